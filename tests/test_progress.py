"""Progress and live heartbeat times, process level: a native worker's solver writes
progress lines, an HTTP agent sends progress in its heartbeat; `GET /api/jobs/{id}`
reads both live from the attempt's last heartbeat (no history event)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from tests.conftest import Api, Solver, wait_until
from tests.procs import Proc
from worker.devserver import DevServer

PROGRESS_SOLVER = """
gate = params["gate"]
print("JOBFORGE_PROGRESS 0.25 warming up", file=sys.stderr, flush=True)
while not os.path.exists(gate + ".1"):
    time.sleep(0.02)
print("not a progress line", file=sys.stderr, flush=True)
print("JOBFORGE_PROGRESS 0.75", file=sys.stderr, flush=True)
while not os.path.exists(gate + ".2"):
    time.sleep(0.02)
print(json.dumps({"done": True}))
"""


@pytest.fixture(autouse=True)
def _worker(session_worker: Proc) -> Proc:
    return session_worker


def job_when(api: Api, job_id: str, check: Callable[[dict[str, Any]], bool], what: str) -> Any:
    def read() -> dict[str, Any] | None:
        job = api.job(job_id)
        return job if check(job) else None

    return wait_until(read, timeout=30, what=what)


def fraction(job: dict[str, Any]) -> float | None:
    progress = job.get("progress")
    return None if progress is None else progress["fraction"]


async def test_a_solvers_progress_and_heartbeat_are_read_live(
    api: Api,
    job_type: str,
    make_solver: Callable[[str], Solver],
    tmp_path: Path,
    temporal: DevServer,
) -> None:
    gate = str(tmp_path / "gate")
    solver = make_solver(PROGRESS_SOLVER)
    job_id = api.submit(**solver.spec(job_type, params={"gate": gate}, heartbeat_timeout_ms=9000))

    job = job_when(
        api,
        job_id,
        lambda j: fraction(j) == 0.25 and j["status"] == "running",
        "the first progress, running",
    )
    assert job["progress"]["message"] == "warming up"
    assert job["progress"]["at"] >= job["claimed_at"]
    assert job["heartbeat_timeout_ms"] == 9000
    assert job["lease_expires_at"] == job["heartbeat_at"] + 9000

    Path(gate + ".1").touch()
    job = job_when(api, job_id, lambda j: fraction(j) == 0.75, "the second progress")
    assert job["progress"]["message"] is None
    # The heartbeat moved with it (heartbeat_at was the start before).
    assert job["heartbeat_at"] >= job["progress"]["at"] - 1000

    Path(gate + ".2").touch()
    done = api.wait_status(job_id, "completed")
    assert done["progress"] is None and done["lease_expires_at"] is None
    # Progress added no workflow task: the history is a short job's.
    client = await Client.connect(temporal.address)
    history = await client.get_workflow_handle(job_id).fetch_history()
    kinds = [event.event_type for event in history.events]
    assert kinds.count(6) <= 4  # EVENT_TYPE_WORKFLOW_TASK_COMPLETED: start, 2 reports, end


def test_an_agents_heartbeat_progress_is_read_live(start_api: Callable[..., Api]) -> None:
    prefix = f"progress-{uuid.uuid4().hex[:8]}-"
    hub = start_api(TEMPORAL_ACTIVITY_QUEUE_PREFIX=prefix)
    job_id = hub.submit(type="agent-work")
    claim = hub.http.post(
        "/api/jobs/claim", json={"worker_id": "agent-p", "types": ["agent-work"], "wait": 10}
    )
    assert claim.status_code == 200, claim.text
    beat = hub.http.post(
        f"/api/jobs/{job_id}/heartbeat",
        json={"worker_id": "agent-p", "progress": {"fraction": 0.5, "message": "half"}},
    )
    assert beat.status_code == 204, beat.text
    job = job_when(hub, job_id, lambda j: fraction(j) == 0.5, "the agent's progress")
    assert job["progress"]["message"] == "half"
    assert job["progress"]["at"] is not None
    assert job["lease_expires_at"] is not None
    # A progress value of another shape is kept by Temporal but is not jobforge's.
    hub.http.post(f"/api/jobs/{job_id}/heartbeat", json={"worker_id": "agent-p", "progress": 7})
    job_when(hub, job_id, lambda j: j["progress"] is None, "the other shape ignored")
    result = hub.http.post(
        f"/api/jobs/{job_id}/result", json={"worker_id": "agent-p", "result": {"ok": True}}
    )
    assert result.status_code == 200, result.text
