"""003's worker side: the design's own workers take a simulation (`POST
/api/agent/next-job`: the agent bridge's claim of container jobs, the worker's pinned
ones first), report on it (`POST /api/agent/job-status`, on the design's transitions) and
say they are alive (`POST /api/agent/heartbeat`). The rest of 003: containers_003.py."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Request, Response, status
from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from api.contracts.containers_003 import simulation_job
from api.contracts.containers_003_files import SharedFilesDep
from api.contracts.containers_003_views import DESIGN, JOB_TYPE, Payload, State, failure
from api.deps import BridgeDep, ConfigDep, JobsDep, MetricsDep, WorkersDep
from workflows.contract_states import state_name
from workflows.errors import HostNotAvailable, InvalidField, JobConflict
from workflows.host_models import HostInfo, WorkerNotFound
from workflows.models import WORKER_ID_PATTERN, WorkerInfo
from workflows.schedule_models import FIRED_JOB_ID_PATTERN

# How long a next-job call gives matching to hand over a queued job (no long poll: the
# design's worker sleeps and asks again).
NEXT_JOB_WAIT_S = 0.25
# The states a worker's report may come from, per reported state (the design's
# transitions; the same state again is always accepted).
REPORTS: dict[str, tuple[str, ...]] = {
    "running": ("dispatched",),
    "stop_requested": ("dispatched", "running"),
    "stopped": ("stop_requested",),
    "finished": ("running",),
    "failed": ("dispatched", "running"),
}
WorkerId = Annotated[str, Field(pattern=WORKER_ID_PATTERN)]


class NextJobIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    worker_id: WorkerId


class JobStatusIn(BaseModel):
    """`POST /api/agent/job-status`: a worker's report on the job it runs."""

    model_config = ConfigDict(extra="forbid")

    job_id: Annotated[str, Field(pattern=FIRED_JOB_ID_PATTERN)]
    status: State
    worker_id: WorkerId
    container_id: Annotated[str | None, Field(max_length=256)] = None
    container_name: Annotated[str | None, Field(max_length=256)] = None
    exit_code: int | None = None
    error: Annotated[str | None, Field(max_length=2000)] = None
    details: JsonValue = None
    result: JsonValue = Field(default=None, description="finished: the result (added)")
    progress: JsonValue = Field(default=None, description="running: {fraction, message} (added)")


class SimulationReported(BaseModel):
    """The answer to a worker's status report."""

    job_id: str
    status: str


class AgentHeartbeatIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    worker_id: WorkerId
    info: dict[str, JsonValue] = Field(default_factory=dict)


class HeartbeatAnswer(BaseModel):
    worker_id: str
    kept: list[str] = Field(description="The info keys kept (all of them), shown by /hosts")


router = APIRouter(tags=["003: container job system"])


@router.post(
    "/api/agent/next-job",
    response_model=Payload,
    responses={204: {"description": "No job available"}},
)
async def next_job(
    request: Request,
    body: NextJobIn,
    bridge: BridgeDep,
    workers: WorkersDep,
    config: ConfigDep,
    metrics: MetricsDep,
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
    if config.contracts.queue_claim_ttl is not None:
        bridge.expire_claim_after(claimed, config.contracts.queue_claim_ttl)
    return Payload.of(claimed)


# Its 404 and 409 are documented with the other designs' in api/openapi.py.
@router.post("/api/agent/job-status", response_model=SimulationReported)
async def job_status(
    body: JobStatusIn,
    jobs: JobsDep,
    bridge: BridgeDep,
    workers: WorkersDep,
    files: SharedFilesDep,
) -> SimulationReported:
    """A worker's status report; the same status again is accepted."""
    await workers.seen(body.worker_id)
    job = await simulation_job(body.job_id, jobs)
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
        return SimulationReported(job_id=job.id, status=wanted)
    if current not in REPORTS.get(wanted, ()):
        raise JobConflict(
            f"{current} -> {wanted} is not a valid transition", id=job.id, status=current
        )
    match wanted:
        case "running":
            # A status report, read back as such (and QUEUE_CLAIM_TTL's): sent at once.
            await bridge.heartbeat(job.id, body.worker_id, body.progress, hold_running=False)
        case "stop_requested":
            await jobs.stop(job.id)
        case "stopped":
            await bridge.fail(job.id, body.worker_id, "stopped")
        case "finished":
            found = body.result
            if found is None:
                found = files.read_json(job.id, "results", "result.json")
            await bridge.result(job.id, body.worker_id, found, None, None)
        case _:
            await bridge.fail(job.id, body.worker_id, failure(body.exit_code, body.error))
    return SimulationReported(job_id=job.id, status=wanted)


@router.post("/api/agent/heartbeat", response_model=HeartbeatAnswer)
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
