"""BulkWorkflow: one bulk action (POST /api/jobs/bulk). It lists the jobs its query
matches, page by page, before it changes any (a snapshot: acting while paging would
move jobs between the pages of a query on their status), then applies the action to
them a chunk at a time. Each job is acted on as its single-job route acts (the
activities call the API's own job service), so a bulk cancel is each job's cancel."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from workflows.bulk_models import (
        BULK_CHUNK,
        BULK_ERRORS_KEPT,
        BulkChunk,
        BulkInput,
        BulkPage,
        BulkProgress,
        BulkResult,
        BulkState,
    )
    from workflows.names import (
        BULK_APPLY_ACTIVITY,
        BULK_LIST_ACTIVITY,
        BULK_PROGRESS_QUERY,
        BULK_WORKFLOW,
    )

LIST_TIMEOUT = timedelta(minutes=2)
# A chunk's jobs are acted on a few at a time; each is one or two calls.
APPLY_TIMEOUT = timedelta(minutes=5)
APPLY_HEARTBEAT = timedelta(seconds=30)
RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))


@workflow.defn(name=BULK_WORKFLOW)
class BulkWorkflow:
    """List, then act, and say how far it got (the `progress` query)."""

    def __init__(self) -> None:
        self._progress: BulkProgress | None = None

    @workflow.run
    async def run(self, inp: BulkInput) -> BulkProgress:
        progress = BulkProgress.listing(inp)
        self._progress = progress
        ids: list[str] = []
        token: str | None = None
        while True:
            page: BulkPage = await workflow.execute_activity(
                BULK_LIST_ACTIVITY,
                args=[inp.query, token],
                result_type=BulkPage,
                start_to_close_timeout=LIST_TIMEOUT,
                retry_policy=RETRY,
            )
            ids += page.ids
            progress.matched = len(ids)
            token = page.next_token
            if token is None:
                break
        progress.state = BulkState.RUNNING
        for start in range(0, len(ids), BULK_CHUNK):
            chunk = BulkChunk(
                op_id=inp.op_id, action=inp.action, ids=ids[start : start + BULK_CHUNK], by=inp.by
            )
            result: BulkResult = await workflow.execute_activity(
                BULK_APPLY_ACTIVITY,
                chunk,
                result_type=BulkResult,
                start_to_close_timeout=APPLY_TIMEOUT,
                heartbeat_timeout=APPLY_HEARTBEAT,
                retry_policy=RETRY,
            )
            progress.done += result.done
            progress.failed += result.failed
            room = BULK_ERRORS_KEPT - len(progress.errors)
            progress.errors += result.errors[: max(room, 0)]
        progress.state = BulkState.DONE
        return progress

    @workflow.query(name=BULK_PROGRESS_QUERY)
    def progress(self) -> BulkProgress | None:
        """How far it got (None before its first task)."""
        return self._progress
