"""Every write to jobs (submit, stop, cancel, re-queue, fail, clean up), and full-job reads.

The one job module that changes a job, always through its workflow. It reads one job by
its workflow's query and a page of full jobs through `job_history_reads` (history, no
replay); `job_visibility_reads` serves summaries and counts from visibility alone, and
`visibility_queries` holds the ordered listings all three stand on.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

import uuid6
from pydantic import ValidationError
from temporalio.api.common.v1 import WorkflowExecution as ProtoExecution
from temporalio.api.workflowservice.v1 import (
    DeleteWorkflowExecutionRequest,
    DescribeNamespaceRequest,
)
from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
    WorkflowUpdateFailedError,
)
from temporalio.common import (
    QueryRejectCondition,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from api import visibility_queries
from api.job_history_reads import FETCH_CONCURRENCY, JobReader
from api.settings import PRIORITY_LIST_SPLIT, ApiSettings
from api.tenancy import EVERY, Scope
from engine.clock import now_ms
from engine.connection import Route, TemporalSettings
from engine.directory import known_job_types, register_job_type
from engine.gates import Admitted, Gates
from engine.log_settings import LogSettings
from engine.log_store import LogStore
from engine.solver_urls import SolverUrlRefused, SolverUrlSettings, check_host, url_problem
from workflows import search_attributes
from workflows.container_models import container_problem
from workflows.errors import (
    ErrorType,
    InvalidField,
    JobConflict,
    JobGone,
    JobNotFound,
    PoolFull,
    TemporalCallFailed,
    TemporalUnavailable,
)
from workflows.job_machine import JobMachine
from workflows.job_states import OPEN, JobStatus
from workflows.models import (
    Job,
    JobInput,
    JobSpec,
    ListOrder,
    Progress,
    events_memo,
    pending_job,
    priority_key,
    tenant_gate_problem,
)
from workflows.names import (
    CANCEL_UPDATE,
    EVENTS_MEMO,
    JOB_QUERY,
    JOB_WORKFLOW,
    OPS_BY,
    OPS_FAIL_UPDATE,
    OPS_REQUEUE_UPDATE,
    STOP_UPDATE,
    attempt_activity_id,
)
from workflows.search_attributes import job_filter

log = logging.getLogger("jobforge.api")

QUERY_TIMEOUT = timedelta(seconds=10)
# Jobs one cleanup call deletes at most (call again for more).
CLEANUP_MAX = 1000
# The largest page of full jobs (each is one read); a larger `limit` is cut to this.
LIST_LIMIT_MAX = 500


@dataclass(frozen=True)
class Submission:
    """A submitted job, and whether this submission made it (False: its key named a
    job that was there; a keyed submission with a read-back cannot tell, and says
    False)."""

    job: Job
    made: bool


@dataclass
class JobList:
    """A page of jobs and the token of the next one."""

    jobs: list[Job]
    next_page_token: str | None


KNOWN_TYPES_TTL_S = 1.0
SPEC_FIELDS = set(JobSpec.model_fields)
# Who re-queues a job through the ops routes when the call names no caller (`by`).
REQUEUED_BY = OPS_BY


def job_id_for_key(key: str, tenant: str | None = None) -> str:
    """A stable job id for an idempotency key (each tenant's keys are its own)."""
    scoped = key if tenant is None else f"{tenant}\n{key}"
    return hashlib.sha256(scoped.encode()).hexdigest()[:32]


def new_job_id() -> str:
    """A generated job id: a UUIDv7 (RFC 9562) as 32 hex digits, so it says when it was
    made (a job gone from Temporal is then told apart from one that never was)."""
    return uuid6.uuid7().hex


def submitted_at_ms(job_id: str) -> int | None:
    """When a generated job id was made (epoch ms); None for any other id."""
    try:
        parsed = uuid.UUID(hex=job_id)
    except ValueError:
        return None
    if len(job_id) != 32 or parsed.version != 7:
        return None
    return parsed.int >> 80


class JobService:
    """What the API does to jobs, through their workflows on Temporal."""

    def __init__(
        self,
        client: Client,
        temporal: TemporalSettings,
        settings: ApiSettings,
        solver_urls: SolverUrlSettings,
        gates: Gates,
        logs: LogStore | None = None,
    ) -> None:
        self._client = client
        self._gates = gates
        self._logs = logs or LogSettings().open()
        self._temporal = temporal
        self._settings = settings
        self._solver_urls = solver_urls
        self._tokens = visibility_queries.PageTokens(settings.forge_ingest_secret)
        self._reader = JobReader(client, self.get)
        self._cutoffs = visibility_queries.Cutoffs()
        self._registered_types: set[str] = set()
        self._known_types: tuple[float, list[str]] = (-KNOWN_TYPES_TTL_S, [])
        self._retention_kept: timedelta | None = None
        # Told the time of each transition made through this service (the event feed
        # looks for it when it comes out of the settle window).
        self.on_transition: Callable[[int], None] | None = None

    # -- submit --------------------------------------------------------------------

    async def submit(
        self, spec: JobSpec, idempotency_key: str | None = None, by: str | None = None
    ) -> Job:
        """Start a JobWorkflow; with a key, the same key and body give the same job.
        `spec.tenant` is the job's tenant as the caller's scope stamped it; `by`, the
        caller, is on its first transition. A keyed job is read back from its workflow."""
        submitted = await self.submit_one(spec, idempotency_key, by, read_back=True)
        return submitted.job

    async def submit_one(
        self,
        spec: JobSpec,
        idempotency_key: str | None = None,
        by: str | None = None,
        *,
        read_back: bool,
    ) -> Submission:
        """`submit`, saying whether this call made the job. `read_back=False` (a
        batch): a keyed job this call made is answered as it starts, without a query;
        one that existed is read back and compared, as always."""
        queue, preferred_queue = await self.check(spec)
        job_id = job_id_for_key(idempotency_key, spec.tenant) if idempotency_key else new_job_id()
        created = now_ms()
        if spec.deadline_at is not None and spec.deadline_at <= created:
            raise InvalidField("deadline_at", "is in the past")
        gated = spec.group is not None or spec.pool is not None or spec.target is not None
        admitted = Admitted()
        start_later = spec.earliest_start_at is not None and spec.earliest_start_at > created
        if gated and not (start_later and spec.admission != "reject"):
            # Leases that are free now are granted before the job starts (it then holds
            # them from its first task); its place at the others is queued. A job with
            # a start time still to come asks when that time comes (an admission-only
            # pool answers now, and its lease is kept for the job).
            admitted = await self._gates.admit(job_id, spec, created, pool_only=start_later)
            refused = admitted.refused
            if refused is not None:
                assert spec.pool is not None
                if refused.reason == "cost_above_capacity":
                    raise InvalidField("cost_units", f"is above pool {spec.pool}'s capacity")
                raise PoolFull(spec.pool, refused.reason or "pool_full", refused.retry_after_s)
        inp = self._job_input(job_id, spec, created, (queue, preferred_queue), admitted, by=by)
        job = pending_job(inp)
        # Without a read-back, a keyed start fails on an existing job instead of joining
        # it: that failure is how the call tells a job it made from one that was there.
        joins = read_back or not idempotency_key
        start = self._start(
            inp,
            job,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING
            if joins
            else WorkflowIDConflictPolicy.FAIL,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        )
        made = True
        try:
            await asyncio.gather(start, self._register_type(spec.type))
        except WorkflowAlreadyStartedError:
            if not idempotency_key:
                raise
            made = False
        else:
            if admitted.later:
                # Its place at the gates after the one that queued it, in submission
                # order.
                await self._gates.enqueue(job_id, spec, created, admitted.later)
        if not idempotency_key or (made and not read_back):
            return Submission(job, made)
        existing = await self.get(job_id)
        if JobSpec.model_validate(existing.model_dump(include=SPEC_FIELDS)) != spec:
            raise JobConflict(
                "Idempotency-Key was already used with a different job body", id=job_id
            )
        if not made and not joins and admitted.later and existing.status in OPEN:
            # What a joining start does for a running job with a key used again: its
            # place at the gates, asked again.
            await self._gates.enqueue(job_id, spec, created, admitted.later)
        return Submission(existing, made and not joins)

    async def check(self, spec: JobSpec, prefix: str = "") -> tuple[str, str | None]:
        """What a job must pass before it is made (a 422 naming the field, after
        `prefix`): its tenant's gate names, its solver_url, its container, its host. Its
        attempt queue and a preferred host's queue (`_queues`)."""
        try:
            if (wrong_gate := tenant_gate_problem(spec)) is not None:
                raise InvalidField(*wrong_gate)
            if spec.solver_url is not None:
                await self._check_solver_url(spec.solver_url)
            if spec.container is not None:
                problem = container_problem(
                    spec.container,
                    self._settings.container_volume_prefixes,
                    self._settings.container_image_allow,
                )
                if problem is not None:
                    raise InvalidField(*problem)
            return self._queues(spec)
        except InvalidField as err:
            if prefix:
                field = f"{prefix}{err.extra['field']}"
                raise InvalidField(field, f"{prefix}{err.message}") from err
            raise

    async def fired_input(
        self, schedule_id: str, spec: JobSpec, created: int
    ) -> tuple[JobInput, TypedSearchAttributes]:
        """What a schedule starts at each firing, checked as `submit` checks a job (422
        naming `job.<field>`): the workflow's input and search attributes as `submit`
        makes them. The job asks its gates itself (nothing is admitted before the
        firing), and takes its id and creation time from its workflow. It starts with
        no events memo: its first task writes it with the job's own id and time, so the
        event stream and the job pages never see a transition stamped otherwise."""
        queues = await self.check(spec, prefix="job.")
        inp = self._job_input(
            schedule_id, spec, created, queues, Admitted(), by=f"schedule {schedule_id}"
        )
        inp.from_schedule = True
        await self._register_type(spec.type)
        return inp, self._search_attributes(inp)

    def _job_input(
        self,
        job_id: str,
        spec: JobSpec,
        created: int,
        queues: tuple[str, str | None],
        admitted: Admitted,
        resumed: Job | None = None,
        by: str | None = None,
    ) -> JobInput:
        """The workflow's input: the spec and what this API decides for it now; `by`, who
        submits (or re-queues) it."""
        gated = spec.group is not None or spec.pool is not None or spec.target is not None
        holds = spec.group is not None or spec.target is not None
        return JobInput(
            id=job_id,
            spec=spec,
            created_at=created,
            priority_key=priority_key(spec.priority, self._settings.priority_levels),
            activity_task_queue=queues[0],
            preferred_task_queue=queues[1],
            heartbeat_timeout_ms=spec.heartbeat_timeout_ms
            or int(self._settings.heartbeat_timeout_s * 1000),
            requeue_hold_ms=int(self._settings.requeue_hold_s * 1000) if holds else 0,
            cancel_wait_ms=int(self._settings.job_cancel_wait_s * 1000),
            gates=self._gates.of(spec),
            gate_defaults=self._settings.gate_defaults() if gated else None,
            granted=admitted.granted,
            gate_weight=admitted.weight,
            resumed=resumed,
            resumed_by=(by or REQUEUED_BY) if resumed is not None else None,
            submitted_by=by if resumed is None else None,
            stop_waits_for_work=True,
            dispatch_timeout_ms=spec.dispatch_timeout_ms or self._settings.dispatch_timeout_ms,
        )

    async def _start(
        self,
        inp: JobInput,
        job: Job,
        *,
        id_conflict_policy: WorkflowIDConflictPolicy,
        id_reuse_policy: WorkflowIDReusePolicy,
    ) -> WorkflowHandle[Any, Any]:
        """Start the job's workflow with its search attributes and first memo."""
        handle = await self._client.start_workflow(
            JOB_WORKFLOW,
            inp,
            id=inp.id,
            task_queue=self._temporal.task_queue,
            search_attributes=self._search_attributes(inp),
            id_conflict_policy=id_conflict_policy,
            id_reuse_policy=id_reuse_policy,
            static_summary=f"{inp.spec.type} job",
            memo={EVENTS_MEMO: events_memo(job)},
        )
        self._transitioned(job)
        return handle

    def _transitioned(self, job: Job) -> None:
        if self.on_transition is not None and job.transitions:
            self.on_transition(job.transitions[-1].ts)

    @staticmethod
    def _search_attributes(inp: JobInput) -> TypedSearchAttributes:
        spec = inp.spec
        return search_attributes.at_submit(
            spec.type,
            spec.priority,
            inp.created_at,
            group=spec.group,
            pool=spec.pool,
            target=spec.target,
            tenant=spec.tenant,
        )

    def _queues(self, spec: JobSpec) -> tuple[str, str | None]:
        """A job's attempt queue, and a preferred host's queue that comes before it
        (docs/workers.md, "Host pinning"): a required host's queue is its only one.
        Each is its type's queue of the job's route (docs/architecture.md, "Routing"):
        only a worker that can run the job polls it."""
        route = Route.of(solver_url=spec.solver_url, container=spec.container)
        shared = self._temporal.activity_queue(spec.type, route, spec.tenant)
        for field in ("require_host", "preferred_host"):
            host: str | None = getattr(spec, field)
            if host is None:
                continue
            if not self._settings.hosts.allows(host):
                raise InvalidField(field, f"{host!r} is not in AVAILABLE_HOSTS")
            pinned = self._temporal.host_queue(spec.type, host, route, spec.tenant)
            return (pinned, None) if field == "require_host" else (shared, pinned)
        return shared, None

    async def known_types(self) -> list[str]:
        """Every job type submitted so far (the registry's memo, cached for a second)."""
        cached_at, types = self._known_types
        if time.monotonic() - cached_at < KNOWN_TYPES_TTL_S:
            return types
        types = await known_job_types(self._client, self._temporal.task_queue)
        self._known_types = (time.monotonic(), types)
        return types

    async def _register_type(self, job_type: str) -> None:
        if job_type in self._registered_types:
            return
        await register_job_type(self._client, self._temporal, job_type)
        self._registered_types.add(job_type)

    async def _check_solver_url(self, url: str) -> None:
        problem = url_problem(url, self._solver_urls.schemes)
        if problem is not None:
            raise InvalidField("solver_url", problem)
        try:
            await check_host(url, self._solver_urls.allow_private_networks)
        except SolverUrlRefused as err:
            raise InvalidField("solver_url", err.message) from err

    # -- read ----------------------------------------------------------------------

    def _handle(self, job_id: str) -> WorkflowHandle[object, object]:
        return self._client.get_workflow_handle(job_id)

    async def get(self, job_id: str, scope: Scope = EVERY) -> Job:
        """The job as its workflow holds it; another tenant's than `scope`'s is a 404."""
        handle = self._handle(job_id)
        try:
            try:
                # A closed run is not replayed on a worker to answer: its close event
                # holds the job when it completed or failed (JobReader.ended).
                job: Job = await handle.query(
                    JOB_QUERY,
                    result_type=Job,
                    rpc_timeout=QUERY_TIMEOUT,
                    reject_condition=QueryRejectCondition.NOT_OPEN,
                )
            except WorkflowQueryRejectedError:
                job = await self._reader.ended(job_id) or await handle.query(
                    JOB_QUERY, result_type=Job, rpc_timeout=QUERY_TIMEOUT
                )
        except RPCError as err:
            if err.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
                raise JobNotFound(job_id) from err
            if err.status == RPCStatusCode.DEADLINE_EXCEEDED:
                raise TemporalUnavailable("no worker answered the job query") from err
            raise
        except WorkflowQueryFailedError as err:
            raise JobNotFound(job_id) from err
        if not scope.reaches(job.tenant):
            raise JobNotFound(job_id)
        return job

    async def check_scope(self, job_id: str, scope: Scope) -> None:
        """404 unless the job is within `scope`, before a change to it: nothing for a
        caller that reaches every tenant, else one describe (its search attributes, no
        workflow task)."""
        if scope.every:
            return
        try:
            desc = await self._handle(job_id).describe(rpc_timeout=QUERY_TIMEOUT)
        except RPCError as err:
            if err.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
                raise JobNotFound(job_id) from err
            raise
        if not scope.reaches(desc.typed_search_attributes.get(search_attributes.TENANT)):
            raise JobNotFound(job_id)

    async def live(self, job: Job) -> Job:
        """An assigned or running job (or one asked to stop, whose solver still runs)
        with what only its pending attempt knows: the last
        heartbeat (`heartbeat_at`, `lease_expires_at`) and progress. One describe call;
        nothing of it is in the job's history."""
        if job.status not in (JobStatus.ASSIGNED, JobStatus.RUNNING, JobStatus.STOP_REQUESTED):
            return job
        try:
            desc = await self._handle(job.id).describe(rpc_timeout=QUERY_TIMEOUT)
        except RPCError as err:
            log.warning("cannot read the attempt of %s: %s", job.id, err)
            return job
        activity_id = attempt_activity_id(job.attempt)
        pending = next(
            (p for p in desc.raw_description.pending_activities if p.activity_id == activity_id),
            None,
        )
        if pending is None:
            return job
        update: dict[str, Any] = {}
        if pending.HasField("last_heartbeat_time"):
            beat = pending.last_heartbeat_time.ToMilliseconds()
            update["heartbeat_at"] = max(beat, job.heartbeat_at or 0)
        if pending.heartbeat_details.payloads:
            details = await self._client.data_converter.decode(pending.heartbeat_details.payloads)
            with contextlib.suppress(ValidationError):
                update["progress"] = Progress.model_validate(details[0])
        heartbeat_at = update.get("heartbeat_at", job.heartbeat_at)
        if heartbeat_at is not None:
            timeout = job.heartbeat_timeout_ms or int(self._settings.heartbeat_timeout_s * 1000)
            update["lease_expires_at"] = heartbeat_at + timeout
        return job.model_copy(update=update)

    async def list_jobs(
        self,
        status: JobStatus | None,
        job_type: str | None,
        *,
        limit: int,
        offset: int = 0,
        order: ListOrder = ListOrder.RECENT,
        page_token: str | None = None,
        statuses: tuple[str, ...] = (),
        group: str | None = None,
        pool: str | None = None,
        target: str | None = None,
        worker: str | None = None,
        id_prefix: str | None = None,
        scope: Scope = EVERY,
    ) -> JobList:
        """One page of jobs, at a cost that grows with `offset + limit`, never with the
        jobs behind them (api/visibility_queries.py). `page_token` continues where the page
        that gave it ended; `offset` then skips further. Only `scope`'s jobs: its
        tenant is a clause of the query, which the page token is signed for, so a token
        from another scope's list is refused."""
        query = job_filter(
            status,
            job_type,
            statuses=statuses,
            group=group,
            pool=pool,
            target=target,
            worker=worker,
            id_prefix=id_prefix,
            tenant=scope.query_tenant,
        )
        signed_for = f"{order.value}:{query}"
        token = self._tokens.open(signed_for, page_token) if page_token else None
        if order == ListOrder.RECENT:
            rows = await visibility_queries.recent(
                self._client, query, offset=offset, limit=limit, token=token
            )
            after = rows.next_token
        else:
            start = offset + (int(token) if token and token.isdigit() else 0)
            chosen = {status.value} if status is not None else set(statuses)
            rows = await visibility_queries.by_priority(
                self._client,
                query,
                offset=start,
                limit=limit,
                thresholds=PRIORITY_LIST_SPLIT,
                # Open jobs only: the live backlog, read through its own index.
                backlog=bool(chosen) and chosen <= OPEN,
                cutoffs=self._cutoffs,
            )
            after = str(rows.next_offset).encode() if rows.next_offset is not None else None
        jobs = await self._reader.read_all(rows.executions)
        return JobList(jobs, self._tokens.seal(signed_for, after) if after else None)

    # -- stop ----------------------------------------------------------------------

    async def stop(self, job_id: str, scope: Scope = EVERY, by: str | None = None) -> Job:
        """Stop a job: pending or assigned, it is cancelled; running, it goes to
        `stop_requested`, and this asks Temporal to cancel its workflow, which cancels
        the attempt (the worker kills the solver) and ends it `stopped`. A repeated
        stop changes nothing; a job that ended otherwise is a 409."""
        await self.check_scope(job_id, scope)
        handle = self._handle(job_id)
        job = await self._job_update(job_id, STOP_UPDATE, ErrorType.NOT_STOPPABLE, *_by(by))
        if job is None:
            return await self._closed_as(job_id, "stopped", JobStatus.STOPPED)
        if job.status in (JobStatus.STOP_REQUESTED, JobStatus.STOPPED) or job.cancelled:
            await handle.cancel()
        return job

    # -- operator overrides --------------------------------------------------------

    async def ops_requeue(self, job_id: str, scope: Scope = EVERY, by: str | None = None) -> Job:
        """An operator's re-queue (the `ops_requeue` update): a running attempt ends and
        a new one starts; a job whose execution has closed runs again under its id
        (`_requeue_closed`). `by`: the caller, for its transitions."""
        await self.check_scope(job_id, scope)
        job = await self._job_update(job_id, OPS_REQUEUE_UPDATE, ErrorType.JOB_ENDED, *_by(by))
        return job if job is not None else await self._requeue_closed(job_id, by)

    async def ops_fail(
        self, job_id: str, reason: str, scope: Scope = EVERY, by: str | None = None
    ) -> Job:
        """An operator's fail (the `ops_fail` update): the job ends `quarantined` with
        `reason`; 409 with its status if it has ended. `by`: the caller, for its
        transitions."""
        await self.check_scope(job_id, scope)
        job = await self._job_update(job_id, OPS_FAIL_UPDATE, ErrorType.JOB_ENDED, reason, *_by(by))
        if job is not None:
            return job
        return await self._closed_as(job_id, "changed", cancelled_ok=False)

    async def _requeue_closed(self, job_id: str, by: str | None = None) -> Job:
        """Re-queue a job whose execution has closed (it ended, whatever its end): a new
        run under the same id carries the job as it ended (transitions, attempts,
        fail_history) and gives it max_attempts more attempts; then the closed run is
        deleted, so lists and counts hold the job once (docs/architecture.md, "Retry").
        It passes its gates again as a submitted job does."""
        handle = self._handle(job_id)
        try:
            closed = await handle.describe(rpc_timeout=QUERY_TIMEOUT)
        except RPCError as err:
            if err.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
                await self._gone_or_unknown(job_id)
            raise
        if closed.status == WorkflowExecutionStatus.RUNNING:
            return await self.get(job_id)  # re-queued meanwhile by another call
        try:
            # The closed run itself: another call may re-queue the job and delete this
            # run between the describe and this read. Its close event, if it holds it.
            ended = await self._reader.ended(job_id, closed.run_id) or (
                await self._client.get_workflow_handle(job_id, run_id=closed.run_id).query(
                    JOB_QUERY, result_type=Job, rpc_timeout=QUERY_TIMEOUT
                )
            )
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            return await self.get(job_id)  # that call's run
        created = now_ms()
        if ended.deadline_at is not None and ended.deadline_at <= created:
            # The operator's retry outlives a deadline that has passed.
            ended.deadline_at = None
        spec = JobSpec.model_validate(ended.model_dump(include=SPEC_FIELDS))
        admitted = Admitted()
        if spec.group is not None or spec.pool is not None or spec.target is not None:
            admitted = await self._gates.admit(job_id, spec, ended.created_at, requeue=True)
            if admitted.refused is not None:
                assert spec.pool is not None
                refused = admitted.refused
                raise PoolFull(spec.pool, refused.reason or "pool_full", refused.retry_after_s)
        inp = self._job_input(
            job_id, spec, ended.created_at, self._queues(spec), admitted, resumed=ended, by=by
        )
        resumed = ended.model_copy(deep=True)
        JobMachine(resumed).requeue(created, by=inp.resumed_by)
        try:
            await self._start(
                inp,
                resumed,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            )
        except WorkflowAlreadyStartedError:
            # Another call re-queued it first (a gate's admit is per job id: the lease
            # granted here is that run's).
            return await self.get(job_id)
        await self._delete_run(job_id, closed.run_id)
        if admitted.later:
            await self._gates.enqueue(job_id, spec, ended.created_at, admitted.later)
        return resumed

    async def _gone_or_unknown(self, job_id: str) -> NoReturn:
        """A job id Temporal does not know: 410 if its id says it was submitted before
        the namespace's retention began (it closed and was deleted), else 404."""
        submitted = submitted_at_ms(job_id)
        if submitted is not None:
            retention = await self._retention()
            if retention is not None and submitted < now_ms() - retention.total_seconds() * 1000:
                when = datetime.fromtimestamp(submitted / 1000, UTC).isoformat(timespec="seconds")
                raise JobGone(job_id, when, retention.total_seconds() / 86400)
        raise JobNotFound(job_id)

    async def _retention(self) -> timedelta | None:
        """How long the namespace keeps closed workflows (read once per process)."""
        if self._retention_kept is None:
            request = DescribeNamespaceRequest(namespace=self._client.namespace)
            answer = await self._client.workflow_service.describe_namespace(request)
            ttl = answer.config.workflow_execution_retention_ttl
            self._retention_kept = ttl.ToTimedelta() if ttl.seconds or ttl.nanos else None
        return self._retention_kept

    async def _delete_run(self, job_id: str, run_id: str | None) -> None:
        """Delete one closed run of a job (its history and its visibility row)."""
        request = DeleteWorkflowExecutionRequest(
            namespace=self._client.namespace,
            workflow_execution=ProtoExecution(workflow_id=job_id, run_id=run_id or ""),
        )
        try:
            await self._client.workflow_service.delete_workflow_execution(request)
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise

    async def cleanup(
        self,
        older_than_s: float,
        statuses: list[JobStatus],
        job_type: str | None = None,
        scope: Scope = EVERY,
    ) -> int:
        """Delete closed jobs that closed more than `older_than_s` ago (of `statuses`,
        if given): at most CLEANUP_MAX per call; the count deleted."""
        cutoff = datetime.fromtimestamp(now_ms() / 1000 - older_than_s, UTC)
        query = (
            f"{search_attributes.JOBS} AND ExecutionStatus != 'Running' "
            f"AND CloseTime < '{cutoff.isoformat()}'"
        )
        if statuses:
            listed = ", ".join(f"'{status.value}'" for status in statuses)
            query += f" AND {search_attributes.STATUS.name} IN ({listed})"
        if job_type is not None:
            query += f" AND {search_attributes.TYPE.name} = '{job_type}'"
        if not scope.every:
            query += f" AND {search_attributes.tenant_clause(scope.tenant)}"
        rows = await visibility_queries.recent(self._client, query, offset=0, limit=CLEANUP_MAX)
        gate = asyncio.Semaphore(FETCH_CONCURRENCY)

        async def delete(execution: WorkflowExecution) -> bool:
            request = DeleteWorkflowExecutionRequest(
                namespace=self._temporal.namespace,
                workflow_execution=ProtoExecution(
                    workflow_id=execution.id, run_id=execution.run_id
                ),
            )
            async with gate:
                try:
                    await self._client.workflow_service.delete_workflow_execution(request)
                except RPCError as err:
                    if err.status == RPCStatusCode.NOT_FOUND:
                        return False  # deleted meanwhile
                    raise
            self._reader.forget(execution)
            await self._logs.remove(execution.id)
            return True

        deleted = await asyncio.gather(*(delete(execution) for execution in rows.executions))
        return sum(deleted)

    # -- cancel --------------------------------------------------------------------

    async def _job_update(
        self, job_id: str, update: str, refusal: ErrorType, *args: object
    ) -> Job | None:
        """Run one of the job's updates: the job after it; None if the workflow has
        closed (no update reaches it); the job's own refusal (`refusal`) as a 409."""
        try:
            job: Job = await self._handle(job_id).execute_update(
                update, args=list(args), result_type=Job
            )
        except WorkflowUpdateFailedError as err:
            cause = err.cause
            if isinstance(cause, ApplicationError) and cause.type == refusal:
                status = cause.details[0] if cause.details else None
                raise JobConflict(cause.message, id=job_id, status=status) from err
            # Not the job's own refusal: most likely the id names a workflow that is not
            # a job (no such update there), which the read tells with a 404.
            await self.get(job_id)
            raise TemporalCallFailed(f"{update} failed: {cause or err}", id=job_id) from err
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            return None
        self._transitioned(job)
        return job

    async def _closed_as(
        self, job_id: str, wanted: str, *also: JobStatus, cancelled_ok: bool = True
    ) -> Job:
        """A job whose workflow has closed (or an unknown id: 404): the job if a cancel
        (`cancelled_ok`), or one of `also`, already ended it; else a 409 with its
        status."""
        job = await self.get(job_id)
        if (cancelled_ok and job.cancelled) or job.status in also:
            return job
        raise JobConflict(
            f"job is {job.status.value}; it has ended and cannot be {wanted}",
            id=job_id,
            status=job.status.value,
        )

    async def cancel(self, job_id: str, scope: Scope = EVERY, by: str | None = None) -> Job:
        """Cancel a pending or assigned job; 409 with the status otherwise. `by`: the
        caller, for its transition."""
        await self.check_scope(job_id, scope)
        handle = self._handle(job_id)
        job = await self._job_update(job_id, CANCEL_UPDATE, ErrorType.NOT_CANCELLABLE, *_by(by))
        if job is None:
            return await self._closed_as(job_id, "cancelled")
        # Ends the execution as Canceled in Temporal; the job is already cancelled.
        await handle.cancel()
        return job


def _by(by: str | None) -> tuple[str, ...]:
    """An update's optional `by` argument: sent only when there is a caller to name, so
    a call without one is the update as it always was."""
    return () if by is None else (by,)
