"""Fixtures: a real Temporal dev server, real API and worker processes, test solvers."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import os
import signal
import sys
import textwrap
import threading
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from engine.log_store import LogStore
from tests import procs
from tests.log_stores import BACKENDS, S3Server, open_store, start_s3_server
from tests.ports import free_port
from tests.procs import CHROMIUM, CHROMIUM_ARGS, Proc
from worker.devserver import DevServer, wait_for_port
from worker.hub_client import pool_limits

if TYPE_CHECKING:
    from tests.workflow_harness import Harness

ROOT = Path(__file__).resolve().parent.parent
SECRET = "test-secret"
REGISTERED_TYPE = "registered-echo"
REGISTERED_SOLVER = [
    sys.executable,
    "-c",
    "import json, sys; print(json.dumps({'registered': True, 'argv': sys.argv[1:]}))",
]
PYTHON = sys.executable

# The `process` tier, which `make check` leaves out: marked from the fixtures a test uses.
pytest_plugins = ["tests.tiers", "tests.cpu_ledger"]


def pytest_configure() -> None:
    """A suite started in the background by a shell without job control (`make test &`
    from a script) inherits SIGINT ignored, and so would every process it starts: the
    tests of what a Ctrl-C does (`watch`, `dev`) need it as a terminal gives it. Python's
    own handler here becomes the default in each child (an ignored signal stays
    ignored through exec, a handled one does not)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    procs.FORK_JOBFORGE = True  # APIs, workers and agents come from a zygote


def pytest_unconfigure() -> None:
    """The zygote ends with its children, and is waited for: their CPU is the suite's."""
    from tests import zygote

    zygote.close()


def _slow_weight(item: pytest.Item) -> tuple[str, float] | None:
    """(what keeps it together, seconds) for a test marked `slow(seconds)`: a module-wide
    mark keeps the module's tests (and its module fixture) on one worker, weighed once."""
    mark = item.get_closest_marker("slow")
    if mark is None:
        return None
    marks = getattr(getattr(item, "module", None), "pytestmark", [])
    whole = any(
        getattr(m, "mark", m) == mark for m in (marks if isinstance(marks, list) else [marks])
    )
    return (str(item.path) if whole else item.nodeid), float(mark.args[0])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under `--dist worksteal`, the slow tests start first, spread over the workers.

    worksteal hands worker k the k-th contiguous share of the collected list and steals
    only from the ends of the shares, so a slow test collected late ran late and held up
    the end of the run. Each share now begins with its slow tests, the heaviest first
    (each group to the least loaded share); the other tests follow in collection order.
    """
    workerinput: dict[str, Any] = getattr(config, "workerinput", {})
    workers = int(workerinput.get("workercount", 0))
    # A worker's own `dist` option reads "no"; the command line it was started from tells.
    argv = " ".join(workerinput.get("mainargv", []))
    if workers < 2 or "worksteal" not in argv:
        return
    groups: dict[str, list[pytest.Item]] = {}
    weights: dict[str, float] = {}
    rest = []
    for item in items:
        slow = _slow_weight(item)
        if slow is None:
            rest.append(item)
        else:
            groups.setdefault(slow[0], []).append(item)
            weights[slow[0]] = max(weights.get(slow[0], 0.0), slow[1])
    # The shares as worksteal cuts them: len // workers left, in turn.
    sizes, left = [], len(items)
    for k in range(workers):
        sizes.append(left // (workers - k))
        left -= sizes[-1]
    heads: list[list[pytest.Item]] = [[] for _ in range(workers)]
    loads = [0.0] * workers
    for key in sorted(groups, key=lambda key: -weights[key]):
        fits = [k for k in range(workers) if len(heads[k]) + len(groups[key]) <= sizes[k]]
        k = min(fits or range(workers), key=lambda k: loads[k])
        heads[k] += groups[key]
        loads[k] += weights[key]
    ordered: list[pytest.Item] = []
    others = iter(rest)
    for k in range(workers):
        ordered += heads[k]
        ordered += itertools.islice(others, max(0, sizes[k] - len(heads[k])))
    ordered += list(others)
    items[:] = ordered


T = TypeVar("T")

# A wait polls every 50 ms at first, then 1.5 times less often each round, down to every
# POLL_MAX_S. A read of a job through the API costs ~15 ms of CPU (API, worker's query,
# dev server), so a wait at 20 reads a second used a fifth of a core for as long as it
# lasted; a job that is there at once is still seen at once.
POLL_FIRST_S = 0.05
POLL_MAX_S = 0.25


def _intervals(interval: float | None) -> Iterator[float]:
    """The pauses between polls: `interval` each time if given, else the backoff."""
    pause = POLL_FIRST_S if interval is None else interval
    while True:
        yield pause
        if interval is None:
            pause = min(POLL_MAX_S, pause * 1.5)


def wait_until(
    condition: Callable[[], T | None],
    *,
    timeout: float = 60.0,
    interval: float | None = None,
    what: str = "",
) -> T:
    """Poll `condition` until it returns something truthy; TimeoutError at the deadline.
    Without `interval`, polls less often as the wait goes on (POLL_MAX_S)."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    pauses = _intervals(interval)
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(next(pauses))
    raise TimeoutError(f"timed out after {timeout:g} s waiting for {what or condition}: {last!r}")


