"""WorkerRecord: one small workflow per registered worker, its record in the memo.

Durable across API and Temporal restarts; `GET /api/workers` lists them through
visibility (memo included), so no query or workflow task is needed to read them.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.models import WorkerInfo, WorkerRecord

REGISTER_SIGNAL = "register"
SEEN_SIGNAL = "seen"
RECORD_MEMO = "worker"


def worker_workflow_id(worker_id: str) -> str:
    """Workflow id of a worker's record."""
    return f"jobforge-worker-{worker_id}"


@workflow.defn(name="WorkerRecord")
class WorkerRecordWorkflow:
    """Holds one worker's capabilities and when it was last heard from."""

    @workflow.init
    def __init__(self, record: WorkerRecord) -> None:
        self._record = record
        self._dirty = True

    @workflow.run
    async def run(self, record: WorkerRecord) -> None:  # noqa: ARG002 - read in __init__
        while True:
            await workflow.wait_condition(
                lambda: self._dirty or workflow.info().is_continue_as_new_suggested()
            )
            if self._dirty:
                self._dirty = False
                workflow.upsert_memo({RECORD_MEMO: self._record.model_dump(mode="json")})
            if workflow.info().is_continue_as_new_suggested():
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(self._record)

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
