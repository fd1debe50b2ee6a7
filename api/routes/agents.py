"""The HTTP agent protocol (the spec's section 2 worker routes): claim, heartbeat,
result, fail. Registration and the worker list are in `workers.py`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Header, Request, Response, status
from pydantic import BaseModel, ConfigDict, Field, JsonValue

from api.agent_bridge import ClaimTiming
from api.deps import Authorized, BridgeDep, MetricsDep, ScopeDep, WorkersDep
from api.routes.jobs import JobId
from workflows.job_states import JobStatus
from workflows.models import HOST_PATTERN, TYPE_PATTERN, WORKER_ID_PATTERN, ClaimedJob

router = APIRouter(prefix="/api", tags=["agents"], dependencies=[Authorized])

# Without `wait`, a claim still gives matching this long to hand over a queued task.
CLAIM_MIN_WAIT_S = 0.25
CLAIM_MAX_WAIT_S = 30.0

WorkerId = Annotated[str, Field(pattern=WORKER_ID_PATTERN)]


class ClaimRequest(BaseModel):
    """`POST /api/jobs/claim` body."""

    model_config = ConfigDict(extra="forbid")

    worker_id: WorkerId
    types: Annotated[
        list[Annotated[str, Field(pattern=TYPE_PATTERN)]] | None, Field(max_length=64)
    ] = None
    wait: Annotated[float, Field(strict=True, ge=0, le=CLAIM_MAX_WAIT_S)] = 0.0
    # Container jobs (docs/workers.md): claim them too, of `container_types` or, without
    # it, of every type claimed.
    containers: Annotated[bool, Field(strict=True)] = False
    container_types: Annotated[
        list[Annotated[str, Field(pattern=TYPE_PATTERN)]] | None, Field(max_length=64)
    ] = None

    # The claimer's node name (WORKER_HOST): jobs pinned to it or to worker_id come too.
    host: Annotated[str | None, Field(pattern=HOST_PATTERN)] = None
    # The types it has a solver of its own for: jobs that name no solver_url come only
    # of these types (without it, of every type claimed; docs/workers.md).
    solver_types: Annotated[
        list[Annotated[str, Field(pattern=TYPE_PATTERN)]] | None, Field(max_length=256)
    ] = None

    @property
    def claimed_container_types(self) -> list[str] | None:
        """The bridge's `container_types`: None for no container jobs."""
        if self.container_types is not None:
            return self.container_types
        return [] if self.containers else None


class HeartbeatRequest(BaseModel):
    """`POST /api/jobs/{id}/heartbeat` body."""

    model_config = ConfigDict(extra="forbid")

    worker_id: WorkerId
    progress: JsonValue = None


class ResultRequest(BaseModel):
    """`POST /api/jobs/{id}/result` body."""

    model_config = ConfigDict(extra="forbid")

    worker_id: WorkerId
    result: JsonValue
    result_hash: Annotated[str | None, Field(pattern=r"^[0-9a-fA-F]{64}$")] = None


class FailRequest(BaseModel):
    """`POST /api/jobs/{id}/fail` body."""

    model_config = ConfigDict(extra="forbid")

    worker_id: WorkerId
    reason: Annotated[str, Field(min_length=1, max_length=2000)]


class JobState(BaseModel):
    """A job's id and status after a worker's report."""

    id: str
    status: JobStatus


@router.post(
    "/jobs/claim",
    response_model=ClaimedJob,
    responses={
        204: {"description": "No job available within `wait`"},
        403: {"description": "Neither worker_id nor host is in AVAILABLE_HOSTS"},
    },
)
async def claim_job(
    request: Request,
    response: Response,
    body: ClaimRequest,
    bridge: BridgeDep,
    workers: WorkersDep,
    metrics: MetricsDep,
    scope: ScopeDep,
) -> ClaimedJob | Response:
    """Claim the next job (highest priority first), long-polling up to `wait` seconds:
    a job of the claimed types' shared queues (those that name a solver_url, and the
    others of `solver_types`), or one pinned to `worker_id` or `host`. A tenant's token
    (or an admin's `X-Tenant`) claims that tenant's jobs only; any other claim, jobs
    without a tenant. `Server-Timing` says where the claim's time went."""
    await workers.seen(body.worker_id)
    timing = ClaimTiming()
    claimed = await bridge.claim(
        body.worker_id,
        body.types,
        max(body.wait, CLAIM_MIN_WAIT_S),
        gone=request.is_disconnected,
        container_types=body.claimed_container_types,
        host=body.host,
        urls=True,
        solver_types=body.solver_types,
        tenant=None if scope.every else scope.tenant,
        timing=timing,
    )
    if claimed is None:
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    metrics.claims.inc()
    response.headers["Server-Timing"] = timing.header()
    return claimed


@router.post(
    "/jobs/{job_id:job_id}/heartbeat",
    status_code=status.HTTP_204_NO_CONTENT,
    responses={409: {"description": "Not held by this worker, or cancelled (`cancelled`)"}},
)
async def heartbeat(
    job_id: JobId,
    body: HeartbeatRequest,
    bridge: BridgeDep,
    workers: WorkersDep,
    scope: ScopeDep,
) -> Response:
    """Keep a claimed job alive; the first heartbeat marks it running."""
    await workers.seen(body.worker_id)
    await bridge.heartbeat(job_id, body.worker_id, body.progress, scope)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/jobs/{job_id:job_id}/result", response_model=JobState)
async def submit_result(
    job_id: JobId,
    body: Annotated[ResultRequest, Body()],
    bridge: BridgeDep,
    workers: WorkersDep,
    scope: ScopeDep,
    idempotency_key: Annotated[
        str | None, Header(alias="X-Idempotency-Key", min_length=1, max_length=200)
    ] = None,
) -> JobState:
    """Complete the job. The same result again is 200; a different one is 409."""
    await workers.seen(body.worker_id)
    await bridge.result(
        job_id, body.worker_id, body.result, body.result_hash, idempotency_key, scope
    )
    return JobState(id=job_id, status=JobStatus.COMPLETED)


@router.post("/jobs/{job_id:job_id}/fail", response_model=JobState)
async def report_failure(
    job_id: JobId, body: FailRequest, bridge: BridgeDep, workers: WorkersDep, scope: ScopeDep
) -> JobState:
    """Fail the attempt: re-queued, or quarantined once attempts are used up."""
    await workers.seen(body.worker_id)
    status = await bridge.fail(job_id, body.worker_id, body.reason, scope)
    return JobState(id=job_id, status=status)
