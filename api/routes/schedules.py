"""Recurring jobs (docs/scheduling.md, "Recurring jobs"): Temporal Schedules whose every
firing submits one job spec as `POST /api/jobs` would. A tenant's caller makes, reads and
changes only its tenant's schedules; another's is a 404."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response, status

from api.auth import ByDep
from api.deps import Authorized, SchedulesDep, ScopeDep
from workflows.schedule_models import (
    SCHEDULE_ID_PATTERN,
    Backfill,
    Schedule,
    ScheduleChange,
    ScheduleCreate,
)

router = APIRouter(prefix="/api/schedules", tags=["schedules"], dependencies=[Authorized])

ScheduleId = Annotated[str, Path(pattern=SCHEDULE_ID_PATTERN, description="Schedule id")]


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=Schedule,
)
async def create_schedule(
    body: ScheduleCreate, schedules: SchedulesDep, scope: ScopeDep
) -> Schedule:
    """Make a schedule: exactly one of `cron` and `interval` (seconds); its `job` is
    checked as a submitted job is (422 naming `job.<field>`), and a tenant's token stamps
    its tenant on it."""
    return await schedules.create(body, scope)


@router.get("", response_model=list[Schedule])
async def list_schedules(schedules: SchedulesDep, scope: ScopeDep) -> list[Schedule]:
    """The caller's schedules, by id, each with its next firings and latest jobs."""
    return await schedules.list_schedules(scope)


@router.get("/{schedule_id}", response_model=Schedule)
async def get_schedule(
    schedule_id: ScheduleId, schedules: SchedulesDep, scope: ScopeDep
) -> Schedule:
    """One schedule: its definition, paused or not, note, next firings, its latest
    firings' jobs and their statuses, and its counts of firings made and skipped."""
    return await schedules.get(schedule_id, scope)


@router.patch("/{schedule_id}", response_model=Schedule)
async def change_schedule(
    schedule_id: ScheduleId, body: ScheduleChange, schedules: SchedulesDep, scope: ScopeDep
) -> Schedule:
    """Change some fields: `cron` or `interval` (one replaces the other), `job`,
    `overlap`, `catchup_window_s`, `paused`, `note`. Firings made before keep their spec."""
    return await schedules.change(schedule_id, body, scope)


@router.delete("/{schedule_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_schedule(
    schedule_id: ScheduleId, schedules: SchedulesDep, scope: ScopeDep
) -> Response:
    """Delete a schedule. The jobs it fired stay, open ones included."""
    await schedules.delete(schedule_id, scope)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/{schedule_id}/pause", response_model=Schedule)
async def pause_schedule(
    schedule_id: ScheduleId, schedules: SchedulesDep, scope: ScopeDep, by: ByDep
) -> Schedule:
    """Pause: no firing until resumed (a trigger or backfill still fires). Without a
    note of its own, the schedule's note says who paused it."""
    return await schedules.pause(schedule_id, scope, paused=True, by=by)


@router.post("/{schedule_id}/resume", response_model=Schedule)
async def resume_schedule(
    schedule_id: ScheduleId, schedules: SchedulesDep, scope: ScopeDep, by: ByDep
) -> Schedule:
    """Resume a paused schedule; times passed while paused do not fire."""
    return await schedules.pause(schedule_id, scope, paused=False, by=by)


@router.post("/{schedule_id}/trigger", response_model=Schedule)
async def trigger_schedule(
    schedule_id: ScheduleId, schedules: SchedulesDep, scope: ScopeDep
) -> Schedule:
    """Fire once now, under the schedule's overlap policy."""
    return await schedules.trigger(schedule_id, scope)


@router.post("/{schedule_id}/backfill", response_model=Schedule)
async def backfill_schedule(
    schedule_id: ScheduleId, body: Backfill, schedules: SchedulesDep, scope: ScopeDep
) -> Schedule:
    """Fire every time the schedule has from `start` to `end`, both included, as if that
    time passed now (`overlap` overrides the schedule's for these firings)."""
    return await schedules.backfill(schedule_id, body, scope)
