"""The HTTP-agent bridge: the spec's worker routes onto Temporal's activity protocol.

Claim = a long-poll of the job types' activity task queues made by the API on the
agent's behalf; heartbeat / result / fail = record heartbeat / complete / fail the
current attempt's activity by workflow id and activity id. There is no lease table:
Temporal's matching gives each task to exactly one poll, and a poll is never cancelled
from our side (a cancelled poll may already own a task), so a task that arrives when no
claimer is left is handed back as `claim_abandoned`, which the workflow does not count.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from pydantic import JsonValue, ValidationError
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    PollActivityTaskQueueRequest,
    PollActivityTaskQueueResponse,
)
from temporalio.client import (
    AsyncActivityCancelledError,
    AsyncActivityHandle,
    Client,
    WorkflowExecutionStatus,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from api.job_service import QUERY_TIMEOUT, JobService
from api.tenancy import EVERY, Scope
from engine.clock import now_ms
from engine.connection import Route, TemporalSettings
from engine.hosts import HostSettings
from workflows import search_attributes
from workflows.errors import (
    AttemptFailureDetails,
    ErrorType,
    Failure,
    HostNotAvailable,
    JobConflict,
    TemporalUnavailable,
)
from workflows.job_states import CLAIMED, JobStatus
from workflows.models import (
    RUNNING_REPORT_DELAY_S,
    AttemptInput,
    AttemptReport,
    AttemptResult,
    ClaimedJob,
    Job,
    Progress,
)
from workflows.names import (
    BRIDGE_IDENTITY_PREFIX,
    CLAIM_JOB_UPDATE,
    REPORT_SIGNAL,
    RUN_JOB_ACTIVITY,
    attempt_activity_id,
)

log = logging.getLogger("jobforge.bridge")

POLL_RPC_TIMEOUT = timedelta(seconds=75)
MAX_POLLS_PER_QUEUE = 4
# How long a task that arrived after its claimer left waits for the next claimer.
HOLD_S = 1.0
# How long a claim waits for the job's workflow to answer before it hands the task back.
CLAIM_UPDATE_TIMEOUT = timedelta(seconds=10)
# A claim that took more than this share of the attempt's heartbeat timeout (a busy
# workflow worker) heartbeats the attempt before it answers.
SLOW_CLAIM_SHARE = 0.25
# How long a sent `running` report stays known: a heartbeat that still reads `assigned`
# (the report not applied yet) does not hold another one.
SENT_REPORT_KEPT_S = 30.0


@dataclass(frozen=True)
class Delivery:
    """A task from one queue's poll."""

    pump: QueuePump
    task: PollActivityTaskQueueResponse
    # When the poll got the task (monotonic s): the attempt's heartbeat timeout runs
    # from then.
    at: float = field(default_factory=time.monotonic)


@dataclass
class ClaimTiming:
    """Where one claim's time went (monotonic s): its `Server-Timing` header."""

    began: float = field(default_factory=time.monotonic)
    task: float | None = None  # the poll got the task the claim took
    sent: float | None = None  # the claim update was sent
    answered: float | None = None  # the job's workflow answered it

    def header(self) -> str:
        """`wait` for a task, `prepare` the claim (hand-off, decode), the `claim`
        update's round trip, and the `answer` built: `name;dur=<ms>` each."""
        now = time.monotonic()
        marks = [("wait", self.began, self.task), ("prepare", self.task, self.sent)]
        marks += [("claim", self.sent, self.answered), ("answer", self.answered, now)]
        return ", ".join(
            f"{name};dur={(end - start) * 1000:.1f}"
            for name, start, end in marks
            if start is not None and end is not None
        )


@dataclass
class Claimer:
    """A claimer waiting for a task on one or more queues."""

    worker_id: str
    future: asyncio.Future[Delivery]


