"""003, the container job system: simulations run in containers by the design's own
workers, which poll for a job, report its status, and are told to stop through it. This
module has the routes of its users and operators; its workers' are in
containers_003_agent.py.

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
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Literal

from fastapi import APIRouter, Body, Depends, Query, Request, status
from fastapi.responses import PlainTextResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, JsonValue

from api.auth import ByDep, OpsByDep
from api.contract_settings import ContractSettings
from api.contracts.containers_003_files import SharedFilesDep
from api.contracts.containers_003_views import (
    DESIGN,
    JOB_TYPE,
    JobInfo,
    QueueEntry,
    SimulationIn,
    Status,
    renamed,
)
from api.deps import ConfigDep, JobsDep, MetricsDep, WorkersDep
from api.job_service import LIST_LIMIT_MAX, job_id_for_key
from api.routes.jobs import JobId
from api.routes.ops import CleanupAge
from api.tenancy import NO_TENANT
from api.worker_directory import WorkerView
from workflows.contract_states import state_name
from workflows.errors import InvalidField, JobConflict, JobNotFound
from workflows.host_models import HostInfo
from workflows.job_states import OPEN, JobStatus
from workflows.models import Job

# How often a followed log's job status is read (`GET /logs/{id}`; the log itself at the
# store's own follow cadence).
FOLLOW_STATUS_S = 1.0
# The states each ops action takes a job from without `force`.
OpsAction = Literal["requeue", "fail", "cancel"]
OPS_FROM: dict[OpsAction, tuple[str, ...]] = {
    "requeue": ("dispatched",),
    "fail": ("running", "stop_requested"),
    "cancel": ("queued",),
}
# The longest heartbeat timeout a job may have (JobSpec.heartbeat_timeout_ms).
STALE_LIMIT_MAX_S = 3600


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


class QueueCleaned(BaseModel):
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


async def simulation_job(job_id: JobId, jobs: JobsDep) -> Job:
    """The job `job_id` names, if it is a simulation, else a 404 (a tenant's job too:
    003's jobs have none); as its workflow holds it, without its attempt's heartbeat."""
    job = await jobs.get(job_id, NO_TENANT)
    if job.type != JOB_TYPE or job.container is None:
        raise JobNotFound(job_id)
    return job


async def live_simulation_job(job: Annotated[Job, Depends(simulation_job)], jobs: JobsDep) -> Job:
    """The simulation with its attempt's last heartbeat and progress (one describe while
    a worker holds it)."""
    return await jobs.live(job)


# A simulation the path names; `Live…` with its heartbeat, for the routes that show it.
SimulationJob = Annotated[Job, Depends(simulation_job)]
LiveSimulationJob = Annotated[Job, Depends(live_simulation_job)]
OpsBody = Annotated[OpsIn | None, Body()]

router = APIRouter(tags=["003: container job system"])

# -- submission and inspection ----------------------------------------------------------


@router.post("/run-simulation", status_code=status.HTTP_201_CREATED, response_model=JobInfo)
async def run_simulation(
    body: SimulationIn, jobs: JobsDep, by: ByDep, config: ConfigDep, metrics: MetricsDep
) -> JobInfo:
    """Queue a simulation (a container job of type `simulation`, run once)."""
    # The job id is known before the job exists (its command may name it): the id
    # the core gives a fresh idempotency key. The key is new, so the call always makes
    # the job, and answers it as written (`queued`) without reading it back, which a
    # worker that takes it at once would show as `dispatched`.
    key = f"{DESIGN}:{uuid.uuid4().hex}"
    spec = body.spec(job_id_for_key(key), stale_limit_ms(config.contracts))
    try:
        submitted = await jobs.submit_one(spec, key, by, read_back=False)
    except InvalidField as err:
        raise renamed(err) from None
    metrics.submissions.inc()
    return JobInfo.of(submitted.job)


@router.get("/status/{job_id}", response_model=Status)
async def get_status(job: LiveSimulationJob) -> Status:
    """The job's status file."""
    return Status.of(job)


@router.get("/job-info/{job_id}", response_model=JobInfo)
async def job_info(job: LiveSimulationJob) -> JobInfo:
    """The job's metadata and status."""
    return JobInfo.of(job)


@router.get("/jobs", response_model=list[JobInfo])
async def list_jobs(
    jobs: JobsDep, limit: Annotated[int, Query(ge=1, le=LIST_LIMIT_MAX)] = 100
) -> list[JobInfo]:
    """Simulations, open ones newest first, then ended ones."""
    page = await jobs.list_jobs(None, JOB_TYPE, limit=limit, scope=NO_TENANT)
    return [JobInfo.of(job) for job in page.jobs if job.container is not None]


@router.get("/queue", response_model=list[QueueEntry])
async def queue(
    jobs: JobsDep, limit: Annotated[int, Query(ge=1, le=LIST_LIMIT_MAX)] = 100
) -> list[QueueEntry]:
    """Simulations waiting for a worker."""
    page = await jobs.list_jobs(JobStatus.PENDING, JOB_TYPE, limit=limit, scope=NO_TENANT)
    return [QueueEntry.of(job) for job in page.jobs if job.container is not None]


@router.get("/hosts", response_model=list[Host])
async def hosts(workers: WorkersDep, config: ConfigDep) -> list[Host]:
    """The workers' health: online (heard from within HOST_HEARTBEAT_TTL, default
    the core's heartbeat timeout), last heartbeat, jobs held, telemetry."""
    online_s = config.contracts.host_heartbeat_ttl
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


# -- logs, progress, result --------------------------------------------------------------


@router.get("/file-logs/{job_id}", response_class=PlainTextResponse)
async def file_logs(job: SimulationJob, files: SharedFilesDep) -> PlainTextResponse:
    """The job's whole log file, as text."""
    text, _ = await files.read_log(job, 0)
    return PlainTextResponse(text)


