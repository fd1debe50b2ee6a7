"""Host pinning with real processes: an API, native workers and HTTP agents, each
serving under its worker id and its WORKER_HOST (docs/workers.md, "Host pinning")."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.conftest import Api, Proc, Solver, Stack, base_env, wait_until
from tests.helpers import statuses
from worker.devserver import DevServer

ECHO = "print(json.dumps({'pid': os.getpid()}))\n"


def host(name: str) -> str:
    """A host id no other test uses (every worker here shares one machine)."""
    return f"{name}-{uuid.uuid4().hex[:6]}"


def stays(api: Api, job_id: str, status: str, seconds: float) -> dict[str, Any]:
    """Read the job for `seconds`: it must keep `status` the whole time."""
    end = time.monotonic() + seconds
    while True:
        job = api.job(job_id)
        assert job["status"] == status, job
        if time.monotonic() >= end:
            return job
        time.sleep(0.2)


def claim(api: Api, worker_id: str, job_type: str, **extra: Any) -> httpx.Response:
    body = {"worker_id": worker_id, "types": [job_type], **extra}
    return api.http.post("/api/jobs/claim", json=body)


def finish(api: Api, job_id: str, worker_id: str) -> dict[str, Any]:
    """Heartbeat (running) and report a result, as an agent does."""
    beat = api.http.post(f"/api/jobs/{job_id}/heartbeat", json={"worker_id": worker_id})
    assert beat.status_code == 204, beat.text
    done = api.http.post(
        f"/api/jobs/{job_id}/result", json={"worker_id": worker_id, "result": {"ok": True}}
    )
    assert done.status_code == 200, done.text
    return api.wait_status(job_id, "completed")


def agent(
    spawn: Callable[..., Proc], temporal: DevServer, stack: Stack, job_type: str, **env: str
) -> Proc:
    """A `jobforge agent` process for one type against the stack's API."""
    proc = spawn(
        ["agent"],
        base_env(temporal, HUB_URL=stack.api.url, WORKER_TYPES=job_type, **env),
    )
    stack.procs.append(proc)
    wait_until(lambda: "ready" in proc.output(), timeout=30, what="agent to start")
    return proc


# -- native workers ----------------------------------------------------------------------


@pytest.mark.slow(20)
def test_a_job_pinned_to_host_b_waits_for_b_while_a_idles_then_runs_on_b(
    start_stack: Callable[..., Stack], make_solver: Callable[[str], Solver], job_type: str
) -> None:
    solver = make_solver(ECHO)
    host_a, host_b = host("host-a"), host("host-b")
    stack = start_stack()
    stack.worker(job_type, "node-a", WORKER_HOST=host_a)
    api = stack.api
    by_host = api.submit(**solver.spec(job_type, require_host=host_b))
    by_worker_id = api.submit(**solver.spec(job_type, require_host="node-b"))
    plain = api.submit(**solver.spec(job_type))

    # A is up and idle: it ran the job submitted after the pinned ones.
    assert api.wait_status(plain, "completed")["host"] == host_a
    for job_id in (by_host, by_worker_id):
        job = stays(api, job_id, "pending", 1.0)
        assert job["waiting_for"] == "host"
        assert (job["attempts"], job["host"]) == (0, None)

    stack.worker(job_type, "node-b", WORKER_HOST=host_b)
    for job_id in (by_host, by_worker_id):
        job = api.wait_status(job_id, "completed", timeout=30)
        assert (job["worker_id"], job["host"], job["waiting_for"]) == ("node-b", host_b, None)
        assert statuses(job) == ["pending", "assigned", "running", "completed"]