@dataclass
class QueuePump:
    """Polls of one activity task queue, started only while claimers wait."""

    name: str
    waiters: deque[Claimer] = field(default_factory=deque)
    held: deque[Delivery] = field(default_factory=deque)
    polls: int = 0

    def live_waiters(self) -> int:
        """Claimers still waiting here."""
        while self.waiters and self.waiters[0].future.done():
            self.waiters.popleft()
        return sum(1 for w in self.waiters if not w.future.done())


@dataclass(frozen=True)
class Holding:
    """A job a worker holds: what addressing its attempt takes."""

    id: str
    attempt: int
    status: JobStatus

    @classmethod
    def of(cls, job: Job) -> Holding:
        return cls(job.id, job.attempt, job.status)


@dataclass
class HeldReport:
    """An attempt's `running` report, held after its first heartbeat as a native worker
    holds its own: sent after RUNNING_REPORT_DELAY_S unless the attempt ends first, when
    its result or failure carries the start time instead."""

    report: AttemptReport
    task: asyncio.Task[None] | None = None
    sending: bool = False


# Statuses a describe can take as held (a stop asked, or a cancel, takes a read).
_PLAINLY_HELD = frozenset(status.value for status in CLAIMED)
ATTEMPT_ID_PREFIX = attempt_activity_id(0).removesuffix("0")


