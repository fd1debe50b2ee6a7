"""Scheduling routes (docs/scheduling.md): groups (002), pools (001) and serial targets
(004). Each answers the gate's state, with job counts from visibility."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, HTTPException, Path, Query, Response, status

from api.deps import Authorized, GatesDep
from api.gate_service import (
    Cancelled,
    GroupPatch,
    GroupView,
    PoolCapacity,
    PoolLock,
    PoolLockAsk,
    PoolView,
    Requeued,
    TargetView,
)
from workflows.gate_models import TargetResume
from workflows.models import GATE_KEY_PATTERN, TARGET_PATTERN

router = APIRouter(prefix="/api", tags=["scheduling"], dependencies=[Authorized])

GroupName = Annotated[str, Path(pattern=GATE_KEY_PATTERN, description="Group name")]
PoolName = Annotated[str, Path(pattern=GATE_KEY_PATTERN, description="Pool name")]
TargetName = Annotated[
    str, Path(pattern=TARGET_PATTERN, description="Target: `name` or `tenant/name`")
]


# -- groups ------------------------------------------------------------------------------


@router.get("/groups", response_model=list[GroupView])
async def list_groups(gates: GatesDep) -> list[GroupView]:
    """Every group (from its first job on), with its settings and job counts."""
    return await gates.groups()


@router.get("/groups/{group}", response_model=GroupView)
async def get_group(group: GroupName, gates: GatesDep) -> GroupView:
    """A group: paused, max_parallel, weight and its jobs per status."""
    return await gates.group(group)


@router.patch("/groups/{group}", response_model=GroupView)
async def patch_group(group: GroupName, patch: GroupPatch, gates: GatesDep) -> GroupView:
    """Change max_parallel (`null` lifts it) or weight; applied at once."""
    return await gates.patch_group(group, patch)


@router.post("/groups/{group}/pause", response_model=GroupView)
async def pause_group(group: GroupName, gates: GatesDep) -> GroupView:
    """No job of the group is assigned after this answers; running jobs finish."""
    return await gates.pause_group(group)


@router.post("/groups/{group}/resume", response_model=GroupView)
async def resume_group(group: GroupName, gates: GatesDep) -> GroupView:
    """Dispatch the group's jobs again."""
    return await gates.resume_group(group)


@router.post("/groups/{group}/retry-failed", response_model=Requeued)
async def retry_failed(group: GroupName, gates: GatesDep) -> Requeued:
    """Re-queue the group's quarantined jobs; each keeps its id, attempts and
    fail_history."""
    return await gates.retry_failed(group)


@router.post("/groups/{group}/cancel", response_model=Cancelled)
async def cancel_group(group: GroupName, gates: GatesDep) -> Cancelled:
    """Cancel the group's pending and assigned jobs (running ones finish)."""
    return await gates.cancel_group(group)


# -- pools -------------------------------------------------------------------------------


@router.get("/pools", response_model=list[PoolView])
async def list_pools(gates: GatesDep) -> list[PoolView]:
    """Every pool that has run, with capacity, units in use and job counts."""
    return await gates.pools()


@router.get("/pools/{pool}", response_model=PoolView)
async def get_pool(pool: PoolName, gates: GatesDep) -> PoolView:
    """A pool; one that never ran has POOL_DEFAULT_CAPACITY."""
    return await gates.pool(pool)


@router.put("/pools/{pool}", response_model=PoolView)
async def set_pool(pool: PoolName, body: PoolCapacity, gates: GatesDep) -> PoolView:
    """Set a pool's capacity, at once, and its `aging_step_s` when given (null: none).
    Lowering the capacity stops admissions until in_use is below it; it never stops a
    running job."""
    return await gates.set_pool(pool, body)


@router.post(
    "/pools/{pool}/lock",
    response_model=PoolLock,
    responses={409: {"description": "Another owner holds it: `owner`, `since`, `expires_at`"}},
)
async def lock_pool(pool: PoolName, ask: PoolLockAsk, gates: GatesDep) -> PoolLock:
    """Take the pool's lock for `owner`, or renew it (the owner asking again). One
    owner at a time: a lock another owner holds is a 409 naming it, until that owner
    goes `ttl_s` without renewing; then it is taken over."""
    return await gates.lock_pool(pool, ask)


@router.delete("/pools/{pool}/lock", status_code=204)
async def unlock_pool(
    pool: PoolName,
    gates: GatesDep,
    owner: Annotated[str, Query(min_length=1, max_length=200, description="Its holder")],
) -> Response:
    """Give the pool's lock back, if `owner` holds it (else nothing changes)."""
    await gates.unlock_pool(pool, owner)
    return Response(status_code=204)


# -- targets -----------------------------------------------------------------------------

_RESUME = "/resume"


@router.get("/targets", response_model=list[TargetView])
async def list_targets(gates: GatesDep) -> list[TargetView]:
    """Every target that has run: halted (and by which job), running and pending."""
    return await gates.targets()


@router.get("/targets/{target:path}", response_model=TargetView)
async def get_target(target: TargetName, gates: GatesDep) -> TargetView:
    """A serial target: halted (and by which job), running and pending counts."""
    if target.endswith(_RESUME):  # GET .../resume is the resume route's, not a name
        raise HTTPException(status.HTTP_405_METHOD_NOT_ALLOWED)
    return await gates.target(target)


@router.post("/targets/{target:path}/resume", response_model=TargetView)
async def resume_target(
    target: TargetName,
    gates: GatesDep,
    how: Annotated[TargetResume | None, Body()] = None,
) -> TargetView:
    """Resume a halted target: `retry` (default) re-queues the halting job first,
    `skip` leaves it quarantined and moves on."""
    return await gates.resume_target(target, how or TargetResume())
