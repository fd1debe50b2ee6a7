"""Groups, pools and serial targets as the REST API shows and changes them
(docs/scheduling.md). A gate's settings and leases come from its workflow; job counts
come from visibility (a bounded number of counts per gate)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pydantic import BaseModel, Field, ValidationError
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from api import visibility_queries
from api.job_visibility_reads import count_kinds
from api.ttl_cache import TtlCache
from engine.connection import Route, TemporalSettings
from engine.gates import Gates
from workflows.errors import (
    ErrorType,
    GateLocked,
    GateNotFound,
    GroupNotFound,
    JobConflict,
    JobNotFound,
    TemporalCallFailed,
)
from workflows.gate_models import GateKind, GatePatch, GateView, LockRequest, TargetResume
from workflows.job_states import BACKLOG, CANCELLABLE, CLAIMED, OPEN, JobStatus, ordered
from workflows.models import COST_UNITS_LIMIT, Job, WaitingFor
from workflows.names import GATE_MEMO, GATE_WORKFLOW, REQUEUE_UPDATE
from workflows.search_attributes import job_filter

# A page of gates listed at once (`GET /api/groups`, `GET /api/pools`).
GATES_LIST_MAX = 200
# Jobs one retry-failed or cancel acts on per call (it answers which ones).
GROUP_ACTION_MAX = 1000
# The longest aging step a pool takes (a week per priority point).
AGING_STEP_MAX_S = 7 * 24 * 3600.0
# How long "a live worker polls this type's queue" is reused.
SERVED_TTL_S = 5.0
# A poller seen this recently serves the queue (Temporal drops idle pollers later).
POLLER_FRESH_S = 90.0
CONCURRENCY = 16

T = TypeVar("T")

# A pool's or target's counts: its open jobs by status (its ended ones, unbounded, are
# the groups' and the jobs' counts to tell).
OPEN_KINDS = tuple(status.value for status in ordered(OPEN))


class GroupView(BaseModel):
    """`GET /api/groups/{group}`."""

    group: str
    paused: bool
    max_parallel: int | None
    weight: float
    counts: dict[str, int]


class GroupPatch(BaseModel):
    """`PATCH /api/groups/{group}`: only the fields given change."""

    max_parallel: int | None = Field(default=None, strict=True, ge=1, le=1_000_000)
    weight: float | None = Field(default=None, gt=0, le=1000)


class PoolView(BaseModel):
    """`GET /api/pools/{pool}`."""

    pool: str
    capacity: int
    aging_step_s: float | None = Field(
        description="A waiting job gains a priority point per this many seconds; "
        "null: priority is exact (the default)"
    )
    in_use: int
    pending: int = Field(description="Its jobs waiting: `counts.pending`")
    running: int = Field(description="Its jobs a worker holds: `counts.assigned + counts.running`")
    counts: dict[str, int] = Field(description="Its open jobs by status")


class PoolCapacity(BaseModel):
    """`PUT /api/pools/{pool}`: its capacity, and its aging step when given."""

    capacity: int = Field(strict=True, ge=0, le=COST_UNITS_LIMIT)
    aging_step_s: float | None = Field(default=None, gt=0, le=AGING_STEP_MAX_S)


# The longest a pool's lock lasts without a renewal.
LOCK_TTL_MAX_S = 3600.0


class PoolLockAsk(BaseModel):
    """`POST /api/pools/{pool}/lock`: take or renew the pool's lock for `owner`."""

    owner: str = Field(min_length=1, max_length=200, description="Who takes it: a daemon's id")
    ttl_s: float = Field(
        default=30.0,
        gt=0,
        le=LOCK_TTL_MAX_S,
        description="It can be taken over once not renewed for this long",
    )


class PoolLock(BaseModel):
    """A pool's lock, held by the asker (times: epoch ms, the pool's own clock)."""

    pool: str
    owner: str
    since: int = Field(description="When this owner took it")
    renewed_at: int
    expires_at: int = Field(description="Free to take over from then on, unless renewed")


class TargetView(BaseModel):
    """`GET /api/targets/{target}`."""

    target: str
    halted: bool
    halted_by: str | None
    running: int = Field(description="Its jobs a worker holds: `counts.assigned + counts.running`")
    pending: int = Field(description="Its jobs waiting: `counts.pending`")
    counts: dict[str, int] = Field(description="Its open jobs by status")


