"""`runforge-cli daemon`: a native jobforge worker in this process, serving its
workspace's run type (`runforge.run.<pool>`, a queue no other daemon polls) with the
command in RUNFORGE_RUN_COMMAND, until SIGINT/SIGTERM.

In process rather than a `jobforge worker` child: the pid the design's tokens name is the
process that runs the runs and takes the signals, and the daemon can tell its record when
it is stopping and stopped. It follows the hub's event stream to print the runs it
starts and finishes as the design's `[RF:QUEUE=…]` tokens, and moves its workspace's
runs still queued as the shared legacy type `runforge.run` to its own type.

One daemon per workspace: before anything else it takes its workspace's lock, held by
the workspace's pool gate (`POST /api/pools/{pool}/lock`, one owner at a time, taken
in one update). It renews the lock at half its ttl and gives it back when it stops; a
daemon killed outright holds it until the ttl passes, then the next one takes it over.
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
from worker.native import (
    NativeWorker,
    install_stop_handlers,
    quiet_attempt_failures,
    quiet_sdk_shutdown,
)
from worker.runforge import (
    LEGACY_RUN_TYPE,
    DaemonState,
    daemon_tags,
    iso,
    legacy_body,
    pool_name,
    run_id_of,
    run_type,
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
# How often the daemon looks for its workspace's queued legacy runs to move (the last
# client that enqueues them may be an older runforge-cli): so such a run waits at most
# this long, for one filtered list call (an empty page, usually) each time.
MOVE_EVERY_S = 5.0
CONFLICT = 409


class LockHeldError(Exception):
    """The workspace's lock is another daemon's: who holds it and since when (ms)."""

    def __init__(self, owner: str, since: int) -> None:
        super().__init__(f"{owner}, locked since {iso(since)}")
        self.owner = owner
        self.since = since


def take_lock(client: HubClient, pool: str, owner: str, ttl_s: float) -> None:
    """Take or renew the workspace's lock; `LockHeldError` when another daemon holds it."""
    try:
        client.lock_pool(pool, owner, ttl_s)
    except HubError as err:
        body = err.body
        if err.status == CONFLICT and "owner" in body:
            raise LockHeldError(str(body["owner"]), int(body.get("since") or 0)) from err
        raise


def say(line: str) -> None:
    """One line on stdout, at once (the tokens are read by other programs)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class RunReporter:
    """Prints JOB_STARTED and JOB_DONE once per attempt of the runs this daemon takes,
    from the hub's event stream (a thread: the hub client is synchronous)."""

    def __init__(self, hub: HubSettings, node_id: str, job_type: str) -> None:
        self._hub = hub
        self._node_id = node_id
        self._type = job_type
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
                        [], [self._type], last_id, on_open=self.opened.set
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


def move_legacy_runs(client: HubClient, pool: str) -> list[tuple[str, str, str]]:
    """Enqueue the workspace's runs still queued as the legacy shared type again as its
    own type, and cancel the old jobs: (old job id, new job id, run id) per run moved.

    The new job comes first, under an idempotency key named by the old one, so a move
    cut short is finished by the next (the same new job). The old job is then canceled;
    if it had left the queue meanwhile (a 409: an older daemon took it, or it was
    canceled), the new one is canceled instead. A run moved has a new job id and a new
    place at the end of its group's queue."""
    moved = []
    query = {"type": LEGACY_RUN_TYPE, "pool": pool, "status": "pending"}
    for job in list(client.job_pages(query)):
        body = legacy_body(job)
        if body is None:
            continue
        new_id = client.submit(body, idempotency_key=f"runforge-move-{job['id']}")
        try:
            client.cancel(job["id"])
        except HubError as err:
            if err.status != CONFLICT:
                raise
            client.cancel(new_id)
            continue
        moved.append((job["id"], new_id, run_id_of(job)))
    return moved


def _move(hub: HubSettings, pool: str) -> None:
    """One move of the legacy runs, each told as an enqueue token."""
    try:
        with HubClient(hub) as client:
            moved = move_legacy_runs(client, pool)
    except HubError as err:
        say(f"runforge daemon: moving legacy runs: {err}")
        return
    for old_id, new_id, run_id in moved:
        say(token("QUEUE", "JOB_ENQUEUED", new_id, f"run_id={run_id}", f"moved_from={old_id}"))


