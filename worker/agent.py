"""`jobforge agent`: the spec's HTTP-only worker (section 3). Outbound HTTP only.

Registers, long-polls `POST /api/jobs/claim`, fetches and verifies the solver with the
same cache as the native worker, runs it with heartbeats every 10 s, and reports the
result or the failure; then claims again at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import httpx
from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from temporalio.exceptions import ApplicationError

from activities.attempt import solver_outcome, split_command
from activities.runner import run_solver
from worker.settings import SolverSettings, _default_node_id, _json_or_csv

log = logging.getLogger("jobforge.agent")

HEARTBEAT_EVERY_S = 10.0
MAX_BACKOFF_S = 30.0


class AgentSettings(BaseSettings):
    """The spec's agent environment variables."""

    model_config = SettingsConfigDict(extra="ignore")

    hub_url: str = Field(default="http://127.0.0.1:8000", validation_alias="HUB_URL")
    node_id: str = Field(default_factory=_default_node_id, validation_alias="NODE_ID")
    node_name: str | None = Field(default=None, validation_alias="NODE_NAME")
    secret: str = Field(default="", validation_alias="FORGE_INGEST_SECRET")
    enabled: bool = Field(default=True, validation_alias="WORKER_ENABLED")
    cores: int = Field(default=1, ge=1, le=1024, validation_alias="WORKER_CORES")
    ram_gb: float = Field(default=1.0, ge=0, validation_alias="WORKER_RAM_GB")
    tags: Annotated[list[str], NoDecode] = Field(
        default_factory=list, validation_alias="WORKER_TAGS"
    )
    types: Annotated[list[str], NoDecode] = Field(
        default_factory=list, validation_alias="WORKER_TYPES"
    )
    poll_interval_ms: int = Field(
        default=5000, ge=0, validation_alias=AliasChoices("JOB_POLL_INTERVAL_MS")
    )
    solvers: dict[str, str | list[str]] = Field(
        default_factory=dict, validation_alias="WORKER_SOLVERS"
    )
    shutdown_grace_s: float = Field(default=30.0, validation_alias="WORKER_SHUTDOWN_GRACE_S")

    @field_validator("types", "tags", mode="before")
    @classmethod
    def _lists(cls, value: Any) -> Any:
        return _json_or_csv(value)

    @property
    def claim_wait_s(self) -> float:
        """Long-poll length: the poll interval, at most 30 s (a claim returns at once on
        a new job, so the interval only bounds how long one request stays open)."""
        return min(max(self.poll_interval_ms / 1000, 1.0), 30.0)


class Hub:
    """The agent's HTTP client: retries transient failures with backoff and jitter."""

    def __init__(self, settings: AgentSettings) -> None:
        self._http = httpx.AsyncClient(
            base_url=settings.hub_url.rstrip("/"),
            headers={"Authorization": f"Bearer {settings.secret}"},
            timeout=httpx.Timeout(settings.claim_wait_s + 30, connect=10),
        )

    async def close(self) -> None:
        """Close connections."""
        await self._http.aclose()

    async def call(
        self, method: str, path: str, stop: asyncio.Event | None = None, **kwargs: Any
    ) -> httpx.Response:
        """One request; transport errors and 5xx are retried until `stop` is set."""
        delay = 0.5
        while True:
            try:
                response = await self._http.request(method, path, **kwargs)
                if response.status_code < 500:
                    return response
                log.warning("%s %s → %s; retrying", method, path, response.status_code)
            except httpx.TransportError as err:
                log.warning("%s %s failed (%s); retrying", method, path, err)
            if stop is not None and stop.is_set():
                raise asyncio.CancelledError
            await asyncio.sleep(delay * random.uniform(0.5, 1.5))
            delay = min(delay * 2, MAX_BACKOFF_S)


