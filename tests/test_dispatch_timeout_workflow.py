"""The dispatch timeout and stale claims, in process (JobWorkflow, GateWorkflow and the
stand-in `run_job` of tests/workflow_harness.py on the session's dev server).

A job holding leases whose attempt no worker takes within `dispatch_timeout_ms` gives
them back, counts no attempt, reads `pending → pending` (`dispatch_timeout`) and asks its
gates again; a job with `requeue_stale_claims` whose claim goes silent before it reports
running goes back the same way (`assigned → pending`).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

import pytest
from pydantic import ValidationError
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus
from temporalio.worker import Worker

from engine.gates import Gates
from tests.conftest import wait_until_async
from tests.workflow_harness import RESULT, WORKER_ID, Harness, JobHandle, now_ms, statuses
from workflows.attempt_outcomes import STALE_CLAIMS_RETURNED
from workflows.errors import ErrorType
from workflows.gate_models import GateKind, GateSettings
from workflows.job_states import DISPATCH_TIMEOUT, JobStatus
from workflows.models import AttemptInput, AttemptResult, Job, JobSpec, WaitingFor

DISPATCH_MS = 400


def gates_for(harness: Harness, **defaults: float) -> Gates:
    return Gates(harness.client, harness.task_queue, GateSettings(**defaults))


# The heartbeat timeout of a job whose silent attempt must lapse and whose next one must
# run to its end: that one heartbeats, but a loaded box can stall the in-process worker
# for half a second (500 ms failed a run at five test processes).
LAPSE_THEN_RUN_MS = 2000


def unserved() -> str:
    """A task queue no worker polls (until a test serves it)."""
    return f"unserved-{uuid.uuid4().hex[:8]}"


async def submit(
    harness: Harness,
    gates: Gates | None,
    *,
    queue: str | None = None,
    dispatch_timeout_ms: int | None = DISPATCH_MS,
    heartbeat_timeout_ms: int = 60_000,
    **fields: object,
) -> JobHandle:
    spec = JobSpec.model_validate({"type": "in-process", **fields})
    return await harness.submit(
        spec=spec,
        gates=gates,
        activity_task_queue=queue,
        dispatch_timeout_ms=dispatch_timeout_ms,
        heartbeat_timeout_ms=heartbeat_timeout_ms,
    )


async def ended(handle: JobHandle) -> Job:
    """The job's end (a job that waits for good fails the test in 30 s)."""
    return await asyncio.wait_for(handle.result(), 30)


def timeouts(job: Job) -> int:
    """How many times the job was sent back to wait by a dispatch timeout."""
    return sum(1 for t in job.transitions if t.reason == DISPATCH_TIMEOUT)


def first_ts(job: Job, status: JobStatus) -> int:
    return next(t.ts for t in job.transitions if t.status == status)


@asynccontextmanager
async def serving(harness: Harness, queue: str, **options: int) -> AsyncIterator[None]:
    """A worker that takes `queue`'s attempts with the harness's stand-in."""
    async with Worker(
        harness.client,
        task_queue=queue,
        activities=[harness.stand_in.run_job],
        max_heartbeat_throttle_interval=timedelta(milliseconds=100),
        **options,  # type: ignore[arg-type]
    ):
        yield