async def wait_until_async(
    condition: Callable[[], Awaitable[Any]],
    *,
    timeout: float = 30.0,
    interval: float | None = None,
    what: str = "",
) -> Any:
    """`wait_until` for an async condition (the event loop runs meanwhile)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    pauses = _intervals(interval)
    while time.monotonic() < deadline:
        last = await condition()
        if last:
            return last
        await asyncio.sleep(next(pauses))
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what or condition}: {last!r}")


def base_env(temporal: DevServer, **extra: str) -> dict[str, str]:
    """Environment for jobforge processes under test."""
    env = dict(os.environ)
    env.update(
        TEMPORAL_ADDRESS=temporal.address,
        FORGE_INGEST_SECRET=SECRET,
        SOLVER_URL_SCHEMES="https,http,file",
        SOLVER_ALLOW_PRIVATE_NETWORKS="true",
        # Workers without WORKER_TYPES (the session worker) follow the type registry's
        # history; they look for it this often while it does not exist yet.
        WORKER_TYPE_POLL_MS="250",
        LOG_LEVEL="INFO",
        PYTHONUNBUFFERED="1",
        # Job logs, shared by every API and worker of the session (as a volume would be).
        LOG_DIR=str(temporal.data_dir / "job-logs"),
    )
    env.update(extra)
    return env


@dataclass
class Api:
    """A running API process and an authenticated client for it."""

    url: str
    proc: Proc
    http: httpx.Client

    def submit(self, **spec: Any) -> str:
        """POST /api/jobs and return the new job's id."""
        response = self.http.post("/api/jobs", json=spec)
        assert response.status_code == 201, response.text
        job_id: str = response.json()["id"]
        return job_id

    def job(self, job_id: str) -> dict[str, Any]:
        """GET /api/jobs/{id}."""
        response = self.http.get(f"/api/jobs/{job_id}")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def wait_listed(self, job_id: str, status: str, **filters: str) -> None:
        """Poll `GET /api/jobs` until it lists the job with `status`: a list is read from
        visibility, which shows a change a moment after a read of the job does."""

        def listed() -> bool:
            params = {"status": status, "limit": "500", **filters}
            found = self.http.get("/api/jobs", params=params)
            return found.status_code == 200 and job_id in {j["id"] for j in found.json()}

        wait_until(listed, timeout=30, what=f"job {job_id} listed as {status}")

    def wait_status(self, job_id: str, *statuses: str, timeout: float = 30.0) -> dict[str, Any]:
        """Poll the job until its status is one of `statuses`."""

        def reached() -> dict[str, Any] | None:
            job = self.job(job_id)
            return job if job["status"] in statuses else None

        result: dict[str, Any] = wait_until(
            reached, timeout=timeout, what=f"job {job_id} to be {statuses}"
        )
        return result


