"""A Python that has imported jobforge once, and forks the `jobforge` processes the tests
start from it.

`python -m worker.cli api` spends about 1 s of CPU before it serves, most of it importing
FastAPI, pydantic and temporalio, and a worker 0.7 s; the suite starts some 230 of them.
The zygote (`python -m tests.zygote`, one per test process) imports them once. For each
`spawn` it forks a child that takes the request's argv, environment, working directory
and log file, and runs `worker.cli`'s `main()` as `python -m worker.cli` does (or
`worker.runforge_cli`'s, design 002's daemon). The child is a
process of its own: its own pid, signals, exit status and children. What it shares with
a fresh interpreter's start is only what was imported before it forked.

Fresh interpreters still start the stack where the start itself is tested: `jobforge dev`
(tests/test_dev_stack.py), the README's commands and the CLI's own runs. Set
JOBFORGE_TEST_FRESH_PROCESSES=1 to start every process fresh.

Protocol: JSON lines. The test process writes `{"id", "module", "argv", "env", "cwd",
"log", "new_session"}`; the zygote answers `{"id", "pid"}` (or `{"id", "error"}`), and
`{"exit": id, "code": returncode}` when the child of request `id` ends (a negative code:
its signal, as `subprocess` gives it). When its stdin closes (the test process ended), it
kills its children and exits.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib
import io
import itertools
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# What a child would import anyway, imported once here.
PRELOAD = (
    "worker.cli",
    "worker.runforge_cli",
    "api.main",
    "worker.native",
    "worker.agent",
    "uvicorn",
    "uvicorn.main",
    "uvicorn.config",
    "uvicorn.server",
    "uvicorn.loops.auto",
    "uvicorn.loops.asyncio",
    "uvicorn.protocols.http.h11_impl",
    "uvicorn.protocols.http.auto",
    "uvicorn.lifespan.on",
)
PR_SET_NAME = 15
PR_SET_PDEATHSIG = 1
# The modules a child may run (`python -m <module>`), and each child's name in
# /proc/PID/comm (its cmdline is the zygote's): "jf-<command>" of jobforge, "jf-runforge".
MODULES = {"worker.cli": "", "worker.runforge_cli": "runforge"}
COMM_PREFIX = "jf-"


# -- the zygote ---------------------------------------------------------------------------


def _say(message: dict[str, Any]) -> None:
    os.write(1, (json.dumps(message) + "\n").encode())


def _stream(fd: int, unbuffered: bool, line_buffering: bool) -> io.TextIOWrapper:
    raw = io.FileIO(fd, "w", closefd=False)
    layer: io.RawIOBase | io.BufferedWriter = raw if unbuffered else io.BufferedWriter(raw)
    return io.TextIOWrapper(
        layer,  # type: ignore[arg-type]
        encoding="utf-8",
        errors="backslashreplace",
        write_through=unbuffered,
        line_buffering=line_buffering,
    )


def _child(request: dict[str, Any], wake_fds: tuple[int, int]) -> None:
    """In the forked child: become `python -m worker.cli <args>`; never returns."""
    code: int = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in wake_fds:
            os.close(fd)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the zygote gone: so is its child
        module = request["module"]
        command = MODULES[module] or (request["argv"][0] if request["argv"] else "cli")
        libc.prctl(PR_SET_NAME, (COMM_PREFIX + command)[:15].encode())
        if request["new_session"]:
            os.setsid()
        os.chdir(request["cwd"])
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(null)
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # found again from this environment's TMPDIR
        unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
        sys.stdin = open(0, closefd=False)  # noqa: SIM115
        sys.stdout = _stream(1, unbuffered, line_buffering=False)
        sys.stderr = _stream(2, unbuffered, line_buffering=True)
        sys.argv = [str(ROOT / (module.replace(".", "/") + ".py")), *request["argv"]]
        try:
            # `python -m <module>` runs its `main()` under `if __name__ == "__main__"`.
            importlib.import_module(module).main()
            code = 0
        except SystemExit as done:
            if done.code is None or isinstance(done.code, int):
                code = done.code or 0
            else:
                sys.stderr.write(f"{done.code}\n")
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
        # What the interpreter does on its way out: wait for its threads, run atexit.
        with contextlib.suppress(BaseException):
            threading._shutdown()  # type: ignore[attr-defined]
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _reap(children: dict[int, int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _say({"exit": children.pop(pid), "code": os.waitstatus_to_exitcode(status)})


def serve() -> None:
    """The zygote's loop: fork on each request, report each child's end."""
    for module in PRELOAD:
        importlib.import_module(module)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    children: dict[int, int] = {}  # pid -> the request that forked it
    pending = b""
    _say({"ready": os.getpid()})
    while True:
        readable, _, _ = select.select([0, wake_r], [], [], 1.0)
        if wake_r in readable:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 4096)
        _reap(children)
        if 0 not in readable:
            continue
        chunk = os.read(0, 1 << 20)
        if not chunk:
            break
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            try:
                pid = os.fork()
            except OSError as error:
                _say({"id": request["id"], "error": str(error)})
                continue
            if pid == 0:
                _child(request, (wake_r, wake_w))
            children[pid] = request["id"]
            _say({"id": request["id"], "pid": pid})
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    while children:
        pid, _ = os.waitpid(-1, 0)
        children.pop(pid, None)


# -- the test process's side --------------------------------------------------------------


class Forked:
    """A child of the zygote, as much of `subprocess.Popen` as the tests use."""

    def __init__(self, zygote: Zygote, request_id: int, pid: int, args: list[str]) -> None:
        self._zygote = zygote
        self._request_id = request_id
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._zygote.exit_code(self._request_id, timeout=0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._zygote.exit_code(self._request_id, timeout=timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """The test process's zygote: started on first use, ended with the process."""

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.zygote"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self._lock = threading.Lock()
        self._changed = threading.Condition()
        self._answers: dict[int, dict[str, Any]] = {}
        self._exits: dict[int, int] = {}
        self._ready = False
        self._ids = itertools.count()
        threading.Thread(target=self._read, name="zygote-reader", daemon=True).start()
        with self._changed:
            if not self._changed.wait_for(self._over_or_ready, timeout=60):
                raise RuntimeError("the test zygote did not start within 60 s")
        if self._process.poll() is not None:
            raise RuntimeError(f"the test zygote exited ({self._process.returncode})")

    def _over_or_ready(self) -> bool:
        return self._ready or self._process.poll() is not None

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            message = json.loads(line)
            with self._changed:
                if "exit" in message:
                    self._exits[message["exit"]] = message["code"]
                elif "ready" in message:
                    self._ready = True
                else:
                    self._answers[message["id"]] = message
                self._changed.notify_all()
        self._process.wait()
        with self._changed:
            self._changed.notify_all()

    def spawn(
        self,
        module: str,
        argv: list[str],
        log: Path,
        env: dict[str, str],
        cwd: Path,
        new_session: bool,
    ) -> Forked:
        """Fork `python -m <module> <argv>`."""
        request_id = next(self._ids)
        request = {
            "id": request_id,
            "module": module,
            "argv": argv,
            "env": env,
            "cwd": str(cwd),
            "log": str(log),
            "new_session": new_session,
        }
        assert self._process.stdin is not None
        with self._lock:
            self._process.stdin.write((json.dumps(request) + "\n").encode())
            self._process.stdin.flush()
        with self._changed:
            self._changed.wait_for(
                lambda: request_id in self._answers or self._process.poll() is not None,
                timeout=60,
            )
            answer = self._answers.pop(request_id, None)
        if answer is None or "pid" not in answer:
            raise RuntimeError(f"the test zygote did not fork {argv}: {answer}")
        return Forked(self, request_id, answer["pid"], [sys.executable, "-m", "worker.cli", *argv])

    def exit_code(self, request_id: int, timeout: float | None) -> int | None:
        """The return code of the child that request forked, once it ended (None if it
        has not within `timeout`)."""
        with self._changed:
            self._changed.wait_for(
                lambda: request_id in self._exits or self._process.poll() is not None,
                timeout=timeout,
            )
            if request_id not in self._exits and self._process.poll() is not None:
                return -signal.SIGKILL  # the zygote's end killed its children
            return self._exits.get(request_id)

    def close(self) -> None:
        """Its children killed, it exits; waited for, so their CPU is counted."""
        if self._process.stdin is not None:
            with contextlib.suppress(OSError):
                self._process.stdin.close()
        try:
            self._process.wait(30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


_zygote: list[Zygote] = []
_started = threading.Lock()


def zygote() -> Zygote:
    """This test process's zygote, started on first use."""
    with _started:
        if not _zygote:
            _zygote.append(Zygote())
        return _zygote[0]


def close() -> None:
    """End this test process's zygote, if it started one."""
    with _started:
        while _zygote:
            _zygote.pop().close()


def wanted() -> bool:
    """Whether `jobforge` processes are forked from a zygote (else started fresh)."""
    return not os.environ.get("JOBFORGE_TEST_FRESH_PROCESSES")


if __name__ == "__main__":
    serve()
