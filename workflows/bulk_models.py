"""A bulk action on every job that matches a filter: its input, its pages and its
progress. The API starts one `BulkWorkflow` per operation (api/bulk_service.py)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from workflows.job_states import CountKind
from workflows.models import (
    TARGET_PATTERN,
    TENANT_GATE_PATTERN,
    TENANT_PATTERN,
    TYPE_PATTERN,
    WORKER_ID_PATTERN,
)

# Job ids one apply activity takes (its jobs are acted on BULK_CONCURRENCY at a time).
BULK_CHUNK = 100
# Job ids one listing activity returns (Temporal's largest visibility page).
BULK_PAGE = 1000
# Reasons kept for the failed jobs (the first ones; the count is whole).
BULK_ERRORS_KEPT = 20


class BulkAction(StrEnum):
    """What is done to each matched job: what its single-job route does."""

    CANCEL = "cancel"  # DELETE /api/jobs/{id}
    STOP = "stop"  # POST /api/jobs/{id}/stop
    REQUEUE = "requeue"  # POST /api/ops/jobs/{id}/requeue


class BulkState(StrEnum):
    LISTING = "listing"
    RUNNING = "running"
    DONE = "done"


class BulkFilter(BaseModel):
    """The jobs a bulk action reaches: the filters of `GET /api/jobs`, ANDed. At least
    one must be named (an empty filter would reach every job)."""

    model_config = ConfigDict(extra="forbid")

    status: CountKind | None = None
    type: Annotated[str | None, Field(pattern=TYPE_PATTERN)] = None
    group: Annotated[str | None, Field(pattern=TENANT_GATE_PATTERN)] = None
    pool: Annotated[str | None, Field(pattern=TENANT_GATE_PATTERN)] = None
    target: Annotated[str | None, Field(pattern=TARGET_PATTERN)] = None
    tenant: Annotated[str | None, Field(pattern=TENANT_PATTERN)] = None
    worker: Annotated[str | None, Field(pattern=WORKER_ID_PATTERN)] = None

    def named(self) -> bool:
        """Whether any filter is set."""
        return any(value is not None for value in self.model_dump().values())


class BulkInput(BaseModel):
    """One operation: its visibility query (the filter, ANDed with the caller's
    tenant), its action, and who asked (for the jobs' transitions)."""

    op_id: str
    query: str
    action: BulkAction
    by: str | None = None
    # The caller's tenant scope: None for every tenant (an admin).
    tenant: str | None = None
    every: bool = True
    filter: BulkFilter
    created_at: int


class BulkPage(BaseModel):
    """One listing page: job ids, and the token of the next page."""

    ids: list[str]
    next_token: str | None = None


class BulkChunk(BaseModel):
    """One apply activity's input."""

    op_id: str
    action: BulkAction
    ids: list[str]
    by: str | None = None


class BulkFailure(BaseModel):
    """A job the action did not apply to, and why (its single route's refusal)."""

    id: str
    error: str


class BulkResult(BaseModel):
    """What one apply activity did."""

    done: int = 0
    failed: int = 0
    errors: list[BulkFailure] = Field(default_factory=list)


class BulkProgress(BaseModel):
    """An operation as `GET /api/jobs/bulk/{op_id}` shows it."""

    id: str
    action: BulkAction
    filter: BulkFilter
    state: BulkState
    matched: int = Field(description="Jobs the filter matched when the operation listed them")
    done: int = Field(description="Jobs the action was applied to")
    failed: int = Field(description="Jobs that refused it (as their single route would)")
    errors: list[BulkFailure] = Field(description=f"The first {BULK_ERRORS_KEPT} refusals")
    created_at: int
    tenant: str | None = None
    every: bool = True

    @classmethod
    def listing(cls, inp: BulkInput) -> BulkProgress:
        """An operation as it starts: nothing matched or done yet."""
        return cls(
            id=inp.op_id,
            action=inp.action,
            filter=inp.filter,
            state=BulkState.LISTING,
            matched=0,
            done=0,
            failed=0,
            errors=[],
            created_at=inp.created_at,
            tenant=inp.tenant,
            every=inp.every,
        )
