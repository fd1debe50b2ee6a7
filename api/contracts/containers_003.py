"""003, the container job system: simulations run in containers by the design's own
workers, which poll for a job, report its status, and are told to stop through it.

- `POST /run-simulation` makes a jobforge container job (containers_003_views.py); its
  worker takes it with `POST /api/agent/next-job` (the agent bridge's claim of container
  jobs, with the worker's pinned ones) and reports with `POST /api/agent/job-status`:
  `running` is the bridge's heartbeat (the first moves the job to running, later ones
  keep it from going stale), `finished` its result, `failed` and `stopped` its fail.
  A transition the design does not allow is a 409; the same status again is accepted.
- The design's shared files are read from `VM_SHARED_DATA` when it is set: the log the
  worker writes, the progress and result the container writes.
- Stale: a job whose worker sends no status update for `JOB_STATUS_TTL` (default the
  core's heartbeat timeout; at most HOST_HEARTBEAT_TTL + WORKER_STALE_GRACE_SECONDS) is
  stale. A dispatched one goes back to the queue, its claim not counted
  (`requeue_stale_claims`), and so does one not reported running within
  QUEUE_CLAIM_TTL; a running one fails: its only attempt timed out.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Annotated, Literal

from fastapi import APIRouter, Body, Query, Request, Response, status
from fastapi.responses import PlainTextResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from api.auth import ByDep, OpsByDep
from api.contracts.containers_003_views import (
    DESIGN,
    JOB_TYPE,
    JobInfo,
    Payload,
    QueueEntry,
    SimulationIn,
    State,
    Status,
    failure,
    renamed,
)
from api.contracts.mounting import ContractSettings
from api.deps import BridgeDep, ConfigDep, JobsDep, Services, WorkersDep
from api.job_service import LIST_LIMIT_MAX, JobService, job_id_for_key
from api.metrics_registry import Metrics
from api.routes.jobs import JobId
from api.routes.ops import CleanupAge
from api.tenancy import NO_TENANT
from api.worker_directory import WorkerView
from engine.log_store import LogStore
from workflows.contract_states import state_name
from workflows.errors import HostNotAvailable, InvalidField, JobConflict, JobNotFound
from workflows.host_models import HostInfo, WorkerNotFound
from workflows.job_states import OPEN, JobStatus
from workflows.models import WORKER_ID_PATTERN, Job, WorkerInfo
from workflows.names import OPS_FAIL_UPDATE, OPS_REQUEUE_UPDATE

# How long a next-job call gives matching to hand over a queued job (no long poll: the
# design's worker sleeps and asks again).
NEXT_JOB_WAIT_S = 0.25
FOLLOW_STATUS_S = 1.0
# The states a worker's report may come from, per reported state (the design's
# transitions; the same state again is always accepted).
REPORTS: dict[str, tuple[str, ...]] = {
    "running": ("dispatched",),
    "stop_requested": ("dispatched", "running"),
    "stopped": ("stop_requested",),
    "finished": ("running",),
    "failed": ("dispatched", "running"),
}
# The states each ops action takes a job from without `force`.
OPS_FROM = {
    "requeue": ("dispatched",),
    "fail": ("running", "stop_requested"),
    "cancel": ("queued",),
}
WorkerId = Annotated[str, Field(pattern=WORKER_ID_PATTERN)]
# The longest heartbeat timeout a job may have (JobSpec.heartbeat_timeout_ms).
STALE_LIMIT_MAX_S = 3600


class NextJobIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    worker_id: WorkerId


class JobStatusIn(BaseModel):
    """`POST /api/agent/job-status`: a worker's report on the job it runs."""

    model_config = ConfigDict(extra="forbid")

    job_id: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
    status: State
    worker_id: WorkerId
    container_id: Annotated[str | None, Field(max_length=256)] = None
    container_name: Annotated[str | None, Field(max_length=256)] = None
    exit_code: int | None = None
    error: Annotated[str | None, Field(max_length=2000)] = None
    details: JsonValue = None
    result: JsonValue = Field(default=None, description="finished: the result (added)")
    progress: JsonValue = Field(default=None, description="running: {fraction, message} (added)")


class Reported(BaseModel):
    job_id: str
    status: str


class AgentHeartbeatIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    worker_id: WorkerId
    info: dict[str, JsonValue] = Field(default_factory=dict)


