"""`jobforge dev`: the embedded stack (Temporal dev server, API, one worker) and the
supervisor that starts it, watches it and stops all of it together.

Each child gets a parent-death signal, so a SIGKILLed `jobforge dev` (an OOM kill, a
closed terminal) leaves no Temporal server holding the ports and the SQLite file.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from activities.runner import dying_with_parent
from worker.devserver import DevServer, env_with, port_in_use, wait_answering
from worker.hub_client import SECRET_FILE_NAME, HubSettings
from worker.settings import SolverSettings, WorkerSettings

DEMO_TYPE = "demo"
DEMO_SOLVER = [sys.executable, "-m", "worker.demo_solver"]
# The local stack may fetch solvers from a file server on this machine (or a file://
# URL): only its own user can submit, since the API listens on 127.0.0.1.
DEV_URL_SCHEMES = "https,http,file"
# The worker's shutdown grace is 30 s by default: a child gets that and a margin.
CHILD_STOP_S = 40.0
READY_LINE = "Ctrl-C stops everything; a second Ctrl-C kills it at once."


class DevError(Exception):
    """`jobforge dev` cannot go on; the message says why, `code` is the exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class DevOptions:
    """Ports and the data dir (`jobforge dev --help`)."""

    api_port: int = 8000
    temporal_port: int = 7233
    ui_port: int = 8233
    data_dir: Path = Path(".jobforge")


def ingest_secret(data_dir: Path, configured: str) -> tuple[str, Path | None]:
    """The stack's FORGE_INGEST_SECRET and the file it is kept in.

    A secret from the environment wins (and no file is written). Otherwise the one in
    `<data_dir>/ingest-secret` is reused, so tokens and signed-in dashboards survive a
    restart; on the first start it is generated there, readable by its owner only.
    """
    if configured:
        return configured, None
    path = data_dir / SECRET_FILE_NAME
    data_dir.mkdir(parents=True, exist_ok=True)
    if path.exists() and (kept := path.read_text().strip()):
        if path.stat().st_mode & 0o077:
            path.chmod(0o600)
        return kept, path
    secret = secrets.token_urlsafe(24)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secret + "\n")
    return secret, path


