"""A job's statuses and the one table of its legal changes (docs/architecture.md).

Pure: stdlib only at import, no I/O, no clocks, so the workflow sandbox, the API, the
workers, the CLI and the tests all read the same table. `JobStatus`, the named sets and
`is_ended` are defined here and nowhere else (tests/test_job_states.py checks it);
`workflows/job_machine.py` applies a change to a job and refuses one the table does not
hold.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Literal, TypeAlias


class JobStatus(StrEnum):
    """The spec's statuses. `failed` is transient unless the job was cancelled."""

    PENDING = "pending"
    ASSIGNED = "assigned"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    QUARANTINED = "quarantined"
    # Job control (docs/api.md): a running job asked to stop, and one whose work is gone.
    STOP_REQUESTED = "stop_requested"
    STOPPED = "stopped"


# Every status in the order a job meets them: lists, counts and the CLI show them so.
STATUS_ORDER: tuple[JobStatus, ...] = tuple(JobStatus)

# -- reasons that name an edge ---------------------------------------------------------

CANCELLED = "cancelled"
DEADLINE_EXCEEDED = "deadline_exceeded"
HOST_UNAVAILABLE = "host_unavailable"
REQUEUED = "requeued"
PREFERRED_HOST_TIMEOUT = "preferred_host_timeout"
# An attempt no worker took within the job's dispatch timeout, or a claim whose worker
# never reported running (a stale claim): the job waits again, no attempt counted.
DISPATCH_TIMEOUT = "dispatch_timeout"

# A job that reads `failed` with one of these reasons has ended; any other `failed` is
# an attempt's failure on its way back to `pending` (or on to `quarantined`).
FINAL_FAILED_REASONS: frozenset[str] = frozenset({CANCELLED, DEADLINE_EXCEEDED, HOST_UNAVAILABLE})

# -- the named sets --------------------------------------------------------------------

P, A, R = JobStatus.PENDING, JobStatus.ASSIGNED, JobStatus.RUNNING
C, F, Q = JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.QUARANTINED
SR, S = JobStatus.STOP_REQUESTED, JobStatus.STOPPED

# A worker holds the job's attempt and works on it (a heartbeat may come).
CLAIMED: frozenset[JobStatus] = frozenset({A, R})
# A worker holds the attempt, and its work may still be alive (a stop not done yet).
HELD: frozenset[JobStatus] = CLAIMED | {SR}
# Not ended: the job may still change by itself.
OPEN: frozenset[JobStatus] = HELD | {P}
# A status an ended job may read (`failed` only with a final reason: `is_ended`).
ENDED: frozenset[JobStatus] = frozenset({C, F, Q, S})
# Always ended, whatever the reason.
TERMINAL: frozenset[JobStatus] = frozenset({C, Q, S})
# A cancel is answered for these (the job ends failed, `cancelled`).
CANCELLABLE: frozenset[JobStatus] = frozenset({P, A})
# A stop is answered for these (a repeated stop changes nothing).
STOPPABLE: frozenset[JobStatus] = OPEN | {S}
# Counted together as a backlog: waiting for a worker.
BACKLOG: frozenset[JobStatus] = frozenset({P})
# The attempt's solver process runs (a stop_requested one until it is killed).
SOLVING: frozenset[JobStatus] = frozenset({R, SR})
# A stop was asked of the job (and took, or is taking, its work away).
STOP_ASKED: frozenset[JobStatus] = frozenset({SR, S})

# -- what counts name ------------------------------------------------------------------

# What every count (jobs, groups, pools, targets, /metrics) and every status filter
# names: a status, or `cancelled`, a job that reads `failed` because it was cancelled.
# Under these names the counts add up: `failed` leaves the cancelled jobs out.
COUNT_KINDS: tuple[str, ...] = tuple(
    kind
    for status in STATUS_ORDER
    for kind in ((status.value, CANCELLED) if status == F else (status.value,))
)
if TYPE_CHECKING:
    CountKind: TypeAlias = str
else:
    # The same names as a type, for pydantic and FastAPI to check and document (one
    # enum of strings, one error naming them all); a type checker reads a str.
    CountKind = Literal[COUNT_KINDS]


def ordered(statuses: Iterable[JobStatus | str]) -> tuple[JobStatus, ...]:
    """`statuses` once each, in STATUS_ORDER (a query or a message reads the same)."""
    wanted = {JobStatus(status) for status in statuses}
    return tuple(status for status in STATUS_ORDER if status in wanted)


def kinds_of(statuses: Iterable[JobStatus | str]) -> tuple[str, ...]:
    """The count kinds jobs in `statuses` are counted under, in COUNT_KINDS' order:
    `failed` brings `cancelled` (a filter on these finds every such job)."""
    wanted = {JobStatus(status).value for status in statuses}
    if F in wanted:
        wanted.add(CANCELLED)
    return tuple(kind for kind in COUNT_KINDS if kind in wanted)


