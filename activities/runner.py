"""Run one solver as a subprocess in its own process group, within limits."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

KILL_GRACE_S = 5.0
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
    stream: asyncio.StreamReader, limit: int, on_overflow: Callable[[], None]
) -> bytes:
    buffer = bytearray()
    overflowed = False
    while chunk := await stream.read(READ_CHUNK):
        if overflowed:
            continue
        buffer += chunk
        if len(buffer) > limit:
            overflowed = True
            del buffer[limit:]
            on_overflow()
    return bytes(buffer)


async def _read_tail(stream: asyncio.StreamReader, keep: int) -> bytes:
    tail = bytearray()
    while chunk := await stream.read(READ_CHUNK):
        tail += chunk
        if len(tail) > keep:
            del tail[: len(tail) - keep]
    return bytes(tail)


async def run_solver(
    argv: list[str],
    *,
    max_runtime_s: float,
    max_output_bytes: int,
    log_tail_bytes: int,
    on_start: Callable[[], Awaitable[None]] | None = None,
) -> SolverRun:
    """Run `argv`; TERM then KILL its whole group at `max_runtime_s` or on cancel.

    Whatever happens, the process group is killed before this returns, so children
    that outlive the solver do not outlive the job.
    """
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    pgid = process.pid
    overflow = asyncio.Event()
    assert process.stdout is not None and process.stderr is not None
    stdout_task = asyncio.create_task(_read_bounded(process.stdout, max_output_bytes, overflow.set))
    stderr_task = asyncio.create_task(_read_tail(process.stderr, log_tail_bytes))
    timed_out = False
    try:
        if on_start is not None:
            await on_start()
        waiter = asyncio.create_task(process.wait())
        overflow_wait = asyncio.create_task(overflow.wait())
        done, _ = await asyncio.wait(
            {waiter, overflow_wait}, timeout=max_runtime_s, return_when=asyncio.FIRST_COMPLETED
        )
        overflow_wait.cancel()
        if waiter not in done:
            timed_out = not overflow.is_set()
            await _terminate(process, pgid)
        await waiter
    except BaseException:
        await asyncio.shield(_terminate(process, pgid))
        stdout_task.cancel()
        stderr_task.cancel()
        raise
    finally:
        kill_group(pgid, signal.SIGKILL)
    stdout = await stdout_task
    stderr = await stderr_task
    return SolverRun(
        exit_code=process.returncode,
        stdout=stdout,
        stderr_tail=stderr.decode("utf-8", errors="replace"),
        timed_out=timed_out,
        output_overflow=overflow.is_set(),
    )


async def _terminate(process: asyncio.subprocess.Process, pgid: int) -> None:
    kill_group(pgid, signal.SIGTERM)
    try:
        await asyncio.wait_for(process.wait(), KILL_GRACE_S)
    except TimeoutError:
        kill_group(pgid, signal.SIGKILL)
        await process.wait()
