"""A container job's run: the runtime's client (`docker` or `podman`, one CLI) as the
attempt's process, through the same runner as a solver, so its stdout is the result,
its output goes to the log store, and max runtime, progress and heartbeats work alike.
What differs is the command line, the stop (`<runtime> stop -t STOP_GRACE_S`: a killed
client leaves its container running) and the cleanup: every container carries labels
naming its job and worker, a run first removes what an earlier attempt of its job left
(a worker SIGKILLed mid-run), and a worker removes its own leftovers when it starts."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from temporalio.exceptions import ApplicationError

from activities.runner import SolverRun, run_solver
from activities.solver import SolverLimits, progress_reader
from engine.log_store import OutputSink
from workflows.container_models import PARAMS_ENV, ContainerSpec, container_problem
from workflows.errors import AttemptFailureDetails, ErrorType
from workflows.models import Progress, RunSpec

log = logging.getLogger("jobforge.worker")

NAME_PREFIX = "jobforge-"
JOB_LABEL = "jobforge.job"
WORKER_LABEL = "jobforge.worker"
ATTEMPT_LABEL = "jobforge.attempt"
# The runtime's own failure (bad option, image not found, cannot start): not the job's.
RUNTIME_FAILED = 125
# How long a housekeeping call of the runtime (ps, rm) may take.
CLI_TIMEOUT_S = 60.0


def container_name(job_id: str, attempt: int) -> str:
    """The name of an attempt's container. Job ids are `[A-Za-z0-9_:-]`; a container's
    name takes no ':' (a schedule's firings have one), so it reads '.'."""
    return f"{NAME_PREFIX}{job_id.replace(':', '.')}-{attempt}"


@dataclass(frozen=True)
class ContainerRuntime:
    """A worker's container runtime and its CONTAINER_* policy and defaults."""

    program: str
    # Global options before the subcommand, for every call (`--runtime runc`).
    global_args: tuple[str, ...] = ()
    volume_prefixes: tuple[str, ...] = ()
    image_allow: tuple[str, ...] = ()
    memory_mb: int | None = None
    cpus: float | None = None

    def _cli(self, *args: str) -> list[str]:
        return [self.program, *self.global_args, *args]

    def run_argv(self, job: RunSpec, job_id: str, attempt: int, worker_id: str) -> list[str]:
        """`<runtime> run` for one attempt. Never privileged, never the host's network,
        no added capabilities: none of those options is ever built here."""
        spec = job.container
        assert spec is not None
        argv = self._cli(
            "run",
            "--rm",
            "--name",
            container_name(job_id, attempt),
            "--label",
            f"{JOB_LABEL}={job_id}",
            "--label",
            f"{ATTEMPT_LABEL}={attempt}",
            "--label",
            f"{WORKER_LABEL}={worker_id}",
            "--security-opt",
            "no-new-privileges",
        )
        memory_mb = spec.memory_mb or self.memory_mb
        if memory_mb:
            argv += ["--memory", f"{memory_mb}m"]
        cpus = spec.cpus or self.cpus
        if cpus:
            argv += ["--cpus", f"{cpus:g}"]
        for key, value in spec.env.items():
            argv += ["--env", f"{key}={value}"]
        params = json.dumps(job.params, separators=(",", ":"), ensure_ascii=False)
        argv += ["--env", f"{PARAMS_ENV}={params}"]
        for volume in spec.volumes:
            mode = ":ro" if volume.read_only else ""
            argv += ["--volume", f"{volume.source}:{volume.target}{mode}"]
        if spec.workdir is not None:
            argv += ["--workdir", spec.workdir]
        return [*argv, spec.image, *spec.command]

    def refusal(self, spec: ContainerSpec) -> str | None:
        """Why this worker's policy refuses `spec` (the API checks the same at submit,
        with its own settings); None if it may run."""
        problem = container_problem(spec, list(self.volume_prefixes), list(self.image_allow))
        return None if problem is None else f"{problem[0]}: {problem[1]}"

    async def call(self, *args: str) -> tuple[int, str]:
        """One housekeeping call: its exit code and output (stderr folded in)."""
        process = await asyncio.create_subprocess_exec(
            *self._cli(*args),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            out, _ = await asyncio.wait_for(process.communicate(), CLI_TIMEOUT_S)
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            raise
        return process.returncode or 0, out.decode("utf-8", errors="replace")

    async def labelled(self, label: str, value: str) -> list[str]:
        """Ids of the containers, running or not, with `label=value`."""
        code, out = await self.call("ps", "-a", "-q", "--filter", f"label={label}={value}")
        if code != 0:
            log.warning("%s ps failed (%d): %s", self.program, code, out.strip())
            return []
        return out.split()

    async def remove(self, *names: str) -> None:
        """Force-remove containers; gone already is fine. A running one is killed at once
        (its attempt is over): docker's `rm -f` sends SIGKILL, podman's would send SIGTERM
        and wait its stop timeout (10 s) first, so podman is told `--time 0`."""
        if names:
            at_once = ("--time", "0") if os.path.basename(self.program).startswith("podman") else ()
            await self.call("rm", "-f", *at_once, *names)

    async def stop(self, name: str, grace_s: float) -> None:
        """`<runtime> stop -t <grace>`: TERM to the container's init, KILL after grace."""
        await self.call("stop", "-t", str(math.ceil(grace_s)), name)

    async def remove_labelled(self, label: str, value: str) -> list[str]:
        """Remove every container with `label=value`; the ids removed."""
        found = await self.labelled(label, value)
        if found:
            log.warning("removing %d leftover container(s) with %s=%s", len(found), label, value)
            await self.remove(*found)
        return found


async def run(
    runtime: ContainerRuntime,
    job: RunSpec,
    job_id: str,
    attempt: int,
    worker_id: str,
    limits: SolverLimits,
    on_start: Callable[[], Awaitable[None]] | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    log_sink: OutputSink | None = None,
) -> SolverRun:
    """Run one attempt's container within `job.max_runtime_ms`; whatever ends it, the
    container is gone when this returns."""
    spec = job.container
    assert spec is not None
    refused = runtime.refusal(spec)
    if refused is not None:
        raise ApplicationError(refused, type=ErrorType.CONTAINER_REFUSED, non_retryable=True)
    # What an earlier attempt of this job left on this host (its worker was killed).
    await runtime.remove_labelled(JOB_LABEL, job_id)
    name = container_name(job_id, attempt)
    try:
        outcome = await run_solver(
            runtime.run_argv(job, job_id, attempt, worker_id),
            max_runtime_s=job.max_runtime_ms / 1000,
            max_output_bytes=limits.max_output_bytes,
            log_tail_bytes=limits.log_tail_bytes,
            on_start=on_start,
            # The limit is the container's (--memory); the runtime's client is not capped.
            max_memory_bytes=None,
            on_stderr_line=progress_reader(on_progress),
            stop_grace_s=limits.stop_grace_s,
            on_output=log_sink.write if log_sink is not None else None,
            stop=lambda: runtime.stop(name, limits.stop_grace_s),
        )
    except OSError as err:
        raise ApplicationError(
            f"cannot start container runtime {runtime.program}: {err.strerror}",
            type=ErrorType.SOLVER_START_FAILED,
        ) from err
    except BaseException:
        await asyncio.shield(runtime.remove(name))
        raise
    if outcome.exit_code != 0:
        # Stopped, timed out, or its client killed: `--rm` may not have run.
        await runtime.remove(name)
    if outcome.exit_code == RUNTIME_FAILED and not outcome.timed_out:
        raise ApplicationError(
            f"{runtime.program} could not run the container (exit {RUNTIME_FAILED}): "
            f"{_last_line(outcome.stderr_tail)}",
            AttemptFailureDetails(log_tail=outcome.stderr_tail or None),
            type=ErrorType.SOLVER_START_FAILED,
        )
    return outcome


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:500] if lines else "no output"
