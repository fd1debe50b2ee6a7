"""The `run_job` activity: one attempt of one job on a native worker."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from temporalio import activity
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from activities import container, solver
from activities.container import ContainerRuntime
from activities.runner import SolverRun
from activities.solver import SolverLimits, SolverSource
from engine.clock import now_ms
from engine.log_store import AttemptLog, LogStore
from workflows.errors import AttemptFailureDetails, ErrorType
from workflows.models import (
    RUNNING_REPORT_DELAY_S,
    AttemptInput,
    AttemptReport,
    AttemptResult,
    Progress,
)
from workflows.names import CLAIM_UPDATE, REPORT_SIGNAL, RUN_JOB_ACTIVITY

# How often a running attempt heartbeats (at most a third of its heartbeat timeout). A
# stop or cancel reaches the worker only in a heartbeat's answer, so this bounds how long
# a stopped solver runs on. A heartbeat costs the dev server 2.5 ms of CPU and the worker
# 1.6 ms (`python -m bench.heartbeat`, docs/benchmarks.md): every 2 s, a running job
# costs about 2 ms of CPU a second; a job shorter than 2 s sends none.
HEARTBEAT_EVERY_S = 2.0

log = logging.getLogger("jobforge.worker")


@dataclass
class RunnerConfig:
    """What the activity needs from the worker's settings."""

    worker_id: str
    source: SolverSource
    limits: SolverLimits
    # Shared by every job type this process serves: WORKER_CORES jobs at once in all.
    slots: asyncio.Semaphore | None = None
    # Where each attempt's output is written as it comes (docs/api.md, logs).
    logs: LogStore | None = None
    # Container jobs run with this runtime (CONTAINER_RUNTIME); None: not on this worker.
    containers: ContainerRuntime | None = None
    # Its node name (WORKER_HOST), recorded on the job as `host`.
    host: str | None = None


class DelayedReport:
    """Send a report after a delay, unless settled first; settle says if it was sent."""

    def __init__(self, send: Callable[[], Awaitable[None]], delay_s: float) -> None:
        self._send = send
        self._delay_s = delay_s
        self._task: asyncio.Task[None] | None = None
        self._sending = False

    def arm(self) -> None:
        """Start the countdown."""
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        await asyncio.sleep(self._delay_s)
        self._sending = True
        await self._send()

    async def settle(self) -> bool:
        """Cancel a report still waiting; wait for one under way. True if it went out."""
        if self._task is None:
            return False
        if not self._sending:
            self._task.cancel()
            return False
        # The workflow must see `running` before the result, for an exact history.
        try:
            await self._task
        except RPCError:
            return False  # not delivered: the result carries the times instead
        return True


class JobActivities:
    """Activities bound to one worker process's client, solvers and settings."""

    def __init__(self, client: Client, config: RunnerConfig) -> None:
        self._client = client
        self._config = config
        # Attempts running now (past the slot wait); the host telemetry reports it.
        self.running = 0

    @activity.defn(name=RUN_JOB_ACTIVITY)
    async def run_job(self, inp: AttemptInput) -> AttemptResult:
        """Claim, fetch and verify the solver, run it with heartbeats, report."""
        info = activity.info()
        timeout = info.heartbeat_timeout.total_seconds() if info.heartbeat_timeout else 60.0
        # Heartbeat from the start: an attempt waiting for a slot (a worker serving
        # several types) is alive, and must not be failed by the heartbeat timeout.
        attempt = Attempt(self._client.get_workflow_handle(inp.job_id), inp, self._config)
        every_s = min(HEARTBEAT_EVERY_S, timeout / 3)
        beat = asyncio.create_task(_heartbeat_loop(every_s, attempt.heartbeat_details))
        try:
            slots = self._config.slots
            if slots is None:
                return await self._counted(attempt, waited=False)
            waited = slots.locked()
            async with slots:
                return await self._counted(attempt, waited=waited)
        except asyncio.CancelledError:
            if activity.is_worker_shutdown():
                raise ApplicationError(
                    "worker shut down during the attempt", type=ErrorType.WORKER_SHUTDOWN
                ) from None
            raise
        finally:
            beat.cancel()

    async def _counted(self, attempt: Attempt, *, waited: bool) -> AttemptResult:
        self.running += 1
        try:
            return await attempt.run(waited=waited)
        finally:
            self.running -= 1


