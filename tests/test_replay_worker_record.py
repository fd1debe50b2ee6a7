"""Replay of committed WorkerRecordWorkflow histories: today's code must still accept them,
and its workflow edges (register, seen, telemetry) in process.

"-v1" was recorded before host telemetry (register and seen signals only); "-v2" after
it (a telemetry signal too). Record a new set only under a new suffix, never overwrite
a committed file:

    JOBFORGE_RECORD_HISTORIES=1 .venv/bin/pytest tests/test_replay_worker_record.py

Without that variable only the committed files are replayed (no server needed).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer, Worker

from engine.connection import TemporalSettings
from engine.directory import register_worker, worker_seen, worker_telemetry
from tests.conftest import wait_until_async
from worker.devserver import DevServer
from worker.native import workflow_runner
from workflows.host_models import HostInfo
from workflows.models import WorkerInfo
from workflows.names import RECORD_MEMO, worker_workflow_id
from workflows.worker_record import WorkerRecordWorkflow

HISTORIES = Path(__file__).resolve().parent / "histories"
RECORD = os.environ.get("JOBFORGE_RECORD_HISTORIES") == "1"
# The newest set is the one a recording run writes.
SETS = ("-v1", "-v2")
NAMES = [f"worker-record{suffix}" for suffix in SETS]
HOST = HostInfo(
    cpu_percent=12.5,
    mem_used_bytes=3 * 2**30,
    mem_total_bytes=16 * 2**30,
    disk_free_bytes=100 * 2**30,
    load_avg=(0.5, 0.25, 0.125),
    running_jobs=1,
    version="0.1.0",
)


def history_file(name: str) -> Path:
    return HISTORIES / f"{name}.json"


def signal_names(name: str) -> list[str]:
    parsed = json.loads(history_file(name).read_text())
    return [
        e["workflowExecutionSignaledEventAttributes"]["signalName"]
        for e in parsed["events"]
        if e["eventType"] == "EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED"
    ]


@pytest.fixture
async def record_worker(temporal: DevServer) -> AsyncIterator[tuple[Client, TemporalSettings]]:
    """A workflow worker running WorkerRecordWorkflow alone, on a fresh task queue."""
    client = await Client.connect(temporal.address, data_converter=pydantic_data_converter)
    settings = TemporalSettings(address=temporal.address, task_queue=f"wr-{uuid.uuid4().hex[:8]}")
    async with Worker(
        client,
        task_queue=settings.task_queue,
        workflows=[WorkerRecordWorkflow],
        workflow_runner=workflow_runner(),
    ):
        yield client, settings


async def memo_of(handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
    memo = await (await handle.describe()).memo()
    record: dict[str, Any] = memo.get(RECORD_MEMO, {})
    return record


# -- the workflow's edges, in process ---------------------------------------------------


async def test_telemetry_lands_in_the_memo_and_counts_as_a_heartbeat(
    record_worker: tuple[Client, TemporalSettings],
) -> None:
    client, settings = record_worker
    worker_id = f"wr-{uuid.uuid4().hex[:6]}"
    await register_worker(client, settings, WorkerInfo(worker_id=worker_id, kind="native"))
    handle = client.get_workflow_handle(worker_workflow_id(worker_id))
    first = await wait_until_async(lambda: memo_of(handle), what="the first memo")
    assert "telemetry" not in first  # the memo of a worker that sent none is as before

    ts = first["last_heartbeat"] + 1000
    await worker_telemetry(client, worker_id, ts, HOST)

    async def with_telemetry() -> dict[str, Any] | None:
        memo = await memo_of(handle)
        return memo if memo.get("telemetry") else None

    memo = await wait_until_async(with_telemetry, what="telemetry in the memo")
    assert memo["telemetry"] == HOST.model_dump(mode="json")
    assert memo["last_heartbeat"] == ts
    assert memo["info"]["worker_id"] == worker_id

    # An older report (delayed in flight) replaces neither the telemetry nor the time.
    await worker_telemetry(client, worker_id, ts - 500, HOST.model_copy(update={"running_jobs": 9}))
    await worker_seen(client, worker_id, ts + 1)

    async def seen_later() -> dict[str, Any] | None:
        memo = await memo_of(handle)
        return memo if memo["last_heartbeat"] == ts + 1 else None

    memo = await wait_until_async(seen_later, what="the later seen")
    assert memo["telemetry"]["running_jobs"] == 1
    await handle.terminate("test over")


# -- recording (only with JOBFORGE_RECORD_HISTORIES=1) --------------------------------


@pytest.mark.skipif(not RECORD, reason="set JOBFORGE_RECORD_HISTORIES=1 to record histories")
async def test_recording_a_worker_record_history(
    record_worker: tuple[Client, TemporalSettings],
) -> None:
    client, settings = record_worker
    name = NAMES[-1]
    assert not history_file(name).exists(), f"{name} is committed; add a new suffix"
    worker_id = f"replay-{uuid.uuid4().hex[:6]}"
    info = WorkerInfo(worker_id=worker_id, name="replay", cores=2, ram_gb=4.0, kind="native")
    await register_worker(client, settings, info)
    handle = client.get_workflow_handle(worker_workflow_id(worker_id))
    await register_worker(client, settings, info.model_copy(update={"tags": ["gpu"]}))
    await worker_seen(client, worker_id, 4_000_000_000_000)
    await worker_telemetry(client, worker_id, 4_000_000_001_000, HOST)

    async def settled() -> bool:
        memo = await memo_of(handle)
        return memo.get("last_heartbeat") == 4_000_000_001_000 and memo["info"]["tags"] == ["gpu"]

    await wait_until_async(settled, what="the record to settle")
    history = await handle.fetch_history()
    history_file(name).write_text(history.to_json() + "\n")
    await handle.terminate("recorded")


# -- replay ------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
async def test_todays_worker_record_replays_each_committed_history(name: str) -> None:
    history = WorkflowHistory.from_json(name, history_file(name).read_text())
    replayer = Replayer(
        workflows=[WorkerRecordWorkflow],
        data_converter=pydantic_data_converter,
        workflow_runner=workflow_runner(),
    )

    result = await replayer.replay_workflow(history)

    assert result.replay_failure is None


def test_the_first_history_predates_telemetry_and_the_second_has_it() -> None:
    assert signal_names("worker-record-v1") == ["register", "register", "seen"]
    assert signal_names("worker-record-v2") == ["register", "register", "seen", "telemetry"]
