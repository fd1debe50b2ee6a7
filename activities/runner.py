"""Run one solver as a subprocess in its own process group, within limits."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import resource
import shutil
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

# How long a solver asked to stop (SIGTERM) has before SIGKILL (STOP_GRACE_S).
KILL_GRACE_S = 10.0
READ_CHUNK = 64 * 1024


@dataclass(frozen=True)
class SolverRun:
    """What a finished solver process left behind."""

    exit_code: int | None
    stdout: bytes
    stderr_tail: str
    timed_out: bool
    output_overflow: bool


def kill_group(pgid: int, sig: signal.Signals) -> None:
    """Signal a whole process group; a group already gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def _read_bounded(
    stream: asyncio.StreamReader,
    limit: int,
    on_overflow: Callable[[], None],
    on_chunk: Callable[[bytes], None] | None = None,
) -> bytes:
    buffer = bytearray()
    overflowed = False
    while chunk := await stream.read(READ_CHUNK):
        if on_chunk is not None:
            on_chunk(chunk)
        if overflowed:
            continue
        buffer += chunk
        if len(buffer) > limit:
            overflowed = True
            del buffer[limit:]
            on_overflow()
    return bytes(buffer)


# Longest stderr line looked at for a progress report.
LINE_MAX = 1024


async def _read_tail(
    stream: asyncio.StreamReader,
    keep: int,
    on_line: Callable[[str], None] | None = None,
    on_chunk: Callable[[bytes], None] | None = None,
) -> bytes:
    tail = bytearray()
    line = bytearray()
    while chunk := await stream.read(READ_CHUNK):
        if on_chunk is not None:
            on_chunk(chunk)
        tail += chunk
        if len(tail) > keep:
            del tail[: len(tail) - keep]
        if on_line is None:
            continue
        *complete, rest = (bytes(line) + chunk).split(b"\n")
        for text in complete:
            on_line(text[:LINE_MAX].decode("utf-8", errors="replace"))
        line = bytearray(rest[:LINE_MAX])
    return bytes(tail)


