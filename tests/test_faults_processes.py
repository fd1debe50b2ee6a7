"""Fault battery, processes: kill workers, Temporal and the API mid-run; nothing is lost.

Load: JOBFORGE_FAULT_LOAD=reduced (default, CI) or full (`make faults`). Each scenario
checks the invariants of tests/faultkit.py (L R D M O) once quiet.
"""

from __future__ import annotations

import json
import random
import signal
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import faultkit
from tests.conftest import SECRET, Api, Proc, Stack, base_env, wait_until
from tests.helpers import read_events
from tests.ports import free_port
from worker.devserver import DevServer, wait_for_port


def _submit_all(
    api: Api,
    solver: faultkit.Solver,
    job_type: str,
    log: Path,
    n: int,
    *,
    max_attempts: int = 3,
    spec: dict[str, Any] | None = None,
    **kw: Any,
):
    """Submit n jobs of the solver double (with the fields of `spec`); return (ids,
    tags by id).

    `max_attempts` above the faults a job can meet, so that every job must complete.
    """
    tags: dict[str, str] = {}
    for i in range(n):
        tag = f"j{i}-{uuid.uuid4().hex[:6]}"
        params = faultkit.run_params(tag, log, **kw)
        fields = {"params": params, "max_attempts": max_attempts, **(spec or {})}
        job_id = api.submit(**solver.spec(job_type, **fields))
        tags[job_id] = tag
    return list(tags), tags


def _agent(
    spawn: Callable[..., Proc], temporal: DevServer, url: str, job_type: str, node: str, cache: Path
) -> Proc:
    proc = spawn(
        ["agent"],
        base_env(
            temporal,
            HUB_URL=url,
            NODE_ID=node,
            WORKER_CORES="2",
            WORKER_TYPES=json.dumps([job_type]),
            SOLVER_CACHE_DIR=str(cache),
        ),
    )
    wait_until(lambda: "ready" in proc.output(), timeout=30, what="agent to start")
    return proc


@pytest.mark.slow(42)
@pytest.mark.timeout(900 if faultkit.FULL else 300)
def test_baseline_two_native_workers_and_an_agent_lose_nothing(
    start_stack: Callable[..., Stack],
    spawn: Callable[..., Proc],
    temporal: DevServer,
    job_type: str,
    tmp_path: Path,
) -> None:
    n = faultkit.scale(100, 1000)
    solver = faultkit.write_solver(tmp_path / "bin")
    log = tmp_path / "runs.log"
    stack = start_stack()
    caches = [tmp_path / "cache-a", tmp_path / "cache-b", tmp_path / "cache-agent"]
    stack.worker(job_type, "native-a", WORKER_CORES="3", SOLVER_CACHE_DIR=str(caches[0]))
    stack.worker(job_type, "native-b", WORKER_CORES="3", SOLVER_CACHE_DIR=str(caches[1]))
    agent = _agent(spawn, temporal, stack.api.url, job_type, "agent-1", caches[2])
    stack.procs.append(agent)

    ids, tags = _submit_all(stack.api, solver, job_type, log, n, sleep_s=0.05)
    jobs = faultkit.assert_invariants(
        stack.api.http, ids, tags, log, timeout=faultkit.scale(120, 600)
    )
    assert all(len(faultkit.read_runs(log)[tag]) == 1 for tag in tags.values())
    assert {job["worker_id"] for job in jobs.values()} >= {"native-a", "native-b"}
    assert not faultkit.check_quiet(solver.path, caches)