@dataclass
class DevStack:
    """The stack for one `jobforge dev` run. Settings are read when it is built (a bad
    WORKER_* or SOLVER_* value raises pydantic's ValidationError there)."""

    options: DevOptions
    hub: HubSettings = field(default_factory=HubSettings)
    worker: WorkerSettings = field(default_factory=WorkerSettings)
    solver: SolverSettings = field(default_factory=SolverSettings)

    def __post_init__(self) -> None:
        self.data_dir = self.options.data_dir.resolve()
        self.server = DevServer(
            self.data_dir,
            port=self.options.temporal_port,
            ui_port=self.options.ui_port,
            die_with_parent=True,
        )
        self.children: list[tuple[str, subprocess.Popen[bytes]]] = []
        self._stopping = False

    @property
    def api_url(self) -> str:
        """The API's base URL."""
        return f"http://127.0.0.1:{self.options.api_port}"

    def child_env(self, secret: str) -> dict[str, str]:
        """The API's and the worker's environment: ours, plus the stack's wiring and the
        dev defaults for what the user did not set."""
        solvers = {DEMO_TYPE: DEMO_SOLVER, **self.worker.solvers}
        values = {
            "FORGE_INGEST_SECRET": secret,
            "TEMPORAL_ADDRESS": self.server.address,
            "TEMPORAL_UI_URL": f"http://127.0.0.1:{self.options.ui_port}",
            "WORKER_SOLVERS": json.dumps(solvers),
        }
        chosen = self.solver.model_fields_set
        if "cache_dir" not in chosen:
            values["SOLVER_CACHE_DIR"] = str(self.data_dir / "solvers")
        if "LOG_DIR" not in os.environ:
            values["LOG_DIR"] = str(self.data_dir / "logs")
        # 003's shared storage: its workers write each simulation's log there, and its
        # simulations mount it (their volumes' sources must lie under it).
        shared = Path(os.environ.get("VM_SHARED_DATA") or self.data_dir / "shared")
        if "VM_SHARED_DATA" not in os.environ:
            shared.mkdir(parents=True, exist_ok=True)
            values["VM_SHARED_DATA"] = str(shared)
        if "CONTAINER_VOLUME_PREFIXES" not in os.environ:
            values["CONTAINER_VOLUME_PREFIXES"] = str(shared)
        if "url_schemes" not in chosen:
            values["SOLVER_URL_SCHEMES"] = DEV_URL_SCHEMES
        if "allow_private_networks" not in chosen:
            values["SOLVER_ALLOW_PRIVATE_NETWORKS"] = "true"
        return env_with(**values)

    def banner(self, secret: str, secret_file: Path | None, env: dict[str, str]) -> list[str]:
        """What `jobforge dev` prints once everything is up."""
        private = env["SOLVER_ALLOW_PRIVATE_NETWORKS"].lower() in ("1", "true", "yes", "on")
        token = (
            f"export FORGE_INGEST_SECRET=$(cat {secret_file})"
            if secret_file is not None
            else "FORGE_INGEST_SECRET from the environment"
        )
        return [
            f"jobforge API     {self.api_url}",
            f"Dashboard        {self.api_url}/#token={quote(secret, safe='')}",
            f"API docs         {self.api_url}/docs",
            f"Temporal UI      http://127.0.0.1:{self.options.ui_port}",
            f"Temporal gRPC    {self.server.address}",
            f"Solver URLs      {env['SOLVER_URL_SCHEMES']} (SOLVER_URL_SCHEMES); private "
            f"networks {'allowed' if private else 'refused'} (SOLVER_ALLOW_PRIVATE_NETWORKS)",
            f"Shared data      {env.get('VM_SHARED_DATA', '')} (VM_SHARED_DATA: design 003's "
            f"storage; CONTAINER_VOLUME_PREFIXES {env.get('CONTAINER_VOLUME_PREFIXES', '')})",
            f"Token            {token}",
            READY_LINE,
        ]

    def _on_signal(self, *_: object) -> None:
        # The first Ctrl-C interrupts whatever dev is waiting for (the server start, the
        # API's port, the idle loop) and the orderly stop runs; a second one kills every
        # process at once. Only signals are sent here: waiting for a child inside a
        # handler could deadlock against the wait the handler interrupted.
        if not self._stopping:
            self._stopping = True
            raise KeyboardInterrupt
        for _name, child in self.children:
            child.kill()
        if self.server.process is not None:
            self.server.process.kill()

    def run(self, out: Callable[[str], None], err: Callable[[str], None]) -> int:
        """Start everything, print the banner, supervise until a signal or a death;
        stop everything. The exit status."""
        self._check_ports()
        if port_in_use(self.options.api_port):
            raise DevError(f"API port {self.options.api_port} is already in use", 2)
        secret, secret_file = ingest_secret(self.data_dir, self.hub.secret)
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)
        code = 0
        try:
            self._start(secret, secret_file, out)
            self._supervise()
        except KeyboardInterrupt:
            out("stopping… (Ctrl-C again kills everything at once)")
        except DevError as error:
            err(f"error: {error}")
            code = error.code
        finally:
            self._stopping = True  # from here on, a signal means "kill it all now"
            self._stop()
        return code

    def _check_ports(self) -> None:
        """The API, the Temporal frontend and its UI need three ports: a port named
        twice would leave one of them on another's listener."""
        named = {
            "--api-port": self.options.api_port,
            "--temporal-port": self.options.temporal_port,
            "--ui-port": self.options.ui_port,
        }
        flags: dict[int, str] = {}
        for flag, port in named.items():
            if port in flags:
                raise DevError(f"{flags[port]} {port} is also given as {flag}: use another port", 2)
            flags[port] = flag

    def _start(self, secret: str, secret_file: Path | None, out: Callable[[str], None]) -> None:
        try:
            self.server.start()
        except (OSError, RuntimeError, TimeoutError) as error:
            raise DevError(
                f"Temporal dev server did not start ({error}); see {self.data_dir / 'temporal.log'}"
            ) from error
        env = self.child_env(secret)
        jobforge = [sys.executable, "-m", "worker.cli"]
        for name, args in (
            ("API", ["api", "--port", str(self.options.api_port)]),
            ("worker", ["worker"]),
        ):
            self.children.append(
                (name, subprocess.Popen(dying_with_parent([*jobforge, *args]), env=env))
            )
        try:
            wait_answering(f"{self.api_url}/healthz", 30, self.children[0][1])
        except (RuntimeError, TimeoutError) as error:
            raise DevError(f"the API did not start: {error}") from error
        for line in self.banner(secret, secret_file, env):
            out(line)

    def _supervise(self) -> None:
        server = self.server.process
        while all(child.poll() is None for _, child in self.children):
            if server is not None and server.poll() is not None:
                raise DevError(f"the Temporal dev server exited ({server.returncode})")
            time.sleep(0.2)
        dead = [
            f"{name} ({child.returncode})"
            for name, child in self.children
            if child.poll() is not None
        ]
        raise DevError(f"{', '.join(dead)} exited; stopping everything")

    def _stop(self) -> None:
        for _name, child in self.children:
            if child.poll() is None:
                child.terminate()
        for _name, child in self.children:
            try:
                child.wait(CHILD_STOP_S)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        self.server.stop()
