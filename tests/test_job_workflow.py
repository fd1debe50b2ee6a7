"""JobWorkflow's state machine, edge by edge, in process.

Each test runs JobWorkflow in an in-process worker on a fresh task queue of the
session's dev server, with a stand-in `run_job` activity whose every attempt the test
scripts: report a claim or a start, return a result, fail with an error type, hold
until released or cancelled, or fall silent. No API, worker or solver process runs
here; the process-level tests prove that wiring.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.service import RPCError, RPCStatusCode

from tests.conftest import wait_until_async
from tests.workflow_harness import (
    RESULT,
    WORKER_ID,
    Harness,
    now_ms,
    running_harness,
    statuses,
)
from workflows import job_workflow
from workflows.errors import AttemptFailureDetails, ErrorType
from workflows.job_workflow import JobWorkflow
from workflows.models import (
    AttemptInput,
    AttemptResult,
    JobStatus,
)
from workflows.names import BRIDGE_IDENTITY_PREFIX


def unserved_queue() -> str:
    """An activity task queue no worker polls: the job stays pending."""
    return f"unserved-{uuid.uuid4().hex[:12]}"


# -- claim, run, complete ---------------------------------------------------------------


async def test_a_job_no_worker_has_claimed_stays_pending(harness: Harness) -> None:
    handle = await harness.submit(activity_task_queue=unserved_queue())
    job = await harness.wait_for(handle, lambda j: j.attempt == 1, "attempt 1 scheduled")
    assert job.status == JobStatus.PENDING
    assert job.attempts == 0
    assert job.worker_id is None
    assert statuses(job) == ["pending"]


async def test_a_claim_report_makes_the_job_assigned_to_its_worker(harness: Harness) -> None:
    gate = asyncio.Event()
    harness.stand_in.default = harness.stand_in.hold(gate, phases=("assigned",))
    handle = await harness.submit()
    job = await harness.wait_status(handle, JobStatus.ASSIGNED)
    assert job.worker_id == WORKER_ID
    assert job.attempts == 1
    assert job.claimed_at is not None
    assert job.heartbeat_at == job.claimed_at
    assert statuses(job) == ["pending", "assigned"]
    gate.set()
    await handle.result()


async def test_a_running_report_makes_the_job_running(harness: Harness) -> None:
    gate = asyncio.Event()
    harness.stand_in.default = harness.stand_in.hold(gate)
    handle = await harness.submit()
    job = await harness.wait_status(handle, JobStatus.RUNNING)
    assert job.attempts == 1
    assert statuses(job) == ["pending", "assigned", "running"]
    gate.set()
    await handle.result()


async def test_a_running_report_without_a_claim_report_records_both(harness: Harness) -> None:
    gate = asyncio.Event()
    harness.stand_in.default = harness.stand_in.hold(gate, phases=("running",))
    handle = await harness.submit()
    job = await harness.wait_status(handle, JobStatus.RUNNING)
    assert job.worker_id == WORKER_ID
    assert job.attempts == 1
    assert statuses(job) == ["pending", "assigned", "running"]
    gate.set()
    await handle.result()


async def test_a_job_whose_attempt_succeeds_is_completed_with_its_result(
    harness: Harness,
) -> None:
    handle = await harness.submit()
    result = await handle.result()
    assert result.status == JobStatus.COMPLETED
    job = await harness.job(handle)
    assert job.result == RESULT
    assert job.result_hash == "hash-42"
    assert job.result_key == "hash-42"
    assert job.worker_id == WORKER_ID
    assert job.attempts == 1
    assert job.fail_reason is None
    assert job.completed_at is not None
    assert statuses(job) == ["pending", "assigned", "running", "completed"]
    assert await harness.closed(handle) == WorkflowExecutionStatus.COMPLETED


async def test_a_short_attempt_that_sent_no_reports_is_still_recorded_claimed_and_run(
    harness: Harness,
) -> None:
    claimed = now_ms() - 50

    async def quick(inp: AttemptInput) -> AttemptResult:
        return AttemptResult(
            worker_id=WORKER_ID,
            result=RESULT,
            result_hash="hash-42",
            claimed_at=claimed,
            started_at=claimed + 10,
        )

    harness.stand_in.default = quick
    handle = await harness.submit()
    job = await handle.result()
    assert statuses(job) == ["pending", "assigned", "running", "completed"]
    assert job.claimed_at == claimed
    assert job.heartbeat_at == claimed + 10
    assert job.attempts == 1
    assert job.transitions[1].worker_id == WORKER_ID


# -- failures, re-queue, quarantine ---------------------------------------------------


async def test_a_failed_attempt_requeues_the_job_as_pending_with_the_failure_in_its_history(
    harness: Harness,
) -> None:
    stand_in = harness.stand_in
    gate = asyncio.Event()
    stand_in.script[1] = stand_in.fail(ErrorType.SOLVER_EXIT, "exit code 7")
    stand_in.script[2] = stand_in.hold(gate, phases=())
    handle = await harness.submit(max_attempts=3)

    job = await harness.wait_for(
        handle, lambda j: j.attempt == 2 and j.status == JobStatus.PENDING, "the re-queue"
    )
    assert job.attempts == 1
    assert job.worker_id is None
    assert job.claimed_at is None
    assert job.fail_reason == "solver_exit: exit code 7"
    assert [(f.reason, f.worker_id) for f in job.fail_history] == [
        ("solver_exit: exit code 7", WORKER_ID)
    ]
    assert statuses(job) == ["pending", "assigned", "running", "failed", "pending"]
    assert job.transitions[3].reason == "solver_exit: exit code 7"

    gate.set()
    job = await handle.result()
    assert job.status == JobStatus.COMPLETED
    assert job.attempts == 2
    assert job.fail_reason is None
    assert len(job.fail_history) == 1
    assert statuses(job)[-2:] == ["running", "completed"]


async def test_a_job_that_fails_every_attempt_is_quarantined_when_its_attempts_run_out(
    harness: Harness,
) -> None:
    harness.stand_in.default = harness.stand_in.fail(ErrorType.SOLVER_EXIT, "exit code 1")
    handle = await harness.submit(max_attempts=2)
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()
    assert isinstance(failure.value.cause, ApplicationError)
    assert failure.value.cause.type == ErrorType.QUARANTINED
    assert await harness.closed(handle) == WorkflowExecutionStatus.FAILED

    job = await harness.job(handle)
    assert job.status == JobStatus.QUARANTINED
    assert job.attempts == 2
    assert job.completed_at is not None
    assert [f.reason for f in job.fail_history] == ["solver_exit: exit code 1"] * 2
    assert statuses(job) == [
        "pending",
        *["assigned", "running", "failed", "pending"],
        *["assigned", "running", "failed", "quarantined"],
    ]
    assert harness.stand_in.started == [1, 2]


@pytest.mark.parametrize(
    "kind", [ErrorType.SOLVER_CHECKSUM_MISMATCH, ErrorType.MAX_RUNTIME_EXCEEDED]
)
async def test_a_final_failure_quarantines_the_job_at_once(
    harness: Harness, kind: ErrorType
) -> None:
    harness.stand_in.default = harness.stand_in.fail(kind, "reported by the worker")
    handle = await harness.submit(max_attempts=5)
    assert await harness.closed(handle) == WorkflowExecutionStatus.FAILED
    job = await harness.job(handle)
    assert job.status == JobStatus.QUARANTINED
    assert job.attempts == 1
    assert job.fail_reason == f"{kind.value}: reported by the worker"
    assert harness.stand_in.started == [1]


async def test_a_non_retryable_failure_quarantines_the_job_at_once(harness: Harness) -> None:
    harness.stand_in.default = harness.stand_in.fail(
        ErrorType.SOLVER_NOT_FOUND, "no solver", non_retryable=True
    )
    handle = await harness.submit(max_attempts=5)
    assert await harness.closed(handle) == WorkflowExecutionStatus.FAILED
    job = await harness.job(handle)
    assert job.status == JobStatus.QUARANTINED
    assert job.attempts == 1
    assert job.fail_reason == "solver_not_found: no solver"


async def test_an_attempt_past_its_max_runtime_is_timed_out_and_quarantines_the_job(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The server-side backstop is max_runtime_ms plus a 10-minute slack; shrink the
    # slack so the start-to-close timeout itself fires (the workflows package is passed
    # through the sandbox, so the workflow reads this very module).
    monkeypatch.setattr(job_workflow, "ATTEMPT_TIMEOUT_SLACK", timedelta(milliseconds=200))
    harness.stand_in.default = harness.stand_in.hold(asyncio.Event())
    handle = await harness.submit(max_attempts=3, max_runtime_ms=100)
    assert await harness.closed(handle) == WorkflowExecutionStatus.FAILED
    job = await harness.job(handle)
    assert job.status == JobStatus.QUARANTINED
    assert job.fail_reason == ErrorType.MAX_RUNTIME_EXCEEDED.value
    assert job.attempts == 1
    assert statuses(job) == ["pending", "assigned", "running", "failed", "quarantined"]


async def test_an_agent_reported_failure_keeps_its_reason_and_a_final_one_quarantines(
    harness: Harness,
) -> None:
    stand_in = harness.stand_in
    stand_in.script[1] = stand_in.fail(ErrorType.AGENT_FAILURE, "solver_exit: exit code 3")
    stand_in.script[2] = stand_in.fail(
        ErrorType.AGENT_FAILURE, "solver_checksum_mismatch: got 00ff"
    )
    handle = await harness.submit(max_attempts=5)
    assert await harness.closed(handle) == WorkflowExecutionStatus.FAILED
    job = await harness.job(handle)
    assert job.status == JobStatus.QUARANTINED
    assert [f.reason for f in job.fail_history] == [
        "solver_exit: exit code 3",
        "solver_checksum_mismatch: got 00ff",
    ]
    assert job.attempts == 2


async def test_a_failed_attempt_that_sent_no_reports_still_counts_as_claimed_and_run(
    harness: Harness,
) -> None:
    claimed = now_ms() - 50
    details = AttemptFailureDetails(log_tail="boom\n", claimed_at=claimed, started_at=claimed + 10)
    harness.stand_in.default = harness.stand_in.fail(
        ErrorType.SOLVER_EXIT, "exit code 1", phases=(), details=details
    )
    handle = await harness.submit(max_attempts=1)
    assert await harness.closed(handle) == WorkflowExecutionStatus.FAILED
    job = await harness.job(handle)
    assert statuses(job) == ["pending", "assigned", "running", "failed", "quarantined"]
    assert job.attempts == 1
    assert job.claimed_at == claimed
    assert job.heartbeat_at == claimed + 10
    assert job.log_tail == "boom\n"


async def test_a_late_report_from_an_earlier_attempt_is_ignored(harness: Harness) -> None:
    stand_in = harness.stand_in
    gate = asyncio.Event()
    stand_in.script[1] = stand_in.fail(ErrorType.SOLVER_EXIT, "exit code 2")
    stand_in.script[2] = stand_in.hold(gate, phases=())
    handle = await harness.submit()
    job = await harness.wait_for(
        handle, lambda j: j.attempt == 2 and j.status == JobStatus.PENDING, "the re-queue"
    )
    attempt_2 = job.attempt_input()
    await stand_in.report(attempt_2, "running", attempt=1)
    # Signals are handled in order: once attempt 2's claim shows, the stray one was seen.
    await stand_in.report(attempt_2, "assigned")
    job = await harness.wait_status(handle, JobStatus.ASSIGNED)
    assert statuses(job) == ["pending", "assigned", "running", "failed", "pending", "assigned"]
    assert job.attempts == 2
    gate.set()
    await handle.result()


# -- heartbeat timeout and hand-back --------------------------------------------------


async def test_a_claimed_attempt_that_stops_heartbeating_fails_and_the_job_is_requeued(
    harness: Harness,
) -> None:
    stand_in = harness.stand_in
    stand_in.script[1] = stand_in.fall_silent(phases=("assigned",))
    # Long enough that the second attempt, which heartbeats, never lapses on a loaded box.
    handle = await harness.submit(heartbeat_timeout_ms=2000)
    job = await handle.result()
    assert job.status == JobStatus.COMPLETED
    assert job.attempts == 2
    assert [(f.reason, f.worker_id) for f in job.fail_history] == [
        (ErrorType.HEARTBEAT_TIMEOUT.value, WORKER_ID)
    ]
    assert statuses(job)[:5] == ["pending", "assigned", "failed", "pending", "assigned"]


async def test_a_native_worker_dying_before_any_report_still_used_an_attempt(
    harness: Harness,
) -> None:
    stand_in = harness.stand_in
    stand_in.script[1] = stand_in.fall_silent(phases=())
    handle = await harness.submit(max_attempts=1, heartbeat_timeout_ms=500)
    assert await harness.closed(handle) == WorkflowExecutionStatus.FAILED
    job = await harness.job(handle)
    assert job.status == JobStatus.QUARANTINED
    assert job.attempts == 1
    assert job.fail_reason == ErrorType.HEARTBEAT_TIMEOUT.value
    assert statuses(job) == ["pending", "assigned", "failed", "quarantined"]


@pytest.mark.xfail(
    strict=True,
    reason="defect: an activity's heartbeat timeout reaches the workflow with an empty "
    "ActivityError.identity, so _unclaimed_handback never sees the bridge's identity and "
    "counts the unclaimed task as a failed attempt (heartbeat_timeout)",
)
async def test_a_bridge_attempt_nobody_claimed_is_not_counted_when_its_heartbeat_lapses(
    client: Client,
) -> None:
    async with running_harness(client, identity=f"{BRIDGE_IDENTITY_PREFIX}test") as harness:
        stand_in = harness.stand_in
        stand_in.script[1] = stand_in.fall_silent(phases=())
        handle = await harness.submit(max_attempts=1, heartbeat_timeout_ms=500)
        job = await handle.result()
    assert job.status == JobStatus.COMPLETED
    assert job.attempt == 2
    assert job.attempts == 1
    assert job.fail_history == []
    assert statuses(job) == ["pending", "assigned", "running", "completed"]


async def test_an_attempt_handed_back_unclaimed_is_not_counted_and_a_fresh_one_is_scheduled(
    harness: Harness,
) -> None:
    stand_in = harness.stand_in
    stand_in.script[1] = stand_in.fail(ErrorType.CLAIM_ABANDONED, "no claimer", phases=())
    handle = await harness.submit(max_attempts=1)
    job = await handle.result()
    assert stand_in.started == [1, 2]
    assert job.status == JobStatus.COMPLETED
    assert job.attempt == 2
    assert job.attempts == 1
    assert job.fail_history == []
    assert statuses(job) == ["pending", "assigned", "running", "completed"]


async def test_an_attempt_handed_back_after_its_claim_counts_as_a_failed_attempt(
    harness: Harness,
) -> None:
    stand_in = harness.stand_in
    stand_in.script[1] = stand_in.fail(
        ErrorType.CLAIM_ABANDONED, "claimer left", phases=("assigned",)
    )
    handle = await harness.submit(max_attempts=3)
    job = await handle.result()
    assert job.attempts == 2
    assert [f.reason for f in job.fail_history] == ["claim_abandoned: claimer left"]


# -- cancel ---------------------------------------------------------------------------


async def test_cancelling_a_pending_job_fails_it_as_cancelled_and_the_execution_ends_canceled(
    harness: Harness,
) -> None:
    handle = await harness.submit(activity_task_queue=unserved_queue())
    await harness.wait_for(handle, lambda j: j.attempt == 1, "attempt 1 scheduled")
    job = await handle.execute_update(JobWorkflow.cancel)
    assert job.status == JobStatus.FAILED
    assert job.fail_reason == ErrorType.CANCELLED.value
    assert job.cancelled
    assert job.attempts == 0
    assert job.completed_at is not None
    assert statuses(job) == ["pending", "failed"]
    assert job.transitions[-1].reason == ErrorType.CANCELLED.value

    # A second cancel answers the cancelled job again.
    again = await handle.execute_update(JobWorkflow.cancel)
    assert again.transitions == job.transitions

    # The API follows the update with a workflow cancel request.
    await handle.cancel()
    assert await harness.closed(handle) == WorkflowExecutionStatus.CANCELED
    assert (await harness.job(handle)).transitions == job.transitions


async def test_cancelling_an_assigned_job_fails_it_as_cancelled_and_cancels_its_attempt(
    harness: Harness,
) -> None:
    stand_in = harness.stand_in
    stand_in.default = stand_in.hold(asyncio.Event(), phases=("assigned",))
    handle = await harness.submit()
    await harness.wait_status(handle, JobStatus.ASSIGNED)
    job = await handle.execute_update(JobWorkflow.cancel)
    assert job.status == JobStatus.FAILED
    assert job.fail_reason == ErrorType.CANCELLED.value
    assert job.attempts == 1
    assert statuses(job) == ["pending", "assigned", "failed"]

    async def attempt_cancelled() -> bool:
        return stand_in.cancelled == [1]

    await wait_until_async(attempt_cancelled, timeout=5, what="the attempt to be cancelled")
    # A report arriving after the cancel changes nothing.
    await stand_in.report(job.attempt_input(), "running")
    await handle.cancel()
    assert await harness.closed(handle) == WorkflowExecutionStatus.CANCELED
    assert statuses(await harness.job(handle)) == ["pending", "assigned", "failed"]
    assert stand_in.started == [1]


async def test_a_running_job_refuses_cancel_as_not_cancellable(harness: Harness) -> None:
    gate = asyncio.Event()
    harness.stand_in.default = harness.stand_in.hold(gate)
    handle = await harness.submit()
    await harness.wait_status(handle, JobStatus.RUNNING)
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(JobWorkflow.cancel)
    cause = refused.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == ErrorType.NOT_CANCELLABLE
    assert cause.details == ("running",)
    assert (await harness.job(handle)).status == JobStatus.RUNNING
    assert harness.stand_in.cancelled == []
    gate.set()
    assert (await handle.result()).status == JobStatus.COMPLETED


async def test_a_completed_job_can_no_longer_be_cancelled(harness: Harness) -> None:
    handle = await harness.submit()
    await handle.result()
    with pytest.raises(RPCError) as refused:
        await handle.execute_update(JobWorkflow.cancel)
    # The execution is closed: the server refuses the update (the API answers 409).
    assert refused.value.status == RPCStatusCode.NOT_FOUND
    assert (await harness.job(handle)).status == JobStatus.COMPLETED


async def test_an_operator_cancel_request_fails_the_job_as_cancelled_and_ends_it_canceled(
    harness: Harness,
) -> None:
    stand_in = harness.stand_in
    stand_in.default = stand_in.hold(asyncio.Event())
    handle = await harness.submit()
    await harness.wait_status(handle, JobStatus.RUNNING)
    await handle.cancel()
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()
    assert isinstance(failure.value.cause, CancelledError)
    assert await harness.closed(handle) == WorkflowExecutionStatus.CANCELED
    job = await harness.job(handle)
    assert job.status == JobStatus.FAILED
    assert job.fail_reason == ErrorType.CANCELLED.value
    assert statuses(job) == ["pending", "assigned", "running", "failed"]

    async def attempt_cancelled() -> bool:
        return stand_in.cancelled == [1]

    await wait_until_async(attempt_cancelled, timeout=5, what="the attempt to be cancelled")