@pytest.mark.slow(40)
@pytest.mark.timeout(900 if faultkit.FULL else 300)
def test_killed_native_workers_lose_nothing(
    start_stack: Callable[..., Stack],
    job_type: str,
    tmp_path: Path,
) -> None:
    n = faultkit.scale(40, 300)
    kills = faultkit.scale(2, 15)
    solver = faultkit.write_solver(tmp_path / "bin")
    log = tmp_path / "runs.log"
    stack = start_stack(JOB_HEARTBEAT_TIMEOUT_S="3")
    caches = {name: tmp_path / f"cache-{name}" for name in ("native-a", "native-b")}

    def start(name: str) -> Proc:
        return stack.worker(job_type, name, WORKER_CORES="3", SOLVER_CACHE_DIR=str(caches[name]))

    workers = {name: start(name) for name in caches}
    # W: jobs these workers cannot run (no solver_url, and no solver registered for the
    # type), submitted before the kills: no worker, restarted or not, ever claims them.
    unrunnable = [stack.api.submit(type=job_type, params={"w": i}) for i in range(3)]
    ids, tags = _submit_all(
        stack.api, solver, job_type, log, n, max_attempts=kills + 2, sleep_s=1.0
    )
    rng = random.Random(7)
    for _ in range(kills):
        time.sleep(3)
        name = rng.choice(sorted(workers))
        workers[name].kill()
        workers[name] = start(name)
    faultkit.assert_invariants(stack.api.http, ids, tags, log, timeout=faultkit.scale(150, 600))
    assert not faultkit.check_unrunnable({j: stack.api.job(j) for j in unrunnable})
    assert not faultkit.check_quiet(solver.path, caches.values(), timeout=20)


@pytest.mark.slow(30)
@pytest.mark.timeout(900 if faultkit.FULL else 300)
def test_a_killed_pinned_hosts_worker_gets_its_jobs_back_and_no_other_host_does(
    start_stack: Callable[..., Stack],
    job_type: str,
    tmp_path: Path,
) -> None:
    n = faultkit.scale(6, 40)
    solver = faultkit.write_solver(tmp_path / "bin")
    log = tmp_path / "runs.log"
    stack = start_stack(JOB_HEARTBEAT_TIMEOUT_S="3")
    host_b = f"host-b-{uuid.uuid4().hex[:6]}"
    caches = {name: tmp_path / f"cache-{name}" for name in ("native-a", "native-b")}
    stack.worker(
        job_type,
        "native-a",
        WORKER_CORES="3",
        WORKER_HOST=f"host-a-{uuid.uuid4().hex[:6]}",
        SOLVER_CACHE_DIR=str(caches["native-a"]),
    )

    def start_b() -> Proc:
        return stack.worker(
            job_type,
            "native-b",
            WORKER_CORES="2",
            WORKER_HOST=host_b,
            SOLVER_CACHE_DIR=str(caches["native-b"]),
        )

    worker_b = start_b()
    pinned, tags = _submit_all(
        stack.api, solver, job_type, log, n, sleep_s=5.0, spec={"require_host": host_b}
    )
    plain, plain_tags = _submit_all(stack.api, solver, job_type, log, n, sleep_s=0.2)

    def running_on_b() -> list[str]:
        return [i for i in pinned if faultkit.get_job(stack.api.http, i)["status"] == "running"]

    hit = wait_until(running_on_b, timeout=60, what="a pinned job running on native-b")
    worker_b.kill()

    def back_to_pending() -> bool:
        job = faultkit.get_job(stack.api.http, hit[0])
        return job["status"] == "pending" and job["attempts"] == 1

    # A pinned job runs 5 s, so the kill finds it running; its attempt then times out.
    wait_until(back_to_pending, timeout=60, what="the killed attempt to time out")
    # native-a is idle (it runs the plain jobs) and never gets a pinned one.
    faultkit.wait_terminal(stack.api.http, plain, timeout=60)
    assert faultkit.get_job(stack.api.http, hit[0])["status"] == "pending"
    start_b()
    jobs = faultkit.assert_invariants(
        stack.api.http,
        [*pinned, *plain],
        {**tags, **plain_tags},
        log,
        timeout=faultkit.scale(120, 600),
    )
    assert not faultkit.check_pinned(jobs, {host_b: {"native-b"}})
    assert jobs[hit[0]]["fail_history"][0]["reason"] == "heartbeat_timeout"
    assert not faultkit.check_quiet(solver.path, caches.values(), timeout=20)


def _submit_in_thread(
    http: httpx.Client, specs: dict[str, dict[str, Any]], out: dict[str, str], seen: list[Any]
) -> threading.Thread:
    """Submit each spec (keyed by its Idempotency-Key) with retries, in a thread."""

    def run() -> None:
        for key, spec in specs.items():
            try:
                job_id, statuses = faultkit.submit_retrying(http, spec, key, timeout=120)
            except BaseException as err:  # reported by the test
                seen.append(err)
                return
            out[key] = job_id
            seen.extend(statuses)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow(28)
