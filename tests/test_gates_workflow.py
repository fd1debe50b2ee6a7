"""Scheduling, in process: groups, pools, serial targets, start times and deadlines.

JobWorkflow and GateWorkflow run on a fresh task queue of the session's dev server,
with the stand-in `run_job` activity (tests/workflow_harness.py). The jobs are queued
at their gates as the API does (engine/gates.py) before they start.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import uuid
from datetime import timedelta
from typing import Any

import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from engine.gates import Gates
from tests import faultkit
from tests.conftest import wait_until_async
from tests.workflow_harness import Harness, JobHandle, PoolRefusedError, now_ms, statuses
from workflows.errors import ErrorType
from workflows.fair_shares import FairShares
from workflows.gate_models import (
    GateGrant,
    GateInput,
    GateKind,
    GatePatch,
    GateSettings,
    GateView,
    TargetResume,
)
from workflows.gate_workflow import FAIR_SHARES_PATCH, GateWorkflow
from workflows.job_workflow import JobWorkflow
from workflows.models import AttemptInput, AttemptResult, Job, JobSpec, JobStatus, WaitingFor
from workflows.names import GRANT_SIGNAL, RECALL_SIGNAL, RELEASE_SIGNAL

HOLD_MS = 600_000


def gates_for(harness: Harness, **defaults: float) -> Gates:
    return Gates(harness.client, harness.task_queue, GateSettings(**defaults))


async def submit(
    harness: Harness,
    gates: Gates,
    *,
    unserved: bool = False,
    hold_ms: int = HOLD_MS,
    admit: bool = True,
    **fields: object,
) -> JobHandle:
    spec = JobSpec.model_validate({"type": "in-process", **fields})
    queue = f"unserved-{uuid.uuid4().hex[:8]}" if unserved else None
    return await harness.submit(
        spec=spec, gates=gates, activity_task_queue=queue, requeue_hold_ms=hold_ms, admit=admit
    )


# Both ways a job comes to hold a lease: granted at submit (the API's way), or asked for
# by the job once it runs (a job queued behind others, or one submitted before grants at
# submit existed).
ADMIT = pytest.mark.parametrize("admit", [True, False], ids=["granted-at-submit", "asked"])


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


async def test_a_grant_or_a_recall_from_a_gate_the_job_never_asked_goes_back_to_it(
    harness: Harness,
) -> None:
    """A stray grant or recall (a gate's record of a job that no longer asks it): the job
    answers each with a release, so the gate's record goes and its lease is free."""
    gates = gates_for(harness)
    await harness.wait_status(await submit(harness, gates, pool="p"), JobStatus.COMPLETED)
    gate_id = gates.ref(GateKind.POOL, "p").workflow_id
    release = asyncio.Event()
    harness.stand_in.default = harness.stand_in.hold(release)
    plain = await harness.submit()
    await harness.wait_status(plain, JobStatus.RUNNING)

    await plain.signal(GRANT_SIGNAL, GateGrant(workflow_id=gate_id))
    await plain.signal(RECALL_SIGNAL, gate_id)

    async def given_back() -> list[str] | None:
        history = await harness.client.get_workflow_handle(gate_id).fetch_history()
        releases = [
            json.loads(e.workflow_execution_signaled_event_attributes.input.payloads[0].data)
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
            and e.workflow_execution_signaled_event_attributes.signal_name == RELEASE_SIGNAL
        ]
        outcomes = [r["outcome"] for r in releases if r["job_id"] == plain.id]
        return outcomes if len(outcomes) == 2 else None

    assert await wait_until_async(given_back, timeout=15, what="both answered") == [
        "cancelled",
        "cancelled",
    ]
    release.set()
    await harness.wait_status(plain, JobStatus.COMPLETED)


async def test_a_gate_names_the_jobs_it_holds_then_the_ones_it_queues(harness: Harness) -> None:
    gates = gates_for(harness, max_parallel=1)
    release = asyncio.Event()
    harness.stand_in.default = harness.stand_in.hold(release)
    first = await submit(harness, gates, group="g")
    await harness.wait_status(first, JobStatus.RUNNING)
    second = await submit(harness, gates, group="g")

    assert await gates.jobs(GateKind.GROUP, "g", 10) == [first.id, second.id]
    assert await gates.jobs(GateKind.GROUP, "g", 1) == [first.id]
    assert await gates.jobs(GateKind.GROUP, "never-ran", 10) == []
    release.set()
    for handle in (first, second):
        await harness.wait_status(handle, JobStatus.COMPLETED)
    await gate_until(gates, GateKind.GROUP, "g", lambda v: not v.holders, "leases back")
    assert await gates.jobs(GateKind.GROUP, "g", 10) == []


# -- leases granted at submit -------------------------------------------------------------


async def test_a_job_whose_leases_are_free_at_submit_starts_holding_them(
    harness: Harness,
) -> None:
    gates = gates_for(harness)
    handle = await submit(harness, gates, target="site/a", group="g", pool="p", cost_units=2)
    await harness.wait_status(handle, JobStatus.COMPLETED)
    history = (await handle.fetch_history()).events
    events = [event.event_type for event in history]
    # No request to a gate and no grant from one: only the three leases given back.
    signals = [
        e.workflow_execution_signaled_event_attributes.signal_name
        for e in history
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    ]
    assert GRANT_SIGNAL not in signals
    sent = [
        e.signal_external_workflow_execution_initiated_event_attributes.signal_name
        for e in history
        if e.event_type == EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED
    ]
    assert sent == [RELEASE_SIGNAL] * 3
    assert events.count(EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED) == 1
    for kind, key in ((GateKind.TARGET, "site/a"), (GateKind.GROUP, "g"), (GateKind.POOL, "p")):
        view = await gate_until(gates, kind, key, lambda v: v.in_use == 0, f"{kind} given back")
        assert view.waiting == 0


async def test_a_gate_admits_what_fits_queues_the_rest_and_refuses_only_when_asked(
    harness: Harness,
) -> None:
    gates = gates_for(harness, capacity=2)
    first = JobSpec(type="in-process", pool="p", cost_units=2)
    admitted = await gates.admit("job-a", first, now_ms())
    assert admitted.granted == [gates.ref(GateKind.POOL, "p").workflow_id]
    # A repeated submit of a holder keeps its lease; nothing is counted twice.
    assert (await gates.admit("job-a", first, now_ms())).granted == admitted.granted
    queued = await gates.admit("job-b", first, now_ms())
    assert (queued.granted, queued.refused) == ([], None)
    reject = JobSpec(type="in-process", pool="p", admission="reject")
    refused = await gates.admit("job-c", reject, now_ms())
    assert refused.refused is not None and refused.refused.reason == "pool_full"
    too_big = reject.model_copy(update={"cost_units": 3})
    refused = await gates.admit("job-d", too_big, now_ms())
    assert refused.refused is not None and refused.refused.reason == "cost_above_capacity"
    view = await gates.view(GateKind.POOL, "p")
    assert view is not None
    # Queued unready: granted only once its job runs and asks.
    assert (view.in_use, view.holders, view.waiting, view.head) == (2, ["job-a"], 1, "job-b")


async def test_admissions_that_reach_a_gate_at_once_share_one_update(harness: Harness) -> None:
    gates = gates_for(harness, capacity=1_000)
    await gates.configure(GateKind.POOL, "p", GatePatch(capacity=1_000))
    specs = [JobSpec(type="in-process", pool="p") for _ in range(40)]
    answers = await asyncio.gather(
        *(gates.admit(f"job-{i}", spec, now_ms()) for i, spec in enumerate(specs))
    )
    assert all(len(a.granted) == 1 for a in answers)
    handle = harness.client.get_workflow_handle(gates.ref(GateKind.POOL, "p").workflow_id)
    events = [e.event_type for e in (await handle.fetch_history()).events]
    updates = events.count(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED)
    # The configure, then the first admission alone, then what came meanwhile.
    assert 2 <= updates < 10, updates


@pytest.mark.slow(20)
async def test_admissions_reaching_a_gate_as_it_continues_as_new_are_all_answered(
    harness: Harness,
) -> None:
    # An update that reaches a gate in the task where it continues as new fails with
    # WorkflowNotReady; admissions are idempotent and sent again (engine/gates.py).
    gates = gates_for(harness, history_limit=60, capacity=1_000)
    spec = JobSpec(type="in-process", pool="p", group="g")
    for _ in range(2):
        handles = await asyncio.gather(*(harness.submit(spec=spec, gates=gates) for _ in range(30)))
        for handle in handles:
            await harness.wait_status(handle, JobStatus.COMPLETED)
    pool_id = gates.ref(GateKind.POOL, "p").workflow_id
    runs = [r async for r in harness.client.list_workflows(f"WorkflowId = '{pool_id}'")]
    assert len(runs) > 1, "the pool gate never continued as new"
    await gate_until(gates, GateKind.POOL, "p", lambda v: v.in_use == 0, "every lease back")


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


@ADMIT
async def test_a_pause_recalls_unclaimed_leases_and_keeps_claimed_ones(
    harness: Harness, admit: bool
) -> None:
    gates = gates_for(harness)
    release = asyncio.Event()
    harness.stand_in.default = harness.stand_in.hold(release)
    running = await submit(harness, gates, group="g", admit=admit)
    await harness.wait_status(running, JobStatus.RUNNING)
    queued = await submit(harness, gates, group="g", unserved=True, admit=admit)
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


async def test_a_pause_is_answered_by_a_holder_that_never_asked_for_its_lease(
    harness: Harness,
) -> None:
    gates = gates_for(harness)
    release = asyncio.Event()
    harness.stand_in.default = harness.stand_in.hold(release)
    handle = await harness.submit()  # a job of no group
    await harness.wait_status(handle, JobStatus.RUNNING)
    # The group records a lease the job never asked for (a stray record, as a lost
    # request leaves): the recall must still be answered, and the record go.
    await gates.admit(handle.id, JobSpec(type="in-process", group="g"), now_ms())
    await gate_until(gates, GateKind.GROUP, "g", lambda v: v.holders == [handle.id], "stray")

    view = await gates.pause(GateKind.GROUP, "g")

    assert view.holders == []  # without the answer: still there, after 30 s
    release.set()
    await harness.wait_status(handle, JobStatus.COMPLETED)


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


@ADMIT
async def test_a_pool_never_leases_more_than_its_capacity_and_its_head_reserves(
    harness: Harness, admit: bool
) -> None:
    gates = gates_for(harness, capacity=3)
    release = asyncio.Event()
    harness.stand_in.default = harness.stand_in.hold(release)
    big = await submit(harness, gates, pool="p", cost_units=2, admit=admit)
    await harness.wait_status(big, JobStatus.RUNNING)
    head = await submit(harness, gates, pool="p", cost_units=2, admit=admit)
    small = await submit(harness, gates, pool="p", cost_units=1, admit=admit)
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


async def test_a_retry_of_an_admission_only_job_that_ended_passes_its_pool_as_a_submit(
    harness: Harness,
) -> None:
    """Its pool released it when it ended; an operator's retry is a new run under its
    id, refused with a reason while the pool is full and admitted once it has room. A
    repeated submit of the ended job is still answered as one (not admitted)."""
    gates = gates_for(harness, capacity=1)
    spec = JobSpec(type="in-process", pool="p", admission="reject")
    ended = await harness.wait_status(
        await harness.submit(spec=spec, gates=gates), JobStatus.COMPLETED
    )
    await gate_until(gates, GateKind.POOL, "p", lambda v: v.in_use == 0, "the unit back")
    resubmit = await gates.admit(ended.id, spec, ended.created_at)
    assert resubmit.refused is not None and resubmit.refused.reason is None
    release = asyncio.Event()
    harness.stand_in.default = harness.stand_in.hold(release)
    holder = await harness.submit(spec=spec, gates=gates)
    await harness.wait_status(holder, JobStatus.RUNNING)

    with pytest.raises(PoolRefusedError) as full:
        await harness.submit(spec=spec, gates=gates, resumed=ended)
    assert full.value.answer.reason == "pool_full"
    release.set()
    await harness.wait_status(holder, JobStatus.COMPLETED)
    await gate_until(gates, GateKind.POOL, "p", lambda v: v.in_use == 0, "the unit back")
    harness.stand_in.default = harness.stand_in.succeed()
    retried = await harness.submit(spec=spec, gates=gates, resumed=ended)

    job = await harness.wait_status(retried, JobStatus.COMPLETED)
    assert job.attempts == 2
    assert statuses(job)[-4:] == ["pending", "assigned", "running", "completed"]


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


async def test_a_pool_ages_its_waiting_jobs_only_once_its_aging_step_is_set(
    harness: Harness,
) -> None:
    gates = gates_for(harness, capacity=1)
    release = asyncio.Event()
    harness.stand_in.default = harness.stand_in.hold(release)
    first = await submit(harness, gates, pool="p")
    await harness.wait_status(first, JobStatus.RUNNING)
    queued_at = now_ms()
    old = await submit(harness, gates, pool="p", priority=0)
    await harness.wait_for(old, lambda j: j.waiting_for is not None, "asked")

    async def waited() -> bool:
        return now_ms() - queued_at >= 3_500

    await wait_until_async(waited, timeout=10, what="three and a half seconds")
    fresh = await submit(harness, gates, pool="p", priority=2)
    await harness.wait_for(fresh, lambda j: j.waiting_for is not None, "asked")
    # No aging by default: priority is exact, the fresh job of priority 2 goes first.
    view = await gate_until(gates, GateKind.POOL, "p", lambda v: v.waiting == 2, "both queued")
    assert view.settings.aging_step_s is None
    assert view.head == fresh.id
    # A point per second waited: the old job, three steps in, outranks it.
    view = await gates.configure(GateKind.POOL, "p", GatePatch(aging_step_s=1))
    assert view.settings.aging_step_s == 1
    assert view.head == old.id
    release.set()
    for handle in (first, old, fresh):
        await harness.wait_status(handle, JobStatus.COMPLETED)
    assert harness.stand_in.jobs == [first.id, old.id, fresh.id]


async def begun_history(handle: WorkflowHandle[Any, Any]) -> list[HistoryEvent] | None:
    """A run's events once its first task completed (a run just continued as new records
    its patch markers with it), else None."""
    events = list((await handle.fetch_history()).events)
    done = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    return events if any(e.event_type == done for e in events) else None


async def queue_at_closed_pool(
    harness: Harness, gates: Gates, jobs: list[dict[str, Any]]
) -> list[JobHandle]:
    """Submit `jobs` (in order) to pool "p" while its capacity is 0, and wait until each
    has asked the pool itself."""
    await gates.configure(GateKind.POOL, "p", GatePatch(capacity=0))
    handles = [await submit(harness, gates, pool="p", **fields) for fields in jobs]
    for handle in handles:
        await harness.wait_for(
            handle, lambda j: j.waiting_for == WaitingFor.POOL_CAPACITY, "asked the pool"
        )
    return handles


@pytest.mark.parametrize(
    ("weights", "expected", "history_limit"),
    [
        ({"light": 1, "heavy": 1}, "LHLHLHLHLHLH", 2_000),
        ({"light": 1, "heavy": 3}, "HLHHHLHHHLHH", 2_000),
        ({"light": 1, "heavy": 3}, "HLHHHLHHHLHH", 60),
    ],
    ids=["1:1", "3:1", "3:1-continued-as-new"],
)
async def test_a_full_pool_shares_its_grants_between_groups_by_weight(
    harness: Harness, weights: dict[str, float], expected: str, history_limit: int
) -> None:
    gates = gates_for(harness, history_limit=history_limit)
    for group, weight in weights.items():
        await gates.configure(GateKind.GROUP, group, GatePatch(weight=weight))
    total = sum(weights.values())
    # Group after group, the light one first: first come, first served would run its
    # whole backlog first.
    backlog = {group: int(12 * weight / total) + 1 for group, weight in weights.items()}
    jobs = [{"group": group} for group, count in backlog.items() for _ in range(count)]
    handles = await queue_at_closed_pool(harness, gates, jobs)
    await gates.configure(GateKind.POOL, "p", GatePatch(capacity=1))
    for handle in handles:
        await harness.wait_status(handle, JobStatus.COMPLETED)
    # Capacity 1: each job ran alone, in the order the pool granted it.
    group_of = {handle.id: fields["group"] for handle, fields in zip(handles, jobs, strict=True)}
    order = [str(group_of[job_id]) for job_id in harness.stand_in.jobs]
    assert "".join(group[0].upper() for group in order[:12]) == expected
    assert faultkit.share_problems(order, weights) == []
    # Every run of the pool gate took the fair-shares path (one marker each), and the
    # shares went on across its continue-as-new.
    gate_id = gates.ref(GateKind.POOL, "p").workflow_id
    runs = [e async for e in harness.client.list_workflows(f"WorkflowId = '{gate_id}'")]
    assert len(runs) >= (2 if history_limit < 2_000 else 1)
    for run in runs:
        handle = harness.client.get_workflow_handle(gate_id, run_id=run.run_id)
        events = await wait_until_async(
            functools.partial(begun_history, handle),
            timeout=15,
            what=f"run {run.run_id}'s first task",
        )
        markers = [
            e
            for e in events
            if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
            # the fair-shares marker (the capacity change also records GATE_AUDIT_PATCH)
            and FAIR_SHARES_PATCH.encode() in e.SerializeToString()
        ]
        assert len(markers) == 1


async def test_a_pool_gate_from_before_fair_shares_drops_the_aging_every_pool_had(
    harness: Harness,
) -> None:
    aged = GateSettings(aging_step_s=60)
    views = {}
    for key, shares in (("from-before", None), ("new", FairShares())):
        handle = await harness.client.start_workflow(
            GateWorkflow.run,
            GateInput(kind=GateKind.POOL, key=key, settings=aged, shares=shares),
            id=f"gate-{uuid.uuid4().hex[:8]}",
            task_queue=harness.task_queue,
        )
        views[key] = await handle.query(GateWorkflow.gate)
        await handle.terminate("done")
    # A pool's aging is its own setting now: one set on a new pool stays.
    assert views["from-before"].settings.aging_step_s is None
    assert views["new"].settings.aging_step_s == 60


async def test_within_a_group_a_pool_grants_by_priority_and_ungrouped_jobs_are_a_group(
    harness: Harness,
) -> None:
    gates = gates_for(harness)
    jobs: list[dict[str, Any]] = [
        {"group": "a", "priority": 0},
        {"group": "a", "priority": 5},
        {"priority": 1},
        {"priority": 0},
        {"group": "b", "priority": -3},
        {"priority": 9},
    ]
    a0, a5, u1, u0, b, u9 = await queue_at_closed_pool(harness, gates, jobs)
    view = await gates.view(GateKind.POOL, "p")
    assert view is not None and view.head == a5.id
    await gates.configure(GateKind.POOL, "p", GatePatch(capacity=1))
    for handle in (a0, a5, u1, u0, b, u9):
        await harness.wait_status(handle, JobStatus.COMPLETED)
    # Three groups of weight 1 (the ungrouped jobs are one) in turn, a tie going to the
    # group whose next job came first; in each, the highest priority first, then arrival.
    assert harness.stand_in.jobs == [a5.id, b.id, u9.id, a0.id, u1.id, u0.id]


async def test_raising_a_pools_capacity_admits_at_once(harness: Harness) -> None:
    gates = gates_for(harness, capacity=0)
    handle = await submit(harness, gates, pool="p")
    await harness.wait_for(
        handle, lambda j: j.waiting_for == WaitingFor.POOL_CAPACITY, "waiting for capacity"
    )
    view = await gates.configure(GateKind.POOL, "p", GatePatch(capacity=5))
    assert view.settings.capacity == 5
    await harness.wait_status(handle, JobStatus.COMPLETED)


@ADMIT
async def test_a_pools_capacity_lowered_below_its_leases_recalls_the_unclaimed_ones(
    harness: Harness, admit: bool
) -> None:
    """Leases granted while the pool was larger (002: runs enqueued before their
    workspace's daemon set its max_parallel) come back at the cut, except a claimed
    one's; then the pool holds its new capacity and shares it between groups."""
    gates = gates_for(harness)  # the default capacity, 100: room for every job
    release = asyncio.Event()
    harness.stand_in.default = harness.stand_in.hold(release)
    running = await submit(harness, gates, pool="p", group="a", admit=admit)
    await harness.wait_status(running, JobStatus.RUNNING)
    # Four more, the whole of group a first, on a queue nobody polls yet: each holds its
    # lease, its attempt waiting in that queue.
    queue = f"later-{uuid.uuid4().hex[:8]}"
    later = {}
    for group in "aabb":
        spec = JobSpec(type="in-process", pool="p", group=group)
        handle = await harness.submit(
            spec=spec, gates=gates, activity_task_queue=queue, admit=admit
        )
        later[handle.id] = group
    await gate_until(gates, GateKind.POOL, "p", lambda v: v.in_use == 5, "five leases")

    view = await gates.configure(GateKind.POOL, "p", GatePatch(capacity=1))

    # The answer comes once the unclaimed leases are back: the running job keeps its own.
    assert (view.in_use, view.holders, view.waiting) == (1, [running.id], 4)
    for handle in harness.handles[1:]:
        job = await harness.job(handle)
        assert (job.status, job.attempts) == (JobStatus.PENDING, 0)  # a recall is no attempt
        assert job.waiting_for == WaitingFor.POOL_CAPACITY
    release.set()
    async with Worker(
        harness.client,
        task_queue=queue,
        activities=[harness.stand_in.run_job],
        max_heartbeat_throttle_interval=timedelta(milliseconds=100),
    ):
        done = [await harness.wait_status(h, JobStatus.COMPLETED) for h in harness.handles]
    # One at a time (each claimed once the one before had completed), the groups in turn.
    ran = sorted(done, key=lambda job: job.claimed_at or 0)
    for before, after in itertools.pairwise(ran):
        assert before.completed_at is not None and after.claimed_at is not None
        assert after.claimed_at >= before.completed_at
    order = [later[job.id] for job in ran[1:]]
    assert all(x != y for x, y in itertools.pairwise(order)), order
    view = await gate_until(gates, GateKind.POOL, "p", lambda v: v.in_use == 0, "all back")
    assert view.waiting == 0


async def test_a_waiting_job_that_is_cancelled_leaves_the_queue(harness: Harness) -> None:
    gates = gates_for(harness, capacity=0)
    handle = await submit(harness, gates, pool="p")
    await gate_until(gates, GateKind.POOL, "p", lambda v: v.waiting == 1, "queued")
    job = await handle.execute_update(JobWorkflow.cancel)
    assert job.cancelled
    await gate_until(gates, GateKind.POOL, "p", lambda v: v.waiting == 0, "withdrawn")


# -- targets -----------------------------------------------------------------------------


@ADMIT
async def test_a_targets_jobs_run_one_at_a_time_in_submission_order(
    harness: Harness, admit: bool
) -> None:
    gates = gates_for(harness)
    handles = [await submit(harness, gates, target="site/t1", admit=admit) for _ in range(4)]
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
    # The last job's lease comes back by its signal, which the gate takes after the job
    # has ended (run 95 read the view in between).
    view = await gate_until(gates, GateKind.GROUP, "g", lambda v: not v.holders, "released")
    assert view.settings.max_parallel == 1


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


# -- why a gated job keeps its last workflow task --------------------------------------


@workflow.defn(name="SignalSink")
class SignalSink:
    def __init__(self) -> None:
        self.hits = 0

    @workflow.signal
    def hit(self) -> None:
        self.hits += 1

    @workflow.query
    def count(self) -> int:
        return self.hits

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)


