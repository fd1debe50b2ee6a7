"""Worker registrations: durable records in Temporal, listed through visibility."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from engine.clock import now_ms
from engine.connection import TemporalSettings
from engine.directory import end_worker_record, register_worker, worker_seen, worker_telemetry
from workflows import search_attributes
from workflows.host_models import HostInfo, WorkerNotFound
from workflows.job_states import JobStatus
from workflows.models import WorkerInfo
from workflows.names import RECORD_MEMO, WORKER_RECORD_WORKFLOW
from workflows.search_attributes import JOBS
from workflows.worker_record import WorkerState

# A worker is told "seen" at most this often per API process (each is a history event).
SEEN_EVERY_S = 15.0
LIST_MAX = 1000


class WorkerView(WorkerInfo):
    """A worker as `GET /api/workers` shows it: its registration, its liveness, and the
    host telemetry of its latest heartbeat (null until it sends one)."""

    registered_at: int
    last_heartbeat: int | None
    alive: bool
    active_jobs: int
    info: HostInfo | None = None


class WorkerDirectory:
    """Registration, liveness and listing of workers."""

    def __init__(
        self,
        client: Client,
        temporal: TemporalSettings,
        alive_after_s: float,
        expire_after_s: float,
    ) -> None:
        self._client = client
        self._temporal = temporal
        self._alive_after_ms = int(alive_after_s * 1000)
        self._expire_after_ms = int(expire_after_s * 1000)
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
        try:
            await worker_seen(self._client, worker_id, now_ms())
        except Exception:  # an unregistered claimer has no record; that is fine
            return

    async def heartbeat(self, worker_id: str, info: HostInfo) -> None:
        """A registered worker's heartbeat with its host telemetry: one signal, stamped
        with this API's clock (as `seen` is). No record, or a closed one: WorkerNotFound,
        so the worker registers again."""
        try:
            await worker_telemetry(self._client, worker_id, now_ms(), info)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise WorkerNotFound(worker_id) from None
            raise
        # It counts as seen: a claim right after it need not tell the record again.
        self._last_seen[worker_id] = time.monotonic()

    async def list(self) -> list[WorkerView]:
        """Every registered worker with liveness and the jobs it holds now; one not heard
        from for `expire_after_s` is left out and its record ended."""
        held: Counter[str] = Counter()
        busy = (
            f"{JOBS} AND {search_attributes.STATUS.name} IN "
            f"('{JobStatus.ASSIGNED.value}', '{JobStatus.RUNNING.value}')"
        )
        async for execution in self._client.list_workflows(busy, limit=LIST_MAX * 16):
            worker = execution.typed_search_attributes.get(search_attributes.WORKER)
            if worker:
                held[worker] += 1
        now = now_ms()
        views: list[WorkerView] = []
        expired: list[str] = []
        async for execution in self._client.list_workflows(
            f"WorkflowType = '{WORKER_RECORD_WORKFLOW}' AND ExecutionStatus = 'Running'",
            limit=LIST_MAX,
        ):
            memo = await execution.memo()
            if RECORD_MEMO not in memo:
                continue
            record = WorkerState.model_validate(memo[RECORD_MEMO])
            last = record.last_heartbeat
            if now - (last or record.registered_at) > self._expire_after_ms:
                expired.append(record.info.worker_id)
                continue
            views.append(
                WorkerView(
                    **record.info.model_dump(),
                    registered_at=record.registered_at,
                    last_heartbeat=last,
                    alive=last is not None and now - last <= self._alive_after_ms,
                    active_jobs=held.get(record.info.worker_id, 0),
                    info=record.telemetry,
                )
            )
        if expired:
            # Ended here, so dead records do not pile up in every listing; best effort
            # (another replica may have ended one first).
            reason = f"not heard from for {self._expire_after_ms / 1000:g} s (WORKER_EXPIRE_S)"
            await asyncio.gather(
                *(end_worker_record(self._client, worker_id, reason) for worker_id in expired),
                return_exceptions=True,
            )
        views.sort(key=lambda v: v.worker_id)
        return views
