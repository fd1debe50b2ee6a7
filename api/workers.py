"""Worker registrations: durable records in Temporal, listed through visibility."""

from __future__ import annotations

import time
from collections import Counter

from pydantic import BaseModel
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy

from api.jobs import JOBS, now_ms
from api.temporal import TemporalSettings
from workflows import attributes
from workflows.models import JobStatus, WorkerInfo, WorkerRecord
from workflows.workers import (
    RECORD_MEMO,
    REGISTER_SIGNAL,
    SEEN_SIGNAL,
    worker_workflow_id,
)

# A worker is told "seen" at most this often per API process (each is a history event).
SEEN_EVERY_S = 15.0
LIST_MAX = 1000


class WorkerView(BaseModel):
    """A worker as `GET /api/workers` shows it."""

    worker_id: str
    name: str | None
    kind: str
    cores: int
    ram_gb: float
    tags: list[str]
    registered_at: int
    last_heartbeat: int | None
    alive: bool
    active_jobs: int


async def register_worker(client: Client, temporal: TemporalSettings, info: WorkerInfo) -> None:
    """Create or update a worker's record (signal-with-start: idempotent upsert)."""
    now = now_ms()
    await client.start_workflow(
        "WorkerRecord",
        WorkerRecord(info=info, registered_at=now, last_heartbeat=now),
        id=worker_workflow_id(info.worker_id),
        task_queue=temporal.task_queue,
        start_signal=REGISTER_SIGNAL,
        start_signal_args=[info],
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )


class WorkerDirectory:
    """Registration, liveness and listing of workers."""

    def __init__(self, client: Client, temporal: TemporalSettings, alive_after_s: float) -> None:
        self._client = client
        self._temporal = temporal
        self._alive_after_ms = int(alive_after_s * 1000)
        self._last_seen: dict[str, float] = {}

    async def register(self, info: WorkerInfo) -> None:
        """Upsert a worker."""
        await register_worker(self._client, self._temporal, info)
        self._last_seen[info.worker_id] = time.monotonic()

    async def seen(self, worker_id: str) -> None:
        """Note that a worker called us; throttled, best effort."""
        last = self._last_seen.get(worker_id)
        if last is not None and time.monotonic() - last < SEEN_EVERY_S:
            return
        self._last_seen[worker_id] = time.monotonic()
        handle = self._client.get_workflow_handle(worker_workflow_id(worker_id))
        try:
            await handle.signal(SEEN_SIGNAL, now_ms())
        except Exception:  # an unregistered claimer has no record; that is fine
            return

    async def list(self) -> list[WorkerView]:
        """Every registered worker with liveness and the jobs it holds now."""
        held: Counter[str] = Counter()
        busy = (
            f"{JOBS} AND {attributes.STATUS.name} IN "
            f"('{JobStatus.ASSIGNED.value}', '{JobStatus.RUNNING.value}')"
        )
        async for execution in self._client.list_workflows(busy, limit=LIST_MAX * 16):
            worker = execution.typed_search_attributes.get(attributes.WORKER)
            if worker:
                held[worker] += 1
        now = now_ms()
        views: list[WorkerView] = []
        async for execution in self._client.list_workflows(
            "WorkflowType = 'WorkerRecord' AND ExecutionStatus = 'Running'", limit=LIST_MAX
        ):
            memo = await execution.memo()
            if RECORD_MEMO not in memo:
                continue
            record = WorkerRecord.model_validate(memo[RECORD_MEMO])
            info = record.info
            last = record.last_heartbeat
            views.append(
                WorkerView(
                    worker_id=info.worker_id,
                    name=info.name,
                    kind=info.kind,
                    cores=info.cores,
                    ram_gb=info.ram_gb,
                    tags=info.tags,
                    registered_at=record.registered_at,
                    last_heartbeat=last,
                    alive=last is not None and now - last <= self._alive_after_ms,
                    active_jobs=held.get(info.worker_id, 0),
                )
            )
        views.sort(key=lambda v: v.worker_id)
        return views
