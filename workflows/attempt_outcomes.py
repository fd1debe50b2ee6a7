"""How JobWorkflow reads the end of an attempt: which failure it was, whether it counts
as an attempt, and its fail_reason. Pure reading of the `ActivityError`, no commands."""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError, TimeoutType

from workflows.errors import AttemptFailureDetails, ErrorType, Failure
from workflows.job_patches import NATIVE_DEATH_COUNTS_PATCH
from workflows.names import BRIDGE_IDENTITY_PREFIX

# Stale claims (`JobSpec.requeue_stale_claims`): a claim whose worker goes silent before
# it reports running goes back to the queue uncounted, this many times per run; later
# ones count as failed attempts, so a job that kills every worker that takes it ends.
STALE_CLAIMS_RETURNED = 3


def not_started_in_time(err: ActivityError) -> bool:
    """The attempt waited in its task queue past its schedule-to-start timeout."""
    cause = err.cause
    return isinstance(cause, TimeoutError) and cause.type == TimeoutType.SCHEDULE_TO_START


def went_silent(err: ActivityError) -> bool:
    """Its worker stopped heartbeating, or the bridge ended the claim (`claim_expired`)."""
    cause = err.cause
    return (isinstance(cause, TimeoutError) and cause.type == TimeoutType.HEARTBEAT) or (
        isinstance(cause, ApplicationError) and cause.type == ErrorType.CLAIM_EXPIRED
    )


def failure_details(err: ActivityError) -> AttemptFailureDetails:
    """A failed attempt's stderr tail and, for a short one, its claim and start times."""
    cause = err.cause
    details = cause.details if isinstance(cause, ApplicationError) else ()
    return AttemptFailureDetails.from_details(details)


def handed_back(err: ActivityError) -> bool:
    """The HTTP bridge gave the attempt back: no agent took it, or the one that did
    never got the answer."""
    cause = err.cause
    return isinstance(cause, ApplicationError) and cause.type == ErrorType.CLAIM_ABANDONED


def unclaimed_handback(err: ActivityError) -> bool:
    """An attempt nobody claimed ended: handed back by the bridge, or the bridge died
    holding it. Not an attempt."""
    if handed_back(err):
        return True
    cause = err.cause
    if not (isinstance(cause, TimeoutError) and cause.type == TimeoutType.HEARTBEAT):
        return False
    # Only the bridge holds a task nobody claimed. A native worker runs its solver
    # before any report (a short job sends none): if it dies then, its solver may well
    # have run, so the attempt is a failed one, not a silent re-run.
    native = not (err.identity or "").startswith(BRIDGE_IDENTITY_PREFIX)
    return not (native and workflow.patched(NATIVE_DEATH_COUNTS_PATCH))


def classify(err: ActivityError) -> tuple[str, bool]:
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