class Agent:
    """WORKER_CORES claim loops against one hub."""

    def __init__(self, settings: AgentSettings, solver: SolverSettings) -> None:
        self._settings = settings
        self._solver = solver
        self._hub = Hub(settings)
        self._cache = solver.cache()
        self._solvers = {t: split_command(c) for t, c in settings.solvers.items()}

    async def run(self, stop: asyncio.Event) -> None:
        """Register, then claim and run jobs until `stop`."""
        s = self._settings
        try:
            response = await self._hub.call(
                "POST",
                "/api/workers/register",
                stop,
                json={
                    "worker_id": s.node_id,
                    "name": s.node_name or s.node_id,
                    "cores": s.cores,
                    "ram_gb": s.ram_gb,
                    "tags": s.tags,
                },
            )
            if response.status_code != 204:
                raise SystemExit(f"registration refused: {response.status_code} {response.text}")
            if not s.enabled:
                log.info("WORKER_ENABLED=false: registered, not running jobs")
                return
            log.info("agent %s ready: cores=%d types=%s", s.node_id, s.cores, s.types or "<all>")
            await asyncio.gather(*(self._loop(stop) for _ in range(s.cores)))
        finally:
            await self._hub.close()

    async def _loop(self, stop: asyncio.Event) -> None:
        s = self._settings
        body: dict[str, Any] = {"worker_id": s.node_id, "wait": s.claim_wait_s}
        if s.types:
            body["types"] = s.types
        while not stop.is_set():
            claim = asyncio.create_task(self._hub.call("POST", "/api/jobs/claim", stop, json=body))
            stopped = asyncio.create_task(stop.wait())
            await asyncio.wait({claim, stopped}, return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
            if not claim.done():
                claim.cancel()  # the bridge hands a task it could not deliver to the next claimer
                with contextlib.suppress(asyncio.CancelledError):
                    await claim
                return
            try:
                response = claim.result()
            except asyncio.CancelledError:
                return
            if response.status_code == 200:
                await self._run_job(response.json(), stop)
            elif response.status_code != 204:
                log.error("claim refused: %s %s", response.status_code, response.text)
                await asyncio.sleep(min(s.poll_interval_ms / 1000, MAX_BACKOFF_S) or 1)

    async def _run_job(self, job: dict[str, Any], stop: asyncio.Event) -> None:
        job_id = job["id"]
        lost = asyncio.Event()  # cancelled, or no longer ours (409 on heartbeat)
        beats: asyncio.Task[None] | None = None

        every_s = min(HEARTBEAT_EVERY_S, job.get("heartbeat_timeout_ms", 60_000) / 3000)

        async def on_start() -> None:
            nonlocal beats
            beats = asyncio.create_task(self._heartbeats(job_id, lost, every_s))

        run = asyncio.create_task(self._execute(job, on_start))
        try:
            await self._until_done(run, lost, stop)
        finally:
            if beats is not None:
                beats.cancel()
        if lost.is_set():
            log.info("job %s was cancelled or taken away; solver stopped", job_id)
            return
        if run.cancelled():
            await self._report_failure(job_id, "worker_shutdown: agent stopped during the job")
            return
        err = run.exception()
        if err is None:
            outcome = run.result()
            response = await self._hub.call(
                "POST",
                f"/api/jobs/{job_id}/result",
                json={
                    "worker_id": self._settings.node_id,
                    "result": outcome.result,
                    "result_hash": outcome.result_hash,
                },
                headers={"X-Idempotency-Key": f"{job_id}:{job['attempt']}:{outcome.result_hash}"},
            )
            if response.status_code != 200:
                log.warning("result for %s refused: %s", job_id, response.text)
        elif isinstance(err, ApplicationError):
            reason = err.type if err.message in ("", err.type) else f"{err.type}: {err.message}"
            await self._report_failure(job_id, reason or "error")
        else:
            await self._report_failure(job_id, f"agent_error: {err}")

    async def _until_done(
        self, run: asyncio.Task[Any], lost: asyncio.Event, stop: asyncio.Event
    ) -> None:
        """Wait for the run; on `lost` cancel it; on `stop` allow the grace period."""
        lost_wait = asyncio.create_task(lost.wait())
        stop_wait = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({run, lost_wait, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            if not run.done() and stop.is_set() and not lost.is_set():
                await asyncio.wait({run, lost_wait}, timeout=self._settings.shutdown_grace_s)
            if not run.done():
                run.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await run
        finally:
            lost_wait.cancel()
            stop_wait.cancel()

    async def _execute(self, job: dict[str, Any], on_start: Callable[[], Awaitable[None]]) -> Any:
        if job.get("solver_url") and job.get("solver_checksum"):
            await self._cache.get(job["solver_url"], job["solver_checksum"])
            argv = [str(await self._cache.verify(job["solver_checksum"]))]
        elif job["type"] in self._solvers:
            argv = list(self._solvers[job["type"]])
        else:
            raise ApplicationError(
                f"no solver_url and no solver registered for type {job['type']!r} on this agent",
                type="solver_not_found",
            )
        run = await run_solver(
            [*argv, "--params", json.dumps(job["params"], separators=(",", ":"))],
            max_runtime_s=job["max_runtime_ms"] / 1000,
            max_output_bytes=self._solver.max_output_bytes,
            log_tail_bytes=self._solver.log_tail_bytes,
            on_start=on_start,
            max_memory_bytes=self._solver.max_memory_bytes,
        )
        return solver_outcome(run, self._settings.node_id, self._solver.max_output_bytes)

    async def _heartbeats(self, job_id: str, lost: asyncio.Event, every_s: float) -> None:
        """Heartbeat now (the job becomes running), then every 10 s; 409 → lost."""
        while True:
            response = await self._hub.call(
                "POST", f"/api/jobs/{job_id}/heartbeat", json={"worker_id": self._settings.node_id}
            )
            if response.status_code == 409:
                lost.set()
                return
            await asyncio.sleep(every_s)

    async def _report_failure(self, job_id: str, reason: str) -> None:
        response = await self._hub.call(
            "POST",
            f"/api/jobs/{job_id}/fail",
            json={"worker_id": self._settings.node_id, "reason": reason[:2000]},
        )
        if response.status_code != 200:
            log.warning("failure report for %s refused: %s", job_id, response.text)


async def serve(settings: AgentSettings, solver: SolverSettings) -> None:
    """Entry point of `jobforge agent`."""
    from worker.main import install_stop_handlers

    stop = asyncio.Event()
    install_stop_handlers(stop)
    await Agent(settings, solver).run(stop)
