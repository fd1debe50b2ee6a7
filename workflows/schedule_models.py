"""Recurring jobs: a schedule's request bodies and its view (docs/scheduling.md,
"Recurring jobs"). A schedule is a Temporal Schedule whose action starts JobWorkflow
with one job spec; the API builds it (api/schedule_service.py). Stdlib and pydantic only.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from workflows.models import EpochMs, JobSpec

# Temporal names a firing's workflow `<schedule id>-<scheduled time, RFC 3339>` (21
# more characters, `-2026-01-02T03:04:05Z`): an id of up to 43 keeps a job id within
# 64 characters.
SCHEDULE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,42}$"
# A firing's job id: a schedule's id and the firing's time (':' among its characters).
FIRED_JOB_ID_PATTERN = r"^[A-Za-z0-9_:-]{1,64}$"

Overlap = Literal[
    "skip", "buffer_one", "buffer_all", "cancel_other", "terminate_other", "allow_all"
]
ScheduleId = Annotated[
    str,
    Field(pattern=SCHEDULE_ID_PATTERN, description="Its id; its jobs' ids start with it"),
]
Cron = Annotated[
    str,
    Field(
        min_length=1,
        max_length=200,
        description="A cron expression (five fields, UTC; `@every 1h`, `@daily` too)",
    ),
]
IntervalS = Annotated[
    int, Field(strict=True, ge=1, le=366 * 86400, description="Fire every this many seconds")
]
# Temporal refuses a catch-up window under 10 s.
CatchupWindowS = Annotated[
    int,
    Field(
        strict=True,
        ge=10,
        le=366 * 86400,
        description="A firing missed while Temporal was down runs if it is at most this "
        "old when Temporal is back (default: one year)",
    ),
]
Note = Annotated[str, Field(max_length=500, description="Free text kept with the schedule")]


class ScheduleCreate(BaseModel):
    """`POST /api/schedules`: exactly one of `cron` and `interval`."""

    model_config = ConfigDict(extra="forbid")

    id: ScheduleId
    cron: Cron | None = None
    interval: IntervalS | None = None
    job: JobSpec
    overlap: Annotated[
        Overlap, Field(description="What a firing does while the last one's job is open")
    ] = "skip"
    catchup_window_s: CatchupWindowS | None = None
    paused: bool = False
    note: Note | None = None


class ScheduleChange(BaseModel):
    """`PATCH /api/schedules/{id}`: the fields to change. `cron` replaces an interval and
    `interval` a cron (one of them at most)."""

    model_config = ConfigDict(extra="forbid")

    cron: Cron | None = None
    interval: IntervalS | None = None
    job: JobSpec | None = None
    overlap: Overlap | None = None
    catchup_window_s: CatchupWindowS | None = None
    paused: bool | None = None
    note: Note | None = None


class Backfill(BaseModel):
    """`POST /api/schedules/{id}/backfill`: fire as if the time from `start` to `end`
    (epoch ms or ISO 8601 with an offset) passed now."""

    model_config = ConfigDict(extra="forbid")

    start: EpochMs
    end: EpochMs
    overlap: Overlap | None = Field(
        default=None, description="Overrides the schedule's overlap for these firings"
    )


class Firing(BaseModel):
    """One firing the schedule made: its job, and that job's status when cheap to read
    (its search attribute; null once the job is deleted)."""

    job_id: str
    scheduled_at: int
    started_at: int
    status: str | None = None


class Schedule(BaseModel):
    """A schedule as read: its definition, its state and what it did lately."""

    id: str
    cron: str | None
    interval: int | None
    job: JobSpec
    overlap: Overlap
    catchup_window_s: int | None
    paused: bool
    note: str | None
    tenant: str | None
    # Epoch ms of the next firings (up to 10, as Temporal computes them).
    next_firings: list[int]
    # The latest firings, newest last (Temporal keeps 10).
    recent: list[Firing]
    # Jobs of its firings still open, as Temporal watches them for overlap (none under
    # allow_all).
    running: list[str]
    fired: int
    skipped_overlap: int
    missed_catchup: int
    created_at: int
