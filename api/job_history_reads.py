"""Full jobs of a listed page read from their Temporal history, not by a workflow query.

Reads only: `job_service` lists with it and asks the workflow for the rest;
`job_visibility_reads` never reads a full job. Jobs of a listing are read in full at the
cost of their page, without replaying them.

A job query replays the job's workflow on a worker when the worker no longer holds it:
every job that waits long (pending jobs of a busy type) or has closed. A page of such
jobs then costs a replay per row. Most rows need none:

- a closed job that completed returned its `Job`, and one that failed (quarantined, or
  failed for a final reason) carries it as its failure's detail: the close event holds
  it (one history read of one event, no worker). `GET /api/jobs/{id}` of a closed job
  reads it so too;
- a plain pending job (no gate, clock or host) that nothing has happened to yet (its
  memo holds only the submit's transition) is its submit input as `pending_job` made
  it, its first attempt scheduled or not: the first events of its history say which;
- what was read of either is kept: a closed run never changes, and an untouched job's
  input never does.

Every other row (a job that is running, was retried, waits at a gate or a clock, or
closed any other way) is asked of its workflow, as `GET /api/jobs/{id}` does. A workflow
that does not answer within ANSWER_WAIT_S (its workers are down or busy) does not hold
up the page, nor fail it: its row is read from its memo instead (`_recorded`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import NamedTuple, TypeVar

from pydantic import ValidationError
from temporalio.api.common.v1 import WorkflowExecution as ProtoExecution
from temporalio.api.enums.v1 import EventType, HistoryEventFilterType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus
from temporalio.service import RPCError

from api import visibility_queries
from workflows import search_attributes
from workflows.errors import JobNotFound, TemporalUnavailable
from workflows.job_states import ENDED, JobStatus, is_ended
from workflows.models import Job, JobInput, as_fired, pending_job
from workflows.names import attempt_activity_id

log = logging.getLogger(__name__)

K = TypeVar("K")
V = TypeVar("V")

# Rows read at once for one page.
FETCH_CONCURRENCY = 16
# Jobs (closed) and inputs (untouched pending jobs) kept once read: at most this many.
CACHE_MAX = 4000
# The first events of a job's history: its start, and its first workflow task's
# commands (the first attempt's activity among them).
FIRST_EVENTS = 16
# How long a page waits for a row's workflow to answer its query before it reads the row
# from its memo: a query waits for a worker (10 s, then a 503 for a single read), and a
# page would wait for its slowest row.
ANSWER_WAIT_S = 2.0
READ_TIMEOUT = timedelta(seconds=10)
# Closed runs whose close event holds the job (`JobReader.ended`).
ENDS_WITH_JOB = frozenset({WorkflowExecutionStatus.COMPLETED, WorkflowExecutionStatus.FAILED})


class Run(NamedTuple):
    """A run to read the history of: its workflow's id, and its own (None: the latest)."""

    id: str
    run_id: str | None