class Bridge:
    """Claim, heartbeat, result and fail for HTTP agents."""

    def __init__(
        self,
        client: Client,
        temporal: TemporalSettings,
        jobs: JobService,
        hosts: HostSettings | None = None,
    ) -> None:
        self._client = client
        self._temporal = temporal
        self._jobs = jobs
        self._hosts = hosts or HostSettings()
        self._pumps: dict[str, QueuePump] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        # `running` reports held, by job id and attempt (this replica's heartbeats).
        self._reports: dict[tuple[str, int], HeldReport] = {}
        self._identity = f"{BRIDGE_IDENTITY_PREFIX}{socket.gethostname()}"

    # -- claim ---------------------------------------------------------------------

    async def claim(
        self,
        worker_id: str,
        types: list[str] | None,
        wait_s: float,
        gone: Callable[[], Awaitable[bool]] | None = None,
        container_types: list[str] | None = None,
        host: str | None = None,
        *,
        urls: bool = False,
        solver_types: list[str] | None = None,
        tenant: str | None = None,
        timing: ClaimTiming | None = None,
    ) -> ClaimedJob | None:
        """The next attempt for this worker, or None when none came within `wait_s`.

        `gone` tells whether the claimer hung up; a task is then passed on, not lost.
        `container_types`: the claimer also runs container jobs of these types (empty:
        of every type it claims); None: no container jobs. `host`: its node name,
        recorded on the job. Jobs pinned to it or to `worker_id` come too (their queues
        are polled beside the shared ones); a claimer outside AVAILABLE_HOSTS is refused.
        `urls`: jobs that name a solver_url come too (the generic claim: a design's own
        claim takes its types' other jobs only). `solver_types`: jobs that name none
        come only of these types; None: of every type claimed. `tenant`: the claimer's
        (its scope's); it polls that tenant's queues only, and without one, the queues
        of jobs without a tenant (docs/architecture.md, "Tenants"). `timing`: filled in
        with where the claim's time went.
        """
        timing = timing or ClaimTiming()
        hosts = self.hosts_of(worker_id, host)
        deadline = time.monotonic() + wait_s
        while True:
            queues = await self._queues(types, hosts, container_types, urls, solver_types, tenant)
            remaining = deadline - time.monotonic()
            delivery = await self._wait_for_task(worker_id, queues, max(remaining, 0.0), types)
            if delivery is None:
                if time.monotonic() >= deadline:
                    return None
                continue
            if gone is not None and await gone():
                self._deliver(delivery)
                return None
            timing.task = delivery.at
            claimed = await self._hand_over(worker_id, delivery, host or worker_id, timing)
            if claimed is not None:
                return claimed

    def hosts_of(self, worker_id: str, host: str | None) -> list[str]:
        """The host ids whose pinned jobs this claimer takes; HostNotAvailable (403)
        for a claimer outside AVAILABLE_HOSTS."""
        if not self._hosts.allows_worker(worker_id, host):
            raise HostNotAvailable(worker_id, host)
        return self._hosts.served(worker_id, host)

    async def _queues(
        self,
        types: list[str] | None,
        hosts: Sequence[str],
        container_types: list[str] | None = None,
        urls: bool = False,
        solver_types: list[str] | None = None,
        tenant: str | None = None,
    ) -> list[str]:
        """The queues of the claimed types' routes (docs/architecture.md, "Routing"):
        every host queue first (a held pinned task first), then the shared ones."""
        names = types if types else await self._jobs.known_types()
        plain = names if solver_types is None else [t for t in names if t in solver_types]
        routes = [(t, Route.PLAIN) for t in plain]
        if urls:
            routes += [(t, Route.URL) for t in names]
        if container_types is not None:
            routes += [(t, Route.CONTAINER) for t in container_types or names]
        pinned = self._temporal.host_queue
        queues = [pinned(t, host, route, tenant) for t, route in routes for host in hosts]
        shared = self._temporal.activity_queue
        return queues + [shared(t, route, tenant) for t, route in routes]

    async def _wait_for_task(
        self, worker_id: str, queues: list[str], wait_s: float, types: list[str] | None
    ) -> Delivery | None:
        for name in queues:
            pump = self._pumps.get(name)
            if pump is not None and pump.held:
                return pump.held.popleft()
        future: asyncio.Future[Delivery] = asyncio.get_running_loop().create_future()
        waiter = Claimer(worker_id, future)
        for name in queues:
            pump = self._pumps.setdefault(name, QueuePump(name))
            pump.waiters.append(waiter)
            self._ensure_polls(pump)
        # Without a type filter, look for newly submitted types now and then.
        slice_s = wait_s if types else min(wait_s, 1.0)
        try:
            return await asyncio.wait_for(asyncio.shield(future), slice_s)
        except TimeoutError:
            if future.done() and not future.cancelled():
                return future.result()
            future.cancel()
            return None

    def _ensure_polls(self, pump: QueuePump) -> None:
        while pump.polls < min(pump.live_waiters(), MAX_POLLS_PER_QUEUE):
            pump.polls += 1
            self._spawn(self._poll(pump))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _poll(self, pump: QueuePump) -> None:
        try:
            response = await self._client.workflow_service.poll_activity_task_queue(
                PollActivityTaskQueueRequest(
                    namespace=self._client.namespace,
                    task_queue=TaskQueue(name=pump.name),
                    identity=self._identity,
                ),
                retry=True,
                timeout=POLL_RPC_TIMEOUT,
            )
        except Exception as err:
            log.warning("poll of %s failed: %s", pump.name, err)
            response = None
            await asyncio.sleep(0.5)  # back off before the next poll: Temporal is down
        finally:
            pump.polls -= 1
        if response is not None and response.task_token:
            self._deliver(Delivery(pump, response))
        self._ensure_polls(pump)

    def _deliver(self, delivery: Delivery) -> None:
        pump = delivery.pump
        while pump.waiters:
            waiter = pump.waiters.popleft()
            if not waiter.future.done():
                waiter.future.set_result(delivery)
                return
        pump.held.append(delivery)
        self._spawn(self._abandon_later(delivery))

    async def _abandon_later(self, delivery: Delivery) -> None:
        await asyncio.sleep(HOLD_S)
        held = delivery.pump.held
        if delivery in held:
            held.remove(delivery)
            await self._abandon(delivery.task)

    async def _abandon(self, task: PollActivityTaskQueueResponse) -> None:
        handle = self._client.get_async_activity_handle(task_token=task.task_token)
        with contextlib.suppress(RPCError):
            await handle.fail(
                ApplicationError("no claimer took the task", type=ErrorType.CLAIM_ABANDONED)
            )

    async def _hand_over(
        self, worker_id: str, delivery: Delivery, host: str, timing: ClaimTiming
    ) -> ClaimedJob | None:
        """Record the claim in the job's workflow; None if the job no longer wants it.

        One update, which answers with the job as the claim left it: no read before it,
        and nothing recorded unless it answers. A claim that fails, or that the job
        refuses (a pause recalled the attempt, the job was cancelled), hands the task
        back as `claim_abandoned`, which the job does not count.
        """
        task = delivery.task
        (inp,) = await self._client.data_converter.decode(task.input.payloads, [AttemptInput])
        assert isinstance(inp, AttemptInput)
        report = AttemptReport(
            attempt=inp.attempt,
            worker_id=worker_id,
            phase="assigned",
            claimed_at=now_ms(),
            host=host,
        )
        workflow = self._client.get_workflow_handle(inp.job_id)
        timing.sent = time.monotonic()
        try:
            job = await workflow.execute_update(
                CLAIM_JOB_UPDATE,
                report,
                result_type=Job | None,  # type: ignore[arg-type]
                rpc_timeout=CLAIM_UPDATE_TIMEOUT,
            )
        except Exception as err:
            # Closed, refused, or no answer in time (no workflow worker): handed back.
            # Should the claim still be applied later, the hand-back undoes it: the job
            # does not count an attempt it gave a claimer who never heard of it.
            await self._abandon(task)
            if isinstance(err, RPCError) and err.status == RPCStatusCode.NOT_FOUND:
                return None  # the job closed meanwhile
            if isinstance(err, WorkflowUpdateRPCTimeoutOrCancelledError):
                raise TemporalUnavailable("no worker answered the claim") from err
            raise
        timing.answered = time.monotonic()
        if job is None:
            await self._abandon(task)
            return None
        timeout_ms = int(task.heartbeat_timeout.ToMilliseconds()) or 60_000
        if (time.monotonic() - delivery.at) * 1000 > timeout_ms * SLOW_CLAIM_SHARE:
            beat_at = now_ms()
            if await self._restart_heartbeat_clock(task):
                job = job.model_copy(update={"heartbeat_at": beat_at})  # the lease it has
        return ClaimedJob.of(job, inp, heartbeat_timeout_ms=timeout_ms)

    async def _restart_heartbeat_clock(self, task: PollActivityTaskQueueResponse) -> bool:
        """Heartbeat a just-claimed attempt: its heartbeat timeout ran while the claim
        waited for the workflow, and the claimer gets the whole of it from its answer,
        as a native worker has from its attempt's start. Best effort: an attempt that
        ended meanwhile (cancelled, say) is the claimer's first heartbeat's to learn."""
        handle = self._client.get_async_activity_handle(task_token=task.task_token)
        try:
            await handle.heartbeat()
        except (RPCError, AsyncActivityCancelledError):
            return False
        return True

    # -- heartbeat, result, fail ------------------------------------------------------

    async def _held_by(
        self, job_id: str, worker_id: str, job: Job | None = None, scope: Scope = EVERY
    ) -> Job:
        """The job, if `worker_id` holds it (`job`: a read the caller already made).
        A claim is applied before its answer, so a job still pending is not held."""
        job = job or await self._jobs.get(job_id, scope)
        if job.cancelled or job.status in (JobStatus.STOP_REQUESTED, JobStatus.STOPPED):
            raise _cancelled(job_id)
        if job.status not in CLAIMED or job.worker_id != worker_id:
            raise JobConflict(
                f"job is not held by worker {worker_id} (status {job.status.value})",
                id=job_id,
                status=job.status.value,
                cancelled=False,
                stop=True,
            )
        return job

    async def _holding(self, job_id: str, worker_id: str, scope: Scope) -> Holding | None:
        """`worker_id`'s hold on the job when a describe shows it plainly: assigned or
        running to it (its search attributes), its attempt pending and not being
        cancelled. None when it takes a read of the job to say (not held, cancelled,
        stopping, another tenant's, or no answer). A describe is answered by the server
        alone; a read (a query) also takes a workflow worker's turn."""
        try:
            desc = await self._client.get_workflow_handle(job_id).describe(
                rpc_timeout=QUERY_TIMEOUT
            )
        except RPCError:
            return None
        found = desc.typed_search_attributes
        status = found.get(search_attributes.STATUS)
        if (
            desc.status != WorkflowExecutionStatus.RUNNING
            or status not in _PLAINLY_HELD
            or found.get(search_attributes.WORKER) != worker_id
            or not scope.reaches(found.get(search_attributes.TENANT))
        ):
            return None
        attempts = [
            p.activity_id
            for p in desc.raw_description.pending_activities
            if p.activity_type.name == RUN_JOB_ACTIVITY
            and p.state != PendingActivityState.PENDING_ACTIVITY_STATE_CANCEL_REQUESTED
        ]
        if len(attempts) != 1 or not attempts[0].startswith(ATTEMPT_ID_PREFIX):
            return None
        number = attempts[0].removeprefix(ATTEMPT_ID_PREFIX)
        if not number.isdigit():
            return None
        return Holding(job_id, int(number), JobStatus(status))

    def _attempt_activity(self, job: Job | Holding) -> AsyncActivityHandle:
        """The job's current attempt, addressed by workflow id and activity id."""
        return self._client.get_async_activity_handle(
            workflow_id=job.id, run_id=None, activity_id=attempt_activity_id(job.attempt)
        )

    async def heartbeat(
        self,
        job_id: str,
        worker_id: str,
        progress: JsonValue,
        scope: Scope = EVERY,
        *,
        hold_running: bool = True,
    ) -> None:
        """Keep the attempt alive; the first heartbeat moves the job to running. Another
        tenant's job than `scope`'s is a 404, here and in `result` and `fail`.

        As a native worker does, the `running` report goes out RUNNING_REPORT_DELAY_S
        after the first heartbeat, only if the attempt has not ended by then: a short
        job's result carries its start time instead (one signal and one workflow task
        fewer). `hold_running=False`: sent at once (a design's explicit status report).
        """
        held = await self._holding(job_id, worker_id, scope)
        if held is None:
            held = Holding.of(await self._held_by(job_id, worker_id, scope=scope))
        handle = self._attempt_activity(held)
        started = now_ms()
        try:
            if held.status == JobStatus.ASSIGNED and not hold_running:
                report = self._running_report(held, worker_id, started)
                await self._client.get_workflow_handle(held.id).signal(REPORT_SIGNAL, report)
            await handle.heartbeat(*([_stamped(progress)] if progress is not None else []))
        except AsyncActivityCancelledError as err:
            self._drop_report(held)
            raise _cancelled(job_id) from err
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            self._drop_report(held)
            raise _attempt_over(job_id) from err
        if held.status == JobStatus.ASSIGNED and hold_running:
            self._hold_running(held.id, self._running_report(held, worker_id, started))
        elif held.status != JobStatus.ASSIGNED:
            self._drop_report(held)  # reported running: by another replica, say

    @staticmethod
    def _running_report(held: Holding, worker_id: str, started: int) -> AttemptReport:
        # The claim is applied: the report's claim time and host go unused.
        return AttemptReport(
            attempt=held.attempt,
            worker_id=worker_id,
            phase="running",
            claimed_at=started,
            started_at=started,
        )

    def _hold_running(self, job_id: str, report: AttemptReport) -> None:
        """Hold the attempt's `running` report, unless one is held or sent already."""
        key = (job_id, report.attempt)
        if key not in self._reports:
            held = HeldReport(report)
            self._reports[key] = held
            held.task = self._spawn(self._send_later(key, held))

    async def _send_later(self, key: tuple[str, int], held: HeldReport) -> None:
        await asyncio.sleep(RUNNING_REPORT_DELAY_S)
        held.sending = True
        await self._report_running(key[0], held.report)
        # Kept a while, then forgotten (a job whose agent went silent, say).
        loop = asyncio.get_running_loop()
        loop.call_later(SENT_REPORT_KEPT_S, self._forget_report, key, held)

    def _forget_report(self, key: tuple[str, int], held: HeldReport) -> None:
        if self._reports.get(key) is held:
            del self._reports[key]

    async def _report_running(self, job_id: str, report: AttemptReport) -> None:
        """Send a `running` report. A job that ended meanwhile (its result reached
        another replica) has no use for it: a closed workflow is not found, and a
        running one ignores a report of an attempt that is not its current one."""
        try:
            await self._client.get_workflow_handle(job_id).signal(REPORT_SIGNAL, report)
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                log.warning("running report of %s not sent: %s", job_id, err)

    async def _settle_report(self, job: Job | Holding) -> int | None:
        """The attempt is ending: a report still held is not sent, and one under way is
        waited for (the workflow sees `running` before the end, as it happened). The
        start time it holds is returned for the result or failure to carry, and kept
        for a retry of an end report that did not go through (until `_drop_report`)."""
        key = (job.id, job.attempt)
        held = self._reports.get(key)
        if held is None:
            return None
        if held.task is not None:
            if held.sending:
                await asyncio.shield(held.task)
            else:
                held.task.cancel()
                loop = asyncio.get_running_loop()
                loop.call_later(SENT_REPORT_KEPT_S, self._forget_report, key, held)
            held.task = None
        return held.report.started_at

    def _drop_report(self, job: Job | Holding) -> None:
        """The attempt ended (cancelled, stopped, over): its held report is not sent."""
        held = self._reports.pop((job.id, job.attempt), None)
        if held is not None and held.task is not None and not held.sending:
            held.task.cancel()

    async def result(
        self,
        job_id: str,
        worker_id: str,
        result: JsonValue,
        result_hash: str | None,
        idempotency_key: str | None,
        scope: Scope = EVERY,
    ) -> None:
        """Complete the attempt; the same result again is accepted and changes nothing."""
        computed = result_hash or hashlib.sha256(_canonical(result)).hexdigest()
        key = idempotency_key or computed
        held = await self._holding(job_id, worker_id, scope)
        if held is None:
            job = await self._jobs.get(job_id, scope)
            if job.status == JobStatus.COMPLETED:
                self._same_result(job, key)
                return
            held = Holding.of(await self._held_by(job_id, worker_id, job))
        handle = self._attempt_activity(held)
        outcome = AttemptResult(
            worker_id=worker_id,
            result=result,
            result_hash=computed,
            result_key=key,
            # A job whose running report was held here: the workflow records `running`
            # at its first heartbeat. Without one (no heartbeat, or it reached another
            # replica), a job still `assigned` is recorded running at its result.
            started_at=await self._settle_report(held),
        )
        try:
            await handle.complete(outcome)
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            self._drop_report(held)
            # A concurrent duplicate may have completed it a moment ago.
            latest = await self._jobs.get(job_id)
            if latest.status == JobStatus.COMPLETED:
                self._same_result(latest, key)
                return
            raise _attempt_over(job_id) from err
        self._drop_report(held)

    @staticmethod
    def _same_result(job: Job, key: str) -> None:
        if job.result_key != key and job.result_hash != key:
            raise JobConflict("job is already completed with a different result", id=job.id)

    async def fail(
        self, job_id: str, worker_id: str, reason: str, scope: Scope = EVERY
    ) -> JobStatus:
        """Fail the attempt: re-queued, or quarantined when attempts are used up. An
        agent that killed its solver after a stop reports reason `stopped`: the job is
        stopped (or about to be), and the report is answered with that, not a 409."""
        job = await self._jobs.get(job_id, scope)
        if (
            reason.strip() == STOPPED_REASON
            and job.status in (JobStatus.STOP_REQUESTED, JobStatus.STOPPED)
            and job.worker_id == worker_id
        ):
            self._drop_report(job)
            if job.status == JobStatus.STOP_REQUESTED:
                await self._stopped(job)
            return JobStatus.STOPPED
        job = await self._held_by(job_id, worker_id, job)
        handle = self._attempt_activity(job)
        # As a result does, the failure carries a held report's start time.
        started_at = await self._settle_report(job)
        details = [AttemptFailureDetails(started_at=started_at)] if started_at else []
        try:
            await handle.fail(ApplicationError(reason, *details, type=ErrorType.AGENT_FAILURE))
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            self._drop_report(job)
            raise _attempt_over(job_id) from err
        self._drop_report(job)
        final = Failure.parse(reason).final
        return (
            JobStatus.QUARANTINED
            if final or job.attempts >= job.max_attempts
            else JobStatus.PENDING
        )

    def expire_claim_after(self, job: Job, limit_s: float) -> None:
        """In `limit_s`, end the attempt `claim_expired` if its claimer has not reported
        running by then (003's QUEUE_CLAIM_TTL). Held by this process only: if it
        exits first, the heartbeat timeout ends such a claim instead."""
        self._spawn(self._expire_claim(job.id, job.attempt, job.worker_id, limit_s))

    async def _expire_claim(
        self, job_id: str, attempt: int, worker_id: str | None, limit_s: float
    ) -> None:
        await asyncio.sleep(limit_s)
        if (job_id, attempt) in self._reports:
            return  # its claimer reported running here: the report is held or sent
        job = await self._jobs.get(job_id)
        if not (
            job.status == JobStatus.ASSIGNED
            and job.attempt == attempt
            and job.worker_id == worker_id
        ):
            return
        with contextlib.suppress(RPCError):  # ended meanwhile: nothing to expire
            await self._attempt_activity(job).fail(
                ApplicationError(
                    f"no running report within {limit_s:g} s of the claim",
                    type=ErrorType.CLAIM_EXPIRED,
                )
            )

    async def _stopped(self, job: Job) -> None:
        """The agent's solver is gone after a stop: the attempt ends cancelled, and the
        job reads `stopped` (it stays `stop_requested` until then, holding its leases).
        An attempt whose cancel is not recorded yet ends failed `stopped` instead; one
        that is over already has nothing left to end."""
        handle = self._attempt_activity(job)
        try:
            await handle.report_cancellation()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return
            log.info("attempt of %s not cancelled yet (%s): failing it stopped", job.id, err)
            with contextlib.suppress(RPCError):
                await handle.fail(ApplicationError(STOPPED_REASON, type=ErrorType.AGENT_FAILURE))


# The reason an agent reports once it killed its solver after a stop (docs/workers.md).
STOPPED_REASON = "stopped"


def _stamped(progress: JsonValue) -> JsonValue:
    """An agent's progress, with the time it reached the API when it is the jobforge
    shape (`{fraction, message}`); any other value is kept as sent."""
    if isinstance(progress, dict) and "fraction" in progress:
        with contextlib.suppress(ValidationError):
            found = Progress.model_validate({**progress, "at": now_ms()})
            dumped: JsonValue = found.model_dump(mode="json")
            return dumped
    return progress


def _cancelled(job_id: str) -> JobConflict:
    # `stop`: the agent must stop its solver (a cancel, or a stop of a running job).
    return JobConflict(
        "job was cancelled or stopped; stop it", id=job_id, cancelled=True, stop=True
    )


def _attempt_over(job_id: str) -> JobConflict:
    return JobConflict("the attempt is over (timed out or replaced)", id=job_id, stop=True)


def _canonical(value: JsonValue) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