class HeartbeatAnswer(BaseModel):
    worker_id: str
    kept: list[str] = Field(description="The info keys kept (all of them), shown by /hosts")


class Host(BaseModel):
    """One worker in the `GET /hosts` snapshot."""

    worker_id: str
    host: str | None
    online: bool
    last_heartbeat: float | None = Field(description="Epoch seconds")
    active_jobs: int
    info: dict[str, JsonValue] | None = Field(
        description="The latest heartbeat's info: jobforge's host telemetry and the "
        "worker's own keys"
    )


class OpsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    force: Annotated[bool, Field(strict=True)] = False
    reason: Annotated[str | None, Field(min_length=1, max_length=500)] = None


class CleanupIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    older_than_s: CleanupAge | None = Field(
        default=None, description="Also delete ended simulations older than this (added)"
    )


class Cleaned(BaseModel):
    removed: int = Field(description="Queue entries without a valid job: always 0")
    deleted: int = Field(description="Ended simulations deleted (with older_than_s)")


class Deleted(BaseModel):
    job_id: str
    status: str
    artefacts_removed: bool


class Progressed(BaseModel):
    job_id: str
    status: str
    progress: JsonValue


class Resulted(BaseModel):
    job_id: str
    status: str
    exit_code: int | None
    result: JsonValue


async def simulation(jobs: JobService, job_id: str) -> Job:
    """A 003 job, read live; any other job is a 404 (a tenant's too: 003's jobs have
    none)."""
    job = await jobs.get(job_id, NO_TENANT)
    if job.type != JOB_TYPE or job.container is None:
        raise JobNotFound(job_id)
    return await jobs.live(job)


def seen_within(worker: WorkerView, now_s: float, limit_s: float) -> bool:
    """Whether the worker was heard from within `limit_s` of `now_s`."""
    last = worker.last_heartbeat
    return last is not None and now_s - last / 1000 <= limit_s


def host_info(info: HostInfo | None) -> dict[str, JsonValue] | None:
    """A heartbeat's info as sent: jobforge's telemetry keys and the worker's own."""
    if info is None:
        return None
    shown: dict[str, JsonValue] = info.model_dump(mode="json", exclude={"extra"})
    return {**shown, **(info.extra or {})}


def stale_limit_ms(settings: ContractSettings) -> int | None:
    """How long a simulation may go without a status update (its heartbeat timeout):
    JOB_STATUS_TTL, and no longer than HOST_HEARTBEAT_TTL + WORKER_STALE_GRACE_SECONDS
    (a worker offline that long loses its jobs; it reports on them through job-status
    only). None: the core's heartbeat timeout."""
    limits = []
    if settings.job_status_ttl is not None:
        limits.append(settings.job_status_ttl)
    if settings.host_heartbeat_ttl is not None:
        limits.append(settings.host_heartbeat_ttl + (settings.worker_stale_grace_seconds or 0))
    return round(min(*limits, STALE_LIMIT_MAX_S) * 1000) if limits else None


