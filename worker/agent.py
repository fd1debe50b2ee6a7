"""`jobforge agent`: the spec's HTTP-only worker (section 3). Outbound HTTP only.

Registers, long-polls `POST /api/jobs/claim`, fetches and verifies the solver with the
same cache as the native worker, runs it with heartbeats every 10 s while uploading its
stdout and stderr (`POST /api/jobs/{id}/logs`), and reports the result or the failure;
then claims again at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import httpx
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from temporalio.exceptions import ApplicationError

from activities import container, solver
from activities.container import WORKER_LABEL
from activities.runner import watch_solvers_by_pidfd
from engine.log_store import split_lines
from worker.host_telemetry import HostSampler
from worker.hub_client import HubSettings, pool_limits
from worker.node_identity import identified
from worker.settings import ContainerSettings, SolverSettings, WorkerSettings
from workflows.errors import ErrorType, Failure
from workflows.models import AttemptResult, ClaimedJob, Progress

log = logging.getLogger("jobforge.agent")

HEARTBEAT_EVERY_S = 10.0
# The registry heartbeat with host telemetry (POST /api/workers/{id}/heartbeat), as often
# as a native worker's (each is an event in the worker's record).
PRESENCE_EVERY_S = 15.0
MAX_BACKOFF_S = 30.0
# Log upload (POST /api/jobs/{id}/logs): a batch about once a second, at most the API's
# 2,000 lines per call; the final flush gets this long before the report goes out.
UPLOAD_EVERY_S = 1.0
UPLOAD_LINES_MAX = 2000
UPLOAD_TIMEOUT_S = 10.0
FINAL_FLUSH_S = 15.0
# A batch that fails this many times in a row is dropped (the job never waits on logs).
UPLOAD_TRIES = 3
# What waits for upload is bounded: a hub away for long costs lines, not memory.
PENDING_MAX_BYTES = 4 * 1024 * 1024


class AgentSettings(BaseSettings):
    """The agent's own environment (the spec's NODE_NAME, JOB_POLL_INTERVAL_MS), composed
    with where the hub is (`HubSettings`: HUB_URL, FORGE_INGEST_SECRET, as the CLI) and
    what it serves (`WorkerSettings`: WORKER_*, NODE_ID, as a native worker)."""

    model_config = SettingsConfigDict(extra="ignore")

    hub: HubSettings = Field(default_factory=HubSettings, exclude=True)
    node_name: str | None = Field(default=None, validation_alias="NODE_NAME")
    poll_interval_ms: int = Field(default=5000, ge=0, validation_alias="JOB_POLL_INTERVAL_MS")
    worker: WorkerSettings = Field(default_factory=WorkerSettings, exclude=True)

    @property
    def claim_wait_s(self) -> float:
        """Long-poll length: the poll interval, at most 30 s (a claim returns at once on
        a new job, so the interval only bounds how long one request stays open)."""
        return min(max(self.poll_interval_ms / 1000, 1.0), 30.0)


class Hub:
    """The agent's HTTP client: retries transient failures with backoff and jitter."""

    def __init__(self, settings: AgentSettings) -> None:
        headers = {"Authorization": f"Bearer {settings.hub.secret}"}
        if settings.worker.tenant is not None:
            # An admin's token acts for the tenant; a tenant's token needs no header
            # (its own tenant), and one naming another is refused.
            headers["X-Tenant"] = settings.worker.tenant
        self._http = httpx.AsyncClient(
            base_url=settings.hub.base_url,
            headers=headers,
            timeout=httpx.Timeout(settings.claim_wait_s + 30, connect=10),
            limits=pool_limits(),
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

    async def call_once(self, method: str, path: str, **kwargs: Any) -> httpx.Response | None:
        """One request, no retry: None when the hub could not be reached."""
        try:
            return await self._http.request(method, path, timeout=UPLOAD_TIMEOUT_S, **kwargs)
        except httpx.HTTPError as err:
            log.warning("%s %s failed: %s", method, path, err)
            return None


class Agent:
    """WORKER_CORES claim loops against one hub."""

    def __init__(
        self,
        settings: AgentSettings,
        solvers: SolverSettings,
        containers: ContainerSettings | None = None,
    ) -> None:
        self._settings = settings
        self._worker = settings.worker
        self._containers = containers or ContainerSettings()
        self._runtime = self._containers.runtime_client()
        self._limits = solvers.limits
        self._source = solvers.source(settings.worker.solvers)
        self._hub = Hub(settings)
        self._running = 0
        self._host = HostSampler(solvers.cache_dir, lambda: self._running)

    async def run(self, stop: asyncio.Event) -> None:
        """Register, then claim and run jobs until `stop`, heartbeating the registry."""
        s = self._worker
        presence: asyncio.Task[None] | None = None
        try:
            await self._register(stop)
            if not s.enabled:
                log.info("WORKER_ENABLED=false: registered, not running jobs")
                return
            presence = asyncio.create_task(self._presence(stop))
            if self._runtime is not None:
                # What this agent left when it was killed, before a container job starts.
                await self._runtime.remove_labelled(WORKER_LABEL, s.node_id)
            log.info("agent %s ready: cores=%d types=%s", s.node_id, s.cores, s.types or "<all>")
            await asyncio.gather(*(self._loop(stop) for _ in range(s.cores)))
        finally:
            if presence is not None:
                presence.cancel()
            await self._hub.close()

    async def _register(self, stop: asyncio.Event) -> None:
        s = self._worker
        response = await self._hub.call(
            "POST",
            "/api/workers/register",
            stop,
            json={
                "worker_id": s.node_id,
                "name": self._settings.node_name or s.node_id,
                "cores": s.cores,
                "ram_gb": s.ram_gb,
                "tags": s.tags,
                "container_runtime": self._containers.runtime,
                "container_types": s.container_types if self._runtime else [],
                "host": s.host,
                "solver_types": s.solver_types(),
            },
        )
        if response.status_code != 204:
            raise SystemExit(f"registration refused: {response.status_code} {response.text}")

    async def _presence(self, stop: asyncio.Event) -> None:
        """The registry heartbeat with host telemetry: at once, then every 15 s. A 404
        means the hub lost this worker's record: register again (the next beat brings
        the telemetry)."""
        path = f"/api/workers/{self._worker.node_id}/heartbeat"
        while not stop.is_set():
            body = {"info": self._host.sample().model_dump(mode="json")}
            response = await self._hub.call("POST", path, stop, json=body)
            if response.status_code == 404:
                log.warning("the hub does not know this worker; registering again")
                await self._register(stop)
                continue
            if response.status_code != 204:
                log.warning(
                    "registry heartbeat refused: %s %s", response.status_code, response.text
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), PRESENCE_EVERY_S)

    async def _loop(self, stop: asyncio.Event) -> None:
        s = self._settings
        body: dict[str, Any] = {
            "worker_id": self._worker.node_id,
            "host": self._worker.host,
            "wait": s.claim_wait_s,
        }
        if self._worker.types:
            body["types"] = self._worker.types
        # Jobs without a solver_url only of the types it has a solver for; those that
        # name one, of every type it claims (docs/architecture.md, "Routing").
        body["solver_types"] = self._worker.solver_types()
        if self._runtime is not None:
            body["containers"] = True
            if self._worker.container_types:
                body["container_types"] = self._worker.container_types
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
                await self._run_job(ClaimedJob.model_validate(response.json()), stop)
            elif response.status_code != 204:
                log.error("claim refused: %s %s", response.status_code, response.text)
                await asyncio.sleep(min(s.poll_interval_ms / 1000, MAX_BACKOFF_S) or 1)

    async def _run_job(self, job: ClaimedJob, stop: asyncio.Event) -> None:
        self._running += 1
        try:
            await self._run_claimed(job, stop)
        finally:
            self._running -= 1

    async def _run_claimed(self, job: ClaimedJob, stop: asyncio.Event) -> None:
        lost = asyncio.Event()  # cancelled, or no longer ours (409 on heartbeat)
        beats: asyncio.Task[None] | None = None
        every_s = min(HEARTBEAT_EVERY_S, job.heartbeat_timeout_ms / 3000)
        progress = LatestProgress()

        async def on_start() -> None:
            nonlocal beats
            beats = asyncio.create_task(self._heartbeats(job.id, lost, every_s, progress))

        output = LogUploader(self._hub, job, self._worker.node_id)
        pump = asyncio.create_task(output.pump())
        run = asyncio.create_task(self._execute(job, on_start, progress.set, output))
        try:
            try:
                await self._until_done(run, lost, stop)
            finally:
                pump.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pump
            # Before the report: once the job closes, a follower's stream ends. The
            # heartbeats go on meanwhile, up to the report: the attempt is held until it
            # is answered (a slow flush must not end it by the heartbeat timeout).
            await output.close()
            if lost.is_set():
                log.info("job %s was cancelled or taken away; solver stopped", job.id)
                return
            await self._report(job, run)
        finally:
            if beats is not None:
                beats.cancel()

    async def _report(self, job: ClaimedJob, run: asyncio.Task[AttemptResult]) -> None:
        """Report the run's result, or its failure."""
        if run.cancelled():
            shutdown = Failure(
                kind=ErrorType.WORKER_SHUTDOWN, message="agent stopped during the job"
            )
            await self._report_failure(job.id, shutdown)
            return
        err = run.exception()
        if err is None:
            await self._report_result(job, run.result())
        elif isinstance(err, ApplicationError):
            await self._report_failure(
                job.id, Failure(kind=err.type or "error", message=err.message)
            )
        else:
            await self._report_failure(
                job.id, Failure(kind=ErrorType.AGENT_ERROR, message=str(err))
            )

    async def _report_result(self, job: ClaimedJob, outcome: AttemptResult) -> None:
        response = await self._hub.call(
            "POST",
            f"/api/jobs/{job.id}/result",
            json={
                "worker_id": self._worker.node_id,
                "result": outcome.result,
                "result_hash": outcome.result_hash,
            },
            headers={"X-Idempotency-Key": f"{job.id}:{job.attempt}:{outcome.result_hash}"},
        )
        if response.status_code != 200:
            log.warning("result for %s refused: %s", job.id, response.text)

    async def _until_done(
        self, run: asyncio.Task[Any], lost: asyncio.Event, stop: asyncio.Event
    ) -> None:
        """Wait for the run; on `lost` cancel it; on `stop` allow the grace period."""
        lost_wait = asyncio.create_task(lost.wait())
        stop_wait = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({run, lost_wait, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            if not run.done() and stop.is_set() and not lost.is_set():
                await asyncio.wait({run, lost_wait}, timeout=self._worker.shutdown_grace_s)
            if not run.done():
                run.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await run
        finally:
            lost_wait.cancel()
            stop_wait.cancel()

    async def _execute(
        self,
        job: ClaimedJob,
        on_start: Callable[[], Awaitable[None]],
        on_progress: Callable[[Progress], None],
        output: LogUploader,
    ) -> AttemptResult:
        node_id = self._worker.node_id
        spec = job.attempt_input()
        if job.container is None:
            argv = await self._source.argv(spec)
            run = await solver.run(spec, argv, self._limits, on_start, on_progress, output)
            return solver.outcome(run, node_id, self._limits.max_output_bytes)
        if self._runtime is None:
            raise ApplicationError(
                "this agent has no container runtime (CONTAINER_RUNTIME)",
                type=ErrorType.CONTAINER_REFUSED,
            )
        run = await container.run(
            self._runtime,
            spec,
            job.id,
            job.attempt,
            node_id,
            self._limits,
            on_start,
            on_progress,
            output,
        )
        return solver.outcome(run, node_id, self._limits.max_output_bytes, "container")

    async def _heartbeats(
        self, job_id: str, lost: asyncio.Event, every_s: float, progress: LatestProgress
    ) -> None:
        """Heartbeat now (the job becomes running), then every 10 s, and sooner (at most
        once per PROGRESS_PUBLISH_MS) when the solver reports progress; 409 → lost."""
        least_s = self._worker.progress_publish_ms / 1000
        while True:
            body: dict[str, Any] = {"worker_id": self._worker.node_id}
            if progress.value is not None:
                body["progress"] = progress.value.model_dump(mode="json", exclude={"at"})
            response = await self._hub.call("POST", f"/api/jobs/{job_id}/heartbeat", json=body)
            if response.status_code == 409:
                lost.set()
                return
            await asyncio.sleep(least_s)
            await progress.changed_within(max(0.0, every_s - least_s))

    async def _report_failure(self, job_id: str, failure: Failure) -> None:
        response = await self._hub.call(
            "POST",
            f"/api/jobs/{job_id}/fail",
            json={"worker_id": self._worker.node_id, "reason": failure.reason[:2000]},
        )
        if response.status_code != 200:
            log.warning("failure report for %s refused: %s", job_id, response.text)


class LogUploader:
    """An attempt's stdout and stderr for `POST /api/jobs/{id}/logs`: chunks cut into
    lines per stream (a line longer than LINE_MAX is split, as the log store does),
    uploaded in batches about once a second from byte `next_offset` as the API last
    answered. Best effort: a batch that keeps failing is dropped, lines past
    PENDING_MAX_BYTES waiting are dropped, and nothing here fails the job."""

    def __init__(self, hub: Hub, job: ClaimedJob, worker_id: str) -> None:
        self._hub = hub
        self._path = f"/api/jobs/{job.id}/logs"
        self._job_id = job.id
        self._attempt = job.attempt
        self._worker_id = worker_id
        self._partial: dict[str, bytes] = {}
        # (line, its stored size in bytes), in the order the solver wrote them.
        self._pending: deque[tuple[dict[str, str], int]] = deque()
        self._pending_bytes = 0
        self._dropped = 0
        self._failures = 0
        self.offset = 0
        # The hub will take no more: the attempt is not ours, or its log was cut.
        self._closed = False

    def write(self, stream: Literal["stdout", "stderr"], chunk: bytes) -> None:
        """A chunk of the solver's output (called by the runner as it reads)."""
        complete, self._partial[stream] = split_lines(self._partial.get(stream, b""), chunk)
        for raw in complete:
            self._queue(stream, raw)

    def _queue(self, stream: str, raw: bytes) -> None:
        if self._closed:
            return
        text = raw.decode("utf-8", errors="replace")
        size = len(stream) + len(text.encode()) + 2
        if self._pending_bytes + size > PENDING_MAX_BYTES:
            self._dropped += 1
            return
        self._pending.append(({"stream": stream, "text": text}, size))
        self._pending_bytes += size

    async def pump(self) -> None:
        """Upload what has come about once a second, until cancelled."""
        while True:
            await asyncio.sleep(UPLOAD_EVERY_S)
            try:
                await self._upload_pending()
            except Exception:
                # Logs are a convenience: a bug here must not end or fail the job.
                log.exception("log upload for %s failed; it stops", self._job_id)
                self._closed = True

    async def close(self) -> None:
        """The final flush: unterminated lines, then all that waits (for at most
        FINAL_FLUSH_S, so a hub that is away delays the report only that long)."""
        for stream, rest in self._partial.items():
            if rest:
                self._queue(stream, rest)
        self._partial.clear()
        try:
            async with asyncio.timeout(FINAL_FLUSH_S):
                await self._upload_pending()
        except TimeoutError:
            log.warning("log upload for %s timed out; the rest is dropped", self._job_id)
        except Exception:
            log.exception("log upload for %s failed; the rest is dropped", self._job_id)
        self._dropped += len(self._pending)
        if self._dropped:
            log.warning("%d log lines of job %s were not uploaded", self._dropped, self._job_id)
        self._pending.clear()
        self._pending_bytes = 0

    async def _upload_pending(self) -> None:
        while self._pending and not self._closed:
            batch = [line for line, _ in list(self._pending)[:UPLOAD_LINES_MAX]]
            if not await self._send(batch):
                self._failures += 1
                if self._failures < UPLOAD_TRIES:
                    return  # again at the next tick
                log.warning("dropping %d log lines of job %s", len(batch), self._job_id)
                self._dropped += len(batch)
            self._failures = 0
            for _ in batch:
                _, size = self._pending.popleft()
                self._pending_bytes -= size
        if self._closed:
            self._dropped += len(self._pending)
            self._pending.clear()
            self._pending_bytes = 0

    async def _send(self, batch: list[dict[str, str]]) -> bool:
        """Upload one batch at `offset`; whether the hub answered it for good."""
        body = {
            "worker_id": self._worker_id,
            "attempt": self._attempt,
            "offset": self.offset,
            "lines": batch,
        }
        stored = sum(len(line["stream"]) + len(line["text"].encode()) + 2 for line in batch)
        for _ in range(2):  # a 409 naming where the log ends: once more from there
            response = await self._hub.call_once("POST", self._path, json=body)
            if response is None:
                return False
            try:
                answer = response.json()
            except ValueError:
                answer = {}
            answer = answer if isinstance(answer, dict) else {}
            if response.status_code == 200 and isinstance(answer.get("next_offset"), int):
                after: int = answer["next_offset"]
                if after - self.offset < stored:
                    # Less than the batch was kept: the hub cut this log (LOG_MAX_BYTES).
                    log.info("the log of job %s was cut by the hub", self._job_id)
                    self._closed = True
                self.offset = after
                return True
            expected = answer.get("expected_offset")
            if response.status_code == 409 and isinstance(expected, int):
                log.info("log of job %s resumes at byte %d", self._job_id, expected)
                self.offset = body["offset"] = expected
                continue
            if response.status_code == 409:
                log.info("job %s is no longer ours; its log upload stops", self._job_id)
                self._closed = True
                return True
            log.warning(
                "log upload for %s refused: %s %s",
                self._job_id,
                response.status_code,
                response.text[:200],
            )
            return False
        return False


class LatestProgress:
    """The solver's last progress report, and a wake-up when a new one comes."""

    def __init__(self) -> None:
        self.value: Progress | None = None
        self._changed = asyncio.Event()

    def set(self, progress: Progress) -> None:
        self.value = progress
        self._changed.set()

    async def changed_within(self, seconds: float) -> None:
        """Return when a new report came (or had come), or after `seconds`."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), seconds)
        self._changed.clear()


async def serve(
    settings: AgentSettings, solver: SolverSettings, containers: ContainerSettings | None = None
) -> None:
    """Entry point of `jobforge agent`."""
    from worker.native import install_stop_handlers

    stop = asyncio.Event()
    install_stop_handlers(stop)
    watch_solvers_by_pidfd()
    with identified(settings.worker, solver.cache_dir) as worker:
        settings = settings.model_copy(update={"worker": worker})
        await Agent(settings, solver, containers).run(stop)