async def scheduled_timeouts(handle: JobHandle) -> list[float]:
    """Each scheduled attempt's schedule-to-start timeout in seconds (0: none)."""
    return [
        event.activity_task_scheduled_event_attributes.schedule_to_start_timeout.ToTimedelta()
        / timedelta(seconds=1)
        for event in (await handle.fetch_history()).events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


# -- an attempt nobody takes -----------------------------------------------------------


async def test_an_attempt_nobody_takes_gives_its_pool_lease_to_the_next_job_uncounted(
    harness: Harness,
) -> None:
    gates = gates_for(harness, capacity=1)
    queue = unserved()
    stuck = await submit(harness, gates, queue=queue, pool="p")
    other = await submit(harness, gates, pool="p", dispatch_timeout_ms=60_000)
    done = await ended(other)
    job = await harness.wait_for(stuck, lambda j: timeouts(j) >= 1, "a dispatch timeout")
    assert job.status == JobStatus.PENDING
    assert job.attempts == 0 and job.fail_history == [] and job.worker_id is None
    assert set(statuses(job)) == {"pending"}
    # The waiting job ran in the capacity the stuck one gave back.
    assert done.attempts == 1
    assert first_ts(done, JobStatus.ASSIGNED) >= job.transitions[1].ts
    # Each attempt it scheduled could wait only the dispatch timeout.
    assert set(await scheduled_timeouts(stuck)) == {DISPATCH_MS / 1000}

    async with serving(harness, queue):
        last = await ended(stuck)
    assert last.status == JobStatus.COMPLETED and last.result == RESULT
    assert last.attempts == 1 and last.fail_history == []
    kinds = [(t.status.value, t.reason) for t in last.transitions]
    assert kinds[-3:] == [("assigned", None), ("running", None), ("completed", None)]
    assert set(kinds[1:-3]) == {("pending", DISPATCH_TIMEOUT)}
    await wait_until_async(lambda: _idle(gates, "p"), timeout=10, what="the pool's units back")


async def _idle(gates: Gates, pool: str) -> bool:
    view = await gates.view(GateKind.POOL, pool)
    return view is not None and view.in_use == 0


async def test_a_dispatch_timeout_returns_group_and_pool_leases_and_asks_behind_the_others(
    harness: Harness,
) -> None:
    gates = gates_for(harness, capacity=1)
    queue = unserved()
    stuck = await submit(harness, gates, queue=queue, group="dead", pool="p")
    live = [await submit(harness, gates, group="live", pool="p") for _ in range(3)]
    done = [await ended(handle) for handle in live]
    job = await harness.job(stuck)
    assert timeouts(job) >= 1 and job.attempts == 0
    # While it waits again it says why (the group's or the pool's lease).
    assert job.waiting_for in (WaitingFor.GROUP_LIMIT, WaitingFor.POOL_CAPACITY, None)
    assert all(d.attempts == 1 for d in done)
    group = await gates.view(GateKind.GROUP, "dead")
    assert group is not None and group.in_use <= 1


async def test_a_target_job_that_is_not_taken_keeps_its_place_in_the_targets_order(
    harness: Harness,
) -> None:
    gates = gates_for(harness)
    queue = unserved()
    first = await submit(harness, gates, queue=queue, target="site/a")
    second = await submit(harness, gates, target="site/a")
    await harness.wait_for(first, lambda j: timeouts(j) >= 2, "two dispatch timeouts")
    assert (await harness.job(second)).status == JobStatus.PENDING
    assert (await harness.job(second)).attempts == 0
    async with serving(harness, queue):
        a = await ended(first)
    b = await ended(second)
    assert first_ts(a, JobStatus.COMPLETED) <= first_ts(b, JobStatus.ASSIGNED)
    assert a.attempts == 1 and b.attempts == 1


async def failed_at_deadline(harness: Harness, dispatch_timeout_ms: int, left_ms: int) -> Job:
    """A pool job nobody takes, whose deadline is `left_ms` away: it closes Failed,
    deadline_exceeded (the job as it ended)."""
    handle = await submit(
        harness,
        gates_for(harness),
        queue=unserved(),
        pool="p",
        dispatch_timeout_ms=dispatch_timeout_ms,
        deadline_at=now_ms() + left_ms,
    )
    assert await harness.closed(handle) == WorkflowExecutionStatus.FAILED
    job = await harness.job(handle)
    assert job.fail_reason == ErrorType.DEADLINE_EXCEEDED
    return job


async def test_a_deadline_before_the_dispatch_timeout_still_fails_the_job(
    harness: Harness,
) -> None:
    job = await failed_at_deadline(harness, dispatch_timeout_ms=60_000, left_ms=1500)
    assert timeouts(job) == 0


# A grant that lands as the job ends is given back by a handler still awaiting its
# signal's delivery when the job closes: that ends no work (job_leases.HANDLER_POLICY).
@pytest.mark.filterwarnings("error::temporalio.workflow.UnfinishedSignalHandlersWarning")
async def test_dispatch_timeouts_until_the_deadline_then_the_job_fails_deadline_exceeded(
    harness: Harness,
) -> None:
    # Room for many 300 ms rounds even on a loaded machine (two are asked for).
    job = await failed_at_deadline(harness, dispatch_timeout_ms=300, left_ms=8000)
    assert timeouts(job) >= 2 and job.attempts == 0


async def test_only_a_job_holding_leases_with_a_dispatch_timeout_in_its_input_uses_it(
    harness: Harness,
) -> None:
    gates = gates_for(harness)
    gated = await submit(harness, gates, pool="p")
    old_input = await submit(harness, gates, pool="q", dispatch_timeout_ms=None)
    # The API never sets one on a job without leases; an input that does changes nothing.
    ungated = await submit(harness, None)
    for handle in (gated, old_input, ungated):
        await ended(handle)
    assert await scheduled_timeouts(gated) == [DISPATCH_MS / 1000]
    assert await scheduled_timeouts(old_input) == [0]
    assert await scheduled_timeouts(ungated) == [0]


async def test_attempts_taken_at_the_moment_of_their_timeout_run_once_and_count_once(
    harness: Harness,
) -> None:
    """One slot, many jobs, a dispatch timeout of about one run: attempts are taken as
    their timeouts fire. Temporal starts a task or times it out, never both."""
    gates = gates_for(harness, capacity=100)
    queue = unserved()
    runs: list[str] = []

    async def play(inp: AttemptInput) -> AttemptResult:
        runs.append(inp.job_id)
        await asyncio.sleep(0.05)
        return AttemptResult(worker_id=WORKER_ID, result=RESULT, result_hash="hash-42")

    harness.stand_in.default = play
    handles = [
        await submit(harness, gates, queue=queue, pool="p", dispatch_timeout_ms=100)
        for _ in range(12)
    ]
    async with serving(harness, queue, max_concurrent_activities=1):
        jobs = [await ended(handle) for handle in handles]
    assert sum(timeouts(job) for job in jobs) > 0, "no attempt timed out: no race"
    for handle, job in zip(handles, jobs, strict=True):
        assert job.status == JobStatus.COMPLETED
        assert runs.count(handle.id) == 1
        assert job.attempts == 1 and job.fail_history == []
        assert statuses(job).count("assigned") == 1


# -- stale claims ------------------------------------------------------------------------


async def test_a_stale_claim_goes_back_to_the_queue_and_counts_no_attempt(
    harness: Harness,
) -> None:
    stand_in = harness.stand_in
    stand_in.script[1] = stand_in.fall_silent(phases=("assigned",))
    handle = await submit(
        harness,
        None,
        dispatch_timeout_ms=None,
        heartbeat_timeout_ms=LAPSE_THEN_RUN_MS,
        max_attempts=1,
        requeue_stale_claims=True,
    )
    job = await ended(handle)
    assert job.status == JobStatus.COMPLETED
    assert job.attempt == 2 and job.attempts == 1 and job.fail_history == []
    kinds = [(t.status.value, t.reason) for t in job.transitions]
    assert kinds == [
        ("pending", None),
        ("assigned", None),
        ("pending", DISPATCH_TIMEOUT),
        ("assigned", None),
        ("running", None),
        ("completed", None),
    ]
    assert job.transitions[2].attempts == 0


async def test_a_job_whose_every_claim_goes_stale_fails_after_the_returns_run_out(
    harness: Harness,
) -> None:
    harness.stand_in.default = harness.stand_in.fall_silent(phases=("assigned",))
    handle = await submit(
        harness,
        None,
        dispatch_timeout_ms=None,
        heartbeat_timeout_ms=500,
        max_attempts=1,
        requeue_stale_claims=True,
    )
    assert await harness.closed(handle) == WorkflowExecutionStatus.FAILED
    job = await harness.job(handle)
    assert job.status == JobStatus.QUARANTINED
    assert timeouts(job) == STALE_CLAIMS_RETURNED
    assert job.attempts == 1
    assert [f.reason for f in job.fail_history] == [ErrorType.HEARTBEAT_TIMEOUT]


async def test_a_claim_that_reported_running_then_went_silent_is_a_failed_attempt(
    harness: Harness,
) -> None:
    stand_in = harness.stand_in
    stand_in.script[1] = stand_in.fall_silent(phases=("assigned", "running"))
    handle = await submit(
        harness,
        None,
        dispatch_timeout_ms=None,
        heartbeat_timeout_ms=LAPSE_THEN_RUN_MS,
        max_attempts=2,
        requeue_stale_claims=True,
    )
    job = await ended(handle)
    assert timeouts(job) == 0
    assert job.attempts == 2
    assert [f.reason for f in job.fail_history] == [ErrorType.HEARTBEAT_TIMEOUT]


async def test_a_stale_claim_of_a_pool_job_gives_its_lease_to_the_next_job(
    harness: Harness,
) -> None:
    stand_in = harness.stand_in
    gates = gates_for(harness, capacity=1)
    silent = stand_in.fall_silent(phases=("assigned",))
    succeed = stand_in.succeed()

    async def play(inp: AttemptInput) -> AttemptResult:
        if inp.params.get("stale") and inp.attempt == 1:
            return await silent(inp)
        return await succeed(inp)

    stand_in.default = play
    first = await submit(
        harness,
        gates,
        heartbeat_timeout_ms=LAPSE_THEN_RUN_MS,
        pool="p",
        max_attempts=1,
        requeue_stale_claims=True,
        params={"stale": True},
    )
    await harness.wait_status(first, JobStatus.ASSIGNED)
    second = await submit(harness, gates, pool="p")
    b = await ended(second)
    a = await ended(first)
    assert a.attempts == 1 and a.fail_history == [] and timeouts(a) == 1
    # The second job ran in the unit the stale claim gave back, before its next claim.
    assert first_ts(b, JobStatus.COMPLETED) <= a.transitions[3].ts


# -- the field ----------------------------------------------------------------------------


def test_a_dispatch_timeout_needs_a_lease_to_give_back_and_stays_in_bounds() -> None:
    assert JobSpec(type="t", pool="p", dispatch_timeout_ms=100).dispatch_timeout_ms == 100
    for bad in (
        {},
        {"pool": "p", "dispatch_timeout_ms": 99},
        {"target": "t", "dispatch_timeout_ms": True},
    ):
        fields = {"dispatch_timeout_ms": 500, **bad}
        with pytest.raises(ValidationError) as raised:
            JobSpec.model_validate({"type": "t", **fields})
        assert [e["loc"] for e in raised.value.errors()] == [("dispatch_timeout_ms",)]


async def test_an_expired_claim_goes_back_to_the_queue_uncounted_as_a_stale_one_does(
    harness: Harness,
) -> None:
    # The bridge ends a claim whose worker did not report running within its claim limit
    # (`claim_expired`), long before the heartbeat timeout.
    stand_in = harness.stand_in
    stand_in.script[1] = stand_in.fail(ErrorType.CLAIM_EXPIRED, "no report", phases=("assigned",))
    handle = await submit(
        harness,
        None,
        dispatch_timeout_ms=None,
        max_attempts=1,
        requeue_stale_claims=True,
    )
    job = await ended(handle)
    assert job.status == JobStatus.COMPLETED
    assert (timeouts(job), job.attempts, job.fail_history) == (1, 1, [])


async def test_an_expired_claim_of_a_job_that_returns_none_is_a_failed_attempt(
    harness: Harness,
) -> None:
    stand_in = harness.stand_in
    stand_in.script[1] = stand_in.fail(ErrorType.CLAIM_EXPIRED, "no report", phases=("assigned",))
    handle = await submit(harness, None, dispatch_timeout_ms=None, max_attempts=2)
    job = await ended(handle)
    assert timeouts(job) == 0 and job.attempts == 2
    assert [f.reason.split(":")[0] for f in job.fail_history] == [ErrorType.CLAIM_EXPIRED]
