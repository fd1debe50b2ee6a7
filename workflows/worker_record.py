"""WorkerRecord: one small workflow per registered worker, its record in the memo.

Durable across API and Temporal restarts; `GET /api/workers` lists them through
visibility (memo included), so no query or workflow task is needed to read them.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.host_models import TELEMETRY_SIGNAL, HostInfo, TelemetryReport
    from workflows.memo_mirror import mirror_into_memo
    from workflows.models import WorkerInfo, WorkerRecord
    from workflows.names import (
        RECORD_MEMO,
        REGISTER_SIGNAL,
        SEEN_SIGNAL,
        WORKER_RECORD_WORKFLOW,
    )


class WorkerState(WorkerRecord):
    """The record with the worker's latest host telemetry. Both fields default to None,
    so a run started (or continued as new) before telemetry existed reads as before."""

    telemetry: HostInfo | None = None
    telemetry_at: int | None = None

    def memo(self) -> dict[str, Any]:
        """The memo form; without telemetry, exactly the pre-telemetry record."""
        unset = {name for name in ("telemetry", "telemetry_at") if getattr(self, name) is None}
        return self.model_dump(mode="json", exclude=unset)


@workflow.defn(name=WORKER_RECORD_WORKFLOW)
class WorkerRecordWorkflow:
    """Holds one worker's capabilities, its latest telemetry and when it was last heard
    from."""

    @workflow.init
    def __init__(self, record: WorkerState) -> None:
        self._record = record
        self._dirty = True

    @workflow.run
    async def run(self, record: WorkerState) -> None:  # noqa: ARG002 - read in __init__
        await mirror_into_memo(RECORD_MEMO, lambda: self._dirty, self._snapshot, self._current)

    def _snapshot(self) -> dict[str, Any]:
        self._dirty = False
        return self._record.memo()

    def _current(self) -> WorkerState:
        return self._record

    @workflow.signal(name=REGISTER_SIGNAL)
    def register(self, info: WorkerInfo) -> None:
        """Upsert the capabilities (a re-registration keeps registered_at)."""
        self._record.info = info
        self._dirty = True

    @workflow.signal(name=SEEN_SIGNAL)
    def seen(self, ts: int) -> None:
        """The worker was heard from at `ts` (ms)."""
        self._heard_at(ts)

    @workflow.signal(name=TELEMETRY_SIGNAL)
    def telemetry(self, report: TelemetryReport) -> None:
        """A heartbeat with telemetry: it counts as seen, and replaces the telemetry
        unless a newer sample came first (signals from two API replicas may cross)."""
        self._heard_at(report.ts)
        record = self._record
        if record.telemetry_at is None or report.ts >= record.telemetry_at:
            record.telemetry = report.info
            record.telemetry_at = report.ts
            self._dirty = True

    def _heard_at(self, ts: int) -> None:
        if self._record.last_heartbeat is None or ts > self._record.last_heartbeat:
            self._record.last_heartbeat = ts
            self._dirty = True
