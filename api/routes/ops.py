"""Operator overrides (bearer-protected, audited in the job's transitions as
`by: "ops: <caller>"`): re-queue, quarantine or cancel any job that has not ended, and delete
old closed jobs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, status
from pydantic import BaseModel, ConfigDict, Field, field_validator

from api.auth import OpsByDep
from api.deps import Authorized, JobsDep, ScopeDep
from workflows.job_states import ENDED, JobStatus
from workflows.models import TYPE_PATTERN, Job

router = APIRouter(prefix="/api/ops", tags=["ops"], dependencies=[Authorized])

JobId = Annotated[str, Path(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="Job id")]


class FailBody(BaseModel):
    """`POST /api/ops/jobs/{id}/fail`."""

    model_config = ConfigDict(extra="forbid")

    reason: Annotated[str, Field(min_length=1, max_length=500)]


# Strict: `false` is no age. At most ten years, so the cutoff is a date Python can hold.
CleanupAge = Annotated[float, Field(ge=0, le=10 * 365 * 24 * 3600, strict=True)]


class CleanupBody(BaseModel):
    """`POST /api/ops/cleanup`."""

    model_config = ConfigDict(extra="forbid")

    older_than_s: CleanupAge
    statuses: list[JobStatus] = Field(default_factory=list, description="Ended statuses")
    type: Annotated[str | None, Field(pattern=TYPE_PATTERN, description="Only this type")] = None

    @field_validator("statuses")
    @classmethod
    def _ended(cls, value: list[JobStatus]) -> list[JobStatus]:
        for found in value:
            if found not in ENDED:
                raise ValueError(f"{found.value} is not an ended status")
        return value


class Cleaned(BaseModel):
    deleted: int


@router.post("/jobs/{job_id}/requeue", response_model=Job)
async def requeue(job_id: JobId, jobs: JobsDep, scope: ScopeDep, by: OpsByDep) -> Job:
    """From any state but completed: a running attempt is ended (its solver killed) and
    a new one started; a quarantined or stopped job that is still open (of a group or
    target) comes back to `pending`; a pending job stays as it is. Same id; attempts
    and fail_history go on."""
    return await jobs.ops_requeue(job_id, scope, by)


@router.post("/jobs/{job_id}/fail", response_model=Job)
async def fail(job_id: JobId, body: FailBody, jobs: JobsDep, scope: ScopeDep, by: OpsByDep) -> Job:
    """End a job that has not ended `quarantined` at once, with `reason`."""
    return await jobs.ops_fail(job_id, body.reason, scope, by)


@router.post("/jobs/{job_id}/cancel", response_model=Job, status_code=status.HTTP_202_ACCEPTED)
async def cancel(job_id: JobId, jobs: JobsDep, scope: ScopeDep, by: OpsByDep) -> Job:
    """End a job that has not ended: `stopped` if it runs (its solver killed), else
    `failed`/`cancelled` (as `POST /api/jobs/{id}/stop`)."""
    return await jobs.stop(job_id, scope, by)


@router.post("/cleanup", response_model=Cleaned)
async def cleanup(body: CleanupBody, jobs: JobsDep, scope: ScopeDep) -> Cleaned:
    """Delete closed jobs older than `older_than_s` (of `statuses`, if given); at most
    1,000 per call; a tenant's caller, only its tenant's."""
    deleted = await jobs.cleanup(body.older_than_s, body.statuses, body.type, scope)
    return Cleaned(deleted=deleted)
