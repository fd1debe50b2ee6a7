"""WorkerRecord: one small workflow per registered worker, its record in the memo.

Durable across API and Temporal restarts; `GET /api/workers` lists them through
visibility (memo included), so no query or workflow task is needed to read them.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.memo_mirror import mirror_into_memo
    from workflows.models import WorkerInfo, WorkerRecord
    from workflows.names import RECORD_MEMO, REGISTER_SIGNAL, SEEN_SIGNAL, WORKER_RECORD_WORKFLOW


@workflow.defn(name=WORKER_RECORD_WORKFLOW)
class WorkerRecordWorkflow:
    """Holds one worker's capabilities and when it was last heard from."""

    @workflow.init
    def __init__(self, record: WorkerRecord) -> None:
        self._record = record
        self._dirty = True

    @workflow.run
    async def run(self, record: WorkerRecord) -> None:  # noqa: ARG002 - read in __init__
        await mirror_into_memo(RECORD_MEMO, lambda: self._dirty, self._snapshot, self._current)

    def _snapshot(self) -> dict[str, Any]:
        self._dirty = False
        return self._record.model_dump(mode="json")

    def _current(self) -> WorkerRecord:
        return self._record

    @workflow.signal(name=REGISTER_SIGNAL)
    def register(self, info: WorkerInfo) -> None:
        """Upsert the capabilities (a re-registration keeps registered_at)."""
        self._record.info = info
        self._dirty = True

    @workflow.signal(name=SEEN_SIGNAL)
    def seen(self, ts: int) -> None:
        """The worker was heard from at `ts` (ms)."""
        if self._record.last_heartbeat is None or ts > self._record.last_heartbeat:
            self._record.last_heartbeat = ts
            self._dirty = True