def router(
    settings: ContractSettings, metrics: Metrics, _services: Callable[[], Services]
) -> APIRouter:
    """003's routes (docs/contracts.md)."""
    routes = APIRouter(tags=["003: container job system"])
    shared = Path(settings.shared_data) if settings.shared_data else None
    ttl_ms = stale_limit_ms(settings)
    online_s = settings.host_heartbeat_ttl

    def job_dir(job_id: str) -> Path | None:
        return None if shared is None else shared / "jobs" / job_id

    def shared_json(job_id: str, *parts: str) -> JsonValue:
        directory = job_dir(job_id)
        if directory is None:
            return None
        try:
            found: JsonValue = json.loads(directory.joinpath(*parts).read_text())
        except (OSError, ValueError):
            return None
        return found

    # -- submission and inspection ----------------------------------------------------

    @routes.post("/run-simulation", status_code=status.HTTP_201_CREATED, response_model=JobInfo)
    async def run_simulation(body: SimulationIn, jobs: JobsDep, by: ByDep) -> JobInfo:
        """Queue a simulation (a container job of type `simulation`, run once)."""
        # The job id is known before the job exists (its command may name it): the id
        # the core gives a fresh idempotency key.
        key = f"{DESIGN}:{uuid.uuid4().hex}"
        spec = body.spec(job_id_for_key(key), ttl_ms)
        try:
            job = await jobs.submit(spec, key, by)
        except InvalidField as err:
            raise renamed(err) from None
        metrics.submissions.inc()
        return JobInfo.of(job)

    @routes.get("/status/{job_id}", response_model=Status)
    async def get_status(job_id: JobId, jobs: JobsDep) -> Status:
        """The job's status file."""
        return Status.of(await simulation(jobs, job_id))

    @routes.get("/job-info/{job_id}", response_model=JobInfo)
    async def job_info(job_id: JobId, jobs: JobsDep) -> JobInfo:
        """The job's metadata and status."""
        return JobInfo.of(await simulation(jobs, job_id))

    @routes.get("/jobs", response_model=list[JobInfo])
    async def list_jobs(
        jobs: JobsDep, limit: Annotated[int, Query(ge=1, le=LIST_LIMIT_MAX)] = 100
    ) -> list[JobInfo]:
        """Simulations, open ones newest first, then ended ones."""
        page = await jobs.list_jobs(None, JOB_TYPE, limit=limit, scope=NO_TENANT)
        return [JobInfo.of(job) for job in page.jobs if job.container is not None]

    @routes.get("/queue", response_model=list[QueueEntry])
    async def queue(
        jobs: JobsDep, limit: Annotated[int, Query(ge=1, le=LIST_LIMIT_MAX)] = 100
    ) -> list[QueueEntry]:
        """Simulations waiting for a worker."""
        page = await jobs.list_jobs(JobStatus.PENDING, JOB_TYPE, limit=limit, scope=NO_TENANT)
        return [QueueEntry.of(job) for job in page.jobs if job.container is not None]

    @routes.get("/hosts", response_model=list[Host])
    async def hosts(workers: WorkersDep) -> list[Host]:
        """The workers' health: online (heard from within HOST_HEARTBEAT_TTL, default
        the core's heartbeat timeout), last heartbeat, jobs held, telemetry."""
        now = time.time()
        return [
            Host(
                worker_id=w.worker_id,
                host=w.host,
                online=w.alive if online_s is None else seen_within(w, now, online_s),
                last_heartbeat=w.last_heartbeat / 1000 if w.last_heartbeat else None,
                active_jobs=w.active_jobs,
                info=host_info(w.info),
            )
            for w in await workers.list()
        ]

    # -- logs, progress, result --------------------------------------------------------

    async def read_log(job: Job, offset: int, store: LogStore) -> tuple[str, int]:
        """The log from byte `offset` on: the file the worker writes on the shared
        storage when there is one, else the core's log store (its own workers' and
        agents' output)."""
        directory = job_dir(job.id)
        if directory is not None:
            try:
                with (directory / "logs" / f"{job.id}.log").open("rb") as file:
                    file.seek(offset)
                    data = file.read()
            except OSError:
                return "", offset
            return data.decode("utf-8", errors="replace"), offset + len(data)
        attempt = job.attempt or next(iter((await store.attempts(job.id))[-1:]), None)
        if not attempt:
            return "", offset
        lines, after = await store.read(job.id, attempt, offset)
        return "".join(f"{line.text}\n" for line in lines), after

    @routes.get("/file-logs/{job_id}", response_class=PlainTextResponse)
    async def file_logs(job_id: JobId, jobs: JobsDep, config: ConfigDep) -> PlainTextResponse:
        """The job's whole log file, as text."""
        job = await simulation(jobs, job_id)
        text, _ = await read_log(job, 0, config.log_store)
        return PlainTextResponse(text)

    @routes.get(
        "/logs/{job_id}", responses={200: {"content": {"text/plain": {}}}}, response_model=None
    )
    async def logs(
        job_id: JobId, request: Request, jobs: JobsDep, config: ConfigDep
    ) -> StreamingResponse:
        """The job's log as a text stream that follows it until the job ends."""
        job = await simulation(jobs, job_id)
        store = config.log_store

        async def chunks() -> AsyncIterator[str]:
            offset = 0
            current = job
            loop = asyncio.get_running_loop()
            checked = loop.time()
            while True:
                text, offset = await read_log(current, offset, store)
                if text:
                    yield text
                if await request.is_disconnected():
                    return
                if loop.time() - checked >= FOLLOW_STATUS_S:
                    checked = loop.time()
                    current = await jobs.get(job_id)
                if current.status not in OPEN and not text:
                    text, offset = await read_log(current, offset, store)
                    if text:
                        yield text
                    return
                await asyncio.sleep(store.follow_poll_s)

        return StreamingResponse(chunks(), media_type="text/plain")

    @routes.get("/progress/{job_id}", response_model=Progressed)
    async def progress(job_id: JobId, jobs: JobsDep) -> Progressed:
        """The progress the container writes (`progress/progress.json`), else the
        running attempt's last reported progress."""
        job = await simulation(jobs, job_id)
        found = shared_json(job_id, "progress", "progress.json")
        if found is None and job.progress is not None:
            found = job.progress.model_dump(mode="json")
        return Progressed(job_id=job_id, status=state_name(job, DESIGN), progress=found)

    @routes.get("/result/{job_id}", response_model=Resulted)
    async def result(job_id: JobId, jobs: JobsDep) -> Resulted:
        """The job's result: what its worker reported, else `results/result.json`."""
        job = await simulation(jobs, job_id)
        found = job.result
        if found is None:
            found = shared_json(job_id, "results", "result.json")
        return Resulted(
            job_id=job_id,
            status=state_name(job, DESIGN),
            exit_code=Status.of(job).exit_code,
            result=found,
        )

    # -- control ------------------------------------------------------------------------

    @routes.post("/stop/{job_id}", response_model=Status)
    async def stop(job_id: JobId, jobs: JobsDep, by: ByDep) -> Status:
        """A queued job is canceled; a dispatched or running one is asked to stop
        (`stop_requested`), which its worker sees, then `stopped`."""
        await simulation(jobs, job_id)
        return Status.of(await jobs.stop(job_id, by=by))

    @routes.delete("/job/{job_id}", response_model=Deleted)
    async def delete(job_id: JobId, jobs: JobsDep, config: ConfigDep) -> Deleted:
        """Remove an ended job's artefacts (its logs, and its directory on the shared
        storage). Its record stays until the ops cleanup deletes it."""
        job = await simulation(jobs, job_id)
        shown = state_name(job, DESIGN)
        if job.status in OPEN:
            raise JobConflict(f"job is {shown}; stop it first", id=job_id, status=shown)
        await config.log_store.remove(job_id)
        directory = job_dir(job_id)
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)
        return Deleted(job_id=job_id, status=shown, artefacts_removed=True)

    # -- the agent ------------------------------------------------------------------------

    @routes.post(
        "/api/agent/next-job",
        response_model=Payload,
        responses={204: {"description": "No job available"}},
    )
    async def next_job(
        request: Request,
        body: NextJobIn,
        bridge: BridgeDep,
        workers: WorkersDep,
    ) -> Payload | Response:
        """The next simulation for this worker: its own pinned ones, then any."""
        await workers.seen(body.worker_id)
        claimed = await bridge.claim(
            body.worker_id,
            [JOB_TYPE],
            NEXT_JOB_WAIT_S,
            gone=request.is_disconnected,
            container_types=[JOB_TYPE],
        )
        if claimed is None:
            return Response(status_code=status.HTTP_204_NO_CONTENT)
        metrics.claims.inc()
        if settings.queue_claim_ttl is not None:
            bridge.expire_claim_after(claimed, settings.queue_claim_ttl)
        return Payload.of(claimed)

    @routes.post(
        "/api/agent/job-status",
        response_model=Reported,
        responses={
            404: {"description": "No such job"},
            409: {"description": "Not a valid transition, or not this worker's job"},
        },
    )
    async def job_status(
        body: JobStatusIn, jobs: JobsDep, bridge: BridgeDep, workers: WorkersDep
    ) -> Reported:
        """A worker's status report; the same status again is accepted."""
        await workers.seen(body.worker_id)
        job = await simulation(jobs, body.job_id)
        shown = state_name(job, DESIGN)
        if job.worker_id not in (None, body.worker_id):
            raise JobConflict(f"job is held by worker {job.worker_id}", id=job.id, status=shown)
        # Queued right after next-job: the claim is recorded, maybe not yet applied (the
        # bridge waits for it, and refuses a worker that does not hold the job).
        current = "dispatched" if shown == "queued" else shown
        wanted = body.status
        if wanted == current:
            if wanted == "running":
                await bridge.heartbeat(job.id, body.worker_id, body.progress)
            return Reported(job_id=job.id, status=wanted)
        if current not in REPORTS.get(wanted, ()):
            raise JobConflict(
                f"{current} -> {wanted} is not a valid transition", id=job.id, status=current
            )
        match wanted:
            case "running":
                await bridge.heartbeat(job.id, body.worker_id, body.progress)
            case "stop_requested":
                await jobs.stop(job.id)
            case "stopped":
                await bridge.fail(job.id, body.worker_id, "stopped")
            case "finished":
                found = body.result
                if found is None:
                    found = shared_json(job.id, "results", "result.json")
                await bridge.result(job.id, body.worker_id, found, None, None)
            case _:
                await bridge.fail(job.id, body.worker_id, failure(body.exit_code, body.error))
        return Reported(job_id=job.id, status=wanted)

    @routes.post("/api/agent/heartbeat", response_model=HeartbeatAnswer)
    async def agent_heartbeat(
        body: AgentHeartbeatIn, workers: WorkersDep, config: ConfigDep
    ) -> HeartbeatAnswer:
        """The worker is alive; its `info` is kept and shown by `/hosts`: the keys of
        jobforge's host telemetry checked, the design's own as sent. A worker heard of
        the first time is registered."""
        if not config.api.hosts.allows_worker(body.worker_id, None):
            raise HostNotAvailable(body.worker_id, None)
        own = set(HostInfo.model_fields) - {"extra"}
        known: dict[str, JsonValue] = {k: v for k, v in body.info.items() if k in own}
        others = {k: v for k, v in body.info.items() if k not in own}
        try:
            info = HostInfo.model_validate({**known, "extra": others or None})
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(part) for part in first["loc"] if part != "extra")
            raise InvalidField(f"info.{where}" if where else "info", first["msg"]) from None
        try:
            await workers.heartbeat(body.worker_id, info)
        except WorkerNotFound:
            await workers.register(WorkerInfo(worker_id=body.worker_id, tags=[f"c{DESIGN}"]))
            await workers.heartbeat(body.worker_id, info)
        return HeartbeatAnswer(worker_id=body.worker_id, kept=sorted(body.info))

    # -- ops --------------------------------------------------------------------------------

    async def ops(
        action: Literal["requeue", "fail", "cancel"],
        job_id: str,
        jobs: JobService,
        body: OpsIn | None,
        force: bool,
        by: str | None,
    ) -> Status:
        job = await simulation(jobs, job_id)
        shown = state_name(job, DESIGN)
        forced = force or (body is not None and body.force)
        if not forced and shown not in OPS_FROM[action]:
            raise JobConflict(
                f"{action} takes a job that is {' or '.join(OPS_FROM[action])} "
                f"(it is {shown}); force=true overrides",
                id=job_id,
                status=shown,
            )
        if action == "requeue":
            return Status.of(await jobs.override(job_id, OPS_REQUEUE_UPDATE, by=by))
        if action == "fail":
            reason = (body.reason if body else None) or "failed by ops"
            return Status.of(await jobs.override(job_id, OPS_FAIL_UPDATE, reason, by=by))
        return Status.of(await jobs.stop(job_id, by=by))

    def ops_route(action: Literal["requeue", "fail", "cancel"]) -> None:
        async def endpoint(
            job_id: JobId,
            jobs: JobsDep,
            by: OpsByDep,
            body: Annotated[OpsIn | None, Body()] = None,
            force: bool = False,
        ) -> Status:
            return await ops(action, job_id, jobs, body, force, by)

        endpoint.__doc__ = f"Ops {action} (`force` as a query parameter or in the body)."
        routes.add_api_route(
            f"/ops/jobs/{{job_id}}/{action}",
            endpoint,
            methods=["POST"],
            response_model=Status,
            name=f"ops_{action}",
        )

    ops_route("requeue")
    ops_route("fail")
    ops_route("cancel")

    @routes.post("/ops/queue/cleanup", response_model=Cleaned)
    async def cleanup(jobs: JobsDep, body: Annotated[CleanupIn | None, Body()] = None) -> Cleaned:
        """Nothing in jobforge's queue can lack its job, so nothing is removed; with
        `older_than_s`, ended simulations that old are deleted (the core's cleanup)."""
        deleted = 0
        if body is not None and body.older_than_s is not None:
            deleted = await jobs.cleanup(body.older_than_s, [], JOB_TYPE)
        return Cleaned(removed=0, deleted=deleted)

    return routes