async def run_solver(
    argv: list[str],
    *,
    max_runtime_s: float,
    max_output_bytes: int,
    log_tail_bytes: int,
    on_start: Callable[[], Awaitable[None]] | None = None,
    max_memory_bytes: int | None = None,
    on_stderr_line: Callable[[str], None] | None = None,
    stop_grace_s: float = KILL_GRACE_S,
    on_output: Callable[[Literal["stdout", "stderr"], bytes], None] | None = None,
    stop: Callable[[], Awaitable[None]] | None = None,
) -> SolverRun:
    """Run `argv`; TERM then KILL its whole group at `max_runtime_s` or on cancel.

    With `stop`, that is how the process is asked to end instead of a TERM (a container
    runtime's `stop`, which the runtime's own client cannot pass on when killed); the
    group still gets KILL if it has not exited `stop_grace_s` after `stop` returned.

    Whatever happens, the process group is killed before this returns, so children
    that outlive the solver do not outlive the job. With `max_memory_bytes`, the
    solver (and whatever it forks) gets that address-space limit (RLIMIT_AS), so a
    solver that allocates without bound fails on its own instead of starving the worker.
    """
    process = await asyncio.create_subprocess_exec(
        *_launcher(argv),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    if max_memory_bytes:
        # Applied from outside just after the start (no Python may run in the child
        # between fork and exec); the solver has at most begun its own start-up by then.
        with contextlib.suppress(ProcessLookupError):
            resource.prlimit(process.pid, resource.RLIMIT_AS, (max_memory_bytes, max_memory_bytes))
    pgid = process.pid
    overflow = asyncio.Event()
    assert process.stdout is not None and process.stderr is not None
    out = (lambda chunk: on_output("stdout", chunk)) if on_output is not None else None
    err = (lambda chunk: on_output("stderr", chunk)) if on_output is not None else None
    stdout_task = asyncio.create_task(
        _read_bounded(process.stdout, max_output_bytes, overflow.set, out)
    )
    stderr_task = asyncio.create_task(
        _read_tail(process.stderr, log_tail_bytes, on_stderr_line, err)
    )
    timed_out = False
    try:
        if on_start is not None:
            await on_start()
        waiter = asyncio.create_task(_exited(process))
        overflow_wait = asyncio.create_task(overflow.wait())
        done, _ = await asyncio.wait(
            {waiter, overflow_wait}, timeout=max_runtime_s, return_when=asyncio.FIRST_COMPLETED
        )
        overflow_wait.cancel()
        if waiter not in done:
            timed_out = not overflow.is_set()
            await _terminate(process, pgid, stop_grace_s, stop)
        await waiter
    except BaseException:
        await asyncio.shield(_terminate(process, pgid, stop_grace_s, stop))
        stdout_task.cancel()
        stderr_task.cancel()
        raise
    finally:
        kill_group(pgid, signal.SIGKILL)
    # The group is gone, so the pipes close: the exit status and the output are final.
    await process.wait()
    stdout = await stdout_task
    stderr = await stderr_task
    return SolverRun(
        exit_code=process.returncode,
        stdout=stdout,
        stderr_tail=stderr.decode("utf-8", errors="replace"),
        timed_out=timed_out,
        output_overflow=overflow.is_set(),
    )


def watch_solvers_by_pidfd() -> None:
    """Learn of each solver's exit through a pidfd polled by the running loop, as asyncio
    does by itself from Python 3.12 on. Python 3.11's default starts a thread per
    process that blocks in waitpid (about 0.3 ms of CPU per solver here). For the entry
    point of a process whose one event loop starts every subprocess (a worker, an
    agent): 3.11's pidfd watcher serves only the loop it is attached to."""
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:
        return  # a kernel without pidfds keeps the thread per process
    watcher = asyncio.PidfdChildWatcher()
    watcher.attach_loop(asyncio.get_running_loop())
    asyncio.set_child_watcher(watcher)


# The solver runs under util-linux's setpriv, which sets its parent-death signal and then
# execs it: a worker that dies outright (SIGKILL) takes its solver with it, so no solver
# runs on beside the re-run of its attempt. Not a Python preexec_fn: forking a
# multi-threaded worker and running Python in the child can deadlock that child, and
# the worker's event loop with it, waiting for the exec.
SETPRIV = shutil.which("setpriv")


def dying_with_parent(argv: list[str]) -> list[str]:
    """`argv` behind `setpriv --pdeathsig KILL`: the process is killed when the thread
    that started it dies. Only for a process started from a thread that lives as long
    as its supervisor does. Without setpriv, `argv` as is."""
    if SETPRIV is None:
        return argv
    return [SETPRIV, "--pdeathsig", "KILL", "--", *argv]


def _launcher(argv: list[str]) -> list[str]:
    """`argv` behind setpriv; a missing or non-executable program fails here, as an
    exec of it would."""
    program = shutil.which(argv[0])
    if program is None:
        code = errno.EACCES if os.path.exists(argv[0]) else errno.ENOENT
        raise OSError(code, os.strerror(code), argv[0])
    return dying_with_parent([program, *argv[1:]])


async def _exited(process: asyncio.subprocess.Process) -> None:
    """Until the solver process itself exits.

    `process.wait()` also waits for its pipes to close, which never happens while a
    child it left behind holds them: a solver that exited would look hung until its
    max_runtime. A pidfd tells the exit alone.
    """
    if process.returncode is not None:
        return
    try:
        fd = os.pidfd_open(process.pid)
    except ProcessLookupError:
        return  # already exited and reaped
    except OSError:
        await process.wait()  # no pidfd on this kernel
        return
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[None] = loop.create_future()

    def on_exit() -> None:
        if not exited.done():
            exited.set_result(None)

    try:
        loop.add_reader(fd, on_exit)
        try:
            await exited
        finally:
            loop.remove_reader(fd)
    finally:
        os.close(fd)


async def _terminate(
    process: asyncio.subprocess.Process,
    pgid: int,
    grace_s: float,
    stop: Callable[[], Awaitable[None]] | None = None,
) -> None:
    if stop is None:
        kill_group(pgid, signal.SIGTERM)
    else:
        await stop()
    try:
        await asyncio.wait_for(_exited(process), grace_s)
    except TimeoutError:
        kill_group(pgid, signal.SIGKILL)
        await _exited(process)