class Lru(OrderedDict[K, V]):
    """A dict that forgets its least recently used entries past `size`."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self._size = size

    def get_fresh(self, key: K) -> V | None:
        """The value of `key`, now the most recently used; None if absent."""
        value = self.get(key)
        if value is not None:
            self.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> V:
        """Keep `value` under `key`, forgetting the oldest past the size."""
        self[key] = value
        self.move_to_end(key)
        while len(self) > self._size:
            self.popitem(last=False)
        return value


Query = Callable[[str], Awaitable[Job]]


class JobReader:
    """Listed executions as full jobs, in order (see the module's text)."""

    def __init__(self, client: Client, query: Query) -> None:
        self._client = client
        self._query = query
        self._closed: Lru[tuple[str, str | None], Job] = Lru(CACHE_MAX)
        self._untouched: Lru[tuple[str, str | None], Job] = Lru(CACHE_MAX)

    async def read_all(self, executions: list[WorkflowExecution]) -> list[Job]:
        """Each execution's job, in order; one that has gone meanwhile is left out."""
        gate = asyncio.Semaphore(FETCH_CONCURRENCY)

        async def read(execution: WorkflowExecution) -> Job | None:
            async with gate:
                try:
                    return await self.read(execution)
                except JobNotFound:
                    return None

        jobs = await asyncio.gather(*(read(execution) for execution in executions))
        return [job for job in jobs if job is not None]

    async def read(self, execution: WorkflowExecution) -> Job:
        """One listed execution's job."""
        key = (execution.id, execution.run_id)
        if execution.status not in (None, WorkflowExecutionStatus.RUNNING):
            if (job := self._closed.get_fresh(key)) is None:
                job = await self._closed_job(execution)
                if job is None:
                    job, answered = await self._asked(execution)
                    if not answered:
                        return job  # its workflow's answer is kept, once it comes
                self._closed.put(key, job)
            return job
        if await self._untouched_memo(execution):
            job = self._untouched.get_fresh(key) or await self._untouched_job(execution)
            if job is not None:
                return self._untouched.put(key, job) if job.attempt else job
        return (await self._asked(execution))[0]

    async def _asked(self, execution: WorkflowExecution) -> tuple[Job, bool]:
        """The job as its workflow answers (True), or, when it does not within
        ANSWER_WAIT_S, as its memo recorded it (False)."""
        try:
            return await asyncio.wait_for(self._query(execution.id), ANSWER_WAIT_S), True
        except (TimeoutError, TemporalUnavailable) as err:
            job = await self._recorded(execution)
            if job is None:
                raise TemporalUnavailable(f"no worker answered for job {execution.id}") from err
            log.warning(
                "job %s read from its memo: its workflow did not answer within %g s",
                execution.id,
                ANSWER_WAIT_S,
            )
            return job, False

    async def _recorded(self, execution: WorkflowExecution) -> Job | None:
        """The job on its submit input, as its memo last recorded it: status, attempt,
        worker, fail reason, end time and latest transitions (EVENTS_MEMO_KEEP), its
        claim time its transition's; not what only its workflow holds (failure history,
        waits, result, heartbeat, host). A run that never recorded a memo: its input,
        with the status its search attribute shows. None if its input is unreadable."""
        _, inp = await self._submitted(execution, size=1)
        if inp is None:
            return None
        job = pending_job(inp)
        memo = await visibility_queries.events_memo(execution)
        if memo is None or not memo.transitions:
            shown = execution.typed_search_attributes.get(search_attributes.STATUS)
            with contextlib.suppress(ValueError):  # none, or one this code does not know
                job.status = JobStatus(shown or job.status)
            return job
        last = memo.transitions[-1]
        # The reason an attempt failed, or the job ended, stays its fail reason.
        reason = next((t.reason for t in reversed(memo.transitions) if t.status in ENDED), None)
        claimed = (
            t.ts
            for t in reversed(memo.transitions)
            if t.status == JobStatus.ASSIGNED and t.attempt == last.attempt
        )
        return job.model_copy(
            update={
                "status": last.status,
                "priority": memo.priority,
                "attempt": last.attempt,
                "attempts": last.attempts,
                "worker_id": last.worker_id,
                "claimed_at": next(claimed, None),
                "fail_reason": reason,
                "completed_at": last.ts if is_ended(last.status, last.reason) else None,
                "transitions": memo.transitions,
            }
        )

    def forget(self, execution: WorkflowExecution) -> None:
        """Drop what was kept of a run (deleted)."""
        self._closed.pop((execution.id, execution.run_id), None)
        self._untouched.pop((execution.id, execution.run_id), None)

    async def _history(
        self, execution: WorkflowExecution | Run, *, size: int, close_only: bool = False
    ) -> list[HistoryEvent]:
        request = GetWorkflowExecutionHistoryRequest(
            namespace=self._client.namespace,
            execution=ProtoExecution(workflow_id=execution.id, run_id=execution.run_id or ""),
            maximum_page_size=size,
            history_event_filter_type=(
                HistoryEventFilterType.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT
                if close_only
                else HistoryEventFilterType.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT
            ),
        )
        try:
            response = await self._client.workflow_service.get_workflow_execution_history(
                request, retry=True, timeout=READ_TIMEOUT
            )
        except RPCError as err:
            log.warning("cannot read the history of %s: %s", execution.id, err)
            return []
        return list(response.history.events)

    async def _decode(self, payloads: object, model: type[V]) -> V | None:
        try:
            values = await self._client.data_converter.decode(payloads, [model])  # type: ignore[arg-type]
        except (ValidationError, ValueError, TypeError) as err:
            log.warning("cannot decode a %s from a history: %s", model.__name__, err)
            return None
        value: V = values[0]
        return value

    async def _closed_job(self, execution: WorkflowExecution) -> Job | None:
        """The job a closed run ended with, from its close event; None when it holds none."""
        if execution.status not in ENDS_WITH_JOB:
            return None
        return await self.ended(execution.id, execution.run_id)

    async def ended(self, job_id: str, run_id: str | None = None) -> Job | None:
        """The job as its closed run ended, from the run's close event alone (one history
        read, no worker): a completed run returned it, and a run that failed (quarantined,
        failed for a final reason) carries it as its failure's detail. None for a run
        that ended any other way (cancelled, terminated) or is open: its workflow is
        asked then."""
        events = await self._history(Run(job_id, run_id), size=1, close_only=True)
        if not events:
            return None
        event = events[0]
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            payloads = event.workflow_execution_completed_event_attributes.result.payloads
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
            failure = event.workflow_execution_failed_event_attributes.failure
            if not failure.HasField("application_failure_info"):
                return None
            payloads = failure.application_failure_info.details.payloads
        else:
            return None
        return await self._decode(payloads[:1], Job) if payloads else None

    async def _untouched_memo(self, execution: WorkflowExecution) -> bool:
        """Whether the job's memo holds only its submit's transition."""
        memo = await visibility_queries.events_memo(execution)
        transitions = memo.transitions if memo is not None else []
        return len(transitions) == 1 and transitions[0].status == JobStatus.PENDING

    async def _submitted(
        self, execution: WorkflowExecution, *, size: int
    ) -> tuple[list[HistoryEvent], JobInput | None]:
        """The run's first `size` events and its submit input (a schedule's firing as
        fired); None for an input that cannot be read."""
        events = await self._history(execution, size=size)
        if not events:
            return events, None
        started = events[0].workflow_execution_started_event_attributes
        inp = await self._decode(started.input.payloads, JobInput)
        if inp is not None and inp.from_schedule:
            inp = as_fired(inp, execution.id, events[0].event_time.ToMilliseconds())
        return events, inp

    async def _untouched_job(self, execution: WorkflowExecution) -> Job | None:
        """An untouched plain job from its input, and its first attempt if scheduled;
        None for a job that takes the scheduled path or is pinned to a host (what it
        waits for is its workflow's to say)."""
        events, inp = await self._submitted(execution, size=FIRST_EVENTS)
        if inp is None or inp.spec.scheduled or inp.spec.pinned_host is not None:
            return None  # its waiting_for (a gate, a clock, a host) is its workflow's
        job = pending_job(inp)
        first = attempt_activity_id(1)
        if any(
            event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and event.activity_task_scheduled_event_attributes.activity_id == first
            for event in events
        ):
            job.attempt = 1
        return job
