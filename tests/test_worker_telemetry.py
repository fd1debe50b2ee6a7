"""Host telemetry on the registry heartbeat, through real processes: an agent's
`POST /api/workers/{id}/heartbeat`, a `jobforge agent`, and a native worker, each seen
in `GET /api/workers`."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Api, base_env, wait_until
from tests.procs import Proc
from worker.devserver import DevServer

pytestmark = pytest.mark.usefixtures("session_worker")

INFO = {
    "cpu_percent": 37.5,
    "mem_used_bytes": 6 * 2**30,
    "mem_total_bytes": 16 * 2**30,
    "disk_free_bytes": 120 * 2**30,
    "load_avg": [1.5, 1.25, 0.75],
    "running_jobs": 2,
    "version": "0.1.0",
}


def listed(api: Api, worker_id: str, ready: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Poll GET /api/workers until `worker_id` is there and `ready`; return it."""

    def found() -> dict[str, Any] | None:
        for worker in api.http.get("/api/workers").json():
            if worker["worker_id"] == worker_id and ready(worker):
                return dict(worker)
        return None

    result: dict[str, Any] = wait_until(found, timeout=30, what=f"{worker_id} in the list")
    return result


def register(api: Api, worker_id: str) -> None:
    response = api.http.post("/api/workers/register", json={"worker_id": worker_id})
    assert response.status_code == 204, response.text


def test_an_agents_heartbeat_shows_its_telemetry_and_liveness(api: Api) -> None:
    worker_id = f"agent-{uuid.uuid4().hex[:6]}"
    register(api, worker_id)
    before = listed(api, worker_id, lambda _: True)
    assert before["info"] is None  # registered, no heartbeat with telemetry yet

    beat = api.http.post(f"/api/workers/{worker_id}/heartbeat", json={"info": INFO})

    assert beat.status_code == 204, beat.text
    worker = listed(api, worker_id, lambda w: w["info"] is not None)
    assert worker["info"] == INFO
    assert worker["alive"] is True
    assert worker["last_heartbeat"] >= before["last_heartbeat"]
    assert worker["kind"] == "agent"


def test_a_heartbeat_from_a_worker_never_registered_answers_404(api: Api) -> None:
    worker_id = f"ghost-{uuid.uuid4().hex[:6]}"

    beat = api.http.post(f"/api/workers/{worker_id}/heartbeat", json={"info": INFO})

    assert beat.status_code == 404, beat.text
    assert beat.json()["worker_id"] == worker_id
    assert "register" in beat.json()["error"]


def test_a_heartbeat_needs_the_token(api: Api) -> None:
    beat = httpx.post(f"{api.url}/api/workers/w-1/heartbeat", json={"info": INFO})

    assert beat.status_code == 401


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("w-1", {"info": {**INFO, "cpu_percent": 150}}, "info.cpu_percent"),
        ("w-1", {"info": {**INFO, "cpu_percent": "37"}}, "info.cpu_percent"),
        ("w-1", {"info": {**INFO, "running_jobs": True}}, "info.running_jobs"),
        ("w-1", {"info": {**INFO, "mem_total_bytes": -1}}, "info.mem_total_bytes"),
        ("w-1", {"info": {**INFO, "load_avg": [1, 2]}}, "info.load_avg.2"),
        ("w-1", {"info": {**INFO, "version": "v" * 65}}, "info.version"),
        ("w-1", {"info": {**INFO, "gpu": 1}}, "info.gpu"),
        ("w-1", {}, "info"),
        ("bad id", {"info": INFO}, "worker_id"),
    ],
)
def test_a_heartbeat_with_a_bad_field_answers_422_naming_it(
    api: Api, path: str, body: dict[str, Any], field: str
) -> None:
    beat = api.http.post(f"/api/workers/{path}/heartbeat", json=body)

    assert beat.status_code == 422, beat.text
    assert beat.json()["error"].startswith(f"{field}:"), beat.json()


def test_a_native_workers_telemetry_is_listed(api: Api) -> None:
    worker = listed(api, "session-worker", lambda w: w["info"] is not None)

    info = worker["info"]
    assert worker["kind"] == "native"
    assert worker["alive"] is True
    assert info["version"] == "0.1.0"
    assert 0 < info["mem_used_bytes"] <= info["mem_total_bytes"]
    assert info["disk_free_bytes"] > 0
    assert len(info["load_avg"]) == 3
    assert info["running_jobs"] >= 0


def test_a_jobforge_agent_sends_its_telemetry_at_once(
    api: Api, spawn: Callable[..., Proc], temporal: DevServer, tmp_path: Path
) -> None:
    node_id = f"agent-{uuid.uuid4().hex[:6]}"
    agent = spawn(
        ["agent"],
        base_env(
            temporal,
            HUB_URL=api.url,
            NODE_ID=node_id,
            WORKER_TYPES=json.dumps([f"unused-{uuid.uuid4().hex[:6]}"]),
            SOLVER_CACHE_DIR=str(tmp_path / "agent-cache"),
        ),
    )
    try:
        worker = listed(api, node_id, lambda w: w["info"] is not None)
    finally:
        agent.stop()
    assert worker["kind"] == "agent"
    assert worker["info"]["version"] == "0.1.0"
    assert worker["info"]["running_jobs"] == 0
    assert worker["info"]["mem_total_bytes"] > 0
