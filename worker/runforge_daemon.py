"""`runforge-cli daemon`: a native jobforge worker in this process, serving the
`runforge.run` type with the command in RUNFORGE_RUN_COMMAND, until SIGINT/SIGTERM.

In process rather than a `jobforge worker` child: the pid the design's tokens name is the
process that runs the runs and takes the signals, and the daemon can tell its record when
it is stopping and stopped. It follows the hub's event stream to print the runs it
starts and finishes as the design's `[RF:QUEUE=…]` tokens.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from temporalio.client import Client

from engine.connection import TemporalSettings, connect
from engine.directory import register_worker
from worker.hub_client import HubClient, HubError, HubSettings
from worker.native import NativeWorker, install_stop_handlers, quiet_attempt_failures
from worker.runforge import (
    RUN_TYPE,
    DaemonState,
    daemon_tags,
    pool_name,
    run_id_of,
    state_of,
    token,
)
from worker.settings import ContainerSettings, SolverSettings, WorkerSettings
from workflows.job_states import HELD
from workflows.models import WorkerInfo

# The core events that end a run on this daemon; `job:pending` ends its attempt only
# (an operator's requeue): no token, it starts again.
DONE_EVENTS = ("job:completed", "job:quarantined", "job:stopped")
# How long, after the worker stopped, the daemon reads the runs it started to report
# how they ended.
FINAL_READ_S = 15.0


def say(line: str) -> None:
    """One line on stdout, at once (the tokens are read by other programs)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class RunReporter:
    """Prints JOB_STARTED and JOB_DONE once per attempt of the runs this daemon takes,
    from the hub's event stream (a thread: the hub client is synchronous)."""

    def __init__(self, hub: HubSettings, node_id: str) -> None:
        self._hub = hub
        self._node_id = node_id
        self._lock = threading.Lock()
        self._running: dict[str, str] = {}  # job id → run id
        self.opened = threading.Event()
        self.stopped = threading.Event()

    def follow(self) -> None:
        """Read the stream until `stopped`, reconnecting after a break."""
        last_id: str | None = None
        with HubClient(self._hub) as client:
            while not self.stopped.is_set():
                try:
                    for name, event_id, data in client.events(
                        [], [RUN_TYPE], last_id, on_open=self.opened.set
                    ):
                        last_id = event_id or last_id
                        self._on(client, name, data)
                        if self.stopped.is_set():
                            return
                except HubError as err:
                    say(f"runforge daemon: event stream: {err}; reconnecting")
                    self.opened.set()
                    self.stopped.wait(1.0)

    def _on(self, client: HubClient, name: str, data: dict[str, object]) -> None:
        job_id = str(data.get("id"))
        if name == "job:running" and data.get("worker_id") == self._node_id:
            try:
                run_id = run_id_of(client.job_json(job_id))
            except HubError:
                run_id = "?"
            with self._lock:
                if job_id in self._running:
                    return
                self._running[job_id] = run_id
            say(token("QUEUE", "JOB_STARTED", job_id, f"run_id={run_id}"))
        elif name in DONE_EVENTS:
            self._done(job_id, str(data.get("status")))
        elif name == "job:pending":
            with self._lock:
                self._running.pop(job_id, None)

    def _done(self, job_id: str, status: str) -> None:
        with self._lock:
            run_id = self._running.pop(job_id, None)
        if run_id is not None:
            shown = state_of({"status": status})
            say(token("QUEUE", "JOB_DONE", job_id, f"run_id={run_id}", f"status={shown}"))

    def finish(self, read: Callable[[str], dict[str, object]], deadline_s: float) -> None:
        """After the worker stopped: report how each run still open here ended."""
        loop_until = time.monotonic() + deadline_s
        while time.monotonic() < loop_until:
            with self._lock:
                open_runs = list(self._running)
            if not open_runs:
                return
            for job_id in open_runs:
                with contextlib.suppress(HubError):
                    status = str(read(job_id).get("status"))
                    if status not in HELD:
                        self._done(job_id, status)
            self.stopped.wait(0.2)


def node_id() -> str:
    """NODE_ID, or `runforge-<host>-<pid>`."""
    return os.environ.get("NODE_ID") or f"runforge-{socket.gethostname()}-{os.getpid()}"


async def _record(
    client: Client,
    temporal: TemporalSettings,
    settings: WorkerSettings,
    pool: str,
    state: DaemonState,
) -> None:
    """Tell the daemon's worker record its state (best effort: the record only informs
    `queue-status`)."""
    info = WorkerInfo(
        worker_id=settings.node_id,
        name=settings.node_id,
        cores=settings.cores,
        ram_gb=settings.ram_gb,
        tags=daemon_tags(pool, os.getpid(), state),
        kind="native",
        solver_types=settings.solver_types(),
    )
    with contextlib.suppress(Exception):
        await register_worker(client, temporal, info)


async def serve(workspace: Path, max_parallel: int, command: str, hub: HubSettings) -> None:
    """Run the daemon until SIGINT/SIGTERM; a hub or Temporal error raises."""
    pool = pool_name(workspace)
    pid = os.getpid()
    worker_id = node_id()
    with HubClient(hub) as client:
        client.set_pool_capacity(pool, max_parallel)
    temporal = TemporalSettings()
    settings = WorkerSettings(
        types=[RUN_TYPE],
        cores=max_parallel,
        solvers={RUN_TYPE: command},
        tags=daemon_tags(pool, pid, "running"),
        node_id=worker_id,
    )
    stop = asyncio.Event()
    install_stop_handlers(stop)
    quiet_attempt_failures()
    temporal_client = await connect(temporal, identity=worker_id)
    reporter = RunReporter(hub, worker_id)
    threading.Thread(target=reporter.follow, name="runforge events", daemon=True).start()
    # Runs can start as soon as the worker polls: follow the stream before that.
    await asyncio.to_thread(reporter.opened.wait, 30)
    native = NativeWorker(
        temporal_client, temporal, settings, SolverSettings(), ContainerSettings(runtime=None)
    )
    running = asyncio.create_task(native.run(stop))
    say(token("DAEMON", "STARTED", f"pid={pid}", f"max_parallel={max_parallel}"))
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait([running, stopping], return_when=asyncio.FIRST_COMPLETED)
    if stop.is_set():
        await _record(temporal_client, temporal, settings, pool, "stopping")
    try:
        await running
    finally:
        stopping.cancel()
        with HubClient(hub) as client:
            await asyncio.to_thread(reporter.finish, client.job_json, FINAL_READ_S)
        reporter.stopped.set()
        await _record(temporal_client, temporal, settings, pool, "stopped")
        say(token("DAEMON", "STOPPED", f"pid={pid}"))
