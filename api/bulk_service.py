"""Bulk actions (POST /api/jobs/bulk): cancel, stop or re-queue every job a filter
matches, as a `BulkWorkflow` (workflows/bulk_workflow.py) that this API process
hosts on its own task queue. Its activities call this process's `JobService`, so each
job is acted on exactly as its single-job route acts: a cancel is the job's cancel
update then the cancel request; a stop, its stop update; a re-queue, the `ops_requeue`
update or the new run of a closed job. Any API replica runs the operation's tasks; one
that dies hands them to another (Temporal retries the activity there)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable

from temporalio import activity
from temporalio.client import Client, WorkflowFailureError, WorkflowQueryFailedError
from temporalio.common import WorkflowIDReusePolicy
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from api import visibility_queries
from api.job_service import JobService
from api.tenancy import EVERY, Scope
from engine.clock import now_ms
from engine.connection import TemporalSettings, connect
from workflows.bulk_models import (
    BULK_PAGE,
    BulkAction,
    BulkChunk,
    BulkFailure,
    BulkFilter,
    BulkInput,
    BulkPage,
    BulkProgress,
    BulkResult,
)
from workflows.bulk_workflow import BulkWorkflow
from workflows.errors import Forbidden, InvalidField, JobforgeError, TenantForbidden
from workflows.models import Job
from workflows.names import (
    BULK_APPLY_ACTIVITY,
    BULK_ID_PREFIX,
    BULK_LIST_ACTIVITY,
    BULK_MEMO,
    BULK_PROGRESS_QUERY,
    BULK_QUEUE_SUFFIX,
    BULK_WORKFLOW,
    OPS_BY,
)
from workflows.search_attributes import job_filter

log = logging.getLogger("jobforge.bulk")

# Jobs of one chunk acted on at once (each is one or two calls to Temporal).
BULK_CONCURRENCY = 16
# Retry a lost connection to Temporal every so often until the worker runs.
CONNECT_RETRY_S = 2.0
# The actions a producer may take on its tenant's jobs; re-queue is the operator's
# (as `POST /api/ops/jobs/{id}/requeue`).
PRODUCER_ACTIONS = frozenset({BulkAction.CANCEL, BulkAction.STOP})


def bulk_query(filter: BulkFilter, scope: Scope) -> str:
    """The filter's visibility query, ANDed with the caller's tenant: a tenant's caller
    naming another tenant is a 403, an admin may name any."""
    tenant = scope.query_tenant
    if filter.tenant is not None:
        if not scope.every and filter.tenant != scope.tenant:
            raise TenantForbidden("filter.tenant", filter.tenant, scope.tenant)
        tenant = filter.tenant
    return job_filter(
        filter.status,
        filter.type,
        group=filter.group,
        pool=filter.pool,
        target=filter.target,
        worker=filter.worker,
        tenant=tenant,
    )


class BulkActivities:
    """The operation's two steps, on this process's job service."""

    def __init__(self, client: Client, jobs: JobService) -> None:
        self._client = client
        self._jobs = jobs

    @activity.defn(name=BULK_LIST_ACTIVITY)
    async def list_page(self, query: str, token: str | None) -> BulkPage:
        """One page of the matching job ids."""
        raw = bytes.fromhex(token) if token else None
        rows = await visibility_queries.recent(
            self._client, query, offset=0, limit=BULK_PAGE, token=raw
        )
        after = rows.next_token.hex() if rows.next_token else None
        return BulkPage(ids=[execution.id for execution in rows.executions], next_token=after)

    @activity.defn(name=BULK_APPLY_ACTIVITY)
    async def apply(self, chunk: BulkChunk) -> BulkResult:
        """Act on each job of the chunk, BULK_CONCURRENCY at a time. A job's own refusal
        (a 4xx of its single route) is counted as failed; anything else (Temporal
        unreachable) fails the activity, whose retry skips the jobs the heartbeat says
        are finished, so a job is not re-queued twice."""
        act = self._action(chunk.action)
        finished: dict[str, str | None] = {}
        details = activity.info().heartbeat_details
        if details:
            finished = dict(details[0])
        gate = asyncio.Semaphore(BULK_CONCURRENCY)

        async def one(job_id: str) -> None:
            async with gate:
                try:
                    await act(job_id, EVERY, chunk.by)
                except JobforgeError as err:
                    finished[job_id] = err.message
                else:
                    finished[job_id] = None
                activity.heartbeat(finished)

        await asyncio.gather(*(one(job_id) for job_id in chunk.ids if job_id not in finished))
        errors = [BulkFailure(id=i, error=e) for i, e in finished.items() if e is not None]
        return BulkResult(done=len(finished) - len(errors), failed=len(errors), errors=errors)

    def _action(self, action: BulkAction) -> Callable[[str, Scope, str | None], Awaitable[Job]]:
        return {
            BulkAction.CANCEL: self._jobs.cancel,
            BulkAction.STOP: self._jobs.stop,
            BulkAction.REQUEUE: self._jobs.ops_requeue,
        }[action]


class BulkService:
    """Starts, reads and runs bulk operations."""

    def __init__(self, client: Client, temporal: TemporalSettings, jobs: JobService) -> None:
        self._client = client
        self._temporal = temporal
        self._jobs = jobs
        self.task_queue = f"{temporal.task_queue}{BULK_QUEUE_SUFFIX}"
        self._task: asyncio.Task[None] | None = None

    async def count(self, filter: BulkFilter, scope: Scope) -> int:
        """How many jobs the filter matches now (one visibility count)."""
        return await visibility_queries.count(self._client, bulk_query(self._named(filter), scope))

    async def start(
        self, filter: BulkFilter, action: BulkAction, scope: Scope, role: str, by: str | None
    ) -> str:
        """Start the operation; its id. Returns at once, whatever the job count."""
        if role != "admin" and action not in PRODUCER_ACTIONS:
            raise Forbidden(f"action: {action.value} in bulk is the admin's only")
        query = bulk_query(self._named(filter), scope)
        if action == BulkAction.REQUEUE and by is not None:
            by = f"{OPS_BY}: {by}"  # as the single re-queue route names its caller
        op_id = f"{BULK_ID_PREFIX}{uuid.uuid4().hex}"
        inp = BulkInput(
            op_id=op_id,
            query=query,
            action=action,
            by=by,
            tenant=scope.tenant,
            every=scope.every,
            filter=filter,
            created_at=now_ms(),
        )
        await self._client.start_workflow(
            BULK_WORKFLOW,
            inp,
            id=op_id,
            task_queue=self.task_queue,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            static_summary=f"bulk {action.value}",
            memo={BULK_MEMO: BulkProgress.listing(inp).model_dump(mode="json")},
        )
        return op_id

    async def read(self, op_id: str, scope: Scope) -> BulkProgress | None:
        """The operation's progress; None if there is none of that id in this scope."""
        handle = self._client.get_workflow_handle(op_id, result_type=BulkProgress)
        try:
            desc = await handle.describe()
        except RPCError as err:
            if err.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
                return None
            raise
        started = (await desc.memo()).get(BULK_MEMO)
        if desc.workflow_type != BULK_WORKFLOW or started is None:
            return None
        # What it was started as: the answer until its first task has run.
        progress: BulkProgress | None = BulkProgress.model_validate(started)
        with contextlib.suppress(WorkflowQueryFailedError, WorkflowFailureError):
            if desc.close_time is None:
                progress = await handle.query(BULK_PROGRESS_QUERY, result_type=BulkProgress)
            else:
                progress = await handle.result()
        if progress is None:
            progress = BulkProgress.model_validate(started)
        if not scope.every and (progress.every or progress.tenant != scope.tenant):
            return None
        return progress

    @staticmethod
    def _named(filter: BulkFilter) -> BulkFilter:
        if not filter.named():
            raise InvalidField("filter", "names no field: an empty filter would reach every job")
        return filter

    # -- the worker that runs the operations ----------------------------------------

    def run_worker(self) -> None:
        """Run the operations' worker in the background (its own connection: a worker
        needs a connected client, and the API's connects lazily)."""
        if self._task is None:
            self._task = asyncio.create_task(self._serve(), name="bulk worker")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _serve(self) -> None:
        while True:
            try:
                client = await connect(self._temporal)
            except Exception as err:  # Temporal not there yet: try again
                log.info("bulk worker waits for Temporal: %s", err)
                await asyncio.sleep(CONNECT_RETRY_S)
                continue
            acts = BulkActivities(self._client, self._jobs)
            worker = Worker(
                client,
                task_queue=self.task_queue,
                workflows=[BulkWorkflow],
                activities=[acts.list_page, acts.apply],
            )
            await worker.run()
            return
