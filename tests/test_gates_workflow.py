"""Scheduling, in process: groups, pools, serial targets, start times and deadlines.

JobWorkflow and GateWorkflow run on a fresh task queue of the session's dev server,
with the stand-in `run_job` activity (tests/workflow_harness.py). The jobs are queued
at their gates as the API does (engine/gates.py) before they start.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import AsyncIterator

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowUpdateFailedError,
)
from temporalio.contrib.pydantic import pydantic_data_converter

from engine.gates import Gates
from tests.conftest import wait_until_async
from tests.workflow_harness import Harness, JobHandle, now_ms, running_harness, statuses
from worker.devserver import DevServer
from workflows.errors import ErrorType
from workflows.gate_models import GateKind, GatePatch, GateSettings, GateView, TargetResume
from workflows.job_workflow import JobWorkflow
from workflows.models import AttemptInput, AttemptResult, Job, JobSpec, JobStatus, WaitingFor

HOLD_MS = 600_000


@pytest.fixture(scope="module")
async def client(temporal: DevServer) -> Client:
    return await Client.connect(temporal.address, data_converter=pydantic_data_converter)


@pytest.fixture
async def harness(client: Client) -> AsyncIterator[Harness]:
    async with running_harness(client) as harness:
        yield harness


def gates_for(harness: Harness, **defaults: float) -> Gates:
    return Gates(harness.client, harness.task_queue, GateSettings(**defaults))


async def submit(
    harness: Harness,
    gates: Gates,
    *,
    unserved: bool = False,
    hold_ms: int = HOLD_MS,
    **fields: object,
) -> JobHandle:
    spec = JobSpec.model_validate({"type": "in-process", **fields})
    queue = f"unserved-{uuid.uuid4().hex[:8]}" if unserved else None
    return await harness.submit(
        spec=spec, gates=gates, activity_task_queue=queue, requeue_hold_ms=hold_ms
    )


async def gate_until(gates: Gates, kind: GateKind, key: str, check: object, what: str) -> GateView:
    async def read() -> GateView | None:
        view = await gates.view(kind, key)
        return view if view is not None and check(view) else None  # type: ignore[operator]

    found: GateView = await wait_until_async(read, timeout=15, what=what)
    return found


def fail_first_run(harness: Harness) -> None:
    """The first attempt the stand-in runs fails (whichever job it is); the rest succeed."""
    fail = harness.stand_in.fail("solver_exit", "boom")
    succeed = harness.stand_in.succeed()
    runs: list[str] = []

    async def play(inp: AttemptInput) -> AttemptResult:
        runs.append(inp.job_id)
        return await (fail if len(runs) == 1 else succeed)(inp)

    harness.stand_in.default = play


async def history_event_types(handle: JobHandle) -> list[int]:
    return [event.event_type for event in (await handle.fetch_history()).events]


# -- the plain path is untouched ---------------------------------------------------------


async def test_a_job_with_no_scheduling_field_takes_the_plain_path(harness: Harness) -> None:
    plain = await harness.submit()
    await harness.wait_status(plain, JobStatus.COMPLETED)
    assert EventType.EVENT_TYPE_MARKER_RECORDED not in await history_event_types(plain)
    gated = await submit(harness, gates_for(harness), group="g")
    await harness.wait_status(gated, JobStatus.COMPLETED)
    assert EventType.EVENT_TYPE_MARKER_RECORDED in await history_event_types(gated)


# -- groups ------------------------------------------------------------------------------


async def test_a_paused_group_assigns_nothing_until_resumed(harness: Harness) -> None:
    gates = gates_for(harness)
    paused = await gates.pause(GateKind.GROUP, "g")
    assert paused.settings.paused
    handle = await submit(harness, gates, group="g")
    job = await harness.wait_for(
        handle, lambda j: j.waiting_for == WaitingFor.GROUP_LIMIT, "waiting at the group"
    )
    assert job.status == JobStatus.PENDING
    view = await gate_until(gates, GateKind.GROUP, "g", lambda v: v.waiting == 1, "queued")
    assert view.holders == []
    assert harness.stand_in.jobs == []
    await gates.resume(GateKind.GROUP, "g", TargetResume())
    job = await harness.wait_status(handle, JobStatus.COMPLETED)
    assert job.waiting_for is None


async def test_a_pause_recalls_unclaimed_leases_and_keeps_claimed_ones(harness: Harness) -> None:
    gates = gates_for(harness)
    release = asyncio.Event()
    harness.stand_in.default = harness.stand_in.hold(release)
    running = await submit(harness, gates, group="g")
    await harness.wait_status(running, JobStatus.RUNNING)
    queued = await submit(harness, gates, group="g", unserved=True)
    await gate_until(gates, GateKind.GROUP, "g", lambda v: len(v.holders) == 2, "two leases")

    view = await gates.pause(GateKind.GROUP, "g")
    # The answer comes once the unclaimed lease is back: only the running job holds one.
    assert view.holders == [running.id]
    assert view.waiting == 1
    job = await harness.job(queued)
    assert job.status == JobStatus.PENDING
    assert job.attempts == 0  # a recalled attempt is not an attempt
    release.set()
    await harness.wait_status(running, JobStatus.COMPLETED)
    await gates.resume(GateKind.GROUP, "g", TargetResume())
    await gate_until(gates, GateKind.GROUP, "g", lambda v: v.holders == [queued.id], "re-granted")


async def test_max_parallel_caps_the_groups_leases(harness: Harness) -> None:
    gates = gates_for(harness)
    await gates.configure(GateKind.GROUP, "g", GatePatch(max_parallel=1))
    release = asyncio.Event()
    harness.stand_in.default = harness.stand_in.hold(release)
    first = await submit(harness, gates, group="g")
    second = await submit(harness, gates, group="g")
    await harness.wait_status(first, JobStatus.RUNNING)
    job = await harness.wait_for(
        second, lambda j: j.waiting_for == WaitingFor.GROUP_LIMIT, "second waits"
    )
    assert job.status == JobStatus.PENDING
    assert harness.stand_in.jobs == [first.id]
    lifted = await gates.configure(GateKind.GROUP, "g", GatePatch(max_parallel=None))
    assert lifted.settings.max_parallel is None
    await harness.wait_status(second, JobStatus.RUNNING)
    release.set()
    for handle in (first, second):
        await harness.wait_status(handle, JobStatus.COMPLETED)


async def test_a_requeued_quarantined_group_job_keeps_its_id_and_history(
    harness: Harness,
) -> None:
    gates = gates_for(harness)
    harness.stand_in.script[1] = harness.stand_in.fail("solver_exit", "exit 3")
    handle = await submit(harness, gates, group="g", max_attempts=1)
    job = await harness.wait_status(handle, JobStatus.QUARANTINED)
    # Held open for a re-queue, its leases given back.
    assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
    await gate_until(gates, GateKind.GROUP, "g", lambda v: not v.holders, "lease back")
    requeued = await handle.execute_update(JobWorkflow.requeue)
    assert requeued.status == JobStatus.PENDING
    job = await harness.wait_status(handle, JobStatus.COMPLETED)
    assert job.attempts == 2
    assert [f.reason for f in job.fail_history] == ["solver_exit: exit 3"]
    assert statuses(job)[-5:] == ["quarantined", "pending", "assigned", "running", "completed"]


async def test_only_a_held_quarantined_job_can_be_requeued(harness: Harness) -> None:
    gates = gates_for(harness)
    release = asyncio.Event()
    harness.stand_in.default = harness.stand_in.hold(release)
    handle = await submit(harness, gates, group="g")
    await harness.wait_status(handle, JobStatus.RUNNING)
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(JobWorkflow.requeue)
    assert "only a quarantined job" in str(refused.value.cause)
    release.set()
    await harness.wait_status(handle, JobStatus.COMPLETED)


# -- pools -------------------------------------------------------------------------------


async def test_a_pool_never_leases_more_than_its_capacity_and_its_head_reserves(
    harness: Harness,
) -> None:
    gates = gates_for(harness, capacity=3)
    release = asyncio.Event()
    harness.stand_in.default = harness.stand_in.hold(release)
    big = await submit(harness, gates, pool="p", cost_units=2)
    await harness.wait_status(big, JobStatus.RUNNING)
    head = await submit(harness, gates, pool="p", cost_units=2)
    small = await submit(harness, gates, pool="p", cost_units=1)
    view = await gate_until(
        gates, GateKind.POOL, "p", lambda v: v.waiting == 2, "both queued behind the first"
    )
    # One unit is free, but the head (2 units) reserves it: the small job waits too.
    assert view.in_use == 2
    assert view.head == head.id
    for handle in (head, small):
        job = await harness.wait_for(
            handle, lambda j: j.waiting_for == WaitingFor.POOL_CAPACITY, "waiting for units"
        )
        assert job.status == JobStatus.PENDING
    release.set()
    first, *rest = [await harness.wait_status(h, JobStatus.COMPLETED) for h in (big, head, small)]
    # Neither queued job was claimed before the first gave its units back.
    assert first.completed_at is not None
    assert all(job.claimed_at is not None and job.claimed_at >= first.completed_at for job in rest)
    view = await gate_until(gates, GateKind.POOL, "p", lambda v: v.in_use == 0, "all back")
    assert view.waiting == 0


async def test_a_pool_admits_by_priority_then_deadline_urgency_first(harness: Harness) -> None:
    gates = gates_for(harness, capacity=1, aging_step_s=3600, deadline_urgency_s=3600)
    release = asyncio.Event()
    harness.stand_in.default = harness.stand_in.hold(release)
    first = await submit(harness, gates, pool="p")
    await harness.wait_status(first, JobStatus.RUNNING)
    low = await submit(harness, gates, pool="p", priority=0)
    high = await submit(harness, gates, pool="p", priority=5)
    urgent = await submit(harness, gates, pool="p", priority=-5, deadline_at=now_ms() + 600_000)
    await gate_until(gates, GateKind.POOL, "p", lambda v: v.waiting == 3, "three queued")
    for handle in (low, high, urgent):
        await harness.wait_for(handle, lambda j: j.waiting_for is not None, "asked")
    release.set()
    for handle in (first, low, high, urgent):
        await harness.wait_status(handle, JobStatus.COMPLETED)
    # Capacity 1: one at a time, the near deadline first, then by priority.
    assert harness.stand_in.jobs == [first.id, urgent.id, high.id, low.id]


async def test_a_waiting_pool_job_gains_a_point_per_aging_step(harness: Harness) -> None:
    gates = gates_for(harness, capacity=1, aging_step_s=1)
    release = asyncio.Event()
    harness.stand_in.default = harness.stand_in.hold(release)
    first = await submit(harness, gates, pool="p")
    await harness.wait_status(first, JobStatus.RUNNING)
    queued_at = now_ms()
    old = await submit(harness, gates, pool="p", priority=0)
    await harness.wait_for(old, lambda j: j.waiting_for is not None, "asked")
    view = await gate_until(gates, GateKind.POOL, "p", lambda v: v.waiting == 1, "queued")
    assert view.head == old.id

    # Aged past three steps, the old job outranks a fresh one of priority 2.
    async def aged() -> bool:
        return now_ms() - queued_at >= 3_500

    await wait_until_async(aged, timeout=10, what="three aging steps")
    fresh = await submit(harness, gates, pool="p", priority=2)
    await harness.wait_for(fresh, lambda j: j.waiting_for is not None, "asked")
    view = await gate_until(gates, GateKind.POOL, "p", lambda v: v.waiting == 2, "both queued")
    assert view.head == old.id
    release.set()
    for handle in (first, old, fresh):
        await harness.wait_status(handle, JobStatus.COMPLETED)
    assert harness.stand_in.jobs == [first.id, old.id, fresh.id]


async def test_raising_a_pools_capacity_admits_at_once(harness: Harness) -> None:
    gates = gates_for(harness, capacity=0)
    handle = await submit(harness, gates, pool="p")
    await harness.wait_for(
        handle, lambda j: j.waiting_for == WaitingFor.POOL_CAPACITY, "waiting for capacity"
    )
    view = await gates.configure(GateKind.POOL, "p", GatePatch(capacity=5))
    assert view.settings.capacity == 5
    await harness.wait_status(handle, JobStatus.COMPLETED)


async def test_a_waiting_job_that_is_cancelled_leaves_the_queue(harness: Harness) -> None:
    gates = gates_for(harness, capacity=0)
    handle = await submit(harness, gates, pool="p")
    await gate_until(gates, GateKind.POOL, "p", lambda v: v.waiting == 1, "queued")
    job = await handle.execute_update(JobWorkflow.cancel)
    assert job.cancelled
    await gate_until(gates, GateKind.POOL, "p", lambda v: v.waiting == 0, "withdrawn")


# -- targets -----------------------------------------------------------------------------


async def test_a_targets_jobs_run_one_at_a_time_in_submission_order(harness: Harness) -> None:
    gates = gates_for(harness)
    handles = [await submit(harness, gates, target="site/t1") for _ in range(4)]
    jobs = [await harness.wait_status(h, JobStatus.COMPLETED) for h in handles]
    assert harness.stand_in.jobs == [h.id for h in handles]
    for earlier, later in itertools.pairwise(jobs):
        assert earlier.completed_at is not None and later.claimed_at is not None
        assert later.claimed_at >= earlier.completed_at
    assert all(job.max_attempts == 1 for job in jobs)


async def test_a_quarantined_job_halts_its_target_and_a_retry_runs_it_first(
    harness: Harness,
) -> None:
    gates = gates_for(harness)
    fail_first_run(harness)
    failing = await submit(harness, gates, target="t")
    await harness.wait_status(failing, JobStatus.QUARANTINED)
    later = await submit(harness, gates, target="t")
    job = await harness.wait_for(
        later, lambda j: j.waiting_for == WaitingFor.TARGET_BUSY, "waits behind the halt"
    )
    view = await gate_until(gates, GateKind.TARGET, "t", lambda v: v.settings.halted, "halted")
    assert view.settings.halted_by == failing.id
    assert job.status == JobStatus.PENDING
    # Retry: the halting job is re-queued and goes first, then the later one.
    await failing.execute_update(JobWorkflow.requeue)
    await harness.wait_status(failing, JobStatus.COMPLETED)
    await harness.wait_status(later, JobStatus.COMPLETED)
    assert harness.stand_in.jobs == [failing.id, failing.id, later.id]
    view = await gate_until(gates, GateKind.TARGET, "t", lambda v: not v.holders, "free")
    assert not view.settings.halted


async def test_resume_with_skip_leaves_the_halting_job_and_moves_on(harness: Harness) -> None:
    gates = gates_for(harness)
    fail_first_run(harness)
    failing = await submit(harness, gates, target="t", hold_ms=0)
    await gate_until(gates, GateKind.TARGET, "t", lambda v: v.settings.halted, "halted")
    later = await submit(harness, gates, target="t")
    await harness.wait_for(later, lambda j: j.waiting_for == WaitingFor.TARGET_BUSY, "waits")
    view = await gates.resume(GateKind.TARGET, "t", TargetResume(job="skip"))
    assert not view.settings.halted
    await harness.wait_status(later, JobStatus.COMPLETED)
    assert (await harness.job(failing)).status == JobStatus.QUARANTINED


# -- times -------------------------------------------------------------------------------


async def test_a_job_waits_for_its_earliest_start(harness: Harness) -> None:
    start = now_ms() + 2_000
    handle = await submit(harness, gates_for(harness), earliest_start_at=start)
    job = await harness.wait_for(
        handle, lambda j: j.waiting_for == WaitingFor.START_TIME, "waiting for its start"
    )
    assert job.status == JobStatus.PENDING
    job = await harness.wait_status(handle, JobStatus.COMPLETED)
    assert job.claimed_at is not None and job.claimed_at >= start


async def test_a_job_cancelled_before_its_start_leaves_no_trace_at_its_gates(
    harness: Harness,
) -> None:
    gates = gates_for(harness)
    handle = await harness.submit(
        spec=JobSpec(type="in-process", group="later", earliest_start_at=now_ms() + 600_000),
        gates=gates,
        enqueue=False,  # as the API: a job with a start time to come is not queued yet
    )
    await harness.wait_for(handle, lambda j: j.waiting_for == WaitingFor.START_TIME, "waits")
    job = await handle.execute_update(JobWorkflow.cancel)
    assert job.cancelled
    await handle.cancel()
    assert await harness.closed(handle) == WorkflowExecutionStatus.CANCELED
    assert await gates.view(GateKind.GROUP, "later") is None


@pytest.mark.parametrize("gated", [False, True], ids=["task-queue", "pool"])
async def test_a_job_not_assigned_by_its_deadline_fails_deadline_exceeded(
    harness: Harness, gated: bool
) -> None:
    gates = gates_for(harness, capacity=0)
    deadline = now_ms() + 1_500
    if gated:
        handle = await submit(harness, gates, pool="p", deadline_at=deadline)
    else:
        handle = await submit(harness, gates, unserved=True, deadline_at=deadline)
    job = await harness.wait_status(handle, JobStatus.FAILED)
    assert job.fail_reason == ErrorType.DEADLINE_EXCEEDED
    assert job.attempts == 0
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    assert (await handle.describe()).status == WorkflowExecutionStatus.FAILED
    if gated:
        await gate_until(gates, GateKind.POOL, "p", lambda v: v.waiting == 0, "withdrawn")


# -- faults ------------------------------------------------------------------------------


async def test_a_terminated_holder_loses_its_lease(harness: Harness) -> None:
    gates = gates_for(harness, ping_after_s=1)
    await gates.configure(GateKind.GROUP, "g", GatePatch(max_parallel=1))
    stuck = await submit(harness, gates, group="g", unserved=True)
    await gate_until(gates, GateKind.GROUP, "g", lambda v: v.holders == [stuck.id], "held")
    await stuck.terminate("operator")
    after = await submit(harness, gates, group="g")
    await harness.wait_status(after, JobStatus.COMPLETED)


async def test_a_gate_continues_as_new_and_keeps_its_queue(harness: Harness) -> None:
    gates = gates_for(harness, history_limit=40)
    await gates.configure(GateKind.GROUP, "g", GatePatch(max_parallel=1))
    handles = [await submit(harness, gates, group="g") for _ in range(6)]
    done: list[Job] = [await harness.wait_status(h, JobStatus.COMPLETED) for h in handles]
    assert len(done) == 6
    gate_id = gates.ref(GateKind.GROUP, "g").workflow_id
    # The gate continued as new along the way: more than one run under its id.
    runs = [e async for e in harness.client.list_workflows(f"WorkflowId = '{gate_id}'")]
    assert len(runs) >= 2
    view = await gates.view(GateKind.GROUP, "g")
    assert view is not None and view.settings.max_parallel == 1 and not view.holders


async def test_a_retry_due_after_the_deadline_ends_the_job_deadline_exceeded(
    harness: Harness,
) -> None:
    deadline = now_ms() + 1_000
    fail = harness.stand_in.fail("solver_exit", "late")

    async def fail_after_the_deadline(inp: AttemptInput) -> AttemptResult:
        async def past() -> bool:
            return now_ms() > deadline + 200

        await wait_until_async(past, timeout=10, what="the deadline to pass")
        return await fail(inp)

    harness.stand_in.script[1] = fail_after_the_deadline
    handle = await submit(
        harness, gates_for(harness), pool="p", deadline_at=deadline, max_attempts=2
    )
    job = await harness.wait_status(handle, JobStatus.FAILED)
    job = await harness.wait_for(
        handle, lambda j: j.fail_reason == ErrorType.DEADLINE_EXCEEDED, "deadline_exceeded"
    )
    assert job.attempts == 1
    assert await harness.closed(handle) == WorkflowExecutionStatus.FAILED