@router.get("/logs/{job_id}", responses={200: {"content": {"text/plain": {}}}}, response_model=None)
async def logs(
    job: SimulationJob, request: Request, jobs: JobsDep, files: SharedFilesDep
) -> StreamingResponse:
    """The job's log as a text stream that follows it until the job ends."""

    async def chunks() -> AsyncIterator[str]:
        offset = 0
        current = job
        loop = asyncio.get_running_loop()
        checked = loop.time()
        while True:
            text, offset = await files.read_log(current, offset)
            if text:
                yield text
            if await request.is_disconnected():
                return
            if loop.time() - checked >= FOLLOW_STATUS_S:
                checked = loop.time()
                current = await jobs.get(job.id)
            if current.status not in OPEN and not text:
                text, offset = await files.read_log(current, offset)
                if text:
                    yield text
                return
            await asyncio.sleep(files.store.follow_poll_s)

    return StreamingResponse(chunks(), media_type="text/plain")


@router.get("/progress/{job_id}", response_model=Progressed)
async def progress(job: LiveSimulationJob, files: SharedFilesDep) -> Progressed:
    """The progress the container writes (`progress/progress.json`), else the
    running attempt's last reported progress."""
    found = files.read_json(job.id, "progress", "progress.json")
    if found is None and job.progress is not None:
        found = job.progress.model_dump(mode="json")
    return Progressed(job_id=job.id, status=state_name(job, DESIGN), progress=found)


@router.get("/result/{job_id}", response_model=Resulted)
async def result(job: SimulationJob, files: SharedFilesDep) -> Resulted:
    """The job's result: what its worker reported, else `results/result.json`."""
    found = job.result
    if found is None:
        found = files.read_json(job.id, "results", "result.json")
    return Resulted(
        job_id=job.id,
        status=state_name(job, DESIGN),
        exit_code=Status.of(job).exit_code,
        result=found,
    )


# -- control -------------------------------------------------------------------------------


@router.post("/stop/{job_id}", response_model=Status)
async def stop(job: SimulationJob, jobs: JobsDep, by: ByDep) -> Status:
    """A queued job is canceled; a dispatched or running one is asked to stop
    (`stop_requested`), which its worker sees, then `stopped`."""
    return Status.of(await jobs.stop(job.id, by=by))


@router.delete("/job/{job_id}", response_model=Deleted)
async def delete(job: SimulationJob, files: SharedFilesDep) -> Deleted:
    """Remove an ended job's artefacts (its logs, and its directory on the shared
    storage). Its record stays until the ops cleanup deletes it."""
    shown = state_name(job, DESIGN)
    if job.status in OPEN:
        raise JobConflict(f"job is {shown}; stop it first", id=job.id, status=shown)
    await files.remove(job.id)
    return Deleted(job_id=job.id, status=shown, artefacts_removed=True)


# -- ops ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpsAsk:
    """An ops action asked of a simulation, allowed from the state it is in."""

    job: Job
    reason: str | None


class OpsFrom:
    """The dependency of an ops action's route: the simulation the path names, if the
    action takes a job from its state (OPS_FROM) or `force` (as a query parameter or in
    the body) overrides; else a 409."""

    def __init__(self, action: OpsAction) -> None:
        self.action = action

    async def __call__(
        self, job: SimulationJob, body: OpsBody = None, force: bool = False
    ) -> OpsAsk:
        shown = state_name(job, DESIGN)
        allowed = OPS_FROM[self.action]
        if not (force or (body is not None and body.force)) and shown not in allowed:
            raise JobConflict(
                f"{self.action} takes a job that is {' or '.join(allowed)} "
                f"(it is {shown}); force=true overrides",
                id=job.id,
                status=shown,
            )
        return OpsAsk(job, body.reason if body else None)


# Each ops action's route takes its job through OpsFrom.
RequeueAsk = Annotated[OpsAsk, Depends(OpsFrom("requeue"))]
FailAsk = Annotated[OpsAsk, Depends(OpsFrom("fail"))]
CancelAsk = Annotated[OpsAsk, Depends(OpsFrom("cancel"))]


@router.post("/ops/jobs/{job_id}/requeue", response_model=Status)
async def ops_requeue(ask: RequeueAsk, jobs: JobsDep, by: OpsByDep) -> Status:
    """Ops requeue (`force` as a query parameter or in the body)."""
    return Status.of(await jobs.ops_requeue(ask.job.id, by=by))


@router.post("/ops/jobs/{job_id}/fail", response_model=Status)
async def ops_fail(ask: FailAsk, jobs: JobsDep, by: OpsByDep) -> Status:
    """Ops fail (`force` as a query parameter or in the body)."""
    return Status.of(await jobs.ops_fail(ask.job.id, ask.reason or "failed by ops", by=by))


@router.post("/ops/jobs/{job_id}/cancel", response_model=Status)
async def ops_cancel(ask: CancelAsk, jobs: JobsDep, by: OpsByDep) -> Status:
    """Ops cancel (`force` as a query parameter or in the body)."""
    return Status.of(await jobs.stop(ask.job.id, by=by))


@router.post("/ops/queue/cleanup", response_model=QueueCleaned)
async def cleanup(jobs: JobsDep, body: Annotated[CleanupIn | None, Body()] = None) -> QueueCleaned:
    """Nothing in jobforge's queue can lack its job, so nothing is removed; with
    `older_than_s`, ended simulations that old are deleted (the core's cleanup)."""
    deleted = 0
    if body is not None and body.older_than_s is not None:
        deleted = await jobs.cleanup(body.older_than_s, [], JOB_TYPE)
    return QueueCleaned(removed=0, deleted=deleted)
