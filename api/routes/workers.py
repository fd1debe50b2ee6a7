"""The fleet: worker registration (native workers and HTTP agents) and the list."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Response, status

from api.deps import Authorized, ConfigDep, WorkersDep
from api.tenancy import current_scope
from api.worker_directory import WorkerView
from workflows.errors import HostNotAvailable
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
    # An agent names its tenant (WORKER_TENANT -> X-Tenant) from its first call: one that
    # its token may not act for is refused here, before it claims.
    dependencies=[Depends(current_scope)],
)
async def register_worker(info: WorkerInfo, workers: WorkersDep, config: ConfigDep) -> Response:
    """Register or update a worker's capabilities (durable)."""
    if not config.api.hosts.allows_worker(info.worker_id, info.host):
        raise HostNotAvailable(info.worker_id, info.host)
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
async def list_workers(workers: WorkersDep) -> list[WorkerView]:
    """Registered workers, native and HTTP, with liveness and jobs held now."""
    return await workers.list()
