"""Processes the tests start, and the benches reuse (bench/harness.py imports these).

- `Proc` and `spawn`: a child process with its log file; `output()`, `wait_for(text)`,
  `stop(sig, timeout)`, `kill()`. `jobforge(...)` is the command line of the CLI.
- `wait_until`: readiness as a poll with a deadline, never a bare sleep.
- `CHROMIUM`, `CHROMIUM_ARGS`: Debian's headless Chromium and the flags it needs here.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from tests.zygote import Forked

T = TypeVar("T")

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
# Set by tests/conftest.py: `spawn` forks `python -m worker.cli ...` (and design 002's
# `worker.runforge_cli`) from the test process's zygote (tests/zygote.py) rather than
# start a fresh interpreter. The benches leave it off.
FORK_JOBFORGE = False
# Called with the command line of each process `spawn` forks (tests/tiers.py checks them).
ON_FORK: list[Callable[[list[str]], None]] = []

# Debian's Chromium, headless, and the flags this closed network needs (without the
# background-networking ones it keeps trying hosts it cannot reach).
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def wait_until(
    condition: Callable[[], T | None],
    *,
    timeout: float = 60.0,
    interval: float = 0.05,
    what: str = "",
) -> T:
    """Poll `condition` until it returns something truthy; TimeoutError at the deadline."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:g} s waiting for {what or condition}: {last!r}")


@dataclass
class Proc:
    """A process a test or a bench started, with the log file its output goes to."""

    process: subprocess.Popen[bytes] | Forked
    log: Path

    @property
    def name(self) -> str:
        """The log file's stem: what the process was started as."""
        return self.log.stem

    def output(self) -> str:
        """Everything it logged so far."""
        return self.log.read_text(errors="replace")

    def wait_for(self, text: str, timeout: float = 60.0) -> None:
        """Block until `text` appears in its log; RuntimeError if it exits first."""

        def logged() -> bool:
            if text in self.output():
                return True
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited early:\n{self.output()[-3000:]}")
            return False

        wait_until(logged, timeout=timeout, what=f"{self.name} to log {text!r}")

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 45.0) -> int:
        """Signal it and wait for it to exit (SIGKILL if it outlives `timeout`)."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait()

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        self.stop(signal.SIGKILL)

    def __enter__(self) -> Proc:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def spawn(
    argv: Sequence[str],
    log: Path,
    env: dict[str, str],
    *,
    cwd: Path = ROOT,
    new_session: bool = False,
) -> Proc:
    """Start `argv` with stdout and stderr to `log` (truncated) and no stdin."""
    argv = list(argv)
    if FORK_JOBFORGE and argv[:2] == [PYTHON, "-m"] and len(argv) > 2:
        from tests import zygote

        if argv[2] in zygote.MODULES and zygote.wanted():
            log.write_bytes(b"")
            for hook in ON_FORK:
                hook(argv)
            forked = zygote.zygote().spawn(argv[2], argv[3:], log, env, cwd, new_session)
            return Proc(forked, log)
    with log.open("wb") as out:
        process = subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=new_session,
        )
    return Proc(process, log)


def jobforge(*args: str) -> list[str]:
    """The command line of `jobforge <args>` with this interpreter."""
    return [PYTHON, "-m", "worker.cli", *args]