@pytest.fixture(scope="session")
def temporal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    """One dev server for the session (tuned dynamic config, headless), its database in
    memory: nothing restarts it, and a job costs it less so (bench.temporal_store)."""
    data = tmp_path_factory.mktemp("temporal")
    # With the CPU ledger on, the server serves its metrics, and the ledger keeps its
    # request counts at the end. (Imported here: a plugin imported by this module's
    # import would not be rewritten for asserts, and pytest warns of it.)
    from tests import cpu_ledger

    ledger = cpu_ledger.directory()
    metrics_port = free_port() if ledger else None
    server = DevServer(
        data, port=free_port(), ui_port=None, in_memory=True, metrics_port=metrics_port
    )
    server.start()
    yield server
    if ledger and metrics_port:
        cpu_ledger.keep_server_metrics(ledger, f"http://127.0.0.1:{metrics_port}/metrics")
    server.stop()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A local S3-compatible server (moto), for the S3 log store."""
    server = start_s3_server(tmp_path_factory.mktemp("s3") / "moto.log")
    yield server
    server.stop()


@pytest.fixture(params=BACKENDS)
def any_log_store(request: pytest.FixtureRequest, tmp_path: Path) -> LogStore:
    """An empty log store of each kind: files, then an S3 bucket."""
    s3 = request.getfixturevalue("s3_server") if request.param == "s3" else None
    return open_store(request.param, tmp_path, s3)


# What `spawn` started, in order. A process is stopped when what started it ends: the
# test whose body started it, at the test's teardown; a fixture, once the fixture is
# finalized (a module's API at the module's end). Idle, an API still costs the dev
# server a listing at each look of its event feed, and the suite runs hundreds of them.
_SPAWNED: list[Proc] = []
# The API and workflow worker of stacks a StackPool keeps for later tests (its own).
_POOLED: set[int] = set()
_OWN_PROCS = pytest.StashKey[list[Proc]]()
_FIXTURE_PROCS: dict[int, list[Proc]] = {}


def _stop_own(started: list[Proc]) -> None:
    for proc in reversed(started):
        if id(proc) not in _POOLED:
            proc.stop(timeout=10)


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any]) -> Iterator[None]:
    first = len(_SPAWNED)
    yield
    if len(_SPAWNED) > first:
        _FIXTURE_PROCS[id(fixturedef)] = _SPAWNED[first:]


def pytest_fixture_post_finalizer(fixturedef: pytest.FixtureDef[Any]) -> None:
    _stop_own(_FIXTURE_PROCS.pop(id(fixturedef), []))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    first = len(_SPAWNED)
    yield
    item.stash[_OWN_PROCS] = _SPAWNED[first:]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    yield
    _stop_own(item.stash.get(_OWN_PROCS, []))


@pytest.fixture(scope="session")
def spawn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Proc]]:
    """Start `python -m worker.cli <args>` with an env; each is stopped when the test or
    fixture that started it ends (above), and any left at session end."""
    logs = tmp_path_factory.mktemp("logs")
    started: list[Proc] = []

    def start(args: list[str], env: dict[str, str]) -> Proc:
        proc = procs.spawn(
            procs.jobforge(*args), logs / f"{args[0]}-{uuid.uuid4().hex[:8]}.log", env
        )
        started.append(proc)
        _SPAWNED.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop(timeout=10)


# How long an API or worker may take to be ready: a crash ends the wait at once, so only
# a start that hangs waits this long (a busy CI box starts an API in 2 to 30 s).
READY_S = 60.0


@contextlib.contextmanager
def stopped_if_not_ready(proc: Proc) -> Iterator[None]:
    """Stop `proc` at once if waiting for it to be ready fails, rather than leaving it
    running (and using CPU) until the session ends."""
    try:
        yield
    except BaseException:
        proc.stop(timeout=10)
        raise


@pytest.fixture(scope="session")
def start_api(temporal: DevServer, spawn: Callable[..., Proc]) -> Iterator[Callable[..., Api]]:
    """Factory: an API process with extra env; it answers /healthz before returning."""
    clients: list[httpx.Client] = []

    def start(**env: str) -> Api:
        port = free_port()
        proc = spawn(["api", "--port", str(port)], base_env(temporal, **env))
        with stopped_if_not_ready(proc):
            wait_for_port(port, READY_S, proc.process)
        url = f"http://127.0.0.1:{port}"
        http = httpx.Client(
            base_url=url,
            headers={"Authorization": f"Bearer {SECRET}"},
            timeout=30,
            limits=pool_limits(),
        )
        clients.append(http)
        return Api(url, proc, http)

    yield start
    for http in clients:
        http.close()


@pytest.fixture(scope="session")
def start_worker(temporal: DevServer, spawn: Callable[..., Proc]) -> Callable[..., Proc]:
    """Factory: a native worker process; returns once it polls its types (or workflows)."""

    def start(*, ready: str = "serving job type", **env: str) -> Proc:
        env.setdefault("SOLVER_CACHE_DIR", str(Path(env.get("TMPDIR", "/tmp")) / "jf-cache"))
        proc = spawn(["worker"], base_env(temporal, **env))
        with stopped_if_not_ready(proc):
            wait_until(
                lambda: ready in proc.output() or proc.process.poll() is not None,
                timeout=READY_S,
                what="worker to start",
            )
        assert proc.process.poll() is None, proc.output()
        return proc

    return start


@pytest.fixture(scope="session")
def api(start_api: Callable[..., Api]) -> Api:
    """The session's API (heartbeat timeout 60 s, as shipped)."""
    return start_api()