@workflow.defn(name="SignalThenReturn")
class SignalThenReturn:
    @workflow.run
    async def run(self, sink: str, wait: bool) -> None:
        sent = asyncio.ensure_future(workflow.get_external_workflow_handle(sink).signal("hit"))
        if wait:
            await sent


async def test_a_signal_sent_in_the_task_that_completes_the_workflow_is_dropped(
    client: Client,
) -> None:
    # What docs/scheduling.md rests on: a job cannot give its leases back in its last
    # workflow task; it waits one more for its release to be delivered.
    queue = f"signal-probe-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client,
        task_queue=queue,
        workflows=[SignalSink, SignalThenReturn],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        sink = await client.start_workflow(SignalSink.run, id=queue, task_queue=queue)
        await client.execute_workflow(
            SignalThenReturn.run, args=[queue, True], id=f"{queue}-w", task_queue=queue
        )
        await wait_until_async(
            lambda: _hits_are(sink, 1), timeout=10, what="the awaited signal delivered"
        )
        handle = await client.start_workflow(
            SignalThenReturn.run, args=[queue, False], id=f"{queue}-n", task_queue=queue
        )
        await handle.result()
        history = await handle.fetch_history()
        assert EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED in [
            e.event_type for e in history.events
        ]
        # The awaited one was delivered within the first wait; a second awaited signal
        # proves the sink still takes signals, and the unawaited one never arrived.
        await client.execute_workflow(
            SignalThenReturn.run, args=[queue, True], id=f"{queue}-w2", task_queue=queue
        )
        await wait_until_async(
            lambda: _hits_are(sink, 2), timeout=10, what="the second awaited signal"
        )
        assert await sink.query(SignalSink.count) == 2
        await sink.terminate("probe done")


async def _hits_are(sink: WorkflowHandle[SignalSink, None], expected: int) -> bool:
    return await sink.query(SignalSink.count) == expected
