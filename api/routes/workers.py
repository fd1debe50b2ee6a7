"""The fleet: worker registration (native workers and HTTP agents) and the list."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response, status

from api.deps import Authorized, ConfigDep, ScopeDep, WorkersDep
from api.worker_directory import WorkerView
from workflows.errors import HostNotAvailable, TenantForbidden
from workflows.host_models import WorkerHeartbeat
from workflows.models import WORKER_ID_PATTERN, WorkerInfo

router = APIRouter(prefix="/api", tags=["workers"], dependencies=[Authorized])

WorkerId = Annotated[str, Path(pattern=WORKER_ID_PATTERN, description="A registered worker")]


@router.post(
    "/workers/register",
    status_code=status.HTTP_204_NO_CONTENT,
    responses={
        403: {
            "description": "Neither worker_id nor host is in AVAILABLE_HOSTS, or X-Tenant "
            "names a tenant other than the token's"
        }
    },
)
async def register_worker(
    info: WorkerInfo, workers: WorkersDep, config: ConfigDep, scope: ScopeDep
) -> Response:
    """Register or update a worker's capabilities (durable). A tenant's caller registers
    it for its tenant (another `tenant` in the body is a 403). An agent names its tenant
    (WORKER_TENANT -> X-Tenant) from this first call: one its token may not act for is
    refused here (the scope's 403), before it claims."""
    if not config.api.hosts.allows_worker(info.worker_id, info.host):
        raise HostNotAvailable(info.worker_id, info.host)
    if not scope.every:
        if info.tenant is not None and info.tenant != scope.tenant:
            raise TenantForbidden("tenant", info.tenant, scope.tenant)
        info = info.model_copy(update={"tenant": scope.tenant})
    await workers.register(info)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/workers/{worker_id}/heartbeat",
    status_code=status.HTTP_204_NO_CONTENT,
    responses={404: {"description": "Not registered (or its record ended): register again"}},
)
async def worker_heartbeat(
    worker_id: WorkerId, beat: WorkerHeartbeat, workers: WorkersDep
) -> Response:
    """A registered worker's heartbeat with its host telemetry (`info`); it also counts
    as seen. One every 15 s is plenty: each is an event in the worker's record."""
    await workers.heartbeat(worker_id, beat.info)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/workers", response_model=list[WorkerView])
async def list_workers(workers: WorkersDep, scope: ScopeDep) -> list[WorkerView]:
    """Registered workers, native and HTTP, with liveness and jobs held now: those of
    the caller's tenant (every one for an admin)."""
    return [worker for worker in await workers.list() if scope.reaches(worker.tenant)]