def is_ended(status: JobStatus | str, reason: str | None = None) -> bool:
    """Whether a job that reads `status` (with `fail_reason`) has ended for good."""
    status = JobStatus(status)
    if status == F:
        return reason in FINAL_FAILED_REASONS
    return status in TERMINAL


def ended_kind(status: JobStatus | str, reason: str | None = None) -> str | None:
    """An ended job's kind as counts name it: its status, or `cancelled` for a job that
    reads `failed` with reason `cancelled` (the 000 contract's cancel). None if open."""
    if not is_ended(status, reason):
        return None
    if JobStatus(status) == F and reason == CANCELLED:
        return CANCELLED
    return JobStatus(status).value


def count_kind(status: JobStatus | str, reason: str | None = None) -> str:
    """The kind a job that reads `status` (with `fail_reason`) is counted under: its
    status, or `cancelled` (see `ended_kind`)."""
    return ended_kind(status, reason) or JobStatus(status).value


# -- the edges -------------------------------------------------------------------------


@dataclass(frozen=True)
class Edge:
    """A legal change from `source` to `target`; `reasons`, when set, are the only
    reasons it may carry (None: any reason, or none)."""

    source: JobStatus
    target: JobStatus
    why: str
    reasons: frozenset[str | None] | None = None


def _only(*reasons: str | None) -> frozenset[str | None]:
    return frozenset(reasons)


# An operator's re-queue of a live job, and the re-queue of an ended one.
_REQUEUE = _only(REQUEUED)

EDGES: tuple[Edge, ...] = (
    Edge(P, A, "a worker claims the attempt"),
    Edge(P, P, "sent back to wait", _only(DISPATCH_TIMEOUT, PREFERRED_HOST_TIMEOUT, REQUEUED)),
    Edge(P, F, "cancelled, or not assigned in time", _only(*sorted(FINAL_FAILED_REASONS))),
    Edge(P, Q, "an operator quarantines it"),
    Edge(A, R, "the solver process started"),
    Edge(A, F, "the attempt failed, or the job was cancelled"),
    Edge(A, P, "re-queued, or its claim went stale", _only(DISPATCH_TIMEOUT, REQUEUED)),
    Edge(A, Q, "an operator quarantines it"),
    Edge(A, SR, "a stop was asked of a claimed job its worker stops (stop_claimed)"),
    Edge(R, C, "the solver exited 0"),
    Edge(R, F, "the attempt failed, or an operator cancelled it"),
    Edge(R, SR, "a stop was asked"),
    Edge(R, P, "an operator re-queues it", _REQUEUE),
    Edge(R, Q, "an operator quarantines it"),
    Edge(SR, S, "the work is gone: process group or container ended, agent reported"),
    Edge(SR, C, "the attempt ended by itself first"),
    Edge(SR, F, "the attempt failed by itself first"),
    Edge(SR, P, "an operator re-queues it", _REQUEUE),
    Edge(SR, Q, "an operator quarantines it"),
    Edge(F, P, "retried: attempts are left, or re-queued"),
    Edge(F, Q, "no attempts left, or a final failure"),
    Edge(F, S, "the failure came after a stop was asked"),
    Edge(C, P, "re-queued", _REQUEUE),
    Edge(Q, P, "re-queued", _REQUEUE),
    Edge(S, P, "re-queued", _REQUEUE),
)

_BY_PAIR: dict[tuple[JobStatus, JobStatus], Edge] = {(e.source, e.target): e for e in EDGES}


def edge(source: JobStatus | str, target: JobStatus | str) -> Edge | None:
    """The table's edge from `source` to `target`, if any."""
    return _BY_PAIR.get((JobStatus(source), JobStatus(target)))


def is_legal(source: JobStatus | str, target: JobStatus | str, reason: str | None = None) -> bool:
    """Whether a job may go from `source` to `target` with `reason`."""
    found = edge(source, target)
    return found is not None and (found.reasons is None or reason in found.reasons)


def mermaid() -> str:
    """The table as a Mermaid state diagram (docs/architecture.md holds this text)."""
    lines = ["stateDiagram-v2", f"    [*] --> {P.value}"]
    for e in EDGES:
        label = e.why if e.reasons is None else ", ".join(sorted(r or "-" for r in e.reasons))
        lines.append(f"    {e.source.value} --> {e.target.value}: {label}")
    lines.extend(f"    {status.value} --> [*]" for status in (C, Q, S))
    lines.append(f"    {F.value} --> [*]: {', '.join(sorted(FINAL_FAILED_REASONS))}")
    return "\n".join(lines)