class Requeued(BaseModel):
    requeued: list[str]


class Cancelled(BaseModel):
    cancelled: list[str]


class GateService:
    """What the scheduling routes do with Temporal."""

    def __init__(
        self,
        client: Client,
        temporal: TemporalSettings,
        gates: Gates,
        cancel: Callable[..., Awaitable[object]],  # (job_id, *, by): JobService.cancel
        cache_ms: int = 0,
    ) -> None:
        self._client = client
        self._cache = TtlCache(cache_ms)
        self._cancel = cancel
        self._temporal = temporal
        self._gates = gates
        self._served: dict[str, tuple[float, bool]] = {}

    # -- groups --------------------------------------------------------------------

    async def group(self, name: str) -> GroupView:
        return await self._group_view(await self._known(GateKind.GROUP, name))

    async def groups(self) -> list[GroupView]:
        """Every group, cached METRICS_CACHE_MS: N dashboards cost one set of calls."""
        return await self._every(GateKind.GROUP, self._group_view)

    async def patch_group(self, name: str, patch: GroupPatch, by: str | None = None) -> GroupView:
        fields = patch.model_fields_set & {"max_parallel", "weight"}
        change = GatePatch.model_validate({**patch.model_dump(include=fields), "by": by})
        view = await self._gates.configure(GateKind.GROUP, name, change)
        return await self._group_view(view)

    async def pause_group(self, name: str, by: str | None = None) -> GroupView:
        """Pause a group; `by`, the caller, is kept among its changes (audit)."""
        return await self._group_view(await self._gates.pause(GateKind.GROUP, name, by))

    async def resume_group(self, name: str, by: str | None = None) -> GroupView:
        """Resume a known group (a resume is no setting: it makes none)."""
        await self._known(GateKind.GROUP, name)
        view = await self._gates.resume(GateKind.GROUP, name, TargetResume(by=by))
        return await self._group_view(view)

    async def retry_failed(self, name: str, by: str | None = None) -> Requeued:
        """Re-queue the group's quarantined jobs (each keeps its id and history); `by`,
        the caller, is on each one's transition."""
        await self.group(name)
        query = job_filter(JobStatus.QUARANTINED.value, group=name)
        ids = await self._ids(query + " AND ExecutionStatus = 'Running'")
        done = await self._each(ids, lambda job_id: self._requeue(job_id, by))
        return Requeued(requeued=done)

    async def cancel_group(self, name: str, by: str | None = None) -> Cancelled:
        """Cancel the group's pending and assigned jobs; `by`, the caller, is on each
        one's transition."""
        await self.group(name)
        query = job_filter(statuses=ordered(CANCELLABLE), group=name)
        listed, held = await asyncio.gather(
            self._ids(query), self._gates.jobs(GateKind.GROUP, name, GROUP_ACTION_MAX)
        )
        # The gate has a job submitted a moment ago that the list may not show yet; a
        # running one it holds is refused by its cancel, and skipped.
        ids = list(dict.fromkeys([*listed, *held]))
        done = await self._each(ids, lambda job_id: self._cancel(job_id, by=by))
        return Cancelled(cancelled=done)

    async def _group_view(self, view: GateView) -> GroupView:
        settings = view.settings
        return GroupView(
            group=view.key,
            paused=settings.paused,
            max_parallel=settings.max_parallel,
            weight=settings.weight,
            counts=await count_kinds(self._client, group=view.key),
        )

    # -- pools ---------------------------------------------------------------------

    async def pool(self, name: str) -> PoolView:
        return await self._pool_view(await self._known(GateKind.POOL, name))

    async def pools(self) -> list[PoolView]:
        """Every pool, cached as the groups are."""
        return await self._every(GateKind.POOL, self._pool_view)

    async def set_pool(self, name: str, body: PoolCapacity, by: str | None = None) -> PoolView:
        """Set a pool's capacity, and its aging step if the body names it (null: none);
        `by`, the caller, is kept among its changes (audit)."""
        given = body.model_dump(include=body.model_fields_set)
        patch = GatePatch.model_validate({**given, "by": by})
        return await self._pool_view(await self._gates.configure(GateKind.POOL, name, patch))

    async def _pool_view(self, view: GateView) -> PoolView:
        counts = await count_kinds(self._client, OPEN_KINDS, pool=view.key)
        return PoolView(
            pool=view.key,
            capacity=view.settings.capacity,
            aging_step_s=view.settings.aging_step_s,
            in_use=view.in_use,
            pending=_waiting(counts),
            running=_claimed(counts),
            counts=counts,
        )

    async def lock_pool(self, name: str, ask: PoolLockAsk, by: str | None = None) -> PoolLock:
        """Take or renew a pool's lock; held by another owner that renews it: 409."""
        request = LockRequest(**ask.model_dump(), by=by)
        answer = await self._gates.lock(GateKind.POOL, name, request)
        lock = answer.lock
        if lock is None:  # the gate names the holder whatever it answers
            raise TemporalCallFailed(f"lock of pool {name} answered no holder")
        expires_at = lock.renewed_at + lock.ttl_ms
        if not answer.held:
            raise GateLocked(f"pool {name}", lock.owner, lock.since, expires_at)
        return PoolLock(
            pool=name,
            owner=lock.owner,
            since=lock.since,
            renewed_at=lock.renewed_at,
            expires_at=expires_at,
        )

    async def unlock_pool(self, name: str, owner: str, by: str | None = None) -> None:
        """Give a known pool's lock back if `owner` holds it."""
        await self._known(GateKind.POOL, name)
        await self._gates.unlock(GateKind.POOL, name, LockRequest(owner=owner, by=by))

    # -- targets -------------------------------------------------------------------

    async def targets(self) -> list[TargetView]:
        """Every target that has run, cached as the groups are."""
        return await self._every(GateKind.TARGET, self._target_view)

    async def target(self, name: str) -> TargetView:
        return await self._target_view(await self._known(GateKind.TARGET, name))

    async def resume_target(
        self, name: str, how: TargetResume, by: str | None = None
    ) -> TargetView:
        """Resume a halted target: `retry` re-queues its halting job (its transition
        names `by`, the caller), which goes first; `skip` leaves that job quarantined
        and moves on. An unknown target stays so."""
        view: GateView | None = await self._known(GateKind.TARGET, name)
        halted_by = view.settings.halted_by if view else None
        if how.job == "retry" and halted_by is not None:
            try:
                await self._requeue(halted_by, by)
            except JobConflict as err:
                raise JobConflict(
                    f"the halting job {halted_by} can no longer be retried ({err.message}); "
                    "resume with job=skip",
                    id=halted_by,
                ) from err
            view = await self._gates.view(GateKind.TARGET, name)
        else:
            named = how.model_copy(update={"by": by})
            view = await self._gates.resume(GateKind.TARGET, name, named)
        return await self._target_view(view or self._gates.default_view(GateKind.TARGET, name))

    async def _target_view(self, view: GateView) -> TargetView:
        counts = await count_kinds(self._client, OPEN_KINDS, target=view.key)
        return TargetView(
            target=view.key,
            halted=view.settings.halted,
            halted_by=view.settings.halted_by,
            running=_claimed(counts),
            pending=_waiting(counts),
            counts=counts,
        )

    # -- a job's waiting reason ----------------------------------------------------

    async def explain(self, job: Job) -> Job:
        """Sharpen a pending job's `waiting_for` with its gate's state (paused, halted),
        or say `no_worker` (`executor` for a container job) when no live worker polls
        the queue it waits on: the one of its type and route."""
        if job.status != JobStatus.PENDING:
            return job
        reason = job.waiting_for
        if reason == WaitingFor.GROUP_LIMIT and job.group is not None:
            view = await self._gates.view(GateKind.GROUP, job.group)
            if view is not None and view.settings.paused:
                reason = WaitingFor.GROUP_PAUSED
        elif reason == WaitingFor.TARGET_BUSY and job.target is not None:
            view = await self._gates.view(GateKind.TARGET, job.target)
            if view is not None and view.settings.halted:
                reason = WaitingFor.TARGET_HALTED
        elif reason is None:
            # The queue the API put it on: only a worker that can run it polls that
            # (a container runtime for a container job, an executor).
            route = Route.of(solver_url=job.solver_url, container=job.container)
            queue = self._temporal.activity_queue(job.type, route, job.tenant)
            if not await self._served_queue(queue):
                reason = WaitingFor.EXECUTOR if route is Route.CONTAINER else WaitingFor.NO_WORKER
        return job.model_copy(update={"waiting_for": reason})

    async def _served_queue(self, queue: str) -> bool:
        cached = self._served.get(queue)
        if cached is not None and time.monotonic() < cached[0]:
            return cached[1]
        request = DescribeTaskQueueRequest(
            namespace=self._temporal.namespace,
            task_queue=TaskQueue(name=queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
        )
        response = await self._client.workflow_service.describe_task_queue(request)
        now = time.time()
        served = any(
            now - poller.last_access_time.ToSeconds() <= POLLER_FRESH_S
            for poller in response.pollers
        )
        self._served[queue] = (time.monotonic() + SERVED_TTL_S, served)
        return served

    # -- shared --------------------------------------------------------------------

    async def _known(self, kind: GateKind, name: str) -> GateView:
        """A gate that a job ever named or a setting made (its workflow runs), else its
        kind's not-found (404). Reading it never starts one."""
        view = await self._gates.view(kind, name)
        if view is None:
            raise GroupNotFound(name) if kind == GateKind.GROUP else GateNotFound(kind.value, name)
        return view

    async def _every(self, kind: GateKind, show: Callable[[GateView], Awaitable[T]]) -> list[T]:
        """Every gate of a kind as `show` answers it, cached METRICS_CACHE_MS."""

        async def compute() -> list[T]:
            views = await self._listed(kind)
            return list(await asyncio.gather(*(show(view) for view in views)))

        return await self._cache.get(kind.value, compute)

    async def _listed(self, kind: GateKind) -> list[GateView]:
        """Gates of one kind, from their memos (one visibility page)."""
        query = f"WorkflowType = '{GATE_WORKFLOW}' AND ExecutionStatus = 'Running'"
        rows = await visibility_queries.recent(self._client, query, offset=0, limit=GATES_LIST_MAX)
        views: list[GateView] = []
        for execution in rows.executions:
            raw = (await execution.memo()).get(GATE_MEMO)
            if raw is None:
                continue
            try:
                view = GateView.model_validate(raw)
            except ValidationError as err:  # not a gate jobforge started: left out
                visibility_queries.unreadable(execution.id, GATE_MEMO, err)
                continue
            if view.kind == kind and execution.id == self._gates.ref(kind, view.key).workflow_id:
                views.append(view)
        return sorted(views, key=lambda view: view.key)

    async def _ids(self, query: str) -> list[str]:
        rows = await visibility_queries.recent(
            self._client, query, offset=0, limit=GROUP_ACTION_MAX
        )
        return [execution.id for execution in rows.executions]

    async def _each(self, ids: list[str], act: Callable[[str], Awaitable[object]]) -> list[str]:
        gate = asyncio.Semaphore(CONCURRENCY)

        async def one(job_id: str) -> str | None:
            async with gate:
                try:
                    await act(job_id)
                except (JobConflict, JobNotFound):
                    return None  # changed meanwhile: not this call's to act on
                return job_id

        return [job_id for job_id in await asyncio.gather(*(one(i) for i in ids)) if job_id]

    async def _requeue(self, job_id: str, by: str | None = None) -> None:
        handle = self._client.get_workflow_handle(job_id)
        try:
            # `by` only when there is a caller to name: the update as it always was.
            args = [] if by is None else [by]
            await handle.execute_update(REQUEUE_UPDATE, args=args, result_type=Job)
        except WorkflowUpdateFailedError as err:
            cause = err.cause
            if isinstance(cause, ApplicationError) and cause.type == ErrorType.NOT_REQUEUEABLE:
                raise JobConflict(cause.message, id=job_id) from err
            raise
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise JobConflict("the job has closed", id=job_id) from err
            raise


def _waiting(counts: dict[str, int]) -> int:
    return sum(counts.get(status.value, 0) for status in BACKLOG)


def _claimed(counts: dict[str, int]) -> int:
    return sum(counts.get(status.value, 0) for status in CLAIMED)
