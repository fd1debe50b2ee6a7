"""Stop, in process: JobWorkflow's stop update and the edges it adds
(running → stop_requested → stopped, stop_requested → completed), with the stand-in
attempt activity (tests/workflow_harness.py)."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from engine.gates import Gates
from tests.conftest import wait_until_async
from tests.workflow_harness import Harness, now_ms, statuses
from workflows.errors import ErrorType
from workflows.gate_models import GateKind, GatePatch, GateSettings
from workflows.job_workflow import JobWorkflow
from workflows.models import JobSpec, JobStatus


async def test_a_running_job_stops_and_its_attempt_is_cancelled(harness: Harness) -> None:
    harness.stand_in.default = harness.stand_in.hold(asyncio.Event())
    handle = await harness.submit()
    await harness.wait_status(handle, JobStatus.RUNNING)

    job = await handle.execute_update(JobWorkflow.stop)
    assert job.status == JobStatus.STOP_REQUESTED
    again = await handle.execute_update(JobWorkflow.stop)  # a repeated stop changes nothing
    assert statuses(again) == statuses(job)
    await handle.cancel()  # what the API sends after the update

    assert await harness.closed(handle) == WorkflowExecutionStatus.CANCELED
    job = await harness.job(handle)
    assert statuses(job)[-3:] == ["running", "stop_requested", "stopped"]
    assert (job.status, job.fail_reason) == (JobStatus.STOPPED, ErrorType.STOPPED)
    await harness.wait_cancelled(1)


async def test_a_result_that_comes_before_the_stop_lands_stands(harness: Harness) -> None:
    release = asyncio.Event()
    harness.stand_in.default = harness.stand_in.hold(release)
    handle = await harness.submit()
    await harness.wait_status(handle, JobStatus.RUNNING)
    await handle.execute_update(JobWorkflow.stop)
    release.set()  # the solver finishes before the API's cancel request
    job = await harness.wait_status(handle, JobStatus.COMPLETED)
    assert statuses(job)[-3:] == ["running", "stop_requested", "completed"]
    assert job.result == {"answer": 42}


@pytest.mark.parametrize("update", ["stop", "cancel"])
async def test_a_job_whose_cancel_request_never_follows_its_update_closes_by_itself(
    harness: Harness, update: str
) -> None:
    # The API's second call (the workflow cancel request) is lost: after cancel_wait_ms
    # the execution closes Failed (cancel_never_came), the job as it reads.
    unserved = update == "cancel"
    if not unserved:
        harness.stand_in.default = harness.stand_in.fall_silent(("assigned", "running"))
    handle = await harness.submit(
        cancel_wait_ms=1500,
        heartbeat_timeout_ms=1000,
        activity_task_queue="nobody-polls-this" if unserved else None,
    )
    if not unserved:
        await harness.wait_status(handle, JobStatus.RUNNING)
    await handle.execute_update(JobWorkflow.stop if update == "stop" else JobWorkflow.cancel)
    assert await harness.closed(handle) == WorkflowExecutionStatus.FAILED
    job = await harness.job(handle)
    assert job.status == (JobStatus.STOPPED if update == "stop" else JobStatus.FAILED)
    assert job.fail_reason == ("stopped" if update == "stop" else "cancelled")


async def test_stopping_a_pending_job_cancels_it(harness: Harness) -> None:
    handle = await harness.submit(activity_task_queue="nobody-polls-this")
    job = await handle.execute_update(JobWorkflow.stop)
    assert job.cancelled
    await handle.cancel()
    assert await harness.closed(handle) == WorkflowExecutionStatus.CANCELED


async def test_a_quarantined_job_cannot_be_stopped(harness: Harness) -> None:
    harness.stand_in.default = harness.stand_in.fail("solver_exit", "boom")
    handle = await harness.submit(
        spec=JobSpec(type="in-process", group="g", max_attempts=1), requeue_hold_ms=600_000
    )
    await harness.wait_status(handle, JobStatus.QUARANTINED)
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(JobWorkflow.stop)
    cause = refused.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == ErrorType.NOT_STOPPABLE


async def test_a_stopped_target_job_halts_its_target_and_a_retry_runs_it_again(
    harness: Harness,
) -> None:
    gates = Gates(harness.client, harness.task_queue, GateSettings())
    release = asyncio.Event()
    harness.stand_in.default = harness.stand_in.hold(release)
    spec = JobSpec(type="in-process", target="t")
    handle = await harness.submit(spec=spec, gates=gates, requeue_hold_ms=600_000)
    await harness.wait_status(handle, JobStatus.RUNNING)
    await handle.execute_update(JobWorkflow.stop)
    await handle.cancel()
    await harness.wait_status(handle, JobStatus.STOPPED)

    async def halted() -> bool:
        view = await gates.view(GateKind.TARGET, "t")
        return view is not None and view.settings.halted_by == handle.id

    await wait_until_async(halted, timeout=10, what="the target halted by the stop")
    release.set()
    await handle.execute_update(JobWorkflow.requeue)
    job = await harness.wait_status(handle, JobStatus.COMPLETED)
    assert "stopped" in statuses(job)
    assert await harness.closed(handle) == WorkflowExecutionStatus.COMPLETED


async def test_a_requeued_stopped_job_can_be_stopped_again(harness: Harness) -> None:
    gates = Gates(harness.client, harness.task_queue, GateSettings())
    harness.stand_in.default = harness.stand_in.hold(asyncio.Event())
    spec = JobSpec(type="in-process", target="t")
    handle = await harness.submit(spec=spec, gates=gates, requeue_hold_ms=600_000)
    await harness.wait_status(handle, JobStatus.RUNNING)
    await handle.execute_update(JobWorkflow.stop)
    await handle.cancel()
    await harness.wait_status(handle, JobStatus.STOPPED)
    await handle.execute_update(JobWorkflow.requeue)
    await harness.wait_for(
        handle, lambda j: j.status == JobStatus.RUNNING and j.attempt == 2, "the re-run"
    )
    # Temporal took the first cancel request already: the stop cancels the attempt itself.
    await handle.execute_update(JobWorkflow.stop)
    job = await harness.wait_status(handle, JobStatus.STOPPED)
    assert statuses(job).count("stopped") == 2

    async def both_cancelled() -> bool:
        return harness.stand_in.cancelled == [1, 2]

    await wait_until_async(both_cancelled, timeout=10, what="both attempts cancelled")


# -- operator overrides ---------------------------------------------------------------


async def test_ops_fail_quarantines_a_running_job_at_once(harness: Harness) -> None:
    harness.stand_in.default = harness.stand_in.hold(asyncio.Event())
    handle = await harness.submit()
    await harness.wait_status(handle, JobStatus.RUNNING)
    job = await handle.execute_update(JobWorkflow.ops_fail, "bad input data")
    assert (job.status, job.fail_reason) == (JobStatus.QUARANTINED, "bad input data")
    assert job.transitions[-1].by == "ops"
    assert await harness.closed(handle) == WorkflowExecutionStatus.FAILED
    await harness.wait_cancelled(1)
    with pytest.raises(RPCError):  # closed: no update reaches it
        await handle.execute_update(JobWorkflow.ops_fail, "again")


async def test_ops_fail_quarantines_a_job_waiting_for_its_start(harness: Harness) -> None:
    spec = JobSpec(type="in-process", earliest_start_at=now_ms() + 600_000)
    handle = await harness.submit(spec=spec)
    await harness.wait_for(handle, lambda j: j.waiting_for is not None, "waiting")
    await handle.execute_update(JobWorkflow.ops_fail, "not wanted")
    assert await harness.closed(handle) == WorkflowExecutionStatus.FAILED
    assert harness.stand_in.jobs == []


async def test_ops_requeue_restarts_a_running_attempt_under_the_same_id(harness: Harness) -> None:
    release = asyncio.Event()
    harness.stand_in.script[1] = harness.stand_in.hold(asyncio.Event())
    harness.stand_in.default = harness.stand_in.hold(release)
    handle = await harness.submit()
    await harness.wait_status(handle, JobStatus.RUNNING)
    await handle.execute_update(JobWorkflow.ops_requeue)
    await harness.wait_for(
        handle, lambda j: j.attempt == 2 and j.status == JobStatus.RUNNING, "the new attempt"
    )
    release.set()
    job = await harness.wait_status(handle, JobStatus.COMPLETED)
    requeued = [t for t in job.transitions if t.reason == "requeued"]
    assert [(t.status, t.by) for t in requeued] == [(JobStatus.PENDING, "ops")]
    with pytest.raises(RPCError):  # completed and closed: refused
        await handle.execute_update(JobWorkflow.ops_requeue)


async def test_ops_requeue_leaves_a_pending_job_and_the_attempt_its_worker_has_not_reported(
    harness: Harness,
) -> None:
    """A second retry of an ended job can reach the run the first one started: it must
    not re-queue that run again (`POST /api/ops/jobs/{id}/requeue` five at once)."""
    release = asyncio.Event()
    harness.stand_in.default = harness.stand_in.hold(release, phases=())
    handle = await harness.submit()

    async def started() -> bool:
        return harness.stand_in.started == [1]

    await wait_until_async(started, what="attempt 1 to start unreported")
    for by in ("ops-a", "ops-b"):
        job = await handle.execute_update(JobWorkflow.ops_requeue, by)
        assert (job.status, job.attempt, statuses(job)) == (JobStatus.PENDING, 1, ["pending"])
    history = await handle.fetch_history()
    kinds = [EventType.Name(event.event_type) for event in history.events]
    assert "EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED" not in kinds  # its attempt goes on
    release.set()
    job = await harness.wait_status(handle, JobStatus.COMPLETED)
    assert [t.reason for t in job.transitions].count("requeued") == 0
    assert (harness.stand_in.started, harness.stand_in.cancelled, job.attempts) == ([1], [], 1)


# -- stopped means the work is gone ---------------------------------------------------


async def test_a_stopped_job_reads_stop_requested_until_its_work_is_gone(harness: Harness) -> None:
    gone = asyncio.Event()
    harness.stand_in.default = harness.stand_in.linger(gone)
    handle = await harness.submit()
    await harness.wait_status(handle, JobStatus.RUNNING)
    await handle.execute_update(JobWorkflow.stop)
    await handle.cancel()
    await harness.wait_cancelled(1)
    # The worker has the cancel, its process has not exited: the job still says so.
    job = await harness.job(handle)
    assert job.status == JobStatus.STOP_REQUESTED
    assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
    gone.set()
    assert await harness.closed(handle) == WorkflowExecutionStatus.CANCELED
    job = await harness.job(handle)
    assert statuses(job)[-3:] == ["running", "stop_requested", "stopped"]


async def test_a_stopped_pool_job_keeps_its_lease_until_its_work_is_gone(harness: Harness) -> None:
    gates = Gates(harness.client, harness.task_queue, GateSettings())
    await gates.configure(GateKind.POOL, "p", GatePatch(capacity=1))
    gone = asyncio.Event()
    harness.stand_in.default = harness.stand_in.linger(gone)
    spec = JobSpec(type="in-process", pool="p", cost_units=1)
    first = await harness.submit(spec=spec, gates=gates)
    await harness.wait_status(first, JobStatus.RUNNING)
    second = await harness.submit(spec=spec, gates=gates)
    await first.execute_update(JobWorkflow.stop)
    await first.cancel()
    await harness.wait_cancelled(1)
    # The stopped job's process still runs: the pool's one unit is still its.
    assert (await harness.job(second)).status == JobStatus.PENDING
    view = await gates.view(GateKind.POOL, "p")
    assert view is not None and view.in_use == 1
    harness.stand_in.default = harness.stand_in.succeed()  # the next attempt runs through
    gone.set()
    await harness.wait_status(first, JobStatus.STOPPED)
    await harness.wait_status(second, JobStatus.COMPLETED)


async def test_a_job_whose_worker_dies_during_its_stop_ends_stopped(harness: Harness) -> None:
    harness.stand_in.default = harness.stand_in.fall_silent(("assigned", "running"))
    handle = await harness.submit(heartbeat_timeout_ms=1000)
    await harness.wait_status(handle, JobStatus.RUNNING)
    await handle.execute_update(JobWorkflow.stop)
    await handle.cancel()
    # No worker answers the cancel: the heartbeat timeout says the work is gone.
    assert await harness.closed(handle) == WorkflowExecutionStatus.CANCELED
    job = await harness.job(handle)
    assert job.status == JobStatus.STOPPED
    assert job.fail_history[-1].reason == "heartbeat_timeout"


# -- stop_claimed: an assigned job's worker may have started its work -----------------


async def test_a_stop_claimed_job_stopped_while_assigned_stops_once_its_work_is_gone(
    harness: Harness,
) -> None:
    gone = asyncio.Event()
    harness.stand_in.default = harness.stand_in.linger(gone, phases=("assigned",))
    handle = await harness.submit(spec=JobSpec(type="in-process", stop_claimed=True))
    await harness.wait_status(handle, JobStatus.ASSIGNED)
    job = await handle.execute_update(JobWorkflow.stop)
    assert job.status == JobStatus.STOP_REQUESTED and not job.cancelled
    await handle.cancel()  # what the API sends after the update
    await harness.wait_cancelled(1)
    assert (await harness.job(handle)).status == JobStatus.STOP_REQUESTED
    gone.set()
    assert await harness.closed(handle) == WorkflowExecutionStatus.CANCELED
    job = await harness.job(handle)
    assert statuses(job)[-3:] == ["assigned", "stop_requested", "stopped"]
    assert job.fail_reason == ErrorType.STOPPED


async def test_a_stop_claimed_job_whose_worker_goes_silent_while_assigned_ends_stopped(
    harness: Harness,
) -> None:
    harness.stand_in.default = harness.stand_in.fall_silent(("assigned",))
    spec = JobSpec(type="in-process", stop_claimed=True, requeue_stale_claims=True)
    handle = await harness.submit(spec=spec, heartbeat_timeout_ms=1000)
    await harness.wait_status(handle, JobStatus.ASSIGNED)
    await handle.execute_update(JobWorkflow.stop)
    await handle.cancel()
    # Not a stale claim back in the queue: a stop was asked, so its silence ends it.
    assert await harness.closed(handle) == WorkflowExecutionStatus.CANCELED
    job = await harness.job(handle)
    assert job.status == JobStatus.STOPPED
    assert "pending" not in statuses(job)[1:]


async def test_an_assigned_job_without_stop_claimed_is_cancelled_by_a_stop(
    harness: Harness,
) -> None:
    harness.stand_in.default = harness.stand_in.hold(asyncio.Event(), phases=("assigned",))
    handle = await harness.submit()
    await harness.wait_status(handle, JobStatus.ASSIGNED)
    job = await handle.execute_update(JobWorkflow.stop)
    assert job.cancelled and job.status == JobStatus.FAILED
