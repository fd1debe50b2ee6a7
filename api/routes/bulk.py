"""Bulk actions on every job a filter matches (docs/api.md, "Bulk actions")."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, status
from pydantic import BaseModel, ConfigDict, Field

from api.auth import ByDep, PrincipalDep
from api.deps import Authorized, BulkDep, ScopeDep
from api.routes.segments import segment_except
from workflows.bulk_models import BulkAction, BulkFilter, BulkProgress
from workflows.errors import BulkNotFound

router = APIRouter(prefix="/api/jobs/bulk", tags=["jobs"], dependencies=[Authorized])

OpId = Annotated[str, Path(pattern=r"^bulk-[0-9a-f]{32}$", description="Operation id")]


# `{op_id:bulk_op_id}` never takes `count`, a route of its own: `GET /api/jobs/bulk/count`
# is a 405 naming POST.
segment_except("bulk_op_id", ("count",))


class BulkRequest(BaseModel):
    """`POST /api/jobs/bulk`."""

    model_config = ConfigDict(extra="forbid")

    filter: BulkFilter
    action: BulkAction


class BulkCountRequest(BaseModel):
    """`POST /api/jobs/bulk/count`."""

    model_config = ConfigDict(extra="forbid")

    filter: BulkFilter


class BulkStarted(BaseModel):
    id: str = Field(description="The operation's id: GET /api/jobs/bulk/{id}")


class BulkCount(BaseModel):
    matched: int = Field(description="Jobs the filter matches now (a visibility count)")


@router.post("", status_code=status.HTTP_202_ACCEPTED, response_model=BulkStarted)
async def start_bulk(
    body: BulkRequest, bulk: BulkDep, scope: ScopeDep, principal: PrincipalDep, by: ByDep
) -> BulkStarted:
    """Start cancelling, stopping or re-queuing every job `filter` matches (ANDed with
    the caller's tenant). 202 at once; the jobs are acted on in the background, each as
    its single route would act."""
    op_id = await bulk.start(body.filter, body.action, scope, principal.role, by)
    return BulkStarted(id=op_id)


@router.post("/count", response_model=BulkCount)
async def count_bulk(body: BulkCountRequest, bulk: BulkDep, scope: ScopeDep) -> BulkCount:
    """How many jobs `filter` matches now: what a bulk action would reach (one count)."""
    return BulkCount(matched=await bulk.count(body.filter, scope))


@router.get("/{op_id:bulk_op_id}", response_model=BulkProgress)
async def read_bulk(op_id: OpId, bulk: BulkDep, scope: ScopeDep) -> BulkProgress:
    """An operation's progress: matched, done, failed, state (`listing`, `running`,
    `done`)."""
    progress = await bulk.read(op_id, scope)
    if progress is None:
        raise BulkNotFound(op_id)
    return progress
