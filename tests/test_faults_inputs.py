"""Input faults: duplicate submissions, hostile solvers, hostile downloads.

Load: JOBFORGE_FAULT_LOAD=reduced (default) or full. Each test runs its own API and
workers on private task queues (`start_stack`). Reproduce one scenario at full load with
`JOBFORGE_FAULT_LOAD=full .venv/bin/pytest tests/test_faults_inputs.py::<name>`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from tests.conftest import (
    PYTHON,
    GatedServer,
    LoopbackServer,
    Solver,
    Stack,
    pid_alive,
    serving,
    wait_until,
    wait_until_async,
)
from tests.faultkit import FULL, check_cache, check_transitions
from worker.devserver import DevServer
from workflows.job_states import TERMINAL

# The worker process's resident memory stays under this while hostile solvers run.
WORKER_RSS_BOUND_MB = 300


def rss_mb(pid: int) -> float:
    """VmRSS of a process in MB (0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except FileNotFoundError:
        pass
    return 0.0


class RssWatch:
    """Sample a process's VmRSS every 50 ms in a thread; `peak` is the highest seen."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mb(self.pid))
            self._stop.wait(0.05)

    def __enter__(self) -> RssWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def assert_cache_clean(cache: Path) -> None:
    """O: no `.part-*` temp files; every cached solver hashes to its name."""
    assert not check_cache(cache), check_cache(cache)


def reason(job: dict[str, Any]) -> str | None:
    """The error type a failed job's reason starts with."""
    text = job["fail_reason"]
    return text.split(":")[0] if text else None


def pids_in(directory: Path) -> list[int]:
    """Every pid a solver double recorded (one file per process)."""
    return [int(p.name) for p in directory.iterdir()] if directory.exists() else []


# -- 5. duplicates -------------------------------------------------------------------


async def test_each_idempotency_key_submitted_three_times_at_once_makes_one_job(
    start_stack: Callable[..., Stack], job_type: str, temporal: DevServer
) -> None:
    stack = start_stack()
    keys = [f"dup-{uuid.uuid4().hex}" for _ in range(200 if FULL else 30)]

    def post(key: str) -> tuple[str, int, str]:
        response = stack.api.http.post(
            "/api/jobs",
            json={"type": job_type, "params": {"key": key}},
            headers={"Idempotency-Key": key},
        )
        assert response.status_code in (200, 201), response.text
        return key, response.status_code, response.json()["id"]

    with ThreadPoolExecutor(max_workers=12) as pool:
        answers = list(pool.map(post, [k for k in keys for _ in range(3)]))

    ids_per_key: dict[str, set[str]] = {}
    for key, _, job_id in answers:
        ids_per_key.setdefault(key, set()).add(job_id)
    assert all(len(ids) == 1 for ids in ids_per_key.values()), ids_per_key
    assert len({next(iter(ids)) for ids in ids_per_key.values()}) == len(keys)

    # Temporal holds exactly one workflow per key (visibility lags: wait, then hold).
    client = await Client.connect(temporal.address)
    query = f"WorkflowType = 'JobWorkflow' AND JobforgeType = '{job_type}'"

    async def count() -> int:
        return (await client.count_workflows(query)).count

    async def all_counted() -> bool:
        return await count() >= len(keys)

    await wait_until_async(all_counted, interval=0.2, what=f"{len(keys)} workflows")
    await asyncio.sleep(1.0)  # read again after a pause: no workflow is added later
    assert await count() == len(keys)

    # The same key with another body is refused.
    response = stack.api.http.post(
        "/api/jobs",
        json={"type": job_type, "params": {"key": "something else"}},
        headers={"Idempotency-Key": keys[0]},
    )
    assert response.status_code == 409, response.text
    assert await count() == len(keys)


# -- 6. hostile solvers --------------------------------------------------------------

PID_RECORD = """
pids = os.environ.get("FAULT_PIDS") or params["pids"]
os.makedirs(pids, exist_ok=True)
open(os.path.join(pids, str(os.getpid())), "w").close()
"""


@pytest.mark.slow(22)
def test_hostile_solvers_fail_within_their_limits_and_leave_nothing_running(
    start_stack: Callable[..., Stack],
    job_type: str,
    make_solver: Callable[[str], Solver],
    tmp_path: Path,
) -> None:
    stack = start_stack()
    pids = tmp_path / "pids"
    log_tail = 4096
    worker = stack.worker(
        job_type,
        "hostile",
        WORKER_CORES="2",
        SOLVER_CACHE_DIR=str(tmp_path / "cache"),
        SOLVER_MAX_MEMORY_MB="256",
        SOLVER_MAX_OUTPUT_BYTES=str(1024 * 1024),
        SOLVER_LOG_TAIL_BYTES=str(log_tail),
    )
    solvers = {
        "hang": make_solver(PID_RECORD + "time.sleep(600)\n"),
        "ignore_term": make_solver(
            PID_RECORD + "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "time.sleep(600)\n"
        ),
        "fork": make_solver(
            PID_RECORD
            + """
for _ in range(3):
    if os.fork() == 0:
        open(os.path.join(pids, str(os.getpid())), "w").close()
        time.sleep(600)
        os._exit(0)
while len(os.listdir(pids)) < 4:  # the children are up: now leave them behind
    time.sleep(0.01)
print(json.dumps({"forked": 3}))
"""
        ),
        "allocate": make_solver(
            PID_RECORD
            + """
hoard = []
while True:
    hoard.append(bytearray(16 * 1024 * 1024))
"""
        ),
        "stdout_flood": make_solver(
            PID_RECORD
            + """
chunk = b"x" * (1024 * 1024)
for _ in range(1024):
    sys.stdout.buffer.write(chunk)
"""
        ),
        "stderr_flood": make_solver(
            PID_RECORD
            + """
chunk = "e" * (1024 * 1024)
for _ in range(64):
    sys.stderr.write(chunk)
sys.stderr.write("THE-END")
print(json.dumps({"ok": True}))
"""
        ),
    }
    runtime = {"hang": 1000, "ignore_term": 1000}
    expected = {
        "hang": ("quarantined", "max_runtime_exceeded"),
        "ignore_term": ("quarantined", "max_runtime_exceeded"),
        "fork": ("completed", None),
        "allocate": ("quarantined", "solver_exit"),
        "stdout_flood": ("quarantined", "result_too_large"),
        "stderr_flood": ("completed", None),
    }
    with RssWatch(worker.process.pid) as watch:
        started = time.monotonic()
        ids = {
            name: stack.api.submit(
                **solver.spec(
                    job_type,
                    params={"pids": str(pids / name)},
                    max_attempts=1,
                    max_runtime_ms=runtime.get(name, 60_000),
                )
            )
            for name, solver in solvers.items()
        }
        jobs = {name: stack.api.wait_status(i, *TERMINAL, timeout=90) for name, i in ids.items()}
        elapsed = time.monotonic() - started
    for name, (status, why) in expected.items():
        job = jobs[name]
        assert job["status"] == status, (name, job)
        assert reason(job) == why, (name, job)
        assert job["attempts"] == 1, (name, job)
    # TERM ignored: KILL after the 5 s grace, so the job ends soon after it.
    assert jobs["ignore_term"]["completed_at"] - jobs["ignore_term"]["created_at"] < 20_000
    assert jobs["stderr_flood"]["log_tail"].endswith("THE-END")
    assert len(jobs["stderr_flood"]["log_tail"].encode()) <= log_tail
    assert not check_transitions(jobs), check_transitions(jobs)
    assert watch.peak < WORKER_RSS_BOUND_MB, watch.peak
    # Every solver process, and every child that outlived its parent, is gone.
    recorded = [pid for name in solvers for pid in pids_in(pids / name)]
    assert len(pids_in(pids / "fork")) == 4
    wait_until(lambda: not [p for p in recorded if pid_alive(p)], timeout=10, what="no solvers")
    assert worker.process.poll() is None, "the worker itself must survive"
    print(f"hostile solvers: {elapsed:.1f} s, worker peak VmRSS {watch.peak:.0f} MB")  # noqa: T201


# -- 7. hostile downloads ------------------------------------------------------------

GOOD = f"""#!{PYTHON}
import json, sys
print(json.dumps({{"ok": True}}))
"""
GOOD_SUM = hashlib.sha256(GOOD.encode()).hexdigest()


def marker_solver(marker: Path) -> str:
    """A solver that leaves `marker` behind if it is ever run."""
    return f"#!{PYTHON}\nopen({str(marker)!r}, 'w').close()\nprint(1)\n"


@dataclass(kw_only=True)
class HostileServer(LoopbackServer):
    """Paths `/good`, `/wrong`, `/truncated`, `/drip`, `/huge`, `/to-file`: one behaviour each."""

    marker_body: bytes


@pytest.fixture
def hostile_server(tmp_path: Path) -> Iterator[HostileServer]:
    """A server whose every path misbehaves in its own way."""
    state = HostileServer(marker_body=marker_solver(tmp_path / "ran").encode())

    class Handler(BaseHTTPRequestHandler):
        def send(self, data: bytes) -> None:
            self.wfile.write(data)
            self.wfile.flush()

        def do_GET(self) -> None:
            state.hits[self.path] += 1
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.behave(self.path.lstrip("/"))

        def behave(self, name: str) -> None:
            if name == "to-file":
                self.send_response(302)
                self.send_header("Location", (tmp_path / "target.py").as_uri())
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            body = state.marker_body if name == "wrong" else GOOD.encode()
            if name == "huge":
                self.send_header("Content-Length", str(10**12))
                self.end_headers()
                for _ in range(100):  # whatever it reads, it must stop early
                    self.send(b"#" * 65536)
                return
            self.send_header("Content-Length", str(len(body) * (4 if name == "truncated" else 1)))
            self.end_headers()
            if name == "drip":
                for byte in body:
                    self.send(bytes([byte]))
                    time.sleep(0.5)
                return
            self.send(body)
            if name == "truncated":
                self.connection.shutdown(socket.SHUT_RDWR)

    with serving(Handler) as state.port:
        yield state


def test_hostile_downloads_are_refused_and_nothing_unverified_runs(
    start_stack: Callable[..., Stack],
    job_type: str,
    hostile_server: HostileServer,
    tmp_path: Path,
) -> None:
    stack = start_stack()
    cache = tmp_path / "cache"
    (tmp_path / "target.py").write_text(marker_solver(tmp_path / "ran"))
    worker = stack.worker(
        job_type,
        "downloads",
        WORKER_CORES="4",
        SOLVER_CACHE_DIR=str(cache),
        SOLVER_URL_SCHEMES="http",
        SOLVER_FETCH_TIMEOUT_S="2",
        SOLVER_MAX_BYTES=str(1024 * 1024),
    )
    cases = {  # path: (error type, max attempts, words in the reason)
        "wrong": ("solver_checksum_mismatch", 1, "expected sha256"),
        "truncated": ("solver_fetch_failed", 1, "RemoteProtocolError"),
        "drip": ("solver_fetch_failed", 2, "exceeded 2 s"),
        "huge": ("solver_fetch_failed", 2, "larger than 1048576 bytes"),
        "to-file": ("solver_fetch_failed", 1, "scheme 'file' is not allowed"),
    }
    ids = {
        name: stack.api.submit(
            type=job_type,
            solver_url=hostile_server.url(name),
            solver_checksum=GOOD_SUM,
            max_attempts=attempts,
        )
        for name, (_, attempts, _) in cases.items()
    }
    jobs = {}
    for name, (why, attempts, words) in cases.items():
        jobs[name] = job = stack.api.wait_status(ids[name], *TERMINAL, timeout=60)
        assert job["status"] == "quarantined", (name, job)
        assert reason(job) == why, (name, job)
        assert words in job["fail_reason"], (name, job)
        assert job["attempts"] <= attempts, (name, job)
    assert not check_transitions(jobs), check_transitions(jobs)
    assert not (tmp_path / "ran").exists(), "an unverified solver ran"
    # The redirect to file:// (not an allowed scheme on this worker) was not followed.
    assert hostile_server.hits["/to-file"] == 1
    assert_cache_clean(cache)
    assert not [p for p in cache.iterdir() if not p.name.startswith(".")], "nothing cached"
    assert worker.process.poll() is None


def test_file_urls_and_private_hosts_are_refused_where_policy_says(
    start_stack: Callable[..., Stack],
    job_type: str,
    hostile_server: HostileServer,
    tmp_path: Path,
) -> None:
    # At submit: an API without `file` or private networks names solver_url in a 422.
    strict = start_stack(SOLVER_URL_SCHEMES="https,http", SOLVER_ALLOW_PRIVATE_NETWORKS="false")
    for url in ((tmp_path / "target.py").as_uri(), hostile_server.url("good")):
        response = strict.api.http.post(
            "/api/jobs", json={"type": job_type, "solver_url": url, "solver_checksum": GOOD_SUM}
        )
        assert response.status_code == 422, response.text
        assert "solver_url" in response.text
    # At the worker: a worker refusing private networks does not touch a loopback URL
    # the (permissive) API let through. (A redirect from a public first hop to a private
    # one cannot be staged on loopback alone; every hop passes the same check.)
    stack = start_stack()
    cache = tmp_path / "cache"
    stack.worker(
        job_type, "no-private", SOLVER_CACHE_DIR=str(cache), SOLVER_ALLOW_PRIVATE_NETWORKS="false"
    )
    job_id = stack.api.submit(
        type=job_type, solver_url=hostile_server.url("good"), solver_checksum=GOOD_SUM
    )
    job = stack.api.wait_status(job_id, *TERMINAL, timeout=60)
    assert (job["status"], reason(job)) == ("quarantined", "solver_fetch_failed"), job
    assert hostile_server.hits["/good"] == 0
    assert_cache_clean(cache)


def test_a_worker_killed_mid_download_leaves_no_temp_file_and_the_job_reruns(
    start_stack: Callable[..., Stack],
    job_type: str,
    gated_server: GatedServer,
    tmp_path: Path,
) -> None:
    stack = start_stack(JOB_HEARTBEAT_TIMEOUT_S="3")
    cache = tmp_path / "cache"
    (gated_server.root / "solver.py").write_text(GOOD)
    first = stack.worker(job_type, "node-a", SOLVER_CACHE_DIR=str(cache))
    job_id = stack.api.submit(
        type=job_type, solver_url=gated_server.url("solver.py"), solver_checksum=GOOD_SUM
    )
    wait_until(lambda: gated_server.held["/solver.py"], timeout=30, what="download held")
    wait_until(lambda: list(cache.glob(".part-*")), timeout=10, what="a temp file")
    first.stop(signal.SIGKILL)
    assert list(cache.glob(".part-*")), "the killed worker left its temp file"
    gated_server.gate.set()
    stack.worker(job_type, "node-b", SOLVER_CACHE_DIR=str(cache))
    job = stack.api.wait_status(job_id, *TERMINAL, timeout=90)
    assert job["status"] == "completed", job
    assert job["worker_id"] == "node-b"
    assert_cache_clean(cache)


def test_many_jobs_needing_one_uncached_solver_download_it_once(
    start_stack: Callable[..., Stack],
    job_type: str,
    hostile_server: HostileServer,
    tmp_path: Path,
) -> None:
    stack = start_stack()
    cache = tmp_path / "cache"
    stack.worker(job_type, "many", WORKER_CORES="4", SOLVER_CACHE_DIR=str(cache))
    url = hostile_server.url("good")
    ids = [
        stack.api.submit(type=job_type, solver_url=url, solver_checksum=GOOD_SUM)
        for _ in range(50 if FULL else 20)
    ]
    for job_id in ids:
        job = stack.api.wait_status(job_id, *TERMINAL, timeout=120)
        assert job["status"] == "completed", job
    assert hostile_server.hits["/good"] == 1
    assert_cache_clean(cache)