@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGKILL], ids=["term", "kill"])
@pytest.mark.timeout(900 if faultkit.FULL else 300)
def test_temporal_restart_loses_nothing_and_answers_503_while_down(
    spawn: Callable[..., Proc],
    job_type: str,
    tmp_path: Path,
    stop_signal: signal.Signals,
) -> None:
    n = faultkit.scale(30, 200)
    server = DevServer(tmp_path / "temporal", port=free_port(), ui_port=None)
    server.start()
    http: httpx.Client | None = None
    procs: list[Proc] = []
    try:
        port = free_port()
        api_proc = spawn(
            ["api", "--port", str(port)], base_env(server, JOB_HEARTBEAT_TIMEOUT_S="5")
        )
        procs.append(api_proc)
        wait_for_port(port, 30, api_proc.process)
        http = httpx.Client(
            base_url=f"http://127.0.0.1:{port}",
            headers={"Authorization": f"Bearer {SECRET}"},
            timeout=30,
        )
        cache = tmp_path / "cache"
        worker = spawn(
            ["worker"],
            base_env(
                server,
                WORKER_CORES="4",
                SOLVER_CACHE_DIR=str(cache),
                NODE_ID="restart-worker",
                WORKER_TYPES=job_type,
            ),
        )
        procs.append(worker)
        wait_until(lambda: "ready: workflows=True" in worker.output(), timeout=30, what="worker")
        solver = faultkit.write_solver(tmp_path / "bin")
        log = tmp_path / "runs.log"
        specs: dict[str, dict[str, Any]] = {}
        tags_by_key: dict[str, str] = {}
        for i in range(n):
            tag = f"r{i}-{uuid.uuid4().hex[:6]}"
            key = f"key-{tag}"
            tags_by_key[key] = tag
            params = faultkit.run_params(tag, log, sleep_s=0.3)
            specs[key] = solver.spec(job_type, params=params, max_attempts=5)
        keys = list(specs)
        third = n // 3
        ids: dict[str, str] = {}
        seen: list[Any] = []
        for key in keys[:third]:
            ids[key], _ = faultkit.submit_retrying(http, specs[key], key)

        # Down: submissions retried in a thread; reads and writes answer 503.
        assert server.process is not None
        server.process.send_signal(stop_signal)
        server.process.wait(30)
        thread = _submit_in_thread(http, {k: specs[k] for k in keys[third:]}, ids, seen)
        probes = [
            http.get("/api/jobs", params={"type": job_type}).status_code,
            http.get(f"/api/jobs/{ids[keys[0]]}").status_code,
            http.post(
                "/api/jobs", json=specs[keys[-1]], headers={"Idempotency-Key": keys[-1]}
            ).status_code,
        ]
        assert set(probes) == {503}, probes
        server.start()
        thread.join(180)
        assert not thread.is_alive()
        errors = [s for s in seen if isinstance(s, BaseException)]
        assert not errors, errors
        assert not {s for s in seen if isinstance(s, int)} - {200, 201, 503}, seen

        # Each key made exactly one job: resubmitting returns it, and the type lists n.
        for key in keys[:: max(1, n // 10)]:
            again, _ = faultkit.submit_retrying(http, specs[key], key)
            assert again == ids[key]
        tags = {ids[key]: tags_by_key[key] for key in keys}
        assert len(tags) == n
        faultkit.assert_invariants(http, list(tags), tags, log, timeout=faultkit.scale(120, 600))
        listed = http.get("/api/jobs", params={"type": job_type, "limit": 500}).json()
        assert sorted(job["id"] for job in listed) == sorted(tags)
        assert not faultkit.check_quiet(solver.path, [cache])
    finally:
        if http is not None:
            http.close()
        for proc in procs:
            proc.stop(timeout=15)
        server.stop()


class SseClient:
    """Follows /api/jobs/events, reconnecting with Last-Event-ID whenever it drops."""

    def __init__(self, url: str, params: dict[str, Any]) -> None:
        self.url = url
        self.params = params
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.last_id: str | None = None
        self.connects = 0
        self.connected = threading.Event()
        self.stop = threading.Event()
        self._http: httpx.Client | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            headers = {"Last-Event-ID": self.last_id} if self.last_id else {}
            try:
                self._http = httpx.Client(timeout=httpx.Timeout(30, connect=2))
                with (
                    self._http as http,
                    http.stream(
                        "GET", f"{self.url}/api/jobs/events", params=self.params, headers=headers
                    ) as response,
                ):
                    if response.status_code != 200:
                        time.sleep(0.3)
                        continue
                    self.connects += 1
                    self.connected.set()
                    for event in read_events(response):
                        self.events.append((event.event, event.data))
                        self.last_id = event.id
                        if self.stop.is_set():
                            return
            except Exception:  # a drop (API killed), or close() from the test
                time.sleep(0.3)

    def close(self) -> None:
        """Stop following: close the connection under the reader."""
        self.stop.set()
        if self._http is not None:
            self._http.close()


@pytest.mark.slow(48)
@pytest.mark.timeout(900 if faultkit.FULL else 300)
def test_killed_api_with_an_agent_and_sse_clients_loses_nothing(
    start_stack: Callable[..., Stack],
    spawn: Callable[..., Proc],
    temporal: DevServer,
    job_type: str,
    tmp_path: Path,
) -> None:
    n = faultkit.scale(30, 200)
    kills = faultkit.scale(1, 3)
    solver = faultkit.write_solver(tmp_path / "bin")
    log = tmp_path / "runs.log"
    stack = start_stack(JOB_HEARTBEAT_TIMEOUT_S="10")
    url = stack.api.url
    port = int(url.rsplit(":", 1)[1])
    cache = tmp_path / "cache-agent"
    agent = _agent(spawn, temporal, url, job_type, "agent-k", cache)
    stack.procs.append(agent)
    clients = [SseClient(url, {"type": job_type}) for _ in range(2)]
    for client in clients:
        assert client.connected.wait(15)

    ids: list[str] = []
    tags: dict[str, str] = {}
    api_proc = stack.api.proc
    per_round = n // (kills + 1)
    for round_ in range(kills + 1):
        count = per_round if round_ < kills else n - per_round * kills
        more, more_tags = _submit_all(
            stack.api, solver, job_type, log, count, max_attempts=kills + 2, sleep_s=0.3
        )
        ids += more
        tags.update(more_tags)
        if round_ == kills:
            break
        time.sleep(2)
        api_proc.kill()
        time.sleep(1)  # the API stays down a second (pacing, not a wait)
        api_proc = spawn(["api", "--port", str(port)], base_env(temporal, **stack.queues))
        stack.procs.append(api_proc)
        wait_for_port(port, 30, api_proc.process)

    def missing() -> list[tuple[int, str, int, int]]:
        """(client, job, seq, ts) of each transition a client has not had as an event."""
        found = []
        for number, client in enumerate(clients):
            seen = {(data["id"], data["seq"]) for _, data in client.events}
            found += [
                (number, job_id, t["seq"], t["ts"])
                for job_id in ids
                for t in jobs[job_id]["transitions"]
                if (job_id, t["seq"]) not in seen
            ]
        return found

    jobs = faultkit.assert_invariants(
        stack.api.http, ids, tags, log, timeout=faultkit.scale(120, 600)
    )
    try:
        wait_until(lambda: not missing(), timeout=30, interval=0.5, what="every transition")
    except TimeoutError:
        # What was lost, and each client's ids around it: a transition the killed process
        # had not sent yet (seen late) and the restarted one resumed past.
        seen = [(client.connects, client.last_id, len(client.events)) for client in clients]
        raise AssertionError(
            f"not had as events: {missing()[:10]}; (connects, last id, events): {seen}"
        ) from None
    for client in clients:
        client.close()
        assert client.connects >= 1 + kills
        problems = faultkit.check_events(client.events, jobs)
        assert not problems, problems[:20]
    assert {job["worker_id"] for job in jobs.values()} == {"agent-k"}
    assert agent.process.poll() is None
    assert not faultkit.check_quiet(solver.path, [cache])
    # SIGTERM with requests open (an agent's claim, streams): it exits in its 5 s grace.
    stopping = time.monotonic()
    api_proc.stop(timeout=30)
    assert time.monotonic() - stopping < 15
