"""JobMachine: every change of a job's status and of what goes with it (attempts,
fail_history, result, times), checked against workflows/job_states.py's table.

Pure: the caller passes the clock (workflow time in a workflow), so the workflow, the API
(a re-queue's first state) and the tests share it. JobWorkflow decides *when* a change
happens; this module says *what* it changes.
"""

from __future__ import annotations

from workflows.job_states import (
    CANCELLED,
    DISPATCH_TIMEOUT,
    REQUEUED,
    A,
    C,
    F,
    JobStatus,
    P,
    Q,
    R,
    S,
    is_legal,
)
from workflows.models import AttemptResult, FailRecord, Job, Transition


class IllegalTransitionError(Exception):
    """A change the table does not hold: a bug in the caller, never a user's input."""


class JobMachine:
    """Owns a job's status changes: each is checked against the table, stamped and
    appended to `transitions`; `changed` says the job's mirror (search attributes, memo)
    is out of date."""

    def __init__(self, job: Job) -> None:
        self.job = job
        # The attempt the transitions are stamped with (the workflow's attempt counter).
        self.attempt = job.attempt
        # Attempts counted before this run's max_attempts (a re-queue gives more).
        self.attempts_base = 0
        self.changed = False

    @property
    def status(self) -> JobStatus:
        return self.job.status

    def move(
        self, status: JobStatus, now_ms: int, reason: str | None = None, by: str | None = None
    ) -> None:
        """Change the job's status, or raise `IllegalTransitionError`."""
        job = self.job
        if not is_legal(job.status, status, reason):
            raise IllegalTransitionError(
                f"job {job.id}: {job.status.value} -> {status.value} ({reason}) is not an edge"
            )
        job.status = status
        job.transitions.append(
            Transition(
                seq=len(job.transitions) + 1,
                status=status,
                ts=now_ms,
                attempt=self.attempt,
                attempts=job.attempts,
                worker_id=job.worker_id,
                reason=reason,
                by=by,
            )
        )
        self.changed = True

    def claim(self, worker_id: str | None, ts: int, host: str | None, now_ms: int) -> None:
        """A worker took the current attempt: `assigned`, one more attempt counted."""
        job = self.job
        job.attempts += 1
        job.worker_id = worker_id
        job.host = host
        job.claimed_at = ts
        job.heartbeat_at = ts
        self.move(A, now_ms)

    def started(self, at: int, now_ms: int) -> None:
        """The attempt's process started: `running`."""
        self.job.heartbeat_at = at
        self.move(R, now_ms)

    def complete(self, outcome: AttemptResult, now_ms: int) -> None:
        """The attempt's work ended with its result: `completed`."""
        job = self.job
        job.worker_id = outcome.worker_id
        job.host = outcome.host or job.host
        job.result = outcome.result
        job.result_hash = outcome.result_hash
        job.result_key = outcome.result_key or outcome.result_hash
        job.log_tail = outcome.log_tail
        job.fail_reason = None
        job.completed_at = now_ms
        self.move(C, now_ms)

    def fail_attempt(self, reason: str, final: bool, log_tail: str | None, now_ms: int) -> bool:
        """The attempt failed: `failed`, then `quarantined` (its last, or a `final`
        failure: True) or back to `pending` for the next one."""
        job = self.job
        quarantine = final or job.attempts - self.attempts_base >= job.max_attempts
        job.fail_reason = reason
        self.record_failure(reason, now_ms)
        if log_tail is not None:
            job.log_tail = log_tail
        self.move(F, now_ms, reason=reason)
        if quarantine:
            job.completed_at = now_ms
            self.move(Q, now_ms, reason=reason)
            return True
        self.release_worker()
        self.move(P, now_ms)
        return False

    def release_worker(self) -> None:
        """The attempt is over and the job waits again: no worker holds it."""
        job = self.job
        job.worker_id = None
        job.host = None
        job.claimed_at = None
        job.heartbeat_at = None

    def record_failure(self, reason: str, now_ms: int) -> None:
        """An attempt's failure, in fail_history."""
        job = self.job
        job.fail_history.append(FailRecord(reason=reason, worker_id=job.worker_id, ts=now_ms))

    def end(
        self, status: JobStatus, now_ms: int, reason: str | None, by: str | None = None
    ) -> None:
        """The job ends in `status` (with `fail_reason` = `reason`)."""
        job = self.job
        job.fail_reason = reason
        job.completed_at = now_ms
        job.waiting_for = None
        self.move(status, now_ms, reason=reason, by=by)

    def stopped(self, reason: str, now_ms: int, by: str | None) -> None:
        """A stop took the job's work away: `stopped`."""
        job = self.job
        job.fail_reason = reason
        job.completed_at = now_ms
        self.move(S, now_ms, reason=reason, by=by)

    def failed_after_stop(self, reason: str, now_ms: int) -> None:
        """The attempt failed by itself after a stop was asked: recorded, no retry."""
        self.record_failure(reason, now_ms)
        self.move(F, now_ms, reason=reason)

    def cancelled(self, now_ms: int, by: str | None) -> None:
        """Cancelled: `failed` with reason `cancelled`, for good."""
        job = self.job
        job.fail_reason = CANCELLED
        job.completed_at = now_ms
        self.move(F, now_ms, reason=CANCELLED, by=by)

    def unclaim(self, now_ms: int) -> None:
        """The claimer never reported running and went silent (a stale claim): back to
        `pending`, and the claim's attempt is not counted."""
        job = self.job
        job.attempts -= 1
        self.release_worker()
        self.move(P, now_ms, reason=DISPATCH_TIMEOUT)

    def requeue(self, now_ms: int, by: str | None = None) -> None:
        """Back to `pending` for a fresh attempt: re-queued by an operator or a gate."""
        job = self.job
        job.completed_at = None
        self.release_worker()
        self.move(P, now_ms, reason=REQUEUED, by=by)

    def resume(self, now_ms: int, by: str | None) -> None:
        """A re-queued ended job, in a new run: its result and waits cleared, `pending`,
        with max_attempts more attempts."""
        job = self.job
        self.attempts_base = job.attempts
        job.result = None
        job.result_hash = None
        job.result_key = None
        job.waiting_for = None
        job.progress = None
        self.requeue(now_ms, by=by)