class Attempt:
    """One attempt's run on this worker, and the reports it sends the job's workflow.

    A short attempt sends no report at all: its claim and start times travel with its
    result or failure instead (one signal and one workflow task fewer per job).
    """

    def __init__(
        self, handle: WorkflowHandle[Any, Any], inp: AttemptInput, config: RunnerConfig
    ) -> None:
        self._handle = handle
        self._inp = inp
        self._config = config
        self._claimed_at = now_ms()
        self._started_at = 0
        self._downloaded = False
        self._running = DelayedReport(lambda: self._report("running"), RUNNING_REPORT_DELAY_S)
        self._progress: Progress | None = None

    def heartbeat_details(self) -> list[Any]:
        """What every heartbeat carries: the solver's last progress, if it sent any
        (Temporal keeps the last heartbeat's details; the API reads them live)."""
        return [] if self._progress is None else [self._progress.model_dump(mode="json")]

    def _on_progress(self, progress: Progress) -> None:
        # Heartbeats are throttled by the worker (PROGRESS_PUBLISH_MS): many lines a
        # second cost at most one heartbeat RPC a second, and no history event.
        self._progress = progress
        activity.heartbeat(*self.heartbeat_details())

    async def run(self, waited: bool) -> AttemptResult:
        """Fetch the solver, run it, and return its result or raise its failure."""
        # A container job has no solver to fetch: its image is the runtime's business.
        argv = (
            await self._config.source.argv(self._inp, on_download=self._on_download)
            if self._inp.container is None
            else []
        )
        if self._inp.claim_first and not await self._claim():
            raise ApplicationError(
                "the attempt was recalled before its solver started",
                type=ErrorType.CANCELLED,
                non_retryable=True,
            )
        # A cancel while the attempt waited for a slot or a download reaches this worker
        # only with a heartbeat response; ask once, so a cancelled job's solver never
        # runs. An attempt that started at once needs no such look (one RPC saved).
        if (
            not self._inp.claim_first
            and (waited or self._downloaded)
            and not await attempt_still_wanted(self._handle, activity.info().activity_id)
        ):
            raise ApplicationError(
                "the attempt was cancelled before its solver started",
                type=ErrorType.CANCELLED,
                non_retryable=True,
            )
        logs = self._config.logs
        log = logs.writer(self._inp.job_id, self._inp.attempt) if logs is not None else None
        try:
            run = await self._execute(argv, log)
        finally:
            if log is not None:
                await log.close()
            # A solver that finished within the delay never sends `running`.
            sent = await self._running.settle()
        limits = self._config.limits
        what = "solver" if self._inp.container is None else "container"
        if sent:
            return solver.outcome(run, self._config.worker_id, limits.max_output_bytes, what)
        try:
            result = solver.outcome(run, self._config.worker_id, limits.max_output_bytes, what)
        except ApplicationError as err:
            # The solver ran: the failure carries the times, so `running` is recorded.
            details = AttemptFailureDetails(
                log_tail=run.stderr_tail or None,
                claimed_at=self._claimed_at,
                started_at=self._started_at,
                host=self._config.host,
            )
            raise ApplicationError(
                err.message, details, type=err.type, non_retryable=err.non_retryable
            ) from None
        return result.model_copy(
            update={
                "claimed_at": self._claimed_at,
                "started_at": self._started_at,
                "host": self._config.host,
            }
        )

    async def _execute(self, argv: list[str], log: AttemptLog | None) -> SolverRun:
        inp, config = self._inp, self._config
        if inp.container is None:
            return await solver.run(
                inp, argv, config.limits, self._on_start, self._on_progress, log
            )
        if config.containers is None:
            # Only workers with a runtime poll container queues: a misrouted attempt,
            # left for another worker.
            raise ApplicationError(
                "this worker has no container runtime (CONTAINER_RUNTIME)",
                type=ErrorType.CONTAINER_REFUSED,
            )
        return await container.run(
            config.containers,
            inp,
            inp.job_id,
            inp.attempt,
            config.worker_id,
            config.limits,
            self._on_start,
            self._on_progress,
            log,
        )

    async def _report(self, phase: Literal["assigned", "running"]) -> None:
        report = AttemptReport(
            attempt=self._inp.attempt,
            worker_id=self._config.worker_id,
            phase=phase,
            claimed_at=self._claimed_at,
            started_at=self._started_at or None,
            host=self._config.host,
        )
        await self._handle.signal(REPORT_SIGNAL, report)

    async def _claim(self) -> bool:
        """Ask the job's workflow for the attempt (it answers in order with a recall)."""
        report = AttemptReport(
            attempt=self._inp.attempt,
            worker_id=self._config.worker_id,
            phase="assigned",
            claimed_at=self._claimed_at,
            host=self._config.host,
        )
        granted: bool = await self._handle.execute_update(CLAIM_UPDATE, report, result_type=bool)
        return granted

    async def _on_download(self) -> None:
        self._downloaded = True
        if not self._inp.claim_first:  # a claim-first attempt is claimed after it
            await self._report("assigned")

    async def _on_start(self) -> None:
        self._started_at = now_ms()
        self._running.arm()


async def attempt_still_wanted(handle: WorkflowHandle[Any, Any], activity_id: str) -> bool:
    """Whether the job's workflow still waits for this attempt (not cancelled, not over).

    When Temporal cannot answer, the attempt goes on: a cancel still arrives with a
    heartbeat response.
    """
    try:
        desc = await handle.describe()
    except RPCError as err:
        log.warning("cannot check attempt %s of %s: %s", activity_id, handle.id, err)
        return True
    if desc.status != WorkflowExecutionStatus.RUNNING:
        return False
    for pending in desc.raw_description.pending_activities:
        if pending.activity_id == activity_id:
            return pending.state != PendingActivityState.PENDING_ACTIVITY_STATE_CANCEL_REQUESTED
    return False


async def _heartbeat_loop(every_s: float, details: Callable[[], list[Any]]) -> None:
    # The attempt's start counts as its first beat: a job shorter than the interval
    # costs no heartbeat RPC at all.
    while True:
        await asyncio.sleep(every_s)
        activity.heartbeat(*details())
