"""The `run_job` activity: one attempt of one job on a native worker."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import shlex
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import JsonValue
from temporalio import activity
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from activities.runner import SolverRun, run_solver
from activities.solver_cache import SolverCache
from workflows.job import REPORT_SIGNAL, RUN_JOB_ACTIVITY
from workflows.models import AttemptInput, AttemptReport, AttemptResult, ErrorType

HEARTBEAT_EVERY_S = 10.0
# A solver still running after this long is reported `running` right away; a faster
# one is recorded running when its result arrives (one signal and one workflow task
# fewer per short job).
RUNNING_REPORT_DELAY_S = 0.5

log = logging.getLogger("jobforge.worker")


def now_ms() -> int:
    """Wall-clock milliseconds, the spec's timestamp unit."""
    return int(time.time() * 1000)


@dataclass
class RunnerConfig:
    """What the activity needs from the worker's settings."""

    worker_id: str
    solvers: dict[str, list[str]] = field(default_factory=dict)
    max_output_bytes: int = 1024 * 1024
    log_tail_bytes: int = 16 * 1024
    max_memory_bytes: int | None = None
    # Shared by every job type this process serves: WORKER_CORES jobs at once in all.
    slots: asyncio.Semaphore | None = None


def parse_result(stdout: bytes) -> tuple[JsonValue, str]:
    """stdout as JSON when it parses, else as text; and the sha256 of the result."""
    text = stdout.decode("utf-8", errors="replace")
    try:
        result: JsonValue = json.loads(text)
    except ValueError:
        result = text
    return result, hashlib.sha256(stdout).hexdigest()


def solver_outcome(run: SolverRun, worker_id: str, max_output_bytes: int) -> AttemptResult:
    """Turn a finished process into a result, or raise the attempt's failure."""
    tail = run.stderr_tail or None
    if run.timed_out:
        raise ApplicationError(
            "solver exceeded max_runtime_ms",
            tail,
            type=ErrorType.MAX_RUNTIME_EXCEEDED,
            non_retryable=True,
        )
    if run.output_overflow:
        raise ApplicationError(
            f"solver printed more than {max_output_bytes} bytes",
            tail,
            type=ErrorType.RESULT_TOO_LARGE,
        )
    if run.exit_code != 0:
        raise ApplicationError(
            f"solver exited with code {run.exit_code}", tail, type=ErrorType.SOLVER_EXIT
        )
    result, result_hash = parse_result(run.stdout)
    return AttemptResult(worker_id=worker_id, result=result, result_hash=result_hash, log_tail=tail)


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
    """Activities bound to one worker process's client, cache and settings."""

    def __init__(self, client: Client, cache: SolverCache, config: RunnerConfig) -> None:
        self._client = client
        self._cache = cache
        self._config = config

    @activity.defn(name=RUN_JOB_ACTIVITY)
    async def run_job(self, inp: AttemptInput) -> AttemptResult:
        """Claim, fetch and verify the solver, run it with heartbeats, report."""
        info = activity.info()
        timeout = info.heartbeat_timeout.total_seconds() if info.heartbeat_timeout else 60.0
        # Heartbeat from the start: an attempt waiting for a slot (a worker serving
        # several types) is alive, and must not be failed by the heartbeat timeout.
        beat = asyncio.create_task(_heartbeat_loop(min(HEARTBEAT_EVERY_S, timeout / 3)))
        try:
            slots = self._config.slots
            if slots is None:
                return await self._attempt(inp, waited=False)
            waited = slots.locked()
            async with slots:
                return await self._attempt(inp, waited=waited)
        except asyncio.CancelledError:
            if activity.is_worker_shutdown():
                raise ApplicationError(
                    "worker shut down during the attempt", type=ErrorType.WORKER_SHUTDOWN
                ) from None
            raise
        finally:
            beat.cancel()

    async def _attempt(self, inp: AttemptInput, waited: bool) -> AttemptResult:
        info = activity.info()
        worker_id = self._config.worker_id
        claimed_at = now_ms()
        handle = self._client.get_workflow_handle(inp.job_id)
        downloaded = False

        async def report(phase: Literal["assigned", "running"], started_at: int | None) -> None:
            report = AttemptReport(
                attempt=inp.attempt,
                worker_id=worker_id,
                phase=phase,
                claimed_at=claimed_at,
                started_at=started_at,
            )
            await handle.signal(REPORT_SIGNAL, report)

        async def on_download() -> None:
            nonlocal downloaded
            downloaded = True
            await report("assigned", None)

        argv = await self._solver_argv(inp, on_download=on_download)
        # A cancel while the attempt waited for a slot or a download reaches this worker
        # only with a heartbeat response; ask once, so a cancelled job's solver never
        # runs. An attempt that started at once needs no such look (one RPC saved).
        if (waited or downloaded) and not await attempt_still_wanted(handle, info.activity_id):
            raise ApplicationError(
                "the attempt was cancelled before its solver started",
                type=ErrorType.CANCELLED,
                non_retryable=True,
            )
        started_at = 0
        running = DelayedReport(lambda: report("running", started_at), RUNNING_REPORT_DELAY_S)

        async def on_start() -> None:
            nonlocal started_at
            started_at = now_ms()
            running.arm()

        try:
            run = await run_solver(
                [*argv, "--params", json.dumps(inp.params, separators=(",", ":"))],
                max_runtime_s=inp.max_runtime_ms / 1000,
                max_output_bytes=self._config.max_output_bytes,
                log_tail_bytes=self._config.log_tail_bytes,
                on_start=on_start,
                max_memory_bytes=self._config.max_memory_bytes,
            )
        except OSError as err:
            raise ApplicationError(
                f"cannot start solver {argv[0]}: {err.strerror}",
                type=ErrorType.SOLVER_START_FAILED,
            ) from err
        finally:
            # A solver that finished within the delay never sends `running`: the result
            # carries its claim and start times and the workflow records both then.
            sent = await running.settle()
        times = {"claimed_at": claimed_at, "started_at": started_at}
        try:
            outcome = solver_outcome(run, worker_id, self._config.max_output_bytes)
        except ApplicationError as err:
            if sent:
                raise
            # The solver ran: the failure carries the times, so `running` is recorded.
            raise ApplicationError(
                err.message,
                err.details[0] if err.details else None,
                times,
                type=err.type,
                non_retryable=err.non_retryable,
            ) from None
        return outcome if sent else outcome.model_copy(update=times)

    async def _solver_argv(
        self, inp: AttemptInput, on_download: Callable[[], Awaitable[None]]
    ) -> list[str]:
        if inp.solver_url and inp.solver_checksum:
            await self._cache.get(inp.solver_url, inp.solver_checksum, on_download)
            path = await self._cache.verify(inp.solver_checksum)
            return [str(path)]
        command = self._config.solvers.get(inp.type)
        if not command:
            raise ApplicationError(
                f"no solver_url and no solver registered for type {inp.type!r} on this worker",
                type=ErrorType.SOLVER_NOT_FOUND,
            )
        return list(command)


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


async def _heartbeat_loop(every_s: float) -> None:
    # The attempt's start counts as its first beat: a job shorter than the interval
    # costs no heartbeat RPC at all.
    while True:
        await asyncio.sleep(every_s)
        activity.heartbeat()


def split_command(command: str | list[str]) -> list[str]:
    """A WORKER_SOLVERS entry as argv: a list as is, a string split like a shell."""
    return list(command) if isinstance(command, list) else shlex.split(command)