async def _keep_moving(hub: HubSettings, pool: str) -> None:
    """Move the legacy runs now and every MOVE_EVERY_S until cancelled."""
    while True:
        await asyncio.to_thread(_move, hub, pool)
        await asyncio.sleep(MOVE_EVERY_S)


def _renew(hub: HubSettings, pool: str, owner: str, ttl_s: float) -> None:
    with HubClient(hub) as client:
        take_lock(client, pool, owner, ttl_s)


async def _keep_lock(
    hub: HubSettings,
    pool: str,
    owner: str,
    ttl_s: float,
    stop: asyncio.Event,
    done: asyncio.Event,
) -> LockHeldError | None:
    """Renew the lock at half its ttl until `done` (no renewal is in flight then).
    Another daemon took it (this one went a ttl unheard): stop, and answer who holds
    it. A failed renewal is retried at the next beat."""
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), ttl_s / 2)
        if done.is_set():
            return None
        try:
            await asyncio.to_thread(_renew, hub, pool, owner, ttl_s)
        except LockHeldError as held:
            say(f"runforge daemon: the workspace lock was taken over by {held}; stopping")
            stop.set()
            return held
        except HubError as err:
            say(f"runforge daemon: renewing the workspace lock: {err}")


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


async def serve(
    workspace: Path, max_parallel: int, command: str, hub: HubSettings, lock_ttl_s: float
) -> None:
    """Run the daemon until SIGINT/SIGTERM, holding the workspace's lock. Another
    daemon holds it (now, or took it over later): `LockHeldError`; a hub or Temporal
    error raises."""
    pool = pool_name(workspace)
    worker_id = node_id()
    # The lock's owner: this process (two daemons may share a NODE_ID).
    owner = f"pid {os.getpid()} on {socket.gethostname()}, worker {worker_id}"
    with HubClient(hub) as client:
        take_lock(client, pool, owner, lock_ttl_s)
    stop, done = asyncio.Event(), asyncio.Event()
    keeping = asyncio.create_task(_keep_lock(hub, pool, owner, lock_ttl_s, stop, done))
    try:
        await _serve(pool, worker_id, max_parallel, command, hub, stop)
    finally:
        done.set()
        lost = await keeping
        if lost is None:
            with contextlib.suppress(HubError), HubClient(hub) as client:
                client.unlock_pool(pool, owner)
    if lost is not None:
        raise lost


async def _serve(
    pool: str,
    worker_id: str,
    max_parallel: int,
    command: str,
    hub: HubSettings,
    stop: asyncio.Event,
) -> None:
    job_type = run_type(pool)
    pid = os.getpid()
    with HubClient(hub) as client:
        client.set_pool_capacity(pool, max_parallel)
    temporal = TemporalSettings()
    settings = WorkerSettings(
        types=[job_type],
        cores=max_parallel,
        solvers={job_type: command},
        tags=daemon_tags(pool, pid, "running"),
        node_id=worker_id,
    )
    install_stop_handlers(stop)
    quiet_attempt_failures()
    quiet_sdk_shutdown()
    temporal_client = await connect(temporal, identity=worker_id)
    reporter = RunReporter(hub, worker_id, job_type)
    threading.Thread(target=reporter.follow, name="runforge events", daemon=True).start()
    # Runs can start as soon as the worker polls: follow the stream before that.
    await asyncio.to_thread(reporter.opened.wait, 30)
    native = NativeWorker(
        temporal_client, temporal, settings, SolverSettings(), ContainerSettings(runtime=None)
    )
    running = asyncio.create_task(native.run(stop))
    say(token("DAEMON", "STARTED", f"pid={pid}", f"max_parallel={max_parallel}"))
    moving = asyncio.create_task(_keep_moving(hub, pool))
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait([running, stopping], return_when=asyncio.FIRST_COMPLETED)
    if stop.is_set():
        await _record(temporal_client, temporal, settings, pool, "stopping")
    moving.cancel()
    try:
        await running
    finally:
        stopping.cancel()
        with HubClient(hub) as client:
            await asyncio.to_thread(reporter.finish, client.job_json, FINAL_READ_S)
        reporter.stopped.set()
        await _record(temporal_client, temporal, settings, pool, "stopped")
        say(token("DAEMON", "STOPPED", f"pid={pid}"))
