"""What was asked of a job from outside its attempt loop: a cancel, a stop, an
operator's quarantine or re-queue, the re-queue of a held job; and the changes each
leads to, through the job's `JobMachine`. JobWorkflow's handlers ask, its loop reads
the answers; no command is issued here."""

from __future__ import annotations

from workflows.errors import ErrorType
from workflows.job_machine import JobMachine
from workflows.job_states import CANCELLABLE, OPEN, JobStatus
from workflows.names import OPS_BY


class JobControl:
    """The job's cancel, stop and operator state."""

    def __init__(self, machine: JobMachine, stop_claimed: bool) -> None:
        self._machine = machine
        # A stop of an assigned job asks its worker to stop it, as a running one's does
        # (`JobSpec.stop_claimed`; False in every input from before: cancelled).
        self._stop_claimed = stop_claimed
        self.cancelled = False
        self.stopping = False
        # The execution's one cancel request was spent on an attempt: a later stop of a
        # re-queued run cancels its attempt itself.
        self.cancel_spent = False
        # Operator overrides: a quarantine reason, or a re-queue of the current attempt.
        self.ops_failed: str | None = None
        self.ops_requeue = False
        # Who asked for the cancel, stop or re-queue under way (an update's `by`).
        self.by: str | None = None
        # Held open for a re-queue (a quarantined or stopped job of a group or target).
        self.held = False
        self.requeued = False

    def interrupted(self) -> bool:
        """Cancelled, or quarantined by an operator: no further attempt."""
        return self.cancelled or self.ops_failed is not None

    def open(self) -> bool:
        return self._machine.status in OPEN and not self.interrupted()

    def requeueable(self) -> bool:
        return self.held and not self.requeued

    def cancel(self, now_ms: int) -> bool:
        """The job ends failed, `cancelled`; False if it was cancelled already."""
        if self.cancelled:
            return False
        self.cancelled = True
        self._machine.cancelled(now_ms, self.by)
        return True

    def stop(self, by: str | None, now_ms: int) -> str | None:
        """A stop: "cancel" for a job nobody works on yet (then cancel it), "stop" for
        one whose work must be stopped (now `stop_requested`), None if nothing changes."""
        status = self._machine.status
        claimed_stop = self._stop_claimed and status == JobStatus.ASSIGNED
        if status in CANCELLABLE and not self.cancelled and not claimed_stop:
            self.by = by
            return "cancel"
        if status == JobStatus.RUNNING or claimed_stop:
            self.stopping = True
            self.by = by
            self._machine.move(JobStatus.STOP_REQUESTED, now_ms, by=by)
            return "stop"
        return None

    def ended_by_cancel(self, now_ms: int) -> None:
        """A cancel took the attempt away: the job ends stopped, or cancelled."""
        if self.stopping:
            self.stopped(now_ms)
        else:
            self.cancel(now_ms)

    def stopped(self, now_ms: int) -> None:
        self.stopping = False
        self._machine.stopped(ErrorType.STOPPED.value, now_ms, self.by)

    def failed_after_stop(self, reason: str, now_ms: int) -> None:
        """The attempt failed by itself after a stop was asked: recorded, then stopped."""
        self._machine.failed_after_stop(reason, now_ms)
        self.stopped(now_ms)

    def quarantine(self, reason: str, by: str | None, now_ms: int) -> bool:
        """An operator quarantines the job now; False if one did already."""
        if self.ops_failed is not None:
            return False
        self.ops_failed = reason
        self._machine.record_failure(reason, now_ms)
        self._machine.end(JobStatus.QUARANTINED, now_ms, reason, by=by or OPS_BY)
        return True

    def requeue_held(self, by: str | None, now_ms: int) -> None:
        """A held job comes back to pending, with max_attempts more attempts."""
        self.requeued = True
        self._machine.attempts_base = self._machine.job.attempts
        self.stopping = False
        self._machine.requeue(now_ms, by=by)

    def ask_requeue_attempt(self, by: str | None) -> bool:
        """An operator re-queues the current attempt: True if its cancel is to be asked."""
        if self.ops_requeue:
            return False
        self.ops_requeue = True
        self.by = by
        return True

    def requeue_attempt(self, now_ms: int) -> None:
        """The re-queued attempt was cancelled: back to pending for a new one."""
        self.ops_requeue = False
        self.stopping = False
        self._machine.requeue(now_ms, by=self.by or OPS_BY)
        self.by = None
