"""004, the tenant lease queue: serial targets whose interrupted or failed job halts them.

Each target is jobforge's serial target `<tenant>/<target_id>` (docs/scheduling.md):
one job at a time, in order; a job that ends stopped or quarantined halts it. So:

- cancel of a running job (or an assigned one, which 004 shows RUNNING: its jobs are
  made with `stop_claimed`) is the core's stop: the job ends `stopped`, shown PAUSED
  with "Job was interrupted by user", and the target halts; of a queued one, a cancel
  (CANCELED);
- a job whose lease (heartbeat) expires fails its only attempt (a target job's
  `max_attempts` is 1): ERROR, and the target halts;
- resume re-queues the job that halted the target (the core's target resume, `retry`),
  which then runs first.

The design names one route (resume); create, list, read and cancel are added in its
style. The tenant comes from the caller's token (api/tenancy.py); an admin names it
with `X-Tenant` or `?tenant=`, and a tenant's token naming another is a 403. Each job
carries its tenant, so the core routes scope it too, and its attempts wait on the
tenant's own task queues (docs/architecture.md, "Tenants").
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response, status
from pydantic import BaseModel, Field, JsonValue

from api.auth import ByDep
from api.contracts.units import iso
from api.deps import GatesDep, JobsDep
from api.routes.jobs import JobId
from api.tenancy import EVERY, Scope, scope_of
from workflows.contract_states import state_name
from workflows.errors import ErrorType, InvalidField, JobConflict, JobNotFound, TenantForbidden
from workflows.gate_models import TargetResume
from workflows.job_states import HELD, JobStatus
from workflows.models import TENANT_PATTERN, Job, JobSpec

DESIGN = "004"
SEGMENT = TENANT_PATTERN
INTERRUPTED = "Job was interrupted by user"
MESSAGES = {
    "PAUSED": INTERRUPTED,
    "CANCELED": "Job was cancelled",
}
FAIL_MESSAGES = {
    ErrorType.HEARTBEAT_TIMEOUT.value: "Lease expired: the worker stopped renewing it",
}

TargetId = Annotated[str, Path(pattern=SEGMENT, description="The target, within the tenant")]


@dataclass(frozen=True)
class TenantAccess:
    """The tenant a 004 request acts for, and the jobs it may read: an admin's reads
    also find the jobs made on the tenant's targets before jobs carried a tenant."""

    name: str
    reads: Scope

    def __str__(self) -> str:
        return self.name


def tenant_of(
    request: Request,
    x_tenant: Annotated[
        str | None, Header(alias="X-Tenant", pattern=SEGMENT, description="The tenant")
    ] = None,
    tenant: Annotated[
        str | None, Query(pattern=SEGMENT, description="The tenant, if no X-Tenant")
    ] = None,
) -> TenantAccess:
    """The request's tenant: its token's; an admin's `X-Tenant` header, or its `tenant`
    parameter. A tenant's token naming another tenant is a 403."""
    if x_tenant and tenant and x_tenant != tenant:
        raise InvalidField("tenant", f"differs from X-Tenant ({x_tenant})")
    named = x_tenant or tenant
    field = "X-Tenant" if x_tenant else "tenant"
    scope = scope_of(getattr(request.state, "principal", None), named, field)
    if scope.tenant is None:
        raise InvalidField("X-Tenant", "name the tenant (X-Tenant header or ?tenant=)")
    return TenantAccess(scope.tenant, EVERY if scope.admin else scope)


Tenant = Annotated[TenantAccess, Depends(tenant_of)]


class TargetJob(BaseModel):
    """A job as 004 shows it."""

    id: str
    tenant: str
    target_id: str
    status: str = Field(description="QUEUED, RUNNING, PAUSED, ERROR, SUCCESS or CANCELED")
    lease_owner: str | None = Field(description="The worker holding the job")
    lease_expires_at: str | None = Field(description="When its lease ends unless renewed")
    cancel_requested: bool
    message: str | None
    type: str
    params: dict[str, JsonValue]
    result: JsonValue = None
    attempts: int
    created_at: str
    updated_at: str

    @classmethod
    def of(cls, job: Job) -> TargetJob:
        """The 004 view of a job of a target."""
        tenant, _, target_id = (job.target or "").partition("/")
        shown = state_name(job, DESIGN)
        message = MESSAGES.get(shown)
        if shown == "ERROR" and job.fail_reason:
            message = FAIL_MESSAGES.get(job.fail_reason, job.fail_reason)
        held = job.status in HELD
        return cls(
            id=job.id,
            tenant=tenant,
            target_id=target_id,
            status=shown,
            lease_owner=job.worker_id if held else None,
            lease_expires_at=iso(job.lease_expires_at) if held else None,
            cancel_requested=job.status == JobStatus.STOP_REQUESTED,
            message=message,
            type=job.type,
            params=job.params,
            result=job.result,
            attempts=job.attempts,
            created_at=iso(job.created_at) or "",
            updated_at=iso(job.transitions[-1].ts if job.transitions else job.created_at) or "",
        )