@pytest.mark.slow(15)
def test_a_preferred_host_job_falls_back_to_any_worker_after_its_wait(
    start_stack: Callable[..., Stack], make_solver: Callable[[str], Solver], job_type: str
) -> None:
    solver = make_solver(ECHO)
    host_a = host("host-a")
    stack = start_stack()
    stack.worker(job_type, "node-a", WORKER_HOST=host_a)
    job_id = stack.api.submit(
        **solver.spec(job_type, preferred_host=host("host-b"), preferred_host_wait_ms=1500)
    )
    assert stack.api.job(job_id)["waiting_for"] == "host"
    job = stack.api.wait_status(job_id, "completed")
    assert statuses(job) == ["pending", "pending", "assigned", "running", "completed"]
    fallback = job["transitions"][1]
    assert fallback["reason"] == "preferred_host_timeout"
    assert fallback["ts"] - job["transitions"][0]["ts"] >= 1500
    assert (job["worker_id"], job["host"], job["attempts"]) == ("node-a", host_a, 1)


@pytest.mark.slow(15)
def test_a_required_host_that_never_comes_ends_failed_host_unavailable(
    start_stack: Callable[..., Stack], make_solver: Callable[[str], Solver], job_type: str
) -> None:
    solver = make_solver(ECHO)
    stack = start_stack()
    stack.worker(job_type, "node-a", WORKER_HOST=host("host-a"))
    job_id = stack.api.submit(
        **solver.spec(job_type, require_host=host("host-z"), require_host_wait_ms=1500)
    )
    assert stack.api.job(job_id)["waiting_for"] == "host"
    job = stack.api.wait_status(job_id, "failed")
    assert job["fail_reason"] == "host_unavailable"
    assert statuses(job) == ["pending", "failed"]
    assert job["transitions"][1]["ts"] - job["transitions"][0]["ts"] >= 1500
    assert (job["attempts"], job["waiting_for"], job["require_host_wait_ms"]) == (0, None, 1500)


# -- HTTP agents ---------------------------------------------------------------------------


@pytest.mark.slow(15)
def test_an_agent_claims_only_jobs_pinned_to_its_host_or_worker_id_or_unpinned(
    start_stack: Callable[..., Stack], job_type: str
) -> None:
    host_a, host_b = host("host-a"), host("host-b")
    stack = start_stack()
    api = stack.api
    pinned = api.submit(type=job_type, require_host=host_b)
    assert claim(api, "agent-a", job_type, host=host_a, wait=1.5).status_code == 204
    response = claim(api, "agent-b", job_type, host=host_b, wait=10)
    assert response.status_code == 200, response.text
    assert response.json()["id"] == pinned
    job = finish(api, pinned, "agent-b")
    assert (job["worker_id"], job["host"]) == ("agent-b", host_b)

    # Pinned to a worker id, and preferred: the claimer sends no host, so its host is
    # its worker id; no other claimer gets the job within the wait.
    by_id = api.submit(type=job_type, preferred_host="agent-c")
    assert claim(api, "agent-a", job_type, host=host_a, wait=1).status_code == 204
    assert claim(api, "agent-c", job_type, wait=10).json()["id"] == by_id
    job = finish(api, by_id, "agent-c")
    assert job["host"] == "agent-c"
    assert statuses(job) == ["pending", "assigned", "running", "completed"]


@pytest.mark.slow(25)
def test_agent_processes_run_a_preferred_job_on_their_host_or_after_the_fallback(
    start_stack: Callable[..., Stack],
    spawn: Callable[..., Proc],
    temporal: DevServer,
    make_solver: Callable[[str], Solver],
    job_type: str,
    tmp_path: Any,
) -> None:
    solver = make_solver(ECHO)
    host_a, host_b = host("host-a"), host("host-b")
    stack = start_stack()
    common = {"SOLVER_CACHE_DIR": str(tmp_path / "cache"), "JOB_POLL_INTERVAL_MS": "2000"}
    agent(spawn, temporal, stack, job_type, NODE_ID="agent-a", WORKER_HOST=host_a, **common)
    fell_back = stack.api.submit(
        **solver.spec(job_type, preferred_host=host_b, preferred_host_wait_ms=1500)
    )
    job = stack.api.wait_status(fell_back, "completed")
    assert [t["reason"] for t in job["transitions"]][1] == "preferred_host_timeout"
    assert (job["worker_id"], job["host"]) == ("agent-a", host_a)

    agent(spawn, temporal, stack, job_type, NODE_ID="agent-b", WORKER_HOST=host_b, **common)
    on_b = stack.api.submit(**solver.spec(job_type, preferred_host=host_b))
    job = stack.api.wait_status(on_b, "completed")
    assert (job["worker_id"], job["host"]) == ("agent-b", host_b)
    assert statuses(job) == ["pending", "assigned", "running", "completed"]