@pytest.fixture(scope="session")
def session_worker(
    start_worker: Callable[..., Proc], tmp_path_factory: pytest.TempPathFactory
) -> Proc:
    """The session's worker: runs workflows and, 4 at once, the jobs of every type that
    name a solver_url and those of REGISTERED_TYPE (its registered solver)."""
    cache = tmp_path_factory.mktemp("session-cache")
    return start_worker(
        ready="ready: workflows=True",
        WORKER_CORES="4",
        SOLVER_CACHE_DIR=str(cache),
        NODE_ID="session-worker",
        WORKER_SOLVERS=json.dumps({REGISTERED_TYPE: REGISTERED_SOLVER}),
    )


@pytest.fixture(scope="session")
def quiet_api(start_api: Callable[..., Api], session_worker: Proc) -> Api:
    """An API whose attempts go to task queues no worker polls: its jobs stay pending.

    The session worker still runs the JobWorkflows (on the default workflow queue), so
    the jobs answer queries and can be cancelled. One for the session: the tests that
    use it submit jobs of their own types.
    """
    return start_api(TEMPORAL_ACTIVITY_QUEUE_PREFIX=f"unserved-{uuid.uuid4().hex[:8]}-")


@pytest.fixture
def job_type() -> str:
    """A fresh job type, hence a fresh activity task queue, per test."""
    return f"t-{uuid.uuid4().hex[:12]}"


@dataclass
class Solver:
    """A solver script on disk, addressable by file:// URL with its checksum."""

    path: Path

    @property
    def url(self) -> str:
        """file:// URL of the script."""
        return self.path.as_uri()

    @property
    def checksum(self) -> str:
        """sha256 of the script."""
        return hashlib.sha256(self.path.read_bytes()).hexdigest()

    def spec(self, job_type: str, **extra: Any) -> dict[str, Any]:
        """A job spec running this solver."""
        return {"type": job_type, "solver_url": self.url, "solver_checksum": self.checksum, **extra}


@pytest.fixture
def make_solver(tmp_path: Path) -> Callable[[str], Solver]:
    """Factory: write a Python solver script (body gets `params` and `run_dir`)."""

    def make(body: str) -> Solver:
        path = tmp_path / f"solver-{uuid.uuid4().hex[:8]}.py"
        source = (
            f"#!{PYTHON}\n"
            "import json, os, sys, time\n"
            "params = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}\n"
            + textwrap.dedent(body)
        )
        path.write_text(source)
        path.chmod(0o755)
        return Solver(path)

    return make


@dataclass(kw_only=True)
class LoopbackServer:
    """A test HTTP server on 127.0.0.1: its port, and the requests it saw per path."""

    port: int = 0
    hits: Counter[str] = field(default_factory=Counter)

    def url(self, name: str) -> str:
        """URL of a path on it."""
        return f"http://127.0.0.1:{self.port}/{name}"


@contextlib.contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[int]:
    """Serve `handler` on a free loopback port, a thread per request, without request
    logging; yields the port and shuts the server down on exit."""

    class Quiet(handler):  # type: ignore[valid-type,misc]
        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@dataclass(kw_only=True)