async def job_on_target(target_id: TargetId, job_id: JobId, tenant: Tenant, jobs: JobsDep) -> Job:
    """The job the path names, if it is a job of that target of the tenant (else a
    404); as its workflow holds it, without its attempt's lease."""
    job = await jobs.get(job_id, tenant.reads)
    if job.target != f"{tenant}/{target_id}":
        raise JobNotFound(job_id)
    return job


async def live_job_on_target(job: Annotated[Job, Depends(job_on_target)], jobs: JobsDep) -> Job:
    """The target's job with its attempt's lease (one describe while it is held)."""
    return await jobs.live(job)


# A job of the path's target, checked; `Live…` with its lease, for the routes that show it.
JobOnTarget = Annotated[Job, Depends(job_on_target)]
LiveJobOnTarget = Annotated[Job, Depends(live_job_on_target)]

router = APIRouter(tags=["004: tenant lease queue"])


@router.post(
    "/targets/{target_id}/jobs",
    status_code=status.HTTP_201_CREATED,
    response_model=TargetJob,
)
async def create_job(
    target_id: TargetId, tenant: Tenant, spec: JobSpec, jobs: JobsDep, by: ByDep
) -> TargetJob:
    """Queue a job on the target: a jobforge job body, whose `target` comes from the
    path; it runs once (an ERROR is not retried; resume runs it again)."""
    key = f"{tenant}/{target_id}"
    if spec.target is not None and spec.target != key:
        raise InvalidField("target", f"is set by the path ({key})")
    if spec.max_attempts != 1 and "max_attempts" in spec.model_fields_set:
        raise InvalidField("max_attempts", "a 004 job runs once (resume runs it again)")
    # A cancel while the job is assigned (shown RUNNING) interrupts it as while it
    # runs: stop_requested until its worker ends it, then PAUSED.
    if spec.tenant is not None and spec.tenant != tenant.name:
        raise TenantForbidden("tenant", spec.tenant, tenant.name)
    job = await jobs.submit(
        spec.model_copy(
            update={
                "target": key,
                "max_attempts": 1,
                "stop_claimed": True,
                "tenant": tenant.name,
            }
        ),
        by=by,
    )
    return TargetJob.of(job)


@router.get("/targets/{target_id}/jobs", response_model=list[TargetJob])
async def list_jobs(
    target_id: TargetId,
    tenant: Tenant,
    jobs: JobsDep,
    response: Response,
    limit: Annotated[int, Query(ge=1)] = 50,
    page_token: str | None = None,
) -> list[TargetJob]:
    """The target's jobs, newest first; `Next-Page-Token` names the next page. A
    held job's lease is read as GET reads it (one call per held job: a serial
    target holds at most one)."""
    page = await jobs.list_jobs(
        None,
        None,
        limit=limit,
        page_token=page_token,
        target=f"{tenant}/{target_id}",
        scope=tenant.reads,
    )
    if page.next_page_token:
        response.headers["Next-Page-Token"] = page.next_page_token
    shown = await asyncio.gather(*(jobs.live(job) for job in page.jobs))
    return [TargetJob.of(job) for job in shown]


@router.get("/targets/{target_id}/jobs/{job_id}", response_model=TargetJob)
async def get_job(job: LiveJobOnTarget) -> TargetJob:
    """One job of the target, with its lease."""
    return TargetJob.of(job)


# The design's paths end in a slash; the same paths without it work too (not in the
# schema).
@router.post("/targets/{target_id}/jobs/{job_id}/cancel/", response_model=TargetJob)
@router.post(
    "/targets/{target_id}/jobs/{job_id}/cancel", response_model=TargetJob, include_in_schema=False
)
async def cancel_job(job: JobOnTarget, jobs: JobsDep, by: ByDep) -> TargetJob:
    """Cancel a queued job (CANCELED), or interrupt a RUNNING one, assigned or
    running (PAUSED; the target halts until the job is resumed)."""
    return TargetJob.of(await jobs.stop(job.id, by=by))


@router.post("/targets/{target_id}/jobs/{job_id}/resume/", response_model=TargetJob)
@router.post(
    "/targets/{target_id}/jobs/{job_id}/resume", response_model=TargetJob, include_in_schema=False
)
async def resume_job(job: JobOnTarget, jobs: JobsDep, gates: GatesDep, by: ByDep) -> TargetJob:
    """Re-queue a PAUSED or ERROR job that halted its target; it runs first."""
    key = job.target or ""
    shown = state_name(job, DESIGN)
    if shown not in ("PAUSED", "ERROR"):
        raise JobConflict(
            f"only a PAUSED or ERROR job can be resumed (status {shown})",
            id=job.id,
            status=shown,
        )
    target = await gates.target(key)
    if target.halted_by != job.id:
        raise JobConflict(
            f"job {job.id} does not halt target {key} (halted by {target.halted_by})",
            id=job.id,
            status=shown,
        )
    await gates.resume_target(key, TargetResume(job="retry"), by)
    return TargetJob.of(await jobs.get(job.id))
