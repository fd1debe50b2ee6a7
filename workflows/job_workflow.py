"""JobWorkflow: one workflow per job (workflow id = job id), the spec's state machine.

Each attempt is one activity execution with `maximum_attempts=1`; the retry loop lives
here so every failed attempt is recorded (attempts, fail_history, transitions) as it
happens. Workers report `assigned` and `running` through one signal per attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable
from datetime import timedelta
from typing import NoReturn

from temporalio import workflow
from temporalio.common import Priority, RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    FailureError,
    TimeoutError,
    TimeoutType,
    is_cancelled_exception,
)

with workflow.unsafe.imports_passed_through():
    from workflows import search_attributes
    from workflows.errors import AttemptFailureDetails, ErrorType, Failure
    from workflows.gate_models import (
        GateGrant,
        GateInput,
        GateKind,
        GateRef,
        GateRelease,
        GateRequest,
        GateSettings,
        ReleaseOutcome,
    )
    from workflows.job_states import (
        CANCELLABLE,
        DISPATCH_TIMEOUT,
        OPEN,
        STOPPABLE,
        JobMachine,
        JobStatus,
    )
    from workflows.models import (
        WAITING_AT,
        AttemptReport,
        AttemptResult,
        Job,
        JobInput,
        Wait,
        WaitingFor,
        as_fired,
        events_memo,
        gate_deadline,
        pending_job,
    )
    from workflows.names import (
        ACQUIRE_SIGNAL,
        BRIDGE_IDENTITY_PREFIX,
        CANCEL_UPDATE,
        CLAIM_JOB_UPDATE,
        CLAIM_UPDATE,
        EVENTS_MEMO,
        GATE_WORKFLOW,
        GRANT_SIGNAL,
        JOB_QUERY,
        JOB_WORKFLOW,
        OPS_BY,
        OPS_FAIL_UPDATE,
        OPS_REQUEUE_UPDATE,
        PING_SIGNAL,
        RECALL_SIGNAL,
        RELEASE_SIGNAL,
        REPORT_SIGNAL,
        REQUEUE_UPDATE,
        RUN_JOB_ACTIVITY,
        STOP_UPDATE,
        attempt_activity_id,
    )

# The worker enforces max_runtime_ms from the solver's start; the server-side timeout
# is the backstop for a worker that cannot (it also covers the solver download).
ATTEMPT_TIMEOUT_SLACK = timedelta(minutes=10)

# Patch: jobs with a group, pool, target, start time or deadline take the scheduled
# path (gates, clocks); a job with none of them never reaches this marker.
SCHEDULING_PATCH = "scheduling-gates"
# Leases granted at submit (JobInput.granted): the job holds them from its first task and
# asks only the gates that queued it.
GRANTED_AT_SUBMIT_PATCH = "gates-granted-at-submit"
# A workflow cancel (the API's, after a stop) that reaches the job in the workflow task
# where its attempt ends, or while it gives its leases back: the attempt's own end
# stands, and the leases still go back.
CANCEL_MEETS_END_PATCH = "cancel-meets-attempt-end"
# A job cancelled or stopped through its update closes by itself if the API's workflow
# cancel request does not follow in time (JobInput.cancel_wait_ms).
CANCEL_WAIT_PATCH = "cancel-request-wait-bounded"
# Jobs with require_host or preferred_host wait a bounded time on their host's queue
# (then fail host_unavailable, or fall back to the shared queue); a job with neither
# never reaches this marker.
HOST_PINNING_PATCH = "host-pinning"
# A cancelled attempt ends when its work is gone (the worker killed the process group or
# removed the container, the agent reported it stopped, or its heartbeat timed out), not
# when the cancel is asked: a stopped job reads `stop_requested` until then, and keeps its
# leases. Before, the attempt was given up at once (TRY_CANCEL). A job started since says
# so in its input (`JobInput.stop_waits_for_work`): a patch marker would cost every job a
# marker and the SDK's TemporalChangeVersion upsert. Runs recorded while this was the
# patch below (never released; tests/histories/*-v5) replay by its marker.
STOP_WAITS_FOR_WORK_PATCH = "stop-waits-for-the-work"
# A recall from a gate whose lease the job does not hold, and that it is not waiting
# for, is answered (a pause waited out its 30 s for it); only such a job records it.
RECALL_ANSWERED_PATCH = "recall-always-answered"
# Dispatch timeout: an attempt a job schedules while it holds leases may wait that long
# for a worker to take it (its schedule-to-start timeout; Temporal either starts it or
# times it out, never both). Not taken: the leases go back, no attempt is counted, and
# the job asks its gates again. A job started since says so in its input
# (`JobInput.dispatch_timeout_ms`); one without leases keeps its attempt queued, since
# giving nothing back, a new attempt would only cost history events.
# Stale claims (`JobSpec.requeue_stale_claims`): a claim whose worker goes silent before
# it reports running goes back to the queue uncounted, this many times per run; later
# ones count as failed attempts, so a job that kills every worker that takes it ends.
STALE_CLAIMS_RETURNED = 3


def _now_ms() -> int:
    return int(workflow.now().timestamp() * 1000)


@workflow.defn(name=JOB_WORKFLOW)
class JobWorkflow:
    """A job's whole life: attempts, reports from workers, cancel, terminal state."""

    @workflow.init
    def __init__(self, inp: JobInput) -> None:
        if inp.from_schedule:
            info = workflow.info()
            inp = as_fired(inp, info.workflow_id, int(info.workflow_start_time.timestamp() * 1000))
        self._job = pending_job(inp) if inp.resumed is None else inp.resumed.model_copy(deep=True)
        # The job's status changes, checked against the one table (workflows/job_states.py).
        self._machine = JobMachine(self._job)
        self._claimed_attempt = 0
        # The attempt an HTTP agent claimed through `claim_job` (the bridge's claim).
        self._bridge_claimed = 0
        self._handle: workflow.ActivityHandle[AttemptResult] | None = None
        self._cancelled = False
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
        # A stop of an assigned job asks its worker to stop it, as a running one's does
        # (`JobSpec.stop_claimed`; False in every input from before: cancelled).
        self._stop_claimed = inp.spec.stop_claimed
        self._stale_returned = 0
        # The scheduled path's state (docs/scheduling.md).
        self._attempts_base = 0
        self._asked: set[str] = set()
        self._leases: set[str] = set()
        self._weight: float | None = None
        self._recalled_attempt = 0
        # The gate the job's last recorded wait is at (Job.waits), and whether a pause
        # of its group recalled its lease since it last held it.
        self._waiting_at: str | None = None
        self._recalled_by_pause = False
        self._deadline_hit = False
        self._held = False
        self._requeued = False
        self._gate_defaults = inp.gate_defaults
        self._stopping = False
        self._cancel_requested = False
        # Operator overrides: a quarantine reason, or a re-queue of the current attempt.
        self._ops_failed: str | None = None
        self._ops_requeue = False
        # Who asked for the cancel, stop or re-queue under way (an update's optional
        # `by`: the API's caller), for the transitions it leads to. None in every
        # history from before: those updates carried no argument.
        self._by: str | None = None
        self._recalled_early: set[str] = set()
        # Host pinning: when the current wait for the host ends (ms; None until the job
        # waits for a host), and whether this wait fell back to the shared queue.
        self._pinned = False
        self._host_until: int | None = None
        self._fell_back = False
        # Set here, not in run: a pause's recall may reach the job in its first task,
        # before run starts. Such a job takes the scheduled path without its marker (one
        # marker per job: each also upserts a search attribute).
        self._granted_at_submit = bool(inp.granted) and workflow.patched(GRANTED_AT_SUBMIT_PATCH)
        if self._granted_at_submit:
            self._asked.update(inp.granted)
            self._leases.update(inp.granted)
            self._weight = inp.gate_weight
        if inp.resumed is not None:
            self._resume(inp.resumed_by)
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

    def _resume(self, by: str | None) -> None:
        """A re-queued ended job (its execution had closed): back to `pending` with its
        history, and max_attempts more attempts. Only a run started with `resumed` comes
        here (the field is newer than every history before it)."""
        job = self._job
        self._claimed_attempt = job.attempt
        self._attempts_base = job.attempts
        job.result = None
        job.result_hash = None
        job.result_key = None
        job.waiting_for = None
        job.progress = None
        self._machine.requeue(_now_ms(), by=by)

    @workflow.run
    async def run(self, inp: JobInput) -> Job:
        if inp.resumed is not None or inp.from_schedule:
            self._publish()
        if inp.spec.pinned_host is not None:
            self._pinned = workflow.patched(HOST_PINNING_PATCH)
        if inp.spec.scheduled and (self._granted_at_submit or workflow.patched(SCHEDULING_PATCH)):
            return await self._run_scheduled(inp)
        job = self._job
        while not self._interrupted():
            self._attempt += 1
            attempt = self._attempt
            job.attempt = attempt
            self._handle = self._start_attempt(inp, Priority(priority_key=inp.priority_key))
            try:
                outcome = await self._handle
            except asyncio.CancelledError:
                ended = self._ended_with_cancel()
                if ended is None:
                    raise
                outcome = ended
            except ActivityError as err:
                if self._interrupted():
                    break
                if self._ops_requeue:
                    self._requeue_attempt()
                    continue
                if is_cancelled_exception(err):
                    # A workflow cancel request: the API's, after a stop; or an
                    # operator's cancel (Temporal UI, CLI).
                    self._mark_ended_by_cancel()
                    self._publish()
                    raise
                if self._stopping:
                    self._stop_after_failure(err)
                    break
                if self._host_wait_over(inp, err):
                    continue
                if self._stale_claim(attempt, err):
                    self._return_stale_claim()
                    self._publish()
                    continue
                try:
                    self._fail_attempt(attempt, err)
                finally:
                    self._publish()
                continue
            finally:
                self._handle = None
            self._complete(outcome)
            self._publish()
            return job
        if self._ops_failed is not None:
            self._raise_ops_failed()
        # Cancelled through the update: the API follows it with a workflow cancel
        # request, which ends this wait and shows the execution as Canceled.
        await self._await_cancel_request(inp)
        return job

    def _start_attempt(
        self, inp: JobInput, priority: Priority, schedule_to_start: timedelta | None = None
    ) -> workflow.ActivityHandle[AttemptResult]:
        job = self._job
        attempt_input = job.attempt_input()
        if job.group is not None:
            attempt_input.claim_first = True
        task_queue = inp.activity_task_queue
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
            priority=priority,
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
            wait = spec.require_host_wait_ms or spec.preferred_host_wait_ms or 0
            self._host_until = now + wait
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
        if not (self._pinned and not self._fell_back and _not_started_in_time(err)):
            return False
        left = self._time_to_deadline()
        if left is not None and left <= timedelta(0):
            return False  # deadline_at came first
        job = self._job
        job.waiting_for = None
        if inp.spec.require_host is not None:
            self._fail_host_unavailable(inp.spec.require_host)
        self._fell_back = True
        self._transition(JobStatus.PENDING, reason=ErrorType.PREFERRED_HOST_TIMEOUT.value)
        self._publish()
        return True

    def _fail_host_unavailable(self, host: str) -> NoReturn:
        job = self._job
        self._machine.end(JobStatus.FAILED, _now_ms(), ErrorType.HOST_UNAVAILABLE.value)
        self._publish()
        raise ApplicationError(
            f"no worker of host {host} took the job in time",
            job,
            type=ErrorType.HOST_UNAVAILABLE,
            non_retryable=True,
        )

    # -- the scheduled path: start time, gates, deadline -----------------------------

    async def _run_scheduled(self, inp: JobInput) -> Job:
        job = self._job
        gates = inp.gates
        start = job.earliest_start_at
        if start is not None and start > _now_ms():
            job.waiting_for = WaitingFor.START_TIME
            await _waited(self._interrupted, timedelta(milliseconds=start - _now_ms()))
        while not self._interrupted():
            if not await self._hold_gates(gates):
                break
            left = self._time_to_deadline()
            if left is not None and left <= timedelta(0):
                # A retry after deadline_at: it can no longer be assigned in time.
                self._deadline_hit = True
                break
            self._attempt += 1
            attempt = self._attempt
            job.attempt = attempt
            self._handle = self._start_attempt(
                inp,
                Priority(
                    priority_key=inp.priority_key,
                    fairness_key=job.group,
                    fairness_weight=self._weight if job.group else None,
                ),
                self._schedule_to_start(gates, attempt),
            )
            try:
                outcome = await self._handle
            except asyncio.CancelledError:
                ended = self._ended_with_cancel()
                if ended is None:
                    # As a cancelled attempt below: a stopped job of a group or target
                    # stays re-queueable, while its leases go back.
                    stopped = self._job.status == JobStatus.STOPPED
                    self._held = stopped and inp.requeue_hold_ms > 0
                    await self._release_surely(gates, "stopped" if stopped else "cancelled")
                    self._cancel_requested = True
                    if stopped and await self._held_for_requeue(inp):
                        continue
                    raise
                outcome = ended
            except ActivityError as err:
                if self._interrupted():
                    break
                if self._recalled_attempt == attempt:
                    continue  # a pause took the lease back before a worker claimed it
                if self._ops_requeue:
                    self._requeue_attempt()
                    await self._requeue_at_group(gates)
                    continue
                if is_cancelled_exception(err):
                    stopped = self._stopping
                    self._mark_ended_by_cancel()
                    self._publish()
                    # Re-queueable from now on, while its leases go back.
                    self._held = stopped and inp.requeue_hold_ms > 0
                    await self._release(gates, "stopped" if stopped else "cancelled")
                    # A stopped job of a group or target can be re-queued (target resume).
                    # Temporal keeps one cancel request per execution: a later stop of
                    # the re-run cancels its attempt itself.
                    self._cancel_requested = True
                    if stopped and await self._held_for_requeue(inp):
                        continue
                    raise
                if self._dispatch_limited == attempt and _not_started_in_time(err):
                    self._transition(JobStatus.PENDING, reason=DISPATCH_TIMEOUT)
                    await self._wait_again(gates)
                    continue
                if self._stopping:
                    self._stop_after_failure(err)
                    # Its work ended by itself (or its worker died) after the API's cancel
                    # request: stopped as by the cancel, so re-queueable (group, target).
                    cancelled = (
                        workflow.cancellation_reason() is not None and self._waits_for_work()
                    )
                    self._held = cancelled and inp.requeue_hold_ms > 0
                    await self._release(gates, "stopped")
                    if not cancelled:
                        break
                    self._cancel_requested = True
                    if await self._held_for_requeue(inp):
                        continue
                    raise asyncio.CancelledError from err
                try:
                    if self._host_wait_over(inp, err):
                        continue
                except ApplicationError:
                    await self._release(gates, "cancelled")
                    raise
                if _not_started_in_time(err):
                    self._deadline_hit = True
                    break
                if self._stale_claim(attempt, err):
                    self._return_stale_claim()
                    await self._wait_again(gates)
                    continue
                try:
                    self._fail_attempt(attempt, err)
                except ApplicationError:
                    self._publish()
                    self._held = inp.requeue_hold_ms > 0
                    await self._release(gates, "quarantined")
                    if await self._held_for_requeue(inp):
                        continue
                    raise
                self._publish()
                await self._requeue_at_group(gates)
                continue
            finally:
                self._handle = None
            self._complete(outcome)
            self._publish()
            await self._release_surely(gates, "completed")
            return job
        if self._ops_failed is not None:
            await self._release(gates, "quarantined")
            self._raise_ops_failed()
        await self._release(gates, "cancelled")
        if self._deadline_hit and not self._cancelled:
            self._fail_deadline()
        await self._await_cancel_request(inp)
        return job

    async def _hold_gates(self, gates: list[GateRef]) -> bool:
        """Hold a lease of every gate, asked in order; False when cancelled or when the
        deadline passes first."""
        job = self._job
        while True:
            missing = [gate for gate in gates if gate.workflow_id not in self._leases]
            if not missing:
                job.waiting_for = None
                self._waiting_at = None
                self._recalled_by_pause = False
                return True
            gate = missing[0]
            if gate.workflow_id not in self._asked:
                self._asked.add(gate.workflow_id)
                await self._signal_gate(gate, ACQUIRE_SIGNAL, self._gate_request())
            job.waiting_for = WAITING_AT[gate.kind]
            self._record_wait(gate)
            left = self._time_to_deadline()
            if left is not None and left <= timedelta(0):
                self._deadline_hit = True
                return False
            if not await _waited(functools.partial(self._holds_or_cancelled, gate), left):
                self._deadline_hit = True
                return False
            if self._interrupted():
                return False

    def _record_wait(self, gate: GateRef) -> None:
        """Keep each wait at a gate (Job.waits), once per wait: no command, no event."""
        if self._waiting_at == gate.workflow_id:
            return
        self._waiting_at = gate.workflow_id
        reason = WAITING_AT[gate.kind]
        if gate.kind == GateKind.GROUP and self._recalled_by_pause:
            reason = WaitingFor.GROUP_PAUSED
        self._job.waits.append(Wait(reason=reason, at=_now_ms()))

    # -- dispatch timeout and stale claims -------------------------------------------

    def _schedule_to_start(self, gates: list[GateRef], attempt: int) -> timedelta | None:
        """How long the attempt may wait to be taken: until deadline_at, and no longer
        than the dispatch timeout while the job holds leases (the shorter decides)."""
        limit = self._time_to_deadline()
        dispatch = self._dispatch_timeout
        if gates and dispatch is not None and (limit is None or dispatch < limit):
            self._dispatch_limited = attempt
            return dispatch
        return limit

    def _stale_claim(self, attempt: int, err: ActivityError) -> bool:
        """The attempt was claimed, its worker never reported running and then went
        silent past the heartbeat timeout (or past its claim limit: the bridge ended
        the attempt `claim_expired`), and the job returns such claims (within
        STALE_CLAIMS_RETURNED). No history before `claim_expired` holds one."""
        cause = err.cause
        stale = (isinstance(cause, TimeoutError) and cause.type == TimeoutType.HEARTBEAT) or (
            isinstance(cause, ApplicationError) and cause.type == ErrorType.CLAIM_EXPIRED
        )
        return (
            self._requeue_stale
            and self._claimed_attempt == attempt
            and self._job.status == JobStatus.ASSIGNED
            and stale
            and self._stale_returned < STALE_CLAIMS_RETURNED
        )

    def _return_stale_claim(self) -> None:
        """A stale claim: back to `pending` (`dispatch_timeout`), its attempt uncounted."""
        self._stale_returned += 1
        if self._pinned:
            self._host_until = None
        self._machine.unclaim(_now_ms())

    async def _wait_again(self, gates: list[GateRef]) -> None:
        """An attempt nobody took (or whose claim went stale) while the job held its
        leases: they go back, and the job asks its gates again. A target keeps the job's
        place (its order is strict); at a group or a pool it asks afresh, so the gate
        grants the others first as its order says."""
        job = self._job
        job.waiting_for = WAITING_AT[gates[0].kind] if gates else None
        self._publish()
        kept_place = GateRelease(job_id=job.id, outcome="recalled")
        afresh = GateRelease(job_id=job.id, outcome="cancelled")
        releases = []
        for gate in gates:
            if gate.workflow_id not in self._leases:
                continue
            self._leases.discard(gate.workflow_id)
            if gate.kind == GateKind.TARGET:
                release = kept_place
            else:
                self._asked.discard(gate.workflow_id)
                release = afresh
            releases.append(self._signal_gate(gate, RELEASE_SIGNAL, release, start=False))
        try:
            await asyncio.gather(*releases)
        except asyncio.CancelledError:
            # A workflow cancel meanwhile (an operator's): the job ends cancelled, and
            # every lease and request still goes back.
            if not self._interrupted():
                self._mark_cancelled()
                self._publish()
            await self._release_surely(gates, "cancelled")
            raise

    async def _requeue_at_group(self, gates: list[GateRef]) -> None:
        """A retry passes its group again (a pause since the last attempt holds it): the
        group lease goes back, and the gate queues the job in its old place. Target and
        pool leases are kept across retries."""
        release = GateRelease(job_id=self._job.id, outcome="recalled")
        for gate in gates:
            if gate.kind == GateKind.GROUP and gate.workflow_id in self._leases:
                self._leases.discard(gate.workflow_id)
                await self._signal_gate(gate, RELEASE_SIGNAL, release, start=False)

    def _holds_or_cancelled(self, gate: GateRef) -> bool:
        return gate.workflow_id in self._leases or self._interrupted()

    def _interrupted(self) -> bool:
        """Cancelled, or quarantined by an operator: no further attempt."""
        return self._cancelled or self._ops_failed is not None

    def _gate_request(self) -> GateRequest:
        job = self._job
        return GateRequest(
            job_id=job.id,
            cost=job.cost_units,
            priority=job.priority,
            created_at=job.created_at,
            deadline_at=gate_deadline(job.deadline_at, job.urgent_at),
            ready=True,
            group=job.group,
            weight=self._weight,
        )

    def _time_to_deadline(self) -> timedelta | None:
        deadline = self._job.deadline_at
        return None if deadline is None else timedelta(milliseconds=deadline - _now_ms())

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
            if not await _waited(lambda: False, limit):
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

    async def _release_surely(self, gates: list[GateRef], outcome: ReleaseOutcome) -> None:
        """Give the leases back even if a workflow cancel arrives meanwhile: the release
        runs to its end (the cancel is spent), and the job goes on as it was going to.
        Before CANCEL_MEETS_END_PATCH the cancel stopped the release."""
        release = asyncio.ensure_future(self._release(gates, outcome))
        while True:
            try:
                await asyncio.shield(release)
                return
            except asyncio.CancelledError:
                if not workflow.patched(CANCEL_MEETS_END_PATCH):
                    release.cancel()
                    raise

    async def _release(self, gates: list[GateRef], outcome: ReleaseOutcome) -> None:
        """Give back every lease and withdraw every request: at each gate the job asked,
        and at each gate the API queued it at (all of them, unless it had a start time
        still to come at submit)."""
        job = self._job
        start = job.earliest_start_at
        queued_by_api = start is None or start <= job.created_at
        asked = self._asked
        self._asked = set()
        self._leases.clear()
        release = GateRelease(job_id=job.id, outcome=outcome)
        await asyncio.gather(
            *(
                self._signal_gate(gate, RELEASE_SIGNAL, release, start=False)
                for gate in gates
                if queued_by_api or gate.workflow_id in asked
            )
        )

    async def _signal_gate(
        self, gate: GateRef, signal: str, arg: object, *, start: bool = True
    ) -> None:
        """Signal a gate; one that does not run (never started, or terminated by hand)
        is started first, with default settings (`start`; a release to a gate that does
        not run has nothing to give back)."""
        handle = workflow.get_external_workflow_handle(gate.workflow_id)
        try:
            await handle.signal(signal, arg)
            return
        except FailureError:
            if not start:
                return
            workflow.logger.warning("gate %s does not run: starting it", gate.workflow_id)
        with contextlib.suppress(FailureError):  # started meanwhile by someone else
            await workflow.start_child_workflow(
                GATE_WORKFLOW,
                GateInput(
                    kind=gate.kind, key=gate.key, settings=self._gate_defaults or GateSettings()
                ),
                id=gate.workflow_id,
                parent_close_policy=workflow.ParentClosePolicy.ABANDON,
            )
        await handle.signal(signal, arg)

    async def _held_for_requeue(self, inp: JobInput) -> bool:
        """A quarantined job of a group or target stays open for a re-queue (group
        retry-failed, target resume); True once re-queued."""
        if inp.requeue_hold_ms <= 0:
            return False
        self._held = True
        requeued = await _waited(
            lambda: self._requeued, timedelta(milliseconds=inp.requeue_hold_ms)
        )
        self._held = False
        self._requeued = False
        return requeued

    def _fail_deadline(self) -> NoReturn:
        job = self._job
        self._machine.end(JobStatus.FAILED, _now_ms(), ErrorType.DEADLINE_EXCEEDED.value)
        self._publish()
        raise ApplicationError(
            "not assigned by its deadline_at",
            job,
            type=ErrorType.DEADLINE_EXCEEDED,
            non_retryable=True,
        )

    @workflow.signal(name=GRANT_SIGNAL)
    async def gate_grant(self, grant: GateGrant) -> None:
        """A gate granted its lease; one this job no longer asks for goes back."""
        if grant.workflow_id not in self._asked:
            release = GateRelease(job_id=self._job.id, outcome="cancelled")
            await workflow.get_external_workflow_handle(grant.workflow_id).signal(
                RELEASE_SIGNAL, release
            )
            return
        if grant.workflow_id in self._recalled_early:
            # Its recall came first (signals between workflows may pass each other):
            # the gate has queued this job again already.
            self._recalled_early.discard(grant.workflow_id)
            return
        self._leases.add(grant.workflow_id)
        if grant.weight is not None:
            self._weight = grant.weight

    @workflow.signal(name=RECALL_SIGNAL)
    async def gate_recall(self, gate_workflow_id: str) -> None:
        """A gate takes back the lease of a job no worker has claimed yet: its group's
        pause, or its pool's capacity lowered below what the pool has leased."""
        if gate_workflow_id not in self._leases:
            if gate_workflow_id in self._asked and self._job.status == JobStatus.PENDING:
                # The grant it recalls has not arrived yet: give it back now.
                self._recalled_early.add(gate_workflow_id)
                self._recalled_by_pause = True
                if self._waiting_at == gate_workflow_id:
                    self._job.waits.append(Wait(reason=WaitingFor.GROUP_PAUSED, at=_now_ms()))
                await workflow.get_external_workflow_handle(gate_workflow_id).signal(
                    RELEASE_SIGNAL, GateRelease(job_id=self._job.id, outcome="recalled")
                )
            elif workflow.patched(RECALL_ANSWERED_PATCH):
                # Not asked: the gate's record is stray, and goes (a grant on its way is
                # given back when it lands). Asked but past pending: the grant lands
                # and is given back with the job's others.
                unasked = gate_workflow_id not in self._asked
                answer = GateRelease(
                    job_id=self._job.id, outcome="cancelled" if unasked else "kept"
                )
                await workflow.get_external_workflow_handle(gate_workflow_id).signal(
                    RELEASE_SIGNAL, answer
                )
            return
        job = self._job
        outcome: ReleaseOutcome = "kept"
        if job.status == JobStatus.PENDING:
            outcome = "recalled"
            self._leases.discard(gate_workflow_id)
            self._recalled_by_pause = True
            if self._handle is not None:
                self._recalled_attempt = self._attempt
                self._handle.cancel()
        await workflow.get_external_workflow_handle(gate_workflow_id).signal(
            RELEASE_SIGNAL, GateRelease(job_id=job.id, outcome=outcome)
        )

    @workflow.signal(name=PING_SIGNAL)
    def gate_ping(self) -> None:
        """A gate checking that this job still runs: that the signal landed says so."""

    @workflow.update(name=REQUEUE_UPDATE)
    def requeue(self, by: str | None = None) -> Job:
        """Re-queue a quarantined job of a group or target: same id, its attempts and
        fail_history go on, with max_attempts more attempts. `by`: who asked."""
        return self._requeue_held(by)

    def _requeue_held(self, by: str | None = None) -> Job:
        job = self._job
        self._requeued = True
        self._attempts_base = job.attempts
        self._stopping = False
        self._machine.requeue(_now_ms(), by=by)
        self._publish()
        return job

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
        status = self._job.status
        if (self._held and not self._requeued) or (status in OPEN and not self._interrupted()):
            return
        raise ApplicationError(
            f"job is {status.value}; only a job that has not completed or closed can be re-queued",
            status.value,
            type=ErrorType.JOB_ENDED,
            non_retryable=True,
        )

    @workflow.update(name=OPS_FAIL_UPDATE)
    def ops_fail(self, reason: str, by: str | None = None) -> Job:
        """Operator override: quarantine a job that has not ended, at once (its attempt
        is cancelled and the worker kills the solver). `by`: who asked ("ops" when not
        said)."""
        job = self._job
        if self._ops_failed is None:
            self._ops_failed = reason
            now = _now_ms()
            job.fail_reason = reason
            job.completed_at = now
            job.waiting_for = None
            self._machine.record_failure(reason, now)
            self._transition(JobStatus.QUARANTINED, reason=reason, by=by or OPS_BY)
            self._publish()
            if self._handle is not None:
                self._handle.cancel()
        return job

    @ops_fail.validator
    def _validate_ops_fail(self, reason: str, by: str | None = None) -> None:  # noqa: ARG002
        status = self._job.status
        if status in OPEN and not self._interrupted():
            return
        raise ApplicationError(
            f"job is {status.value}; it has ended already",
            status.value,
            type=ErrorType.JOB_ENDED,
            non_retryable=True,
        )

    def _requeue_attempt(self) -> None:
        """An operator's re-queue cancelled the current attempt: back to pending, and the
        loop starts a new one."""
        self._ops_requeue = False
        self._stopping = False
        self._machine.requeue(_now_ms(), by=self._by or OPS_BY)
        self._by = None
        self._publish()

    def _raise_ops_failed(self) -> NoReturn:
        raise ApplicationError(
            f"quarantined by an operator: {self._ops_failed}",
            self._job,
            type=ErrorType.QUARANTINED,
            non_retryable=True,
        )

    @requeue.validator
    def _validate_requeue(self, by: str | None = None) -> None:  # noqa: ARG002 - the update's
        if self._held and not self._requeued:
            return
        raise ApplicationError(
            f"job is {self._job.status.value}; only a quarantined job of a group or "
            "target can be re-queued",
            self._job.status.value,
            type=ErrorType.NOT_REQUEUEABLE,
            non_retryable=True,
        )

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
            started = report.started_at or report.claimed_at
            self._machine.started(started, _now_ms())
        self._publish()

    @workflow.update(name=CLAIM_UPDATE)
    def claim_attempt(self, report: AttemptReport) -> bool:
        """A worker asks before it starts the attempt's solver: True, and the job is
        assigned to it; False if the attempt is no longer wanted (a pause recalled it,
        or the job was cancelled). Ordered with the recall, so never both."""
        return self._claim_if_wanted(report)

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

    @workflow.update(name=CANCEL_UPDATE)
    def cancel(self, by: str | None = None) -> Job:
        """Cancel a pending or assigned job: failed with fail_reason `cancelled`. `by`:
        who asked."""
        if not self._cancelled:
            self._by = by
        return self._cancel_now()

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
            self._transition(JobStatus.STOP_REQUESTED, by=by)
            self._publish()
            if self._cancel_requested and self._handle is not None:
                self._handle.cancel()
        return job

    @stop.validator
    def _validate_stop(self, by: str | None = None) -> None:  # noqa: ARG002 - the update's
        status = self._job.status
        if self._cancelled or status in STOPPABLE:
            return
        raise ApplicationError(
            f"job is {status.value}; it has ended and cannot be stopped",
            status.value,
            type=ErrorType.NOT_STOPPABLE,
            non_retryable=True,
        )

    @cancel.validator
    def _validate_cancel(self, by: str | None = None) -> None:  # noqa: ARG002 - the update's
        status = self._job.status
        if self._cancelled or status in CANCELLABLE:
            return
        raise ApplicationError(
            f"job is {status.value}; only pending or assigned jobs can be cancelled",
            status.value,
            type=ErrorType.NOT_CANCELLABLE,
            non_retryable=True,
        )

    # -- transitions ---------------------------------------------------------------

    def _claim(self, attempt: int, worker_id: str | None, ts: int, host: str | None) -> None:
        self._claimed_attempt = attempt
        if self._pinned:
            # Claimed: a later attempt waits for its host afresh.
            self._job.waiting_for = None
            self._host_until = None
            self._fell_back = False
        self._machine.claim(worker_id, ts, host, _now_ms())

    def _complete(self, outcome: AttemptResult) -> None:
        job = self._job
        now = _now_ms()
        if self._claimed_attempt != self._attempt:
            self._claim(self._attempt, outcome.worker_id, outcome.claimed_at or now, outcome.host)
        if job.status == JobStatus.ASSIGNED:
            # A result with no report of the start before it (a short job): it ran.
            self._machine.started(outcome.started_at or now, _now_ms())
        job.worker_id = outcome.worker_id
        job.host = outcome.host or job.host
        job.result = outcome.result
        job.result_hash = outcome.result_hash
        job.result_key = outcome.result_key or outcome.result_hash
        job.log_tail = outcome.log_tail
        job.fail_reason = None
        job.completed_at = now
        self._transition(JobStatus.COMPLETED)

    def _fail_attempt(self, attempt: int, err: ActivityError) -> None:
        job = self._job
        if self._claimed_attempt != attempt and _unclaimed_handback(err):
            # Nobody claimed this attempt (the HTTP bridge handed the task back, or it
            # died holding it): not an attempt; the next loop schedules a fresh one.
            return
        if self._bridge_claimed == attempt and _handed_back(err):
            # The bridge handed back an attempt it had claimed: its claimer never got
            # the answer (the bridge gave up waiting for it). Not an attempt either.
            self._machine.unclaim(_now_ms())
            return
        reason, final = _classify(err)
        details = _failure_details(err)
        now = _now_ms()
        if self._claimed_attempt != attempt:
            # The activity started with no report reaching us (a short attempt, or a
            # worker that died at once): the claim still counts.
            self._claim(attempt, err.identity or None, details.claimed_at or now, details.host)
        if job.status == JobStatus.ASSIGNED and details.started_at:
            self._machine.started(details.started_at, _now_ms())
        job.fail_reason = reason
        self._machine.record_failure(reason, now)
        if details.log_tail is not None:
            job.log_tail = details.log_tail
        self._transition(JobStatus.FAILED, reason=reason)
        if final or job.attempts - self._attempts_base >= job.max_attempts:
            job.completed_at = now
            self._transition(JobStatus.QUARANTINED, reason=reason)
            raise ApplicationError(
                f"quarantined after {job.attempts} attempt(s): {reason}",
                job,
                type=ErrorType.QUARANTINED,
                non_retryable=True,
            )
        self._machine.release_worker()
        self._transition(JobStatus.PENDING)

    def _mark_ended_by_cancel(self) -> None:
        if self._stopping:
            self._mark_stopped()
        else:
            self._mark_cancelled()

    def _mark_stopped(self, reason: str = ErrorType.STOPPED.value) -> None:
        job = self._job
        self._stopping = False
        job.fail_reason = reason
        job.completed_at = _now_ms()
        self._transition(JobStatus.STOPPED, reason=reason, by=self._by)

    def _stop_after_failure(self, err: ActivityError) -> None:
        """The attempt failed on its own after a stop was asked: the failure is recorded
        and the job ends stopped (no retry)."""
        reason, _ = _classify(err)
        self._machine.record_failure(reason, _now_ms())
        self._transition(JobStatus.FAILED, reason=reason)
        self._mark_stopped()
        self._publish()

    def _mark_cancelled(self) -> None:
        job = self._job
        self._cancelled = True
        now = _now_ms()
        job.fail_reason = ErrorType.CANCELLED.value
        job.completed_at = now
        self._transition(JobStatus.FAILED, reason=ErrorType.CANCELLED.value, by=self._by)

    def _transition(
        self, status: JobStatus, reason: str | None = None, by: str | None = None
    ) -> None:
        """Record a status change, stamped with workflow time: the clock of the search
        attribute `JobforgeUpdatedAt`, so the event stream can order and resume by it.
        A reporter's own times land in claimed_at/heartbeat_at/completed_at."""
        self._machine.move(status, _now_ms(), reason=reason, by=by)

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


