"""Recurring jobs on Temporal Schedules (docs/scheduling.md, "Recurring jobs").

A schedule is a Temporal Schedule whose action starts JobWorkflow with one job's input,
made and checked as `JobService.submit` makes a job: every firing is a normal job with
the spec's type, priority, tenant, gates, search attributes and memo, under the workflow
id Temporal gives it (`<schedule id>-<scheduled time>`). Temporal fires, buffers, skips,
catches up, pauses and backfills; jobforge runs no timer of its own. Temporal starts a
firing's workflow whether or not any worker is up, so firings are not lost while
workers are down: the overlap policy decides what runs.

A schedule's tenant is a search attribute on it (`JobforgeTenant`), as on a job: a
tenant's caller lists and changes only its own, and another tenant's is a 404.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionExecutionStartWorkflow,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleBackfill,
    ScheduleDescription,
    ScheduleHandle,
    ScheduleIntervalSpec,
    ScheduleListActionStartWorkflow,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError, RPCStatusCode

from api.job_service import JobService
from api.tenancy import EVERY, Scope
from engine.clock import now_ms
from engine.connection import TemporalSettings
from workflows import search_attributes
from workflows.errors import InvalidField, JobConflict, ScheduleNotFound
from workflows.models import JobInput, JobSpec
from workflows.names import JOB_WORKFLOW, SCHEDULE_MEMO
from workflows.schedule_models import (
    Backfill,
    Firing,
    Overlap,
    ScheduleChange,
    ScheduleCreate,
)
from workflows.schedule_models import Schedule as ScheduleView

OVERLAP: dict[str, ScheduleOverlapPolicy] = {
    "skip": ScheduleOverlapPolicy.SKIP,
    "buffer_one": ScheduleOverlapPolicy.BUFFER_ONE,
    "buffer_all": ScheduleOverlapPolicy.BUFFER_ALL,
    "cancel_other": ScheduleOverlapPolicy.CANCEL_OTHER,
    "terminate_other": ScheduleOverlapPolicy.TERMINATE_OTHER,
    "allow_all": ScheduleOverlapPolicy.ALLOW_ALL,
}
OVERLAP_NAME: dict[ScheduleOverlapPolicy, Overlap] = {v: k for k, v in OVERLAP.items()}  # type: ignore[misc]
# Schedules a list reads at most (each is one describe).
LIST_MAX = 200
DESCRIBES_AT_ONCE = 8
# Firings whose job status one visibility call reads.
STATUS_READS = 50
# The notes a pause or resume writes (a schedule's own note is kept).
OWN_NOTES = ("paused by ", "resumed by ")
# A job spec's fields that hold a fixed time: a schedule fires at many times.
FIXED_TIMES = ("earliest_start_at", "deadline_at", "urgent_at")


def _ms(when: datetime) -> int:
    return int(when.timestamp() * 1000)


def _time_spec(cron: str | None, interval: int | None) -> ScheduleSpec:
    if cron is not None:
        return ScheduleSpec(cron_expressions=[cron])
    assert interval is not None
    return ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(seconds=interval))])


def _one_of(cron: str | None, interval: int | None, *, required: bool) -> None:
    if cron is not None and interval is not None:
        raise InvalidField("cron", "give cron or interval, not both")
    if required and cron is None and interval is None:
        raise InvalidField("cron", "give cron or interval (seconds)")


def _recurring(spec: JobSpec) -> None:
    """What a one-off job may have and a recurring one may not."""
    for field in FIXED_TIMES:
        if getattr(spec, field) is not None:
            raise InvalidField(
                f"job.{field}", "a schedule's jobs fire at many times; a fixed time fits none"
            )
    if spec.admission == "reject":
        raise InvalidField("job.admission", "reject answers a caller; a firing has none")


class ScheduleService:
    """What the schedule routes do with Temporal."""

    def __init__(self, client: Client, temporal: TemporalSettings, jobs: JobService) -> None:
        self._client = client
        self._temporal = temporal
        self._jobs = jobs

    # -- making the action -----------------------------------------------------------

    async def _action(
        self, schedule_id: str, spec: JobSpec, cron: str | None, interval: int | None
    ) -> ScheduleActionStartWorkflow:
        """The start of one firing's job, as `submit` would start it."""
        _recurring(spec)
        inp, attributes = await self._jobs.fired_input(schedule_id, spec, now_ms())
        memo = {SCHEDULE_MEMO: {"id": schedule_id, "cron": cron, "interval": interval}}
        return ScheduleActionStartWorkflow(
            JOB_WORKFLOW,
            inp,
            id=schedule_id,
            task_queue=self._temporal.task_queue,
            typed_search_attributes=attributes,
            memo=memo,
            static_summary=f"{spec.type} job, schedule {schedule_id}",
        )

    @staticmethod
    def _stamped(scope: Scope, spec: JobSpec) -> JobSpec:
        """The job spec with the caller's tenant, its gates checked (422 `job.<field>`)."""
        try:
            return scope.stamp(spec)
        except InvalidField as err:
            field = f"job.{err.extra['field']}"
            raise InvalidField(field, f"job.{err.message}") from err

    # -- create, change, delete ------------------------------------------------------

    async def create(self, body: ScheduleCreate, scope: Scope) -> ScheduleView:
        """Make a schedule; 409 if its id is taken, 422 naming a bad field."""
        _one_of(body.cron, body.interval, required=True)
        spec = self._stamped(scope, body.job)
        action = await self._action(body.id, spec, body.cron, body.interval)
        schedule = Schedule(
            action=action,
            spec=_time_spec(body.cron, body.interval),
            policy=SchedulePolicy(
                overlap=OVERLAP[body.overlap],
                catchup_window=(
                    timedelta(seconds=body.catchup_window_s) if body.catchup_window_s else None
                ),
            ),
            state=ScheduleState(paused=body.paused, note=body.note),
        )
        tenant = spec.tenant
        attributes = (
            TypedSearchAttributes([SearchAttributePair(search_attributes.TENANT, tenant)])
            if tenant is not None
            else TypedSearchAttributes.empty
        )
        try:
            await self._client.create_schedule(body.id, schedule, search_attributes=attributes)
        except ScheduleAlreadyRunningError as err:
            raise JobConflict(f"schedule {body.id} already exists", id=body.id) from err
        except RPCError as err:
            if err.status == RPCStatusCode.INVALID_ARGUMENT:
                raise InvalidField("cron" if body.cron else "interval", err.message) from err
            raise
        return await self.get(body.id, scope)

    async def change(self, schedule_id: str, body: ScheduleChange, scope: Scope) -> ScheduleView:
        """Change some of a schedule's fields; the others stay."""
        _one_of(body.cron, body.interval, required=False)
        desc = await self._describe(schedule_id, scope)
        current = await self._read(desc)
        cron, interval = current.cron, current.interval
        if body.cron is not None or body.interval is not None:
            cron, interval = body.cron, body.interval
        action: ScheduleActionStartWorkflow | None = None
        if body.job is not None or (cron, interval) != (current.cron, current.interval):
            spec = current.job
            if body.job is not None:
                job = body.job
                if scope.every and job.tenant is None:
                    job = job.model_copy(update={"tenant": current.tenant})
                spec = self._stamped(scope, job)
                if spec.tenant != current.tenant:
                    raise InvalidField("job.tenant", "a schedule's tenant does not change")
            action = await self._action(schedule_id, spec, cron, interval)

        def updated(inp: ScheduleUpdateInput) -> ScheduleUpdate:
            schedule = inp.description.schedule
            if action is not None:
                schedule.action = action
            if (cron, interval) != (current.cron, current.interval):
                schedule.spec = _time_spec(cron, interval)
            if body.overlap is not None:
                schedule.policy.overlap = OVERLAP[body.overlap]
            if body.catchup_window_s is not None:
                schedule.policy.catchup_window = timedelta(seconds=body.catchup_window_s)
            if body.paused is not None:
                schedule.state.paused = body.paused
            if body.note is not None:
                schedule.state.note = body.note
            return ScheduleUpdate(schedule=schedule)

        try:
            await self._client.get_schedule_handle(schedule_id).update(updated)
        except RPCError as err:
            if err.status == RPCStatusCode.INVALID_ARGUMENT:
                raise InvalidField("cron" if body.cron else "interval", err.message) from err
            raise
        return await self.get(schedule_id, scope)

    async def delete(self, schedule_id: str, scope: Scope) -> None:
        """Delete a schedule; the jobs it fired stay."""
        await self._describe(schedule_id, scope)
        await self._call(schedule_id, lambda handle: handle.delete())

    async def pause(
        self, schedule_id: str, scope: Scope, *, paused: bool, by: str | None = None
    ) -> ScheduleView:
        """Pause (no firing until resumed) or resume a schedule. Temporal sets the note
        with either: a note someone wrote stays, else it says who did it."""
        desc = await self._describe(schedule_id, scope)
        note = desc.schedule.state.note or ""
        if not note or note.startswith(OWN_NOTES):
            note = f"{'paused' if paused else 'resumed'} by {by or 'the API'}"
        if paused:
            await self._call(schedule_id, lambda handle: handle.pause(note=note))
        else:
            await self._call(schedule_id, lambda handle: handle.unpause(note=note))
        return await self.get(schedule_id, scope)

    async def trigger(self, schedule_id: str, scope: Scope) -> ScheduleView:
        """Fire once now (the schedule's overlap policy applies; paused or not)."""
        await self._describe(schedule_id, scope)
        await self._call(schedule_id, lambda handle: handle.trigger())
        return await self.get(schedule_id, scope)

    async def backfill(self, schedule_id: str, body: Backfill, scope: Scope) -> ScheduleView:
        """Fire as if the time from `start` to `end` (both included) passed now."""
        if body.end < body.start:
            raise InvalidField("end", "is before start")
        await self._describe(schedule_id, scope)
        period = ScheduleBackfill(
            start_at=datetime.fromtimestamp(body.start / 1000, UTC),
            end_at=datetime.fromtimestamp(body.end / 1000, UTC),
            overlap=OVERLAP[body.overlap] if body.overlap is not None else None,
        )
        await self._call(schedule_id, lambda handle: handle.backfill(period))
        return await self.get(schedule_id, scope)

    # -- reading -----------------------------------------------------------------------

    async def get(self, schedule_id: str, scope: Scope = EVERY) -> ScheduleView:
        """A schedule with its next firings and its latest ones' jobs."""
        return await self._read(await self._describe(schedule_id, scope), statuses=True)

    async def list_schedules(self, scope: Scope = EVERY) -> list[ScheduleView]:
        """The schedules within `scope` (at most LIST_MAX), by id: one describe each,
        and the status of each one's last firing only (one visibility call per
        STATUS_READS)."""
        query = None if scope.every else search_attributes.tenant_clause(scope.tenant)
        ids: list[str] = []
        async for entry in await self._client.list_schedules(query=query):
            action = entry.schedule.action if entry.schedule else None
            if isinstance(action, ScheduleListActionStartWorkflow) and (
                action.workflow == JOB_WORKFLOW
            ):
                ids.append(entry.id)
            if len(ids) >= LIST_MAX:
                break
        gate = asyncio.Semaphore(DESCRIBES_AT_ONCE)

        async def one(schedule_id: str) -> ScheduleView | None:
            async with gate:
                try:
                    desc = await self._describe(schedule_id, scope)
                    return await self._read(desc)
                except ScheduleNotFound:
                    return None  # deleted since the list

        found = await asyncio.gather(*(one(schedule_id) for schedule_id in sorted(ids)))
        views = [view for view in found if view is not None]
        # Each one's last firing's status: one visibility call per STATUS_READS of them.
        last = [view.recent[-1] for view in views if view.recent]
        for start in range(0, len(last), STATUS_READS):
            await self._statuses(last[start : start + STATUS_READS])
        return views

    async def _describe(self, schedule_id: str, scope: Scope) -> ScheduleDescription:
        """The schedule's description; 404 if there is none, it starts no job, or it is
        outside `scope`."""
        try:
            desc = await self._client.get_schedule_handle(schedule_id).describe()
        except RPCError as err:
            if err.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
                raise ScheduleNotFound(schedule_id) from err
            raise
        action = desc.schedule.action
        if not isinstance(action, ScheduleActionStartWorkflow) or action.workflow != JOB_WORKFLOW:
            raise ScheduleNotFound(schedule_id)
        if not scope.reaches(desc.typed_search_attributes.get(search_attributes.TENANT)):
            raise ScheduleNotFound(schedule_id)
        return desc

    async def _call(
        self, schedule_id: str, call: Callable[[ScheduleHandle], Awaitable[None]]
    ) -> None:
        try:
            await call(self._client.get_schedule_handle(schedule_id))
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise ScheduleNotFound(schedule_id) from err
            raise

    async def _read(self, desc: ScheduleDescription, *, statuses: bool = False) -> ScheduleView:
        schedule = desc.schedule
        action = schedule.action
        assert isinstance(action, ScheduleActionStartWorkflow)
        converter = self._client.data_converter
        decoded = await converter.decode(list(action.args), [JobInput])
        inp: JobInput = decoded[0]
        memo: dict[str, Any] = {}
        if action.memo:
            raw = action.memo.get(SCHEDULE_MEMO)
            if raw is not None:
                memo = (await converter.decode([raw]))[0]
        info = desc.info
        recent = [
            Firing(
                job_id=result.action.workflow_id,
                scheduled_at=_ms(result.scheduled_at),
                started_at=_ms(result.started_at),
            )
            for result in info.recent_actions
            if isinstance(result.action, ScheduleActionExecutionStartWorkflow)
        ]
        if statuses and recent:
            await self._statuses(recent)
        intervals = schedule.spec.intervals
        window = schedule.policy.catchup_window
        return ScheduleView(
            id=desc.id,
            cron=memo.get("cron"),
            interval=int(intervals[0].every.total_seconds()) if intervals else None,
            job=inp.spec,
            # Temporal's default when a schedule names none (one made elsewhere).
            overlap=OVERLAP_NAME.get(schedule.policy.overlap, "skip"),
            catchup_window_s=int(window.total_seconds()) if window else None,
            paused=schedule.state.paused,
            note=schedule.state.note or None,
            tenant=desc.typed_search_attributes.get(search_attributes.TENANT),
            next_firings=[_ms(when) for when in info.next_action_times],
            recent=recent,
            running=[
                run.workflow_id
                for run in info.running_actions
                if isinstance(run, ScheduleActionExecutionStartWorkflow)
            ],
            fired=info.num_actions,
            skipped_overlap=info.num_actions_skipped_overlap,
            missed_catchup=info.num_actions_missed_catchup_window,
            created_at=_ms(info.created_at),
        )

    async def _statuses(self, firings: list[Firing]) -> None:
        """Each firing's job status from visibility: one list call for them all."""
        listed = ", ".join(f"'{firing.job_id}'" for firing in firings)
        by_id = {firing.job_id: firing for firing in firings}
        with contextlib.suppress(RPCError):
            async for execution in self._client.list_workflows(
                f"WorkflowId IN ({listed})", limit=len(firings)
            ):
                status = execution.typed_search_attributes.get(search_attributes.STATUS)
                if execution.id in by_id and status is not None:
                    by_id[execution.id].status = status
