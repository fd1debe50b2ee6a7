"""JobWorkflow: one workflow per job (workflow id = job id), the job's orchestration.

One attempt loop: a job waits for its start time, holds a lease of each of its gates
(workflows/job_leases.py), runs one activity per attempt (`maximum_attempts=1`, so every
failed attempt is recorded as it happens) and decides what follows it. A job with no
gates and no clocks runs the same loop with nothing to hold. What each step changes in
the job is `JobMachine`'s (workflows/job_machine.py); how an attempt's error reads is
workflows/attempt_outcomes.py's; changes that shipped are versioned as
workflows/job_patches.py says.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any, NoReturn

from temporalio import workflow
from temporalio.common import Priority, RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from workflows import search_attributes
    from workflows.attempt_outcomes import (
        classify,
        failure_details,
        handed_back,
        not_started_in_time,
        unclaimed_handback,
        went_silent,
    )
    from workflows.errors import ErrorType
    from workflows.gate_models import GateGrant
    from workflows.job_leases import GateLeases
    from workflows.job_machine import JobMachine
    from workflows.job_patches import (
        CANCEL_MEETS_END_PATCH,
        CANCEL_WAIT_PATCH,
        GRANTED_AT_SUBMIT_PATCH,
        HOST_PINNING_PATCH,
        SCHEDULING_PATCH,
        STOP_WAITS_FOR_WORK_PATCH,
    )
    from workflows.job_states import CANCELLABLE, DISPATCH_TIMEOUT, OPEN, STOPPABLE, JobStatus
    from workflows.models import (
        WAITING_AT,
        AttemptReport,
        AttemptResult,
        Job,
        JobInput,
        WaitingFor,
        as_fired,
        events_memo,
        pending_job,
    )
    from workflows.names import (
        CANCEL_UPDATE,
        CLAIM_JOB_UPDATE,
        CLAIM_UPDATE,
        EVENTS_MEMO,
        GRANT_SIGNAL,
        JOB_QUERY,
        JOB_WORKFLOW,
        OPS_BY,
        OPS_FAIL_UPDATE,
        OPS_REQUEUE_UPDATE,
        PING_SIGNAL,
        RECALL_SIGNAL,
        REPORT_SIGNAL,
        REQUEUE_UPDATE,
        RUN_JOB_ACTIVITY,
        STOP_UPDATE,
        attempt_activity_id,
    )
    from workflows.workflow_time import waited
    from workflows.workflow_time import workflow_now_ms as _now_ms

# The worker enforces max_runtime_ms from the solver's start; the server-side timeout
# is the backstop for a worker that cannot (it also covers the solver download).
ATTEMPT_TIMEOUT_SLACK = timedelta(minutes=10)
# Stale claims (`JobSpec.requeue_stale_claims`): a claim whose worker goes silent before
# it reports running goes back to the queue uncounted, this many times per run; later
# ones count as failed attempts, so a job that kills every worker that takes it ends.
STALE_CLAIMS_RETURNED = 3


@workflow.defn(name=JOB_WORKFLOW)
class JobWorkflow:
    """A job's whole life: attempts, reports from workers, cancel, terminal state."""

    @workflow.init
    def __init__(self, inp: JobInput) -> None:
        if inp.from_schedule:
            info = workflow.info()
            inp = as_fired(inp, info.workflow_id, int(info.workflow_start_time.timestamp() * 1000))
        self._job = pending_job(inp) if inp.resumed is None else inp.resumed.model_copy(deep=True)
        self._machine = JobMachine(self._job)
        self._gates = GateLeases(self._job, inp.gates, inp.gate_defaults, self._interrupted)
        self._handle: workflow.ActivityHandle[AttemptResult] | None = None
        self._claimed_attempt = 0
        # The attempt an HTTP agent claimed through `claim_job` (the bridge's claim).
        self._bridge_claimed = 0
        self._recalled_attempt = 0
        self._attempts_base = 0
        self._stop_waits_input = inp.stop_waits_for_work
        self._stop_waits: bool | None = None
        self._dispatch_timeout = (
            None
            if inp.dispatch_timeout_ms is None
            else timedelta(milliseconds=inp.dispatch_timeout_ms)
        )
        # The attempt whose schedule-to-start timeout is the dispatch timeout (not the
        # deadline's or the host's, which end the wait otherwise).
        self._dispatch_limited = 0
        self._requeue_stale = inp.spec.requeue_stale_claims
        self._stale_returned = 0
        # A stop of an assigned job asks its worker to stop it, as a running one's does
        # (`JobSpec.stop_claimed`; False in every input from before: cancelled).
        self._stop_claimed = inp.spec.stop_claimed
        self._deadline_hit = False
        # Held open for a re-queue (a quarantined or stopped job of a group or target).
        self._held = False
        self._requeued = False
        self._cancelled = False
        self._stopping = False
        self._cancel_requested = False
        # Operator overrides: a quarantine reason, or a re-queue of the current attempt.
        self._ops_failed: str | None = None
        self._ops_requeue = False
        # Who asked for the cancel, stop or re-queue under way (an update's `by`).
        self._by: str | None = None
        # Host pinning: when the current wait for the host ends (ms; None until the job
        # waits for a host), and whether this wait fell back to the shared queue.
        self._pinned = False
        self._host_until: int | None = None
        self._fell_back = False
        # Asked here, not in run: a pause's recall may reach the job in its first task.
        self._granted_at_submit = bool(inp.granted) and workflow.patched(GRANTED_AT_SUBMIT_PATCH)
        if self._granted_at_submit:
            self._gates.granted_at_submit(inp.granted, inp.gate_weight)
        if inp.resumed is not None:
            # A re-queued ended job: its attempts and fail_history go on.
            self._claimed_attempt = self._job.attempt
            self._attempts_base = self._job.attempts
            self._machine.resume(_now_ms(), inp.resumed_by)
        # A schedule's job starts with the schedule's search attributes and memo: its
        # first task mirrors its own id and times.
        self._machine.changed = inp.from_schedule or self._machine.changed

    @property
    def _attempt(self) -> int:
        """The current (or last) attempt's number; transitions are stamped with it."""
        return self._machine.attempt

    @_attempt.setter
    def _attempt(self, attempt: int) -> None:
        self._machine.attempt = attempt

    @workflow.run
    async def run(self, inp: JobInput) -> Job:
        job = self._job
        if inp.resumed is not None or inp.from_schedule:
            self._publish()
        if inp.spec.pinned_host is not None:
            self._pinned = workflow.patched(HOST_PINNING_PATCH)
        if not (
            inp.spec.scheduled and (self._granted_at_submit or workflow.patched(SCHEDULING_PATCH))
        ):
            self._gates.plain()
        start = job.earliest_start_at
        if self._gates.active and start is not None and start > _now_ms():
            job.waiting_for = WaitingFor.START_TIME
            await waited(self._interrupted, timedelta(milliseconds=start - _now_ms()))
        while not self._interrupted():
            held = await self._gates.hold(self._time_to_deadline)
            if not held:
                self._deadline_hit = held is False
                break
            left = self._time_to_deadline()
            if self._gates.active and left is not None and left <= timedelta(0):
                self._deadline_hit = True  # a retry that can no longer be assigned in time
                break
            self._attempt += 1
            attempt = job.attempt = self._attempt
            self._handle = self._start_attempt(inp)
            try:
                outcome = await self._handle
            except asyncio.CancelledError:
                ended = self._ended_with_cancel()
                if ended is None:
                    # As a cancelled attempt below: a stopped job of a group or target
                    # stays re-queueable, while its leases go back.
                    stopped = job.status == JobStatus.STOPPED
                    release = self._gates.release_surely("stopped" if stopped else "cancelled")
                    if await self._hold_for_requeue(inp, stopped, release, cancel_spent=True):
                        continue
                    raise
                outcome = ended
            except ActivityError as err:
                if await self._after_error(inp, attempt, err):
                    continue
                break
            finally:
                self._handle = None
            self._complete(outcome)
            self._publish()
            await self._gates.release_surely("completed")
            return job
        if self._ops_failed is not None:
            await self._gates.release("quarantined")
            self._raise_ops_failed()
        await self._gates.release("cancelled")
        if self._deadline_hit and not self._cancelled:
            self._end(
                JobStatus.FAILED, ErrorType.DEADLINE_EXCEEDED, "not assigned by its deadline_at"
            )
        await self._await_cancel_request(inp)
        return job

    async def _after_error(self, inp: JobInput, attempt: int, err: ActivityError) -> bool:
        """What follows an attempt that ended in an error: True for the next attempt,
        False to leave the loop; raises when the job's run ends here."""
        if self._interrupted():
            return False
        if self._recalled_attempt == attempt:
            return True  # a pause took the lease back before a worker claimed it
        if self._ops_requeue:
            self._requeue_attempt()
            await self._gates.requeue_at_group()
            return True
        if is_cancelled_exception(err):
            stopped = self._stopping
            self._mark_ended_by_cancel()
            self._publish()
            # A stopped job of a group or target can be re-queued (target resume).
            # Temporal keeps one cancel request per execution: a later stop of the re-run
            # cancels its attempt itself.
            release = self._gates.release("stopped" if stopped else "cancelled")
            if await self._hold_for_requeue(inp, stopped, release, cancel_spent=True):
                return True
            raise err
        if self._dispatch_limited == attempt and not_started_in_time(err):
            self._machine.move(JobStatus.PENDING, _now_ms(), reason=DISPATCH_TIMEOUT)
            await self._wait_again()
            return True
        if self._stopping:
            self._stop_after_failure(err)
            # Its work ended by itself (or its worker died) after the API's cancel request:
            # stopped as by the cancel, so re-queueable (group, target).
            if not (workflow.cancellation_reason() is not None and self._waits_for_work()):
                self._held = False
                await self._gates.release("stopped")
                return False
            release = self._gates.release("stopped")
            if await self._hold_for_requeue(inp, True, release, cancel_spent=True):
                return True
            raise asyncio.CancelledError from err
        try:
            if self._host_wait_over(inp, err):
                return True
        except ApplicationError:
            await self._gates.release("cancelled")
            raise
        if not_started_in_time(err):
            self._deadline_hit = True
            return False
        if self._stale_claim(attempt, err):
            self._return_stale_claim()
            await self._wait_again()
            return True
        try:
            self._fail_attempt(attempt, err)
        except ApplicationError:
            self._publish()
            release = self._gates.release("quarantined")
            if await self._hold_for_requeue(inp, True, release, cancel_spent=False):
                return True
            raise
        self._publish()
        await self._gates.requeue_at_group()
        return True

    def _start_attempt(self, inp: JobInput) -> workflow.ActivityHandle[AttemptResult]:
        job = self._job
        attempt_input = job.attempt_input()
        if job.group is not None:
            attempt_input.claim_first = True
        weight = self._gates.weight if job.group else None
        task_queue, schedule_to_start = inp.activity_task_queue, self._schedule_to_start()
        if self._pinned:
            task_queue, schedule_to_start = self._placement(inp, schedule_to_start)
        return workflow.start_activity(
            RUN_JOB_ACTIVITY,
            attempt_input,
            result_type=AttemptResult,
            task_queue=task_queue,
            activity_id=attempt_activity_id(job.attempt),
            start_to_close_timeout=timedelta(milliseconds=job.max_runtime_ms)
            + ATTEMPT_TIMEOUT_SLACK,
            schedule_to_start_timeout=schedule_to_start,
            heartbeat_timeout=timedelta(milliseconds=inp.heartbeat_timeout_ms),
            retry_policy=RetryPolicy(maximum_attempts=1),
            cancellation_type=(
                workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
                if self._waits_for_work()
                else workflow.ActivityCancellationType.TRY_CANCEL
            ),
            priority=Priority(
                priority_key=inp.priority_key, fairness_key=job.group, fairness_weight=weight
            ),
            summary=f"attempt {job.attempt}",
        )

    def _waits_for_work(self) -> bool:
        """Whether a cancelled attempt is awaited until its work is gone: the job's input
        says so; a history recorded under the patch says so by its marker (asked only
        while replaying, so a live run never records one)."""
        if self._stop_waits is None:
            self._stop_waits = self._stop_waits_input or (
                workflow.unsafe.is_replaying() and workflow.patched(STOP_WAITS_FOR_WORK_PATCH)
            )
        return self._stop_waits

    def _schedule_to_start(self) -> timedelta | None:
        """How long the attempt may wait to be taken: until deadline_at, and no longer
        than the dispatch timeout while the job holds leases (the shorter decides)."""
        if not self._gates.active:
            return None
        limit = self._time_to_deadline()
        dispatch = self._dispatch_timeout
        if self._gates.gates and dispatch is not None and (limit is None or dispatch < limit):
            self._dispatch_limited = self._attempt
            return dispatch
        return limit

    def _time_to_deadline(self) -> timedelta | None:
        deadline = self._job.deadline_at
        return None if deadline is None else timedelta(milliseconds=deadline - _now_ms())

    # -- host pinning ------------------------------------------------------------------

    def _placement(
        self, inp: JobInput, schedule_to_start: timedelta | None
    ) -> tuple[str, timedelta | None]:
        """A pinned job's next attempt: its queue, and how long it may wait there. Each
        wait for the host (from the first attempt, and again after a claimed attempt
        ended) lasts its host's wait at most; an attempt nobody claimed (a bridge's
        hand-back) does not restart it."""
        spec = inp.spec
        if self._fell_back:
            return inp.activity_task_queue, schedule_to_start
        now = _now_ms()
        if self._host_until is None:
            self._host_until = now + (spec.require_host_wait_ms or spec.preferred_host_wait_ms or 0)
        self._job.waiting_for = WaitingFor.HOST
        left = timedelta(milliseconds=max(self._host_until - now, 1))
        if schedule_to_start is not None:
            if left < schedule_to_start:
                self._dispatch_limited = 0  # the host's wait ends first
            left = min(left, schedule_to_start)
        return inp.preferred_task_queue or inp.activity_task_queue, left

    def _host_wait_over(self, inp: JobInput, err: ActivityError) -> bool:
        """A pinned job's attempt waited on its host's queue past the host's wait (not
        past deadline_at): a preferred host's job goes to the shared queue (True: start
        the next attempt); a required host's job ends failed, `host_unavailable`."""
        if not (self._pinned and not self._fell_back and not_started_in_time(err)):
            return False
        left = self._time_to_deadline()
        if left is not None and left <= timedelta(0):
            return False  # deadline_at came first
        self._job.waiting_for = None
        if inp.spec.require_host is not None:
            message = f"no worker of host {inp.spec.require_host} took the job in time"
            self._end(JobStatus.FAILED, ErrorType.HOST_UNAVAILABLE, message)
        self._fell_back = True
        self._machine.move(
            JobStatus.PENDING, _now_ms(), reason=ErrorType.PREFERRED_HOST_TIMEOUT.value
        )
        self._publish()
        return True

    # -- stale claims, waits, cancels ------------------------------------------------

    def _stale_claim(self, attempt: int, err: ActivityError) -> bool:
        """The attempt was claimed, its worker never reported running and then went
        silent past the heartbeat timeout (or past its claim limit: the bridge ended
        the attempt `claim_expired`), and the job returns such claims (within
        STALE_CLAIMS_RETURNED)."""
        return (
            self._requeue_stale
            and self._claimed_attempt == attempt
            and self._job.status == JobStatus.ASSIGNED
            and went_silent(err)
            and self._stale_returned < STALE_CLAIMS_RETURNED
        )

    def _return_stale_claim(self) -> None:
        """A stale claim: back to `pending` (`dispatch_timeout`), its attempt uncounted."""
        self._stale_returned += 1
        if self._pinned:
            self._host_until = None
        self._machine.unclaim(_now_ms())

    async def _wait_again(self) -> None:
        """An attempt nobody took (or whose claim went stale): its leases go back, and the
        job asks its gates again."""
        gates = self._gates.gates
        self._job.waiting_for = WAITING_AT[gates[0].kind] if gates else None
        self._publish()
        try:
            await self._gates.wait_again()
        except asyncio.CancelledError:
            # A workflow cancel meanwhile (an operator's): the job ends cancelled, and
            # every lease and request still goes back.
            if not self._interrupted():
                self._mark_cancelled()
                self._publish()
            await self._gates.release_surely("cancelled")
            raise

    async def _hold_for_requeue(
        self,
        inp: JobInput,
        holds: bool,
        release: Coroutine[Any, Any, None],
        *,
        cancel_spent: bool,
    ) -> bool:
        """The job's run ends here unless it `holds`: its leases go back (`release`); a
        job of a group or target then stays open for a re-queue (group retry-failed,
        target resume). True once re-queued."""
        self._held = holds and inp.requeue_hold_ms > 0
        await release
        if cancel_spent:
            self._cancel_requested = True
        if not holds or inp.requeue_hold_ms <= 0:
            return False
        self._held = True
        limit = timedelta(milliseconds=inp.requeue_hold_ms)
        requeued = await waited(lambda: self._requeued, limit)
        self._held = False
        self._requeued = False
        return requeued

    def _interrupted(self) -> bool:
        """Cancelled, or quarantined by an operator: no further attempt."""
        return self._cancelled or self._ops_failed is not None

    async def _await_cancel_request(self, inp: JobInput) -> None:
        """Wait for the workflow cancel request the API sends after a cancel or stop
        update; it ends the wait and the execution shows Canceled. If it never comes
        (the API killed between its two calls) within `cancel_wait_ms`, the execution
        closes Failed, the job as it reads (stopped or cancelled), so that nothing stays
        open for good."""
        if workflow.cancellation_reason() is not None and self._waits_for_work():
            # The cancel request came while the attempt's work was being stopped (it
            # was spent on the attempt): the execution ends Canceled now.
            raise asyncio.CancelledError
        if inp.cancel_wait_ms > 0 and workflow.patched(CANCEL_WAIT_PATCH):
            limit = timedelta(milliseconds=inp.cancel_wait_ms)
            if not await waited(lambda: False, limit):
                job = self._job
                raise ApplicationError(
                    f"job {job.status.value}; no cancel request followed in {limit}",
                    job,
                    type=ErrorType.CANCEL_NEVER_CAME,
                    non_retryable=True,
                )
        await workflow.wait_condition(lambda: False)

    def _ended_with_cancel(self) -> AttemptResult | None:
        """The workflow was cancelled (the API follows a stop with a cancel request)
        while it awaited its attempt. If the attempt had already returned in the same
        workflow task, its result stands (`stop_requested → completed`, the cancel is
        spent); otherwise the job ends stopped or cancelled (None) and the caller lets
        the cancel go on (Temporal status Canceled). Before CANCEL_MEETS_END_PATCH the
        cancel went on at once, and the job kept its status."""
        if not workflow.patched(CANCEL_MEETS_END_PATCH):
            raise asyncio.CancelledError
        handle = self._handle
        if (
            handle is not None
            and handle.done()
            and not handle.cancelled()
            and handle.exception() is None
        ):
            return handle.result()
        if not self._interrupted():  # a cancel update has marked it already
            self._mark_ended_by_cancel()
            self._publish()
        return None

    # -- gates' signals ------------------------------------------------------------------

    @workflow.signal(name=GRANT_SIGNAL)
    async def gate_grant(self, grant: GateGrant) -> None:
        """A gate granted its lease; one this job no longer asks for goes back."""
        await self._gates.on_grant(grant)

    @workflow.signal(name=RECALL_SIGNAL)
    async def gate_recall(self, gate_workflow_id: str) -> None:
        """A gate takes back the lease of a job no worker has claimed yet: its group's
        pause, or its pool's capacity lowered below what the pool has leased."""
        await self._gates.on_recall(gate_workflow_id, self._recall_attempt)

    def _recall_attempt(self) -> None:
        if self._handle is not None:
            self._recalled_attempt = self._attempt
            self._handle.cancel()

    @workflow.signal(name=PING_SIGNAL)
    def gate_ping(self) -> None:
        """A gate checking that this job still runs: that the signal landed says so."""

    # -- operators and the API -----------------------------------------------------------

    @workflow.update(name=REQUEUE_UPDATE)
    def requeue(self, by: str | None = None) -> Job:
        """Re-queue a quarantined job of a group or target: same id, its attempts and
        fail_history go on, with max_attempts more attempts. `by`: who asked."""
        return self._requeue_held(by)

    @requeue.validator
    def _validate_requeue(self, by: str | None = None) -> None:  # noqa: ARG002 - the update's
        if not (self._held and not self._requeued):
            self._refuse(
                "only a quarantined job of a group or target can be re-queued",
                ErrorType.NOT_REQUEUEABLE,
            )

    def _requeue_held(self, by: str | None = None) -> Job:
        self._requeued = True
        self._attempts_base = self._job.attempts
        self._stopping = False
        self._machine.requeue(_now_ms(), by=by)
        self._publish()
        return self._job

    @workflow.update(name=OPS_REQUEUE_UPDATE)
    def ops_requeue(self, by: str | None = None) -> Job:
        """Operator override: a held quarantined or stopped job comes back to pending; a
        pending, assigned or running one has its attempt cancelled (the worker kills the
        solver) and a new one started. Same id; attempts and fail_history go on. `by`:
        who asked ("ops" when not said)."""
        if self._held and not self._requeued:
            return self._requeue_held(by=by or OPS_BY)
        if self._handle is not None and not self._ops_requeue:
            self._ops_requeue = True
            self._by = by
            self._handle.cancel()
        return self._job

    @ops_requeue.validator
    def _validate_ops_requeue(self, by: str | None = None) -> None:  # noqa: ARG002 - the update's
        if not ((self._held and not self._requeued) or self._open()):
            why = "only a job that has not completed or closed can be re-queued"
            self._refuse(why, ErrorType.JOB_ENDED)

    def _requeue_attempt(self) -> None:
        """An operator's re-queue cancelled the current attempt: back to pending, and the
        loop starts a new one."""
        self._ops_requeue = False
        self._stopping = False
        self._machine.requeue(_now_ms(), by=self._by or OPS_BY)
        self._by = None
        self._publish()

    @workflow.update(name=OPS_FAIL_UPDATE)
    def ops_fail(self, reason: str, by: str | None = None) -> Job:
        """Operator override: quarantine a job that has not ended, at once (its attempt
        is cancelled and the worker kills the solver). `by`: who asked ("ops" when not
        said)."""
        if self._ops_failed is None:
            self._ops_failed = reason
            now = _now_ms()
            self._machine.record_failure(reason, now)
            self._machine.end(JobStatus.QUARANTINED, now, reason, by=by or OPS_BY)
            self._publish()
            if self._handle is not None:
                self._handle.cancel()
        return self._job

    @ops_fail.validator
    def _validate_ops_fail(self, reason: str, by: str | None = None) -> None:  # noqa: ARG002
        if not self._open():
            self._refuse("it has ended already", ErrorType.JOB_ENDED)

    def _raise_ops_failed(self) -> NoReturn:
        raise ApplicationError(
            f"quarantined by an operator: {self._ops_failed}",
            self._job,
            type=ErrorType.QUARANTINED,
            non_retryable=True,
        )

    @workflow.update(name=CANCEL_UPDATE)
    def cancel(self, by: str | None = None) -> Job:
        """Cancel a pending or assigned job: failed with fail_reason `cancelled`. `by`:
        who asked."""
        if not self._cancelled:
            self._by = by
        return self._cancel_now()

    @cancel.validator
    def _validate_cancel(self, by: str | None = None) -> None:  # noqa: ARG002 - the update's
        if not (self._cancelled or self._job.status in CANCELLABLE):
            self._refuse(
                "only pending or assigned jobs can be cancelled", ErrorType.NOT_CANCELLABLE
            )

    def _cancel_now(self) -> Job:
        if not self._cancelled:
            self._mark_cancelled()
            self._publish()
            if self._handle is not None:
                self._handle.cancel()
        return self._job

    @workflow.update(name=STOP_UPDATE)
    def stop(self, by: str | None = None) -> Job:
        """Stop a job: a pending or assigned one is cancelled; a running one becomes
        `stop_requested`, and `stopped` once the API's workflow cancel request has
        cancelled its attempt (the worker kills the solver: SIGTERM, then SIGKILL). A
        job with `stop_claimed` treats an assigned job as a running one: its worker may
        have started the work already."""
        job = self._job
        claimed_stop = self._stop_claimed and job.status == JobStatus.ASSIGNED
        if job.status in CANCELLABLE and not self._cancelled and not claimed_stop:
            self._by = by
            return self._cancel_now()
        if job.status == JobStatus.RUNNING or claimed_stop:
            self._stopping = True
            self._by = by
            self._machine.move(JobStatus.STOP_REQUESTED, _now_ms(), by=by)
            self._publish()
            if self._cancel_requested and self._handle is not None:
                self._handle.cancel()
        return job

    @stop.validator
    def _validate_stop(self, by: str | None = None) -> None:  # noqa: ARG002 - the update's
        if not (self._cancelled or self._job.status in STOPPABLE):
            self._refuse("it has ended and cannot be stopped", ErrorType.NOT_STOPPABLE)

    def _open(self) -> bool:
        return self._job.status in OPEN and not self._interrupted()

    def _refuse(self, why: str, error: ErrorType) -> NoReturn:
        """An update's validator refuses it: the job's status, and why."""
        status = self._job.status.value
        raise ApplicationError(f"job is {status}; {why}", status, type=error, non_retryable=True)

    # -- workers ---------------------------------------------------------------------

    @workflow.query(name=JOB_QUERY)
    def job(self) -> Job:
        """The job as read by the API."""
        return self._job

    @workflow.signal(name=REPORT_SIGNAL)
    def attempt_report(self, report: AttemptReport) -> None:
        """A worker claimed the current attempt, or started its solver process."""
        job = self._job
        if report.attempt != self._attempt or self._cancelled:
            return
        if report.attempt == self._recalled_attempt:
            return  # recalled by a pause before this claim reached the job
        if job.status == JobStatus.PENDING:
            self._claim(report.attempt, report.worker_id, report.claimed_at, report.host)
        if report.phase == "running" and job.status == JobStatus.ASSIGNED:
            self._machine.started(report.started_at or report.claimed_at, _now_ms())
        self._publish()

    @workflow.update(name=CLAIM_UPDATE)
    def claim_attempt(self, report: AttemptReport) -> bool:
        """A worker asks before it starts the attempt's solver: True, and the job is
        assigned to it; False if the attempt is no longer wanted (a pause recalled it,
        or the job was cancelled). Ordered with the recall, so never both."""
        return self._claim_if_wanted(report)

    @workflow.update(name=CLAIM_JOB_UPDATE)
    def claim_job(self, report: AttemptReport) -> Job | None:
        """An HTTP agent's claim (through the bridge), of any attempt: as `claim_attempt`,
        answered with the job as the claim left it, or None if the attempt is no longer
        wanted (the bridge then hands it back). No query before it: one round trip."""
        if self._handle is None or self._handle.done():
            return None  # the attempt ended; its next one, if any, is not begun yet
        if not self._claim_if_wanted(report):
            return None
        self._bridge_claimed = report.attempt
        return self._job

    def _claim_if_wanted(self, report: AttemptReport) -> bool:
        if (
            report.attempt != self._attempt
            or report.attempt == self._recalled_attempt
            or self._cancelled
            or self._handle is None
        ):
            return False
        if self._job.status == JobStatus.PENDING:
            self._claim(report.attempt, report.worker_id, report.claimed_at, report.host)
            self._publish()
        return True

    # -- the job's changes -----------------------------------------------------------

    def _claim(self, attempt: int, worker_id: str | None, ts: int, host: str | None) -> None:
        self._claimed_attempt = attempt
        if self._pinned:
            # Claimed: a later attempt waits for its host afresh.
            self._job.waiting_for = None
            self._host_until = None
            self._fell_back = False
        self._machine.claim(worker_id, ts, host, _now_ms())

    def _complete(self, outcome: AttemptResult) -> None:
        now = _now_ms()
        if self._claimed_attempt != self._attempt:
            self._claim(self._attempt, outcome.worker_id, outcome.claimed_at or now, outcome.host)
        if self._job.status == JobStatus.ASSIGNED:
            # A result with no report of the start before it (a short job): it ran.
            self._machine.started(outcome.started_at or now, now)
        self._machine.complete(outcome, now)

    def _fail_attempt(self, attempt: int, err: ActivityError) -> None:
        job = self._job
        if self._claimed_attempt != attempt and unclaimed_handback(err):
            # Nobody claimed this attempt (the HTTP bridge handed the task back, or it
            # died holding it): not an attempt; the next loop schedules a fresh one.
            return
        if self._bridge_claimed == attempt and handed_back(err):
            # The bridge handed back an attempt it had claimed: its claimer never got
            # the answer (the bridge gave up waiting for it). Not an attempt either.
            self._machine.unclaim(_now_ms())
            return
        reason, final = classify(err)
        details = failure_details(err)
        now = _now_ms()
        if self._claimed_attempt != attempt:
            # The activity started with no report reaching us (a short attempt, or a
            # worker that died at once): the claim still counts.
            self._claim(attempt, err.identity or None, details.claimed_at or now, details.host)
        if job.status == JobStatus.ASSIGNED and details.started_at:
            self._machine.started(details.started_at, now)
        last = final or job.attempts - self._attempts_base >= job.max_attempts
        self._machine.fail_attempt(reason, details.log_tail, last, now)
        if last:
            raise ApplicationError(
                f"quarantined after {job.attempts} attempt(s): {reason}",
                job,
                type=ErrorType.QUARANTINED,
                non_retryable=True,
            )

    def _mark_ended_by_cancel(self) -> None:
        if self._stopping:
            self._mark_stopped()
        else:
            self._mark_cancelled()

    def _mark_stopped(self) -> None:
        self._stopping = False
        self._machine.stopped(ErrorType.STOPPED.value, _now_ms(), self._by)

    def _stop_after_failure(self, err: ActivityError) -> None:
        """The attempt failed on its own after a stop was asked: the failure is recorded
        and the job ends stopped (no retry)."""
        reason, _ = classify(err)
        self._machine.failed_after_stop(reason, _now_ms())
        self._mark_stopped()
        self._publish()

    def _mark_cancelled(self) -> None:
        self._cancelled = True
        self._machine.cancelled(_now_ms(), self._by)

    def _end(self, status: JobStatus, error: ErrorType, message: str) -> NoReturn:
        """The job ends here, in `status` with reason `error`, and so does its run."""
        self._machine.end(status, _now_ms(), error.value)
        self._publish()
        raise ApplicationError(message, self._job, type=error, non_retryable=True)

    def _publish(self) -> None:
        """Mirror the job into search attributes and memo, once per workflow task
        (each upsert is a history event, and the job path is what throughput costs)."""
        if not self._machine.changed:
            return
        self._machine.changed = False
        job = self._job
        workflow.upsert_search_attributes(
            [
                search_attributes.STATUS.value_set(job.status.value),
                search_attributes.WORKER.value_set(job.worker_id or ""),
                search_attributes.UPDATED_AT.value_set(workflow.now()),
            ]
        )
        workflow.upsert_memo({EVENTS_MEMO: events_memo(job)})