# -- the API's answers -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"require_host": "no spaces allowed"}, "require_host"),
        ({"require_host": True}, "require_host"),
        ({"preferred_host": ""}, "preferred_host"),
        ({"require_host": "a", "preferred_host": "b"}, "preferred_host"),
        ({"require_host_wait_ms": 5000}, "require_host_wait_ms"),
        ({"preferred_host": "b", "preferred_host_wait_ms": 0}, "preferred_host_wait_ms"),
        ({"require_host": "a", "require_host_wait_ms": "5000"}, "require_host_wait_ms"),
        ({"preferred_host_wait_ms": 5000}, "preferred_host_wait_ms"),
    ],
)
def test_an_invalid_host_field_is_a_422_naming_it(
    api: Api, job_type: str, body: dict[str, Any], field: str
) -> None:
    response = api.http.post("/api/jobs", json={"type": job_type, **body})
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["field"] == field


@pytest.mark.usefixtures("session_worker")
def test_a_pinned_job_submitted_twice_with_one_key_is_one_job(api: Api, job_type: str) -> None:
    body = {"type": job_type, "require_host": host("host-z"), "require_host_wait_ms": 1000}
    key = {"Idempotency-Key": uuid.uuid4().hex}
    first = api.http.post("/api/jobs", json=body, headers=key)
    again = api.http.post("/api/jobs", json=body, headers=key)
    other = api.http.post("/api/jobs", json={**body, "require_host": "elsewhere"}, headers=key)
    assert (first.status_code, again.status_code, other.status_code) == (201, 201, 409)
    assert first.json()["id"] == again.json()["id"]
    assert api.wait_status(first.json()["id"], "failed")["fail_reason"] == "host_unavailable"


def test_available_hosts_refuses_other_hosts_with_403_and_unlisted_pins_with_422(
    start_api: Callable[..., Api], job_type: str
) -> None:
    api = start_api(AVAILABLE_HOSTS="host-a,node-b")
    register = "/api/workers/register"

    refused = api.http.post(register, json={"worker_id": "node-x", "host": "host-x"})
    assert refused.status_code == 403, refused.text
    assert "AVAILABLE_HOSTS" in refused.json()["error"]
    assert claim(api, "node-x", job_type, host="host-x").status_code == 403
    assert claim(api, "node-x", job_type).status_code == 403
    # Listed by its host, or by its worker id.
    assert (
        api.http.post(register, json={"worker_id": "node-x", "host": "host-a"}).status_code == 204
    )
    assert api.http.post(register, json={"worker_id": "node-b"}).status_code == 204
    assert claim(api, "node-b", job_type).status_code == 204

    for field in ("require_host", "preferred_host"):
        response = api.http.post("/api/jobs", json={"type": job_type, field: "host-z"})
        assert response.status_code == 422, response.text
        assert response.json()["field"] == field


def test_a_native_worker_outside_available_hosts_does_not_start(
    spawn: Callable[..., Proc], temporal: DevServer
) -> None:
    proc = spawn(
        ["worker"],
        base_env(
            temporal,
            AVAILABLE_HOSTS="host-a",
            NODE_ID="node-x",
            WORKER_HOST="host-x",
            WORKER_TYPES="nothing",
        ),
    )
    wait_until(lambda: proc.process.poll() is not None, timeout=30, what="the worker to exit")
    assert proc.process.returncode != 0
    assert "node-x (host host-x) is not in AVAILABLE_HOSTS" in proc.output()
