"""Scheduling routes (docs/scheduling.md): groups (002), pools (001) and serial targets
(004). Each answers the gate's state, with job counts from visibility.

A tenant's gates are named `<tenant>/<name>` (api/tenancy.py): a tenant's caller lists
only those, and any other is a 404 to it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Depends, HTTPException, Path, Query, Request, Response, status

from api.auth import ByDep
from api.deps import Authorized, GatesDep, ScopeDep
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
from workflows.models import TARGET_PATTERN, TENANT_GATE_PATTERN

GroupName = Annotated[
    str, Path(pattern=TENANT_GATE_PATTERN, description="Group: `name` or `tenant/name`")
]
PoolName = Annotated[
    str, Path(pattern=TENANT_GATE_PATTERN, description="Pool: `name` or `tenant/name`")
]
TargetName = Annotated[
    str, Path(pattern=TARGET_PATTERN, description="Target: `name` or `tenant/name`")
]


# A name that ends in one of its kind's actions is that action's path, not a name:
# GET /api/groups/acme/pause is a 405 naming POST, not a read of group "acme/pause".
_ACTIONS = {
    "group": ("pause", "resume", "retry-failed", "cancel"),
    "pool": ("lock",),
    "target": ("resume",),
}


def _not_an_action(request: Request) -> None:
    """405 on a gate's own route (`…/{kind:path}`) for a name that ends in one of its
    kind's actions; before the name is validated, so that it is the first answer."""
    template: str = getattr(request.scope.get("route"), "path", "")
    for kind, actions in _ACTIONS.items():
        if template.endswith(f"{{{kind}:path}}"):
            name = str(request.path_params.get(kind, ""))
            if "/" in name and name.rsplit("/", 1)[1] in actions:
                raise HTTPException(status.HTTP_405_METHOD_NOT_ALLOWED)


router = APIRouter(
    prefix="/api", tags=["scheduling"], dependencies=[Authorized, Depends(_not_an_action)]
)


def _own_group(group: GroupName, scope: ScopeDep) -> str:
    scope.check_gate("group", group)
    return group


def _own_pool(pool: PoolName, scope: ScopeDep) -> str:
    scope.check_gate("pool", pool)
    return pool


def _own_target(target: TargetName, scope: ScopeDep) -> str:
    scope.check_gate("target", target)
    return target


# A gate named in the path, within the caller's tenant (else a 404).
OwnGroup = Annotated[str, Depends(_own_group)]
OwnPool = Annotated[str, Depends(_own_pool)]
OwnTarget = Annotated[str, Depends(_own_target)]

# -- groups ------------------------------------------------------------------------------


@router.get("/groups", response_model=list[GroupView])
async def list_groups(gates: GatesDep, scope: ScopeDep) -> list[GroupView]:
    """Every group (from its first job on), with its settings and job counts."""
    return [view for view in await gates.groups() if scope.owns_gate(view.group)]


@router.get("/groups/{group:path}", response_model=GroupView)
async def get_group(group: OwnGroup, gates: GatesDep) -> GroupView:
    """A group: paused, max_parallel, weight and its jobs per status."""
    return await gates.group(group)


@router.patch("/groups/{group:path}", response_model=GroupView)
async def patch_group(group: OwnGroup, patch: GroupPatch, gates: GatesDep, by: ByDep) -> GroupView:
    """Change max_parallel (`null` lifts it) or weight; applied at once."""
    return await gates.patch_group(group, patch, by)


@router.post("/groups/{group:path}/pause", response_model=GroupView)
async def pause_group(group: OwnGroup, gates: GatesDep, by: ByDep) -> GroupView:
    """No job of the group is assigned after this answers; running jobs finish."""
    return await gates.pause_group(group, by)


@router.post("/groups/{group:path}/resume", response_model=GroupView)
async def resume_group(group: OwnGroup, gates: GatesDep, by: ByDep) -> GroupView:
    """Dispatch the group's jobs again."""
    return await gates.resume_group(group, by)


@router.post("/groups/{group:path}/retry-failed", response_model=Requeued)
async def retry_failed(group: OwnGroup, gates: GatesDep, by: ByDep) -> Requeued:
    """Re-queue the group's quarantined jobs; each keeps its id, attempts and
    fail_history."""
    return await gates.retry_failed(group, by)


@router.post("/groups/{group:path}/cancel", response_model=Cancelled)
async def cancel_group(group: OwnGroup, gates: GatesDep, by: ByDep) -> Cancelled:
    """Cancel the group's pending and assigned jobs (running ones finish)."""
    return await gates.cancel_group(group, by)


# -- pools -------------------------------------------------------------------------------


@router.get("/pools", response_model=list[PoolView])
async def list_pools(gates: GatesDep, scope: ScopeDep) -> list[PoolView]:
    """Every pool that has run, with capacity, units in use and job counts."""
    return [view for view in await gates.pools() if scope.owns_gate(view.pool)]


@router.get("/pools/{pool:path}", response_model=PoolView)
async def get_pool(pool: OwnPool, gates: GatesDep) -> PoolView:
    """A pool; one that never ran has POOL_DEFAULT_CAPACITY."""
    return await gates.pool(pool)


@router.put("/pools/{pool:path}", response_model=PoolView)
async def set_pool(pool: OwnPool, body: PoolCapacity, gates: GatesDep, by: ByDep) -> PoolView:
    """Set a pool's capacity, at once, and its `aging_step_s` when given (null: none).
    Lowering the capacity stops admissions until in_use is below it; it never stops a
    running job."""
    return await gates.set_pool(pool, body, by)


@router.post(
    "/pools/{pool:path}/lock",
    response_model=PoolLock,
    responses={409: {"description": "Another owner holds it: `owner`, `since`, `expires_at`"}},
)
async def lock_pool(pool: OwnPool, ask: PoolLockAsk, gates: GatesDep, by: ByDep) -> PoolLock:
    """Take the pool's lock for `owner`, or renew it (the owner asking again). One
    owner at a time: a lock another owner holds is a 409 naming it, until that owner
    goes `ttl_s` without renewing; then it is taken over."""
    return await gates.lock_pool(pool, ask, by)


@router.delete("/pools/{pool:path}/lock", status_code=204)
async def unlock_pool(
    pool: OwnPool,
    gates: GatesDep,
    by: ByDep,
    owner: Annotated[str, Query(min_length=1, max_length=200, description="Its holder")],
) -> Response:
    """Give the pool's lock back, if `owner` holds it (else nothing changes)."""
    await gates.unlock_pool(pool, owner, by)
    return Response(status_code=204)


# -- targets -----------------------------------------------------------------------------


@router.get("/targets", response_model=list[TargetView])
async def list_targets(gates: GatesDep, scope: ScopeDep) -> list[TargetView]:
    """Every target that has run: halted (and by which job), running and pending."""
    return [view for view in await gates.targets() if scope.owns_gate(view.target)]


@router.get("/targets/{target:path}", response_model=TargetView)
async def get_target(target: OwnTarget, gates: GatesDep) -> TargetView:
    """A serial target: halted (and by which job), running and pending counts."""
    return await gates.target(target)


@router.post("/targets/{target:path}/resume", response_model=TargetView)
async def resume_target(
    target: OwnTarget,
    gates: GatesDep,
    by: ByDep,
    how: Annotated[TargetResume | None, Body()] = None,
) -> TargetView:
    """Resume a halted target: `retry` (default) re-queues the halting job first,
    `skip` leaves it quarantined and moves on."""
    return await gates.resume_target(target, how or TargetResume(), by)
