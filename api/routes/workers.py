"""The fleet: worker registration (native workers and HTTP agents) and the list."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from api.deps import Authorized, WorkersDep
from api.worker_directory import WorkerView
from workflows.models import WorkerInfo

router = APIRouter(prefix="/api", tags=["workers"], dependencies=[Authorized])


@router.post("/workers/register", status_code=status.HTTP_204_NO_CONTENT)
async def register_worker(info: WorkerInfo, workers: WorkersDep) -> Response:
    """Register or update a worker's capabilities (durable)."""
    await workers.register(info)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/workers", response_model=list[WorkerView])
async def list_workers(workers: WorkersDep) -> list[WorkerView]:
    """Registered workers, native and HTTP, with liveness and jobs held now."""
    return await workers.list()
