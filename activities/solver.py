"""A job's solver, from its source to its outcome: find the command (a verified cached
download, or a command registered on this worker), run it with the job's params
within the worker's limits, and turn the finished process into a result or a typed
failure. Shared by the native worker's activity and the HTTP agent."""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from pydantic import JsonValue
from temporalio.exceptions import ApplicationError

from activities.runner import SolverRun, run_solver
from activities.solver_cache import SolverCache
from engine.clock import now_ms
from engine.log_store import OutputSink
from workflows.errors import AttemptFailureDetails, ErrorType
from workflows.models import AttemptResult, Progress, RunSpec


@dataclass(frozen=True)
class SolverLimits:
    """Bounds on one solver process."""

    max_output_bytes: int = 1024 * 1024
    log_tail_bytes: int = 16 * 1024
    max_memory_bytes: int | None = None
    # A solver stopped (cancel, stop, max runtime) gets SIGTERM, then SIGKILL after this.
    stop_grace_s: float = 10.0


def split_command(command: str | list[str]) -> list[str]:
    """A WORKER_SOLVERS entry as argv: a list as is, a string split like a shell."""
    return list(command) if isinstance(command, list) else shlex.split(command)


@dataclass
class SolverSource:
    """Where this worker's solvers come from: the cache, or registered commands."""

    cache: SolverCache
    registered: dict[str, list[str]] = field(default_factory=dict)

    async def argv(
        self, job: RunSpec, on_download: Callable[[], Awaitable[None]] | None = None
    ) -> list[str]:
        """The command for `job`'s solver, verified right before it runs.

        `on_download` runs before a download starts (a download can take a while).
        """
        if job.solver_url and job.solver_checksum:
            await self.cache.get(job.solver_url, job.solver_checksum, on_download)
            return [str(await self.cache.verify(job.solver_checksum))]
        command = self.registered.get(job.type)
        if not command:
            raise ApplicationError(
                f"no solver_url and no solver registered for type {job.type!r} on this worker",
                type=ErrorType.SOLVER_NOT_FOUND,
            )
        return list(command)


async def run(
    job: RunSpec,
    argv: list[str],
    limits: SolverLimits,
    on_start: Callable[[], Awaitable[None]] | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    log: OutputSink | None = None,
) -> SolverRun:
    """Run `argv --params <json>` within `job.max_runtime_ms` and `limits`; each
    progress line the solver writes to stderr goes to `on_progress`."""
    try:
        return await run_solver(
            [*argv, "--params", json.dumps(job.params, separators=(",", ":"))],
            max_runtime_s=job.max_runtime_ms / 1000,
            max_output_bytes=limits.max_output_bytes,
            log_tail_bytes=limits.log_tail_bytes,
            on_start=on_start,
            max_memory_bytes=limits.max_memory_bytes,
            on_stderr_line=progress_reader(on_progress),
            stop_grace_s=limits.stop_grace_s,
            on_output=log.write if log is not None else None,
        )
    except OSError as err:
        raise ApplicationError(
            f"cannot start solver {argv[0]}: {err.strerror}",
            type=ErrorType.SOLVER_START_FAILED,
        ) from err


def progress_reader(
    on_progress: Callable[[Progress], None] | None,
) -> Callable[[str], None] | None:
    """A stderr line reader that passes progress lines (JOBFORGE_PROGRESS) on."""
    if on_progress is None:
        return None

    def on_line(line: str) -> None:
        if found := Progress.from_line(line, now_ms()):
            on_progress(found)

    return on_line


def parse_result(stdout: bytes) -> tuple[JsonValue, str]:
    """stdout as JSON when it parses, else as text; and the sha256 of the result."""
    text = stdout.decode("utf-8", errors="replace")
    try:
        result: JsonValue = json.loads(text)
    except ValueError:
        result = text
    return result, hashlib.sha256(stdout).hexdigest()


def outcome(
    run: SolverRun, worker_id: str, max_output_bytes: int, what: str = "solver"
) -> AttemptResult:
    """Turn a finished process into a result, or raise the attempt's failure (its
    details: an AttemptFailureDetails with the stderr tail). `what` ran: a solver, or
    a container."""
    details = AttemptFailureDetails(log_tail=run.stderr_tail or None)
    if run.timed_out:
        raise ApplicationError(
            f"{what} exceeded max_runtime_ms",
            details,
            type=ErrorType.MAX_RUNTIME_EXCEEDED,
            non_retryable=True,
        )
    if run.output_overflow:
        raise ApplicationError(
            f"{what} printed more than {max_output_bytes} bytes",
            details,
            type=ErrorType.RESULT_TOO_LARGE,
        )
    if run.exit_code != 0:
        raise ApplicationError(
            f"{what} exited with code {run.exit_code}", details, type=ErrorType.SOLVER_EXIT
        )
    result, result_hash = parse_result(run.stdout)
    return AttemptResult(
        worker_id=worker_id, result=result, result_hash=result_hash, log_tail=details.log_tail
    )
