"""A job a Temporal Schedule fires (`JobInput.from_schedule`), in process: the real
JobWorkflow on the harness's queue, started by a real schedule of the session's dev
server. Its replay history is recorded here too (JOBFORGE_RECORD_HISTORIES=1), as its
own set, and replayed always."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.client import (
    Schedule,
    ScheduleActionExecutionStartWorkflow,
    ScheduleActionStartWorkflow,
    ScheduleHandle,
    ScheduleSpec,
    ScheduleState,
    WorkflowExecutionStatus,
    WorkflowHistory,
)
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from tests.conftest import wait_until_async
from tests.workflow_harness import Harness, JobHandle, now_ms
from worker.native import workflow_runner
from workflows import search_attributes
from workflows.gate_workflow import GateWorkflow
from workflows.job_states import JobStatus
from workflows.job_workflow import JobWorkflow
from workflows.models import EventsMemo, JobInput, JobSpec
from workflows.names import EVENTS_MEMO, SCHEDULE_MEMO

HISTORIES = Path(__file__).resolve().parent / "histories"
RECORD = os.environ.get("JOBFORGE_RECORD_HISTORIES") == "1"
# A plain job fired by a schedule, that completed: no marker, no patch.
HISTORY = HISTORIES / "job-fired-by-schedule-completed-s1.json"


@pytest.fixture
async def scheduled(harness: Harness) -> AsyncIterator[ScheduleHandle]:
    """A paused schedule whose action starts a plain job on the harness's queue, as the
    API makes one (api/schedule_service.py): one input, `from_schedule`, for every
    firing. Deleted after the test."""
    schedule_id = f"wf-{uuid.uuid4().hex[:10]}"
    spec = JobSpec(type="in-process", priority=4)
    inp = JobInput(
        id=schedule_id,
        spec=spec,
        created_at=now_ms(),
        priority_key=3,
        activity_task_queue=harness.task_queue,
        heartbeat_timeout_ms=60_000,
        submitted_by=f"schedule {schedule_id}",
        stop_waits_for_work=True,
        from_schedule=True,
    )
    action = ScheduleActionStartWorkflow(
        JobWorkflow.run,
        inp,
        id=schedule_id,
        task_queue=harness.task_queue,
        typed_search_attributes=search_attributes.at_submit(
            spec.type, spec.priority, inp.created_at
        ),
        memo={SCHEDULE_MEMO: {"id": schedule_id, "cron": "0 0 1 1 *", "interval": None}},
    )
    handle = await harness.client.create_schedule(
        schedule_id,
        # Never due by itself: each test fires it.
        schedule=Schedule(
            action=action,
            spec=ScheduleSpec(cron_expressions=["0 0 1 1 *"]),
            state=ScheduleState(paused=True),
        ),
    )
    yield handle
    await handle.delete()


async def fire(harness: Harness, schedule: ScheduleHandle) -> tuple[JobHandle, int]:
    """Trigger the schedule once: its job's handle, and when Temporal started it (ms)."""
    await schedule.trigger()

    async def started() -> ScheduleActionExecutionStartWorkflow | None:
        recent = (await schedule.describe()).info.recent_actions
        action = recent[-1].action if recent else None
        return action if isinstance(action, ScheduleActionExecutionStartWorkflow) else None

    action = await wait_until_async(started, timeout=30, what="the firing")
    handle: JobHandle = harness.client.get_workflow_handle_for(JobWorkflow.run, action.workflow_id)
    desc = await handle.describe()
    assert desc.start_time is not None
    return handle, int(desc.start_time.timestamp() * 1000)


async def test_a_fired_job_is_named_and_dated_by_its_workflow_and_runs(
    harness: Harness, scheduled: ScheduleHandle
) -> None:
    handle, started = await fire(harness, scheduled)
    assert handle.id.startswith(f"{scheduled.id}-")
    job = await harness.wait_status(handle, JobStatus.COMPLETED)
    # The stand-in reported to the job by its id: the workflow's, not the schedule's.
    assert job.id == handle.id
    assert [t.status for t in job.transitions] == [
        JobStatus.PENDING,
        JobStatus.ASSIGNED,
        JobStatus.RUNNING,
        JobStatus.COMPLETED,
    ]
    assert job.created_at == job.transitions[0].ts == started
    assert job.transitions[0].by == f"schedule {scheduled.id}"
    assert job.priority == 4


async def test_a_fired_jobs_first_task_mirrors_its_own_id_and_time(
    harness: Harness, scheduled: ScheduleHandle
) -> None:
    # Its attempt reports nothing until the gate opens: the job is pending after its
    # first task, which alone has mirrored it.
    gate = asyncio.Event()
    harness.stand_in.default = harness.stand_in.hold(gate, phases=())
    handle, started = await fire(harness, scheduled)

    async def mirrored() -> EventsMemo | None:
        desc = await handle.describe()
        raw = (await desc.memo()).get(EVENTS_MEMO)
        if raw is None:
            return None  # a firing starts with no events memo: its first task writes it
        memo = EventsMemo.model_validate(raw)
        updated = desc.typed_search_attributes.get(search_attributes.UPDATED_AT)
        fresh = updated is not None and updated.timestamp() * 1000 >= started
        return memo if fresh and memo.created_at == started else None

    memo = await wait_until_async(mirrored, timeout=30, what="the first task's upsert")
    assert [(t.status, t.ts) for t in memo.transitions] == [(JobStatus.PENDING, started)]
    gate.set()
    await harness.wait_status(handle, JobStatus.COMPLETED)


# -- its replay history -----------------------------------------------------------------


@pytest.mark.skipif(not RECORD, reason="records only with JOBFORGE_RECORD_HISTORIES=1")
async def test_recording_a_fired_jobs_history(harness: Harness, scheduled: ScheduleHandle) -> None:
    assert not HISTORY.exists(), f"{HISTORY.name} is committed: name a new set"
    handle, _ = await fire(harness, scheduled)
    await harness.wait_status(handle, JobStatus.COMPLETED)

    async def closed() -> bool:
        return (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED

    await wait_until_async(closed, timeout=30, what="the run to close")
    HISTORY.write_text((await handle.fetch_history()).to_json() + "\n")


def test_the_fired_jobs_history_is_a_plain_completed_run_of_a_schedules_input() -> None:
    events = json.loads(HISTORY.read_text())["events"]
    started = events[0]["workflowExecutionStartedEventAttributes"]
    assert started["workflowType"]["name"] == "JobWorkflow"
    assert events[-1]["eventType"] == "EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED"
    assert not [e for e in events if e["eventType"] == "EVENT_TYPE_MARKER_RECORDED"]
    attributes = started["searchAttributes"]["indexedFields"]
    assert "TemporalScheduledById" in attributes  # Temporal's own mark of a firing


async def test_todays_workflows_replay_the_fired_jobs_history() -> None:
    history = WorkflowHistory.from_json(HISTORY.name, HISTORY.read_text())
    replayer = Replayer(
        workflows=[JobWorkflow, GateWorkflow],
        data_converter=pydantic_data_converter,
        workflow_runner=workflow_runner(),
    )
    await replayer.replay_workflow(history)
