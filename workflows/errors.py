"""jobforge's one error vocabulary; api/errors.py is the same errors seen from HTTP.

- `ErrorType`: the failure type strings activities raise and the workflow records.
- `Failure`: a failure reason as a model (the spec's `fail_reason` string is its text).
- `AttemptFailureDetails`: what a failed attempt carries to the workflow.
- Domain errors (`JobNotFound`, `JobConflict`, …): what services raise; `api/errors.py`
  maps each class to one HTTP status, in one table.

Stdlib and pydantic only, like the models.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel


class ErrorType(StrEnum):
    """Failure type strings, defined once: activities raise them, the API maps them."""

    SOLVER_CHECKSUM_MISMATCH = "solver_checksum_mismatch"
    SOLVER_FETCH_FAILED = "solver_fetch_failed"
    SOLVER_NOT_FOUND = "solver_not_found"
    SOLVER_EXIT = "solver_exit"
    SOLVER_START_FAILED = "solver_start_failed"
    RESULT_TOO_LARGE = "result_too_large"
    MAX_RUNTIME_EXCEEDED = "max_runtime_exceeded"
    HEARTBEAT_TIMEOUT = "heartbeat_timeout"
    WORKER_SHUTDOWN = "worker_shutdown"
    CANCELLED = "cancelled"
    NOT_CANCELLABLE = "not_cancellable"
    QUARANTINED = "quarantined"
    # The HTTP bridge got a task but no claimer was left to take it: not an attempt.
    CLAIM_ABANDONED = "claim_abandoned"
    # A failure an HTTP agent reported; its reason is kept verbatim.
    AGENT_FAILURE = "agent_failure"
    # An HTTP agent's own error (not one of the solver failures above).
    AGENT_ERROR = "agent_error"
    # A running job an operator stopped (status `stopped`).
    STOPPED = "stopped"
    # An operator override refused: the job has ended (or, for requeue, completed).
    JOB_ENDED = "job_ended"
    # Stop of a job that has ended otherwise.
    NOT_STOPPABLE = "not_stoppable"
    # A job still not assigned at its deadline_at.
    DEADLINE_EXCEEDED = "deadline_exceeded"
    # A job cancelled or stopped through its update whose workflow cancel request never
    # followed: its execution closed by itself (Failed), the job as it reads.
    CANCEL_NEVER_CAME = "cancel_never_came"
    # Re-queue refused: the job is not quarantined, or not held for a re-queue.
    NOT_REQUEUEABLE = "not_requeueable"
    # A pool turned an admission-only job away (`admission: reject`).
    POOL_FULL = "pool_full"
    # A container job this worker will not run: its runtime is missing, or the job's
    # image or volumes are outside the worker's CONTAINER_* policy.
    CONTAINER_REFUSED = "container_refused"
    # A required host took no attempt within require_host_wait_ms (job ends failed).
    HOST_UNAVAILABLE = "host_unavailable"
    # A claim whose worker did not report running within its claim limit (003's
    # QUEUE_CLAIM_TTL): the bridge ends the attempt so, and a job that returns stale
    # claims (`requeue_stale_claims`) waits again, the claim uncounted.
    CLAIM_EXPIRED = "claim_expired"
    # Not a failure: the reason on the transition of a job whose preferred host took
    # no attempt within preferred_host_wait_ms, so it went to the shared queue.
    PREFERRED_HOST_TIMEOUT = "preferred_host_timeout"
    # The token registry's refusals (workflows/token_registry.py): a revoke of an id
    # it does not hold, a create past its most tokens.
    TOKEN_NOT_FOUND = "token_not_found"
    TOKEN_LIMIT = "token_limit"


# Failures that end the job at once, whatever attempts remain.
FINAL_FAILURES = frozenset({ErrorType.SOLVER_CHECKSUM_MISMATCH, ErrorType.MAX_RUNTIME_EXCEEDED})


class Failure(BaseModel):
    """A failure reason: its kind (usually an `ErrorType`) and a message.

    Its text form, `kind: message` (or just `kind`), is the spec's `fail_reason` and
    what an HTTP agent reports; `parse` reads it back. This is the one place that
    knows that format.
    """

    kind: str
    message: str = ""

    @property
    def reason(self) -> str:
        """The text form."""
        if not self.message or self.message == self.kind:
            return self.kind
        return f"{self.kind}: {self.message}"

    @property
    def final(self) -> bool:
        """Whether this failure ends the job at once."""
        return self.kind in FINAL_FAILURES

    @classmethod
    def parse(cls, reason: str) -> Failure:
        """A reason's kind and message (a reason without a colon is all kind)."""
        kind, sep, message = reason.partition(":")
        if not sep:
            return cls(kind=reason.strip(), message="")
        return cls(kind=kind.strip(), message=message.strip())


class AttemptFailureDetails(BaseModel):
    """The details a failed attempt's ApplicationError carries: the solver's stderr
    tail and, for a short attempt whose reports never went out, its claim and start
    times (so the workflow records `assigned` and `running` all the same)."""

    log_tail: str | None = None
    claimed_at: int | None = None
    started_at: int | None = None
    host: str | None = None

    @classmethod
    def from_details(cls, details: Sequence[Any]) -> AttemptFailureDetails:
        """Read an ApplicationError's details: this model, or the older positional
        form `(tail, {"claimed_at": …, "started_at": …})` of recorded histories."""
        if not details:
            return cls()
        first = details[0]
        if isinstance(first, dict) and not (len(details) > 1):
            return cls.model_validate(first)
        times = details[1] if len(details) > 1 and isinstance(details[1], dict) else {}
        valid = {k: int(v) for k, v in times.items() if isinstance(v, int) and v > 0}
        return cls(
            log_tail=first if isinstance(first, str) else None,
            claimed_at=valid.get("claimed_at"),
            started_at=valid.get("started_at"),
        )


