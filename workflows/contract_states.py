"""One state machine, told in each design's words: the one table of state names (the
API's contract adapters and `runforge-cli` both read it; docs/contracts.md)."""

from __future__ import annotations

from enum import StrEnum

from workflows.job_states import STATUS_ORDER, JobStatus
from workflows.models import Job

# The designs jobforge grew from; 000 is the hub's own contract.
DESIGNS = ("000", "001", "002", "003", "004")


class Phase(StrEnum):
    """Where a job is in the core's state machine, finely enough for every design."""

    WAITING = "pending, waiting"  # at a gate, a start time, or for a worker
    ADMITTED = "pending, admitted"  # its gates granted, not yet claimed
    ASSIGNED = "assigned"
    RUNNING = "running"
    STOP_REQUESTED = "stop_requested"
    COMPLETED = "completed"
    QUARANTINED = "quarantined"
    FAILED = "failed or cancelled"
    STOPPED = "stopped"


# One row per phase; the columns are the designs, in DESIGNS' order.
# fmt: off
_ROWS: dict[Phase, tuple[str, str, str, str, str]] = {
    Phase.WAITING:        ("pending",     "QUEUED",      "queued",    "queued",         "QUEUED"),
    Phase.ADMITTED:       ("pending",     "DISPATCHING", "queued",    "queued",         "QUEUED"),
    Phase.ASSIGNED:       ("assigned",    "DISPATCHING", "running",   "dispatched",     "RUNNING"),
    Phase.RUNNING:        ("running",     "RUNNING",     "running",   "running",        "RUNNING"),
    Phase.STOP_REQUESTED: ("running",     "RUNNING",     "running",   "stop_requested", "RUNNING"),
    Phase.COMPLETED:      ("completed",   "DONE",        "succeeded", "finished",       "SUCCESS"),
    Phase.QUARANTINED:    ("quarantined", "FAILED",      "failed",    "failed",         "ERROR"),
    Phase.FAILED:         ("failed",      "CANCELED",    "canceled",  "canceled",       "CANCELED"),
    Phase.STOPPED:        ("failed",      "CANCELED",    "canceled",  "stopped",        "PAUSED"),
}
# fmt: on
STATE_NAMES: dict[Phase, dict[str, str]] = {
    row: dict(zip(DESIGNS, names, strict=True)) for row, names in _ROWS.items()
}

_BY_STATUS = {
    JobStatus.ASSIGNED: Phase.ASSIGNED,
    JobStatus.RUNNING: Phase.RUNNING,
    JobStatus.STOP_REQUESTED: Phase.STOP_REQUESTED,
    JobStatus.COMPLETED: Phase.COMPLETED,
    JobStatus.QUARANTINED: Phase.QUARANTINED,
    JobStatus.FAILED: Phase.FAILED,
    JobStatus.STOPPED: Phase.STOPPED,
}


def phase(job: Job) -> Phase:
    """The job's phase. A pending job whose attempt is scheduled and that waits for
    nothing else (no gate, no start time) is admitted: only a claim is missing. A job
    read as `failed` has ended (a failed attempt that is retried reads `pending`)."""
    admitted = job.waiting_for is None and job.attempt > 0
    return status_phase(job.status, admitted=admitted)


def status_phase(status: JobStatus, *, admitted: bool = False) -> Phase:
    """The phase of a job in `status` (a pending one waiting, unless `admitted`)."""
    if status == JobStatus.PENDING:
        return Phase.ADMITTED if admitted else Phase.WAITING
    return _BY_STATUS[status]


def status_name(status: JobStatus, design: str, *, admitted: bool = False) -> str:
    """A status in `design`'s words, for a reader that has only the status (an event)."""
    return STATE_NAMES[status_phase(status, admitted=admitted)][design]


def state_name(job: Job, design: str) -> str:
    """The job's state in `design`'s words."""
    return STATE_NAMES[phase(job)][design]


def names(design: str) -> list[str]:
    """Every state name of `design`, each once, in the table's order."""
    return list(dict.fromkeys(row[design] for row in STATE_NAMES.values()))


# -- the other direction: from a design's state name back to the core ------------------

_STATUS_OF: dict[Phase, JobStatus] = {
    Phase.WAITING: JobStatus.PENDING,
    Phase.ADMITTED: JobStatus.PENDING,
    **{row: status for status, row in _BY_STATUS.items()},
}


def phases_named(design: str, name: str) -> tuple[Phase, ...]:
    """The phases `design` calls `name`, in the table's order (none for a name it
    does not use)."""
    return tuple(row for row, named in STATE_NAMES.items() if named[design] == name)


def statuses_named(design: str, name: str) -> frozenset[JobStatus]:
    """Every status a job `design` calls `name` may read: to list such jobs, then keep
    those whose `state_name` is `name` (a pending job may be waiting or admitted)."""
    return frozenset(_STATUS_OF[row] for row in phases_named(design, name))


def statuses_counted(design: str, name: str) -> frozenset[JobStatus]:
    """The statuses whose jobs a count by status files under `name`: each status once,
    as `status_name` reads it without the job (a pending job is waiting), so that the
    counts of `design`'s names add up to the jobs."""
    return frozenset(s for s in STATUS_ORDER if status_name(s, design) == name)