class SolverServer(LoopbackServer):
    """Serves the files under `root`."""

    root: Path


@pytest.fixture
def solver_server(tmp_path: Path) -> Iterator[SolverServer]:
    """Serve tmp_path/served over HTTP on loopback."""
    root = tmp_path / "served"
    root.mkdir()
    state = SolverServer(root=root)

    class Handler(SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

        def do_GET(self) -> None:
            state.hits[self.path] += 1
            super().do_GET()

    with serving(Handler) as state.port:
        yield state


# -- isolated stacks: an API and workers on task queues of their own --------------


@dataclass
class Stack:
    """An API, a workflow-only worker and activity workers on private task queues.

    The session worker serves every type it learns of (their solver_url jobs), but only
    on the default queues, so jobs of a stack run only on the workers the test starts
    for it.
    """

    api: Api
    queues: dict[str, str]
    start_worker: Callable[..., Proc]
    procs: list[Proc] = field(default_factory=list)

    def worker(self, job_type: str, node_id: str, **env: str) -> Proc:
        """An activity-only worker for `job_type` (comma list) on this stack's queues."""
        proc = self.start_worker(
            **{
                **self.queues,
                "WORKER_TYPES": job_type,
                "WORKER_RUN_WORKFLOWS": "false",
                "NODE_ID": node_id,
                **env,
            }
        )
        self.procs.append(proc)
        return proc


async def _registry_on_default_queue(temporal: DevServer) -> None:
    """Start the (global) type registry on the default queue if nobody has yet.

    An isolated API registers its types in the same registry workflow; had it created
    it, the registry would live on the stack's private queue and die with the stack.
    """
    from temporalio.client import Client
    from temporalio.common import WorkflowIDConflictPolicy

    from engine.connection import TemporalSettings
    from workflows.names import REGISTRY_WORKFLOW_ID

    client = await Client.connect(temporal.address)
    await client.start_workflow(
        "JobTypeRegistry",
        [],
        id=REGISTRY_WORKFLOW_ID,
        task_queue=TemporalSettings().task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )


# Idle stacks kept for later tests (each an API and a workflow worker, ~2.5 s CPU to
# start and next to nothing while idle); the least recently used beyond this stop.
IDLE_STACKS_KEPT = 3


class StackPool:
    """Isolated stacks handed to one test at a time and kept between tests.

    A stack's API and workflow worker (`procs[:2]`) are shared by the tests that ask for
    the same API env, one after the other: its jobs' types are the tests' own, and what
    the API keeps is namespace-wide anyway. The workers a test adds are stopped after
    it; a stack one of whose two processes a test stopped or killed is not kept.
    """

    def __init__(self, start_api: Callable[..., Api], start_worker: Callable[..., Proc]):
        self.start_api = start_api
        self.start_worker = start_worker
        self.idle: list[tuple[tuple[tuple[str, str], ...], Stack]] = []

    def take(self, api_env: dict[str, str], *, shared: bool = True) -> Stack:
        """An idle stack started with `api_env`, or (always, unless `shared`) a new one."""
        key = tuple(sorted(api_env.items()))
        for i, (kept, stack) in enumerate(self.idle if shared else []):
            if kept == key:
                del self.idle[i]
                return Stack(stack.api, stack.queues, self.start_worker, stack.procs[:2])
        name = f"iso-{uuid.uuid4().hex[:10]}"
        queues = {"TEMPORAL_TASK_QUEUE": name, "TEMPORAL_ACTIVITY_QUEUE_PREFIX": f"{name}-"}
        api = self.start_api(**queues, **api_env)
        # Workflows only: the one type it polls is never submitted.
        workflows = self.start_worker(
            ready="ready: workflows=True",
            WORKER_TYPES="no-such-type",
            NODE_ID=f"{name}-workflows",
            **queues,
        )
        _POOLED.update((id(api.proc), id(workflows)))
        return Stack(api, queues, self.start_worker, [api.proc, workflows])

    def give_back(self, api_env: dict[str, str], stack: Stack, *, keep: bool = True) -> None:
        """Stop the test's own workers; keep the stack (if `keep`) when its API and
        workflow worker still run."""
        shared, own = stack.procs[:2], stack.procs[2:]
        for proc in reversed(own):
            proc.stop(timeout=15)
        alive = shared[0] is stack.api.proc and all(p.process.poll() is None for p in shared)
        if keep and alive:
            self.idle.insert(0, (tuple(sorted(api_env.items())), stack))
            for _, old in self.idle[IDLE_STACKS_KEPT:]:
                self.stop(old)
            del self.idle[IDLE_STACKS_KEPT:]
        else:
            self.stop(stack)

    @staticmethod
    def stop(stack: Stack) -> None:
        """Stop a stack's workflow worker, then its API."""
        for proc in reversed(stack.procs[:2]):
            proc.stop(timeout=15)


@pytest.fixture(scope="session")
async def stack_pool(
    temporal: DevServer, start_api: Callable[..., Api], start_worker: Callable[..., Proc]
) -> AsyncIterator[StackPool]:
    """The session's StackPool (the type registry started on the default queue first)."""
    await _registry_on_default_queue(temporal)
    pool = StackPool(start_api, start_worker)
    yield pool
    for _, stack in pool.idle:
        pool.stop(stack)


@pytest.fixture
def start_stack(stack_pool: StackPool) -> Iterator[Callable[..., Stack]]:
    """Factory: a Stack (API env as keyword arguments) of the test's own while it runs;
    the workers it adds stop after the test, its API and workflow worker are kept for
    later tests with the same env unless the test stopped one of them. With
    `shared=False`, a new stack that no other test had or will have (for a test that
    reads what the API keeps in memory about every job it saw, say)."""
    taken: list[tuple[dict[str, str], Stack, bool]] = []

    def start(*, shared: bool = True, **api_env: str) -> Stack:
        stack = stack_pool.take(api_env, shared=shared)
        taken.append((api_env, stack, shared))
        return stack

    yield start
    for api_env, stack, shared in taken:
        stack_pool.give_back(api_env, stack, keep=shared)


@dataclass(kw_only=True)
class GatedServer(SolverServer):
    """Sends half of a file under `root`, then waits for `gate`."""

    gate: threading.Event = field(default_factory=threading.Event)
    held: Counter[str] = field(default_factory=Counter)
    aborted: Counter[str] = field(default_factory=Counter)


@pytest.fixture
def gated_server(tmp_path: Path) -> Iterator[GatedServer]:
    """Serve tmp_path/gated; each body stalls half way until the test sets `gate`."""

    root = tmp_path / "gated"
    root.mkdir()
    state = GatedServer(root=root)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.hits[self.path] += 1
            path = root / self.path.lstrip("/")
            if not path.is_file():
                self.send_error(404)
                return
            body = path.read_bytes()
            half = len(body) // 2
            try:
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[:half])
                self.wfile.flush()
                state.held[self.path] += 1
                state.gate.wait(120)
                self.wfile.write(body[half:])
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                state.aborted[self.path] += 1

    with serving(Handler) as state.port:
        yield state
        state.gate.set()


def pid_alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


# -- a headless browser for the dashboard tests -------------------------------------

# Default for actions and expect(); generous, as CI machines may be busy.
BROWSER_TIMEOUT_MS = 20_000
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing (apt-get install chromium)"
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless Debian Chromium, driven by Playwright (no downloaded browser). One per
    module: a live sync Playwright holds an event loop that async tests cannot share."""
    expect.set_options(timeout=BROWSER_TIMEOUT_MS)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh browser context (so a fresh sessionStorage) per test."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(BROWSER_TIMEOUT_MS)
    yield context.new_page()
    context.close()


# -- in-process workflow tests (tests/workflow_harness.py) --------------------------------


@pytest.fixture(scope="module")
async def client(temporal: DevServer) -> Client:
    """A client of the session's dev server with the product's data converter."""
    return await Client.connect(temporal.address, data_converter=pydantic_data_converter)


@pytest.fixture
async def harness(client: Client) -> AsyncIterator[Harness]:
    """A fresh task queue with JobWorkflow, GateWorkflow and the stand-in run_job on it."""
    from tests.workflow_harness import running_harness  # it imports this module

    async with running_harness(client) as running:
        yield running
