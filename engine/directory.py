"""The deployment's directory, from outside the workflows: the job types ever
submitted (JobTypeRegistry, workflows/type_registry.py) and the registered workers
(WorkerRecord, workflows/worker_record.py). The same two concepts as those workflow
modules, seen from the caller's side: the API, the native worker and the CLI use it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionDescription, WorkflowExecutionStatus
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from engine.clock import now_ms
from engine.connection import TemporalSettings
from workflows.host_models import HostInfo, TelemetryReport
from workflows.models import WorkerInfo
from workflows.names import (
    ADD_TYPE_SIGNAL,
    REGISTER_SIGNAL,
    TYPES_MEMO,
    registry_workflow_id,
    worker_workflow_id,
)
from workflows.type_registry import JobTypeRegistry
from workflows.worker_record import WorkerRecordWorkflow, WorkerState


async def known_job_types(client: Client, task_queue: str) -> list[str]:
    """Every job type ever submitted, from the registry workflow's memo (a describe
    call: no workflow task). None yet, or no registry: an empty list."""
    desc = await _registry(client, task_queue)
    if desc is None or desc.status not in (WorkflowExecutionStatus.RUNNING, None):
        return []
    return await _types_of(desc)


async def _registry(client: Client, task_queue: str) -> WorkflowExecutionDescription | None:
    """The registry's current run, described; None if there is none."""
    try:
        return await client.get_workflow_handle(registry_workflow_id(task_queue)).describe()
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
        return None


async def _types_of(desc: WorkflowExecutionDescription) -> list[str]:
    return _types_in((await desc.memo()).get(TYPES_MEMO, []))


def _types_in(raw: Any) -> list[str]:
    return [str(t) for t in raw] if isinstance(raw, list) else []


# A history long poll that nothing answers returns empty at the server's long-poll
# expiry and is asked again; its own deadline is long, so that the expiry ends it.
LONG_POLL_TIMEOUT = timedelta(seconds=70)


async def follow_job_types(
    client: Client, task_queue: str, absent_s: float
) -> AsyncIterator[list[str]]:
    """Every job type ever submitted, now and again each time the set changes.

    One describe reads the registry's memo; then its run's history is followed by long
    poll (`wait_new_event`). Every change to the set is a memo upsert event that holds
    the whole set, so a type added is seen as soon as the registry records it, and an
    idle follower costs one request per long-poll expiry. When the run ends (it
    continues as new), the next run is followed. No registry yet: an empty set, and a
    look again every `absent_s`. Never ends; errors are the caller's."""
    while True:
        desc = await _registry(client, task_queue)
        yield [] if desc is None else await _types_of(desc)
        if desc is None or desc.status != WorkflowExecutionStatus.RUNNING:
            await asyncio.sleep(absent_s)  # none yet, or between a run's end and the next
            continue
        events = client.get_workflow_handle(desc.id, run_id=desc.run_id).fetch_history_events(
            wait_new_event=True, rpc_timeout=LONG_POLL_TIMEOUT
        )
        async for event in events:  # ends when the run closes
            if event.event_id <= desc.history_length:
                continue  # read by the describe
            if event.event_type != EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED:
                continue
            upserted = event.workflow_properties_modified_event_attributes.upserted_memo
            if TYPES_MEMO in upserted.fields:
                [raw] = await client.data_converter.decode([upserted.fields[TYPES_MEMO]])
                yield _types_in(raw)


async def register_job_type(client: Client, temporal: TemporalSettings, job_type: str) -> None:
    """Add a type to the registry, starting the registry if need be (idempotent)."""
    await client.start_workflow(
        JobTypeRegistry.run,
        [],
        id=registry_workflow_id(temporal.task_queue),
        task_queue=temporal.task_queue,
        start_signal=ADD_TYPE_SIGNAL,
        start_signal_args=[job_type],
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )


async def register_worker(client: Client, temporal: TemporalSettings, info: WorkerInfo) -> None:
    """Create or update a worker's record (signal-with-start: idempotent upsert)."""
    now = now_ms()
    await client.start_workflow(
        WorkerRecordWorkflow.run,
        WorkerState(info=info, registered_at=now, last_heartbeat=now),
        id=worker_workflow_id(info.worker_id),
        task_queue=temporal.task_queue,
        start_signal=REGISTER_SIGNAL,
        start_signal_args=[info],
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )


async def end_worker_record(client: Client, worker_id: str, reason: str) -> None:
    """End a worker's record (it leaves the fleet; it registers again if it comes
    back). One already ended, or none: nothing to do."""
    try:
        await client.get_workflow_handle(worker_workflow_id(worker_id)).terminate(reason=reason)
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise


async def worker_seen(client: Client, worker_id: str, ts: int) -> None:
    """Tell a worker's record it was heard from at `ts`."""
    await client.get_workflow_handle(worker_workflow_id(worker_id)).signal(
        WorkerRecordWorkflow.seen, ts
    )


async def worker_telemetry(client: Client, worker_id: str, ts: int, info: HostInfo) -> None:
    """A heartbeat with host telemetry: the record notes it was heard from at `ts` and
    keeps `info`. Raises RPCError NOT_FOUND for a worker that has no (running) record."""
    await client.get_workflow_handle(worker_workflow_id(worker_id)).signal(
        WorkerRecordWorkflow.telemetry, TelemetryReport(ts=ts, info=info)
    )