async def _waited(condition: Callable[[], bool], limit: timedelta | None) -> bool:
    """Wait for `condition`; False if `limit` passed first."""
    try:
        await workflow.wait_condition(condition, timeout=limit)
    except asyncio.TimeoutError:  # noqa: UP041 - `TimeoutError` here is Temporal's
        return False
    return True


def _not_started_in_time(err: ActivityError) -> bool:
    """The attempt waited in the task queue past the job's deadline_at."""
    cause = err.cause
    return isinstance(cause, TimeoutError) and cause.type == TimeoutType.SCHEDULE_TO_START


def _failure_details(err: ActivityError) -> AttemptFailureDetails:
    """A failed attempt's stderr tail and, for a short one, its claim and start times."""
    cause = err.cause
    details = cause.details if isinstance(cause, ApplicationError) else ()
    return AttemptFailureDetails.from_details(details)


# Patch: a native worker that died holding an unreported attempt still took it.
NATIVE_DEATH_COUNTS_PATCH = "native-death-counts"


def _handed_back(err: ActivityError) -> bool:
    cause = err.cause
    return isinstance(cause, ApplicationError) and cause.type == ErrorType.CLAIM_ABANDONED


def _unclaimed_handback(err: ActivityError) -> bool:
    cause = err.cause
    if isinstance(cause, ApplicationError):
        return cause.type == ErrorType.CLAIM_ABANDONED
    if not (isinstance(cause, TimeoutError) and cause.type == TimeoutType.HEARTBEAT):
        return False
    # Only the bridge holds a task nobody claimed. A native worker runs its solver
    # before any report (a short job sends none): if it dies then, its solver may well
    # have run, so the attempt is a failed one, not a silent re-run.
    native = not (err.identity or "").startswith(BRIDGE_IDENTITY_PREFIX)
    return not (native and workflow.patched(NATIVE_DEATH_COUNTS_PATCH))


def _classify(err: ActivityError) -> tuple[str, bool]:
    """A failed attempt's fail_reason, and whether it ends the job at once."""
    cause = err.cause
    if isinstance(cause, TimeoutError):
        if cause.type == TimeoutType.HEARTBEAT:
            return ErrorType.HEARTBEAT_TIMEOUT.value, False
        if cause.type == TimeoutType.START_TO_CLOSE:
            return ErrorType.MAX_RUNTIME_EXCEEDED.value, True
        timeout = Failure(kind="timeout", message=cause.type.name if cause.type else "unknown")
        return timeout.reason, False
    if isinstance(cause, ApplicationError) and cause.type == ErrorType.AGENT_FAILURE:
        # An HTTP agent's report: its reason is kept verbatim.
        reason = cause.message or ErrorType.AGENT_FAILURE.value
        return reason, Failure.parse(reason).final
    if isinstance(cause, ApplicationError):
        failure = Failure(kind=cause.type or "error", message=cause.message)
        return failure.reason, failure.final or cause.non_retryable
    return str(cause or err), False