# -- domain errors: raised by services, mapped to HTTP once (api/errors.py) ------------


class JobforgeError(Exception):
    """A request jobforge cannot carry out; `extra` becomes fields of the answer."""

    def __init__(self, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        self.extra = extra


class JobNotFound(JobforgeError):  # noqa: N818 - the domain's own words
    """No job has this id."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"job {job_id} not found", id=job_id)


class JobGone(JobforgeError):  # noqa: N818 - the domain's own words
    """The job existed (its id tells when it was submitted) but has been deleted: it
    closed longer ago than the namespace keeps closed workflows."""

    def __init__(self, job_id: str, submitted: str, retention_days: float) -> None:
        super().__init__(
            f"job {job_id} was submitted {submitted} and is past the namespace's retention "
            f"of {retention_days:g} days: its record is gone",
            id=job_id,
        )


class GroupNotFound(JobforgeError):  # noqa: N818 - the domain's own words
    """No job ever named this group, and no setting was made for it."""

    def __init__(self, group: str) -> None:
        super().__init__(f"group {group} not found", group=group)


class PoolFull(JobforgeError):  # noqa: N818 - the domain's own words
    """An admission-only job (`admission: reject`) the pool cannot take now."""

    def __init__(self, pool: str, reason: str, retry_after_s: int) -> None:
        super().__init__(
            f"pool {pool} cannot take the job now ({reason}); retry after {retry_after_s} s",
            reason=reason,
            retry_after_s=retry_after_s,
        )
        self.retry_after_s = retry_after_s


class JobConflict(JobforgeError):  # noqa: N818 - the domain's own words
    """The request conflicts with the job's state or an earlier request."""


class GateLocked(JobConflict):
    """A gate's lock that another owner holds and keeps renewing."""

    def __init__(self, what: str, owner: str, since: int, expires_at: int) -> None:
        taken = datetime.fromtimestamp(since / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        super().__init__(
            f"{what} is locked by {owner} since {taken}",
            owner=owner,
            since=since,
            expires_at=expires_at,
        )


class InvalidField(JobforgeError):  # noqa: N818 - the domain's own words
    """A request field has a value jobforge refuses; the message names the field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message if message.startswith(field) else f"{field}: {message}")
        self.extra = {"field": field}


class HostNotAvailable(JobforgeError):  # noqa: N818 - the domain's own words
    """A worker whose host ids (worker id, WORKER_HOST) are all outside AVAILABLE_HOSTS."""

    def __init__(self, worker_id: str, host: str | None) -> None:
        names = worker_id if host in (None, worker_id) else f"{worker_id} (host {host})"
        super().__init__(
            f"worker {names} is not in AVAILABLE_HOSTS", worker_id=worker_id, host=host
        )


class TemporalUnavailable(JobforgeError):  # noqa: N818 - the domain's own words
    """Temporal cannot be reached, or no worker answers; try again shortly."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"Temporal is unavailable, try again: {detail}")


class LogStoreUnavailable(JobforgeError):  # noqa: N818 - the domain's own words
    """The job log store (an S3 bucket) cannot be reached or refused the call; try again
    shortly."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"the job log store is unavailable, try again: {detail}")


class TemporalCallFailed(JobforgeError):  # noqa: N818 - the domain's own words
    """Temporal refused a call for a reason that is neither the caller's nor transient."""


class TenantForbidden(JobforgeError):  # noqa: N818 - the domain's own words
    """A tenant named in a request that is not the caller's own (its token's)."""

    def __init__(self, field: str, named: str | None, own: str | None) -> None:
        mine = own if own is not None else "no tenant"
        super().__init__(f"{field}: tenant {named} differs from the token's ({mine})", field=field)

    @classmethod
    def design(cls, design: str, tenant: str | None) -> TenantForbidden:
        """A tenant's caller on the routes of a design whose jobs have no tenant."""
        err = cls("tenant", tenant, None)
        err.message = (
            f"tenant: design {design}'s jobs have no tenant; {tenant}'s token reaches none"
        )
        return err


class GateNotFound(JobforgeError):  # noqa: N818 - the domain's own words
    """A pool or target no job ever named and no setting made, or one outside the
    caller's tenant (a tenant's gates are its own)."""

    def __init__(self, kind: str, name: str) -> None:
        super().__init__(f"{kind} {name} not found", **{kind: name})


class ScheduleNotFound(JobforgeError):  # noqa: N818 - the domain's own words
    """No schedule has this id, or it is another tenant's."""

    def __init__(self, schedule_id: str) -> None:
        super().__init__(f"schedule {schedule_id} not found", id=schedule_id)


class Unauthorized(JobforgeError):  # noqa: N818 - the domain's own words
    """A missing or wrong token."""


class Forbidden(JobforgeError):  # noqa: N818 - the domain's own words
    """A valid token whose role may not make this call."""


class TokenNotFound(JobforgeError):  # noqa: N818 - the domain's own words
    """No token has this id (it never existed, or it was revoked)."""

    def __init__(self, token_id: str) -> None:
        super().__init__(f"token {token_id} not found", id=token_id)


class BulkNotFound(JobforgeError):  # noqa: N818 - the domain's own words
    """No bulk operation has this id, or it is another tenant's."""

    def __init__(self, op_id: str) -> None:
        super().__init__(f"bulk operation {op_id} not found", id=op_id)
