"""JobWorkflow: one workflow per job (workflow id = job id), the job's orchestration.

One attempt loop: wait for the start time, hold a lease of each gate (`GateLeases`; none
on the plain path), run one activity per attempt (`maximum_attempts=1`, so each failed
attempt is recorded as it happens), decide what follows. The job's changes are
`JobMachine`'s, the API's and operators' requests `JobControl`'s; versioning: job_patches.
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
    from workflows import job_patches as patches
    from workflows import names
    from workflows.attempt_outcomes import (
        STALE_CLAIMS_RETURNED,
        classify,
        failure_details,
        handed_back,
        not_started_in_time,
        unclaimed_handback,
        went_silent,
    )
    from workflows.errors import ErrorType
    from workflows.gate_models import GateGrant
    from workflows.host_wait import HostWait
    from workflows.job_control import JobControl
    from workflows.job_leases import HANDLER_POLICY, GateLeases
    from workflows.job_machine import JobMachine
    from workflows.job_states import CANCELLABLE, DISPATCH_TIMEOUT, STOPPABLE, JobStatus
    from workflows.models import (
        WAITING_AT,
        AttemptReport,
        AttemptResult,
        Job,
        JobInput,
        WaitingFor,
        as_fired,
        pending_job,
    )
    from workflows.search_attributes import upsert_job
    from workflows.workflow_time import waited
    from workflows.workflow_time import workflow_now_ms as _now_ms

# The worker enforces max_runtime_ms from the solver's start; the server-side timeout
# is the backstop for a worker that cannot (it also covers the solver download).
ATTEMPT_TIMEOUT_SLACK = timedelta(minutes=10)


@workflow.defn(name=names.JOB_WORKFLOW)
class JobWorkflow:
    """A job's whole life: attempts, reports from workers, cancel, terminal state."""

    @workflow.init
    def __init__(self, inp: JobInput) -> None:
        if inp.from_schedule:
            info = workflow.info()
            inp = as_fired(inp, info.workflow_id, int(info.workflow_start_time.timestamp() * 1000))
        self._job = pending_job(inp) if inp.resumed is None else inp.resumed.model_copy(deep=True)
        self._machine = JobMachine(self._job)
        self._control = JobControl(self._machine, inp.spec.stop_claimed)
        self._gates = GateLeases(self._job, inp.gates, inp.gate_defaults, self._control.interrupted)
        self._host = HostWait()
        self._handle: workflow.ActivityHandle[AttemptResult] | None = None
        # The attempt a worker claimed, an agent claimed (`claim_job`), a pause recalled.
        self._claimed_attempt = 0
        self._bridge_claimed = 0
        self._recalled_attempt = 0
        self._stale_returned = 0
        self._inp = inp
        self._stop_waits: bool | None = None
        # The attempt whose schedule-to-start timeout is the dispatch timeout (not the
        # deadline's or the host's, which end the wait otherwise).
        self._dispatch_limited = 0
        self._deadline_hit = False
        # Asked here, not in run: a pause's recall may reach the job in its first task.
        granted = bool(inp.granted) and workflow.patched(patches.GRANTED_AT_SUBMIT_PATCH)
        self._granted_at_submit = granted
        if granted:
            self._gates.granted_at_submit(inp.granted, inp.gate_weight)
        if inp.resumed is not None:  # a re-queued ended job: attempts and fail_history go on
            self._claimed_attempt = self._job.attempt
            self._machine.resume(_now_ms(), inp.resumed_by)
        # A schedule's job starts with the schedule's memo: its first task mirrors its own.
        self._machine.changed = inp.from_schedule or self._machine.changed

    @workflow.run
    async def run(self, inp: JobInput) -> Job:
        job = self._job
        if inp.resumed is not None or inp.from_schedule:
            self._publish()
        if inp.spec.pinned_host is not None:
            self._host.pinned = workflow.patched(patches.HOST_PINNING_PATCH)
        granted = self._granted_at_submit
        if not (inp.spec.scheduled and (granted or workflow.patched(patches.SCHEDULING_PATCH))):
            self._gates.plain()
        start = job.earliest_start_at
        if self._gates.active and start is not None and start > _now_ms():
            job.waiting_for = WaitingFor.START_TIME
            await waited(self._control.interrupted, timedelta(milliseconds=start - _now_ms()))
        while not self._control.interrupted():
            held = await self._gates.hold(self._time_to_deadline)
            if not held:
                self._deadline_hit = held is False
                break
            left = self._time_to_deadline()
            if self._gates.active and left is not None and left <= timedelta(0):
                self._deadline_hit = True  # a retry that can no longer be assigned in time
                break
            self._machine.attempt += 1
            attempt = job.attempt = self._machine.attempt
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
        if self._control.ops_failed is not None:
            await self._gates.release("quarantined")
            message = f"quarantined by an operator: {self._control.ops_failed}"
            raise ApplicationError(message, job, type=ErrorType.QUARANTINED, non_retryable=True)
        await self._gates.release("cancelled")
        if self._deadline_hit and not self._control.cancelled:
            message = "not assigned by its deadline_at"
            self._end(JobStatus.FAILED, ErrorType.DEADLINE_EXCEEDED, message)
        await self._await_cancel_request(inp)
        return job

    async def _after_error(self, inp: JobInput, attempt: int, err: ActivityError) -> bool:
        """What follows an attempt that ended in an error: True for the next attempt,
        False to leave the loop; raises when the job's run ends here."""
        control = self._control
        if self._control.interrupted():
            return False
        if self._recalled_attempt == attempt:
            return True  # a pause took the lease back before a worker claimed it
        if control.ops_requeue:
            control.requeue_attempt(_now_ms())
            self._publish()
            await self._gates.requeue_at_group()
            return True
        if is_cancelled_exception(err):
            # An API cancel request after a stop, or an operator's. A stopped job of a
            # group or target can be re-queued (target resume); Temporal keeps one cancel
            # request per execution, so a later stop of the re-run cancels it itself.
            stopped = control.stopping
            control.ended_by_cancel(_now_ms())
            self._publish()
            release = self._gates.release("stopped" if stopped else "cancelled")
            if await self._hold_for_requeue(inp, stopped, release, cancel_spent=True):
                return True
            raise err
        if self._dispatch_limited == attempt and not_started_in_time(err):
            self._machine.move(JobStatus.PENDING, _now_ms(), reason=DISPATCH_TIMEOUT)
            await self._wait_again()
            return True
        if control.stopping:
            # Its work ended by itself (or its worker died) after a stop: the failure is
            # recorded and the job ends stopped; after the API's cancel request, stopped
            # as by the cancel, so re-queueable (group, target).
            control.failed_after_stop(classify(err)[0], _now_ms())
            self._publish()
            if not (workflow.cancellation_reason() is not None and self._waits_for_work()):
                control.held = False
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
            # Claimed, then silent before it reported running: back to pending, uncounted.
            self._stale_returned += 1
            self._host.restart()
            self._machine.unclaim(_now_ms())
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
        attempt_input.claim_first = attempt_input.claim_first or job.group is not None
        weight = self._gates.weight if job.group else None
        task_queue, schedule_to_start = inp.activity_task_queue, self._schedule_to_start()
        if self._host.pinned:
            task_queue, schedule_to_start, cut = self._host.placement(
                job, inp, schedule_to_start, _now_ms()
            )
            if cut:
                self._dispatch_limited = 0  # the host's wait ends first
        return workflow.start_activity(
            names.RUN_JOB_ACTIVITY,
            attempt_input,
            result_type=AttemptResult,
            task_queue=task_queue,
            activity_id=names.attempt_activity_id(job.attempt),
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
        """Whether a cancelled attempt is awaited until its work is gone: as the input
        says, or a history's marker (asked only in replay: a live run records none)."""
        if self._stop_waits is None:
            marker = patches.STOP_WAITS_FOR_WORK_PATCH
            self._stop_waits = self._inp.stop_waits_for_work or (
                workflow.unsafe.is_replaying() and workflow.patched(marker)
            )
        return self._stop_waits

    def _schedule_to_start(self) -> timedelta | None:
        """How long the attempt may wait to be taken: until deadline_at, and no longer
        than the dispatch timeout while the job holds leases (the shorter decides)."""
        if not self._gates.active:
            return None
        limit = self._time_to_deadline()
        if self._gates.gates and self._inp.dispatch_timeout_ms is not None:
            dispatch = timedelta(milliseconds=self._inp.dispatch_timeout_ms)
            if limit is None or dispatch < limit:
                self._dispatch_limited = self._machine.attempt
                return dispatch
        return limit

    def _time_to_deadline(self) -> timedelta | None:
        deadline = self._job.deadline_at
        return None if deadline is None else timedelta(milliseconds=deadline - _now_ms())

    def _host_wait_over(self, inp: JobInput, err: ActivityError) -> bool:
        """A pinned job's attempt waited out its host: a preferred host's job goes to the
        shared queue (True), a required host's job ends failed, `host_unavailable`."""
        if not self._host.waited_out(err, self._time_to_deadline()):
            return False
        self._job.waiting_for = None
        if inp.spec.require_host is not None:
            message = f"no worker of host {inp.spec.require_host} took the job in time"
            self._end(JobStatus.FAILED, ErrorType.HOST_UNAVAILABLE, message)
        self._host.fell_back = True
        reason = ErrorType.PREFERRED_HOST_TIMEOUT.value
        self._machine.move(JobStatus.PENDING, _now_ms(), reason=reason)
        self._publish()
        return True

    def _stale_claim(self, attempt: int, err: ActivityError) -> bool:
        """Claimed, never reported running, then silent past the heartbeat timeout (or
        ended `claim_expired` by the bridge); the job returns such claims (a few times)."""
        return (
            self._inp.spec.requeue_stale_claims
            and self._claimed_attempt == attempt
            and self._job.status == JobStatus.ASSIGNED
            and went_silent(err)
            and self._stale_returned < STALE_CLAIMS_RETURNED
        )

    async def _wait_again(self) -> None:
        """An attempt nobody took (or whose claim went stale): its leases go back, and the
        job asks its gates again."""
        gates = self._gates.gates
        self._job.waiting_for = WAITING_AT[gates[0].kind] if gates else None
        self._publish()
        try:
            await self._gates.wait_again()
        except asyncio.CancelledError:
            # An operator's workflow cancel: cancelled, and every lease still goes back.
            if not self._control.interrupted():
                self._control.cancel(_now_ms())
                self._publish()
            await self._gates.release_surely("cancelled")
            raise

    async def _hold_for_requeue(
        self, inp: JobInput, holds: bool, release: Coroutine[Any, Any, None], *, cancel_spent: bool
    ) -> bool:
        """Its leases go back (`release`); a job that `holds` (of a group or target) stays
        open for a re-queue (group retry-failed, target resume): True once re-queued."""
        control = self._control
        control.held = holds and inp.requeue_hold_ms > 0
        await release
        control.cancel_spent = control.cancel_spent or cancel_spent
        if not holds or inp.requeue_hold_ms <= 0:
            return False
        control.held = True
        limit = timedelta(milliseconds=inp.requeue_hold_ms)
        requeued = await waited(lambda: control.requeued, limit)
        control.held = control.requeued = False
        return requeued

    async def _await_cancel_request(self, inp: JobInput) -> None:
        """Wait for the cancel request the API sends after a cancel or stop update: the
        execution ends Canceled. If none comes within `cancel_wait_ms` (the API died
        between its two calls), it closes Failed, so that nothing stays open for good."""
        if workflow.cancellation_reason() is not None and self._waits_for_work():
            # It came while the attempt's work was being stopped (spent on the attempt).
            raise asyncio.CancelledError
        if inp.cancel_wait_ms > 0 and workflow.patched(patches.CANCEL_WAIT_PATCH):
            limit = timedelta(milliseconds=inp.cancel_wait_ms)
            if not await waited(lambda: False, limit):
                status = self._job.status.value
                message = f"job {status}; no cancel request followed in {limit}"
                raise ApplicationError(
                    message, self._job, type=ErrorType.CANCEL_NEVER_CAME, non_retryable=True
                )
        await workflow.wait_condition(lambda: False)

    def _ended_with_cancel(self) -> AttemptResult | None:
        """Cancelled while it awaited its attempt: an attempt that returned in the same
        task stands (the cancel is spent); else the job ends stopped or cancelled (None)
        and the cancel goes on. Before CANCEL_MEETS_END_PATCH it went on at once."""
        if not workflow.patched(patches.CANCEL_MEETS_END_PATCH):
            raise asyncio.CancelledError
        handle = self._handle
        if handle and handle.done() and not handle.cancelled() and handle.exception() is None:
            return handle.result()
        if not self._control.interrupted():  # a cancel update has marked it already
            self._control.ended_by_cancel(_now_ms())
            self._publish()
        return None

    # -- gates' signals ------------------------------------------------------------------

    @workflow.signal(name=names.GRANT_SIGNAL, unfinished_policy=HANDLER_POLICY)
    async def gate_grant(self, grant: GateGrant) -> None:
        """A gate granted its lease; one this job no longer asks for goes back."""
        await self._gates.on_grant(grant)

    @workflow.signal(name=names.RECALL_SIGNAL, unfinished_policy=HANDLER_POLICY)
    async def gate_recall(self, gate_workflow_id: str) -> None:
        """A gate takes back an unclaimed job's lease: a pause, or a pool's lower capacity."""
        await self._gates.on_recall(gate_workflow_id, self._recall_attempt)

    def _recall_attempt(self) -> None:
        if self._handle is not None:
            self._recalled_attempt = self._machine.attempt
            self._handle.cancel()

    @workflow.signal(name=names.PING_SIGNAL)
    def gate_ping(self) -> None:
        """A gate checking that this job still runs: that the signal landed says so."""

    # -- the API and operators -----------------------------------------------------------

    @workflow.update(name=names.REQUEUE_UPDATE)
    def requeue(self, by: str | None = None) -> Job:
        """Re-queue a held quarantined job of a group or target: same id, its attempts
        and fail_history go on, with max_attempts more attempts. `by`: who asked."""
        return self._requeue_held(by)

    def _requeue_held(self, by: str | None) -> Job:
        self._control.requeue_held(by, _now_ms())
        self._publish()
        return self._job

    @requeue.validator
    def _validate_requeue(self, by: str | None = None) -> None:  # noqa: ARG002 - the update's
        if not self._control.requeueable():
            why = "only a quarantined job of a group or target can be re-queued"
            self._refuse(why, ErrorType.NOT_REQUEUEABLE)

    @workflow.update(name=names.OPS_REQUEUE_UPDATE)
    def ops_requeue(self, by: str | None = None) -> Job:
        """Operator override: a held job comes back to pending; a live one has its attempt
        cancelled (the worker kills the solver) and a new one started; a pending one stays."""
        if self._control.requeueable():
            return self._requeue_held(by or names.OPS_BY)
        pending = self._job.status == JobStatus.PENDING
        if pending and workflow.patched(patches.OPS_REQUEUE_PENDING_KEPT_PATCH):
            return self._job  # nobody holds its attempt: nothing to end
        if self._handle is not None and self._control.ask_requeue_attempt(by):
            self._handle.cancel()
        return self._job

    @ops_requeue.validator
    def _validate_ops_requeue(self, by: str | None = None) -> None:  # noqa: ARG002 - the update's
        if not (self._control.requeueable() or self._control.open()):
            why = "only a job that has not completed or closed can be re-queued"
            self._refuse(why, ErrorType.JOB_ENDED)

    @workflow.update(name=names.OPS_FAIL_UPDATE)
    def ops_fail(self, reason: str, by: str | None = None) -> Job:
        """Operator override: quarantine a job that has not ended, at once (its attempt
        is cancelled and the worker kills the solver). `by`: who asked."""
        if self._control.quarantine(reason, by, _now_ms()):
            self._publish()
            if self._handle is not None:
                self._handle.cancel()
        return self._job

    @ops_fail.validator
    def _validate_ops_fail(self, reason: str, by: str | None = None) -> None:  # noqa: ARG002
        if not self._control.open():
            self._refuse("it has ended already", ErrorType.JOB_ENDED)

    @workflow.update(name=names.CANCEL_UPDATE)
    def cancel(self, by: str | None = None) -> Job:
        """Cancel a pending or assigned job: failed with fail_reason `cancelled`."""
        if not self._control.cancelled:
            self._control.by = by
        return self._cancel_now()

    @cancel.validator
    def _validate_cancel(self, by: str | None = None) -> None:  # noqa: ARG002 - the update's
        if not (self._control.cancelled or self._job.status in CANCELLABLE):
            why = "only pending or assigned jobs can be cancelled"
            self._refuse(why, ErrorType.NOT_CANCELLABLE)

    def _cancel_now(self) -> Job:
        if self._control.cancel(_now_ms()):
            self._publish()
            if self._handle is not None:
                self._handle.cancel()
        return self._job

    @workflow.update(name=names.STOP_UPDATE)
    def stop(self, by: str | None = None) -> Job:
        """Stop a job: a pending or assigned one is cancelled; a running one (or, with
        `stop_claimed`, an assigned one) is `stop_requested`, and `stopped` once the
        API's cancel request has cancelled its attempt and its work is gone."""
        asked = self._control.stop(by, _now_ms())
        if asked == "cancel":
            return self._cancel_now()
        if asked == "stop":
            self._publish()
            if self._control.cancel_spent and self._handle is not None:
                self._handle.cancel()
        return self._job

    @stop.validator
    def _validate_stop(self, by: str | None = None) -> None:  # noqa: ARG002 - the update's
        if not (self._control.cancelled or self._job.status in STOPPABLE):
            self._refuse("it has ended and cannot be stopped", ErrorType.NOT_STOPPABLE)

    def _refuse(self, why: str, error: ErrorType) -> NoReturn:
        """An update's validator refuses it: the job's status, and why."""
        status = self._job.status.value
        raise ApplicationError(f"job is {status}; {why}", status, type=error, non_retryable=True)

    # -- workers ---------------------------------------------------------------------

    @workflow.query(name=names.JOB_QUERY)
    def job(self) -> Job:
        """The job as read by the API."""
        return self._job

    @workflow.signal(name=names.REPORT_SIGNAL)
    def attempt_report(self, report: AttemptReport) -> None:
        """A worker claimed the current attempt, or started its solver process."""
        job = self._job
        if report.attempt != self._machine.attempt or self._control.cancelled:
            return
        if report.attempt == self._recalled_attempt:
            return  # recalled by a pause before this claim reached the job
        if job.status == JobStatus.PENDING:
            self._claim(report.attempt, report.worker_id, report.claimed_at, report.host)
        if report.phase == "running" and job.status == JobStatus.ASSIGNED:
            self._machine.started(report.started_at or report.claimed_at, _now_ms())
        self._publish()

    @workflow.update(name=names.CLAIM_UPDATE)
    def claim_attempt(self, report: AttemptReport) -> bool:
        """A worker asks before it starts the attempt's solver: True, and the job is
        assigned to it; False if the attempt is no longer wanted (a pause recalled it,
        or the job was cancelled). Ordered with the recall, so never both."""
        return self._claim_if_wanted(report)

    def _claim_if_wanted(self, report: AttemptReport) -> bool:
        if (
            report.attempt != self._machine.attempt
            or report.attempt == self._recalled_attempt
            or self._control.cancelled
            or self._handle is None
        ):
            return False
        if self._job.status == JobStatus.PENDING:
            self._claim(report.attempt, report.worker_id, report.claimed_at, report.host)
            self._publish()
        return True

    @workflow.update(name=names.CLAIM_JOB_UPDATE)
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

    # -- the attempt's end -----------------------------------------------------------

    def _claim(self, attempt: int, worker_id: str | None, ts: int, host: str | None) -> None:
        self._claimed_attempt = attempt
        self._host.claimed(self._job)
        self._machine.claim(worker_id, ts, host, _now_ms())

    def _complete(self, outcome: AttemptResult) -> None:
        now, attempt = _now_ms(), self._machine.attempt
        if self._claimed_attempt != attempt:
            self._claim(attempt, outcome.worker_id, outcome.claimed_at or now, outcome.host)
        if self._job.status == JobStatus.ASSIGNED:
            # A result with no report of the start before it (a short job): it ran.
            self._machine.started(outcome.started_at or now, now)
        self._machine.complete(outcome, now)

    def _fail_attempt(self, attempt: int, err: ActivityError) -> None:
        """Record a failed attempt: back to pending, or quarantined (raised)."""
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
        if self._job.status == JobStatus.ASSIGNED and details.started_at:
            self._machine.started(details.started_at, now)
        if self._machine.fail_attempt(reason, final, details.log_tail, now):
            message = f"quarantined after {self._job.attempts} attempt(s): {reason}"
            raise ApplicationError(
                message, self._job, type=ErrorType.QUARANTINED, non_retryable=True
            )

    def _end(self, status: JobStatus, error: ErrorType, message: str) -> NoReturn:
        """The job ends in `status` with reason `error`, and its run fails with it."""
        self._machine.end(status, _now_ms(), error.value)
        self._publish()
        raise ApplicationError(message, self._job, type=error, non_retryable=True)

    def _publish(self) -> None:
        """Mirror the job into search attributes and memo, once per workflow task (each
        upsert is a history event, and the job path is what throughput costs)."""
        if self._machine.changed:
            self._machine.changed = False
            upsert_job(self._job)
