"""Stop over REST, process level: a native worker's solver that ignores SIGTERM is
killed after STOP_GRACE_S and the job ends `stopped`; an HTTP agent hears of it through
its heartbeat's 409; terminal jobs answer 409; the CLI's `jobforge stop`."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus

from bench.harness import wait_until
from tests.conftest import Solver, Stack
from tests.test_cancel import wait_execution_status
from tests.test_cli import jobforge
from worker.devserver import DevServer

STUBBORN = """
import signal
signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(params["pid_file"], "w") as out:
    out.write(str(os.getpid()))
print("JOBFORGE_PROGRESS 0.1 started", file=sys.stderr, flush=True)
while True:
    time.sleep(0.05)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


async def test_a_stopped_solver_is_killed_and_the_job_ends_stopped(
    start_stack: Callable[..., Stack],
    make_solver: Callable[[str], Solver],
    tmp_path: Path,
    temporal: DevServer,
) -> None:
    stack = start_stack()
    stack.worker("stubborn", "stop-worker", STOP_GRACE_S="1")
    api = stack.api
    pid_file = tmp_path / "pid"
    solver = make_solver(STUBBORN)
    job_id = api.submit(
        **solver.spec("stubborn", params={"pid_file": str(pid_file)}, heartbeat_timeout_ms=3000)
    )
    api.wait_status(job_id, "running")
    wait_until(lambda: pid_file.exists() and pid_file.read_text(), timeout=30, what="the pid")
    pid = int(pid_file.read_text())

    answer = api.http.post(f"/api/jobs/{job_id}/stop")
    assert answer.status_code == 202, answer.text
    assert answer.json()["status"] in ("stop_requested", "stopped")
    job = api.wait_status(job_id, "stopped")
    assert job["fail_reason"] == "stopped"
    statuses = [t["status"] for t in job["transitions"]]
    assert statuses[-2:] == ["stop_requested", "stopped"]
    await wait_execution_status(temporal, job_id, WorkflowExecutionStatus.CANCELED)
    # It ignores SIGTERM: SIGKILL after STOP_GRACE_S (1 s), within a heartbeat (1 s).
    wait_until(lambda: not alive(pid), timeout=1 + 1 + 2, what="the solver killed")

    again = api.http.post(f"/api/jobs/{job_id}/stop")
    assert again.status_code == 202 and again.json()["status"] == "stopped"
    client = await Client.connect(temporal.address)
    assert (await client.get_workflow_handle(job_id).describe()).status == (
        WorkflowExecutionStatus.CANCELED
    )


def test_stopping_an_ended_job_is_a_409_and_a_pending_one_is_cancelled(
    start_stack: Callable[..., Stack],
) -> None:
    stack = start_stack()
    api = stack.api
    pending = api.submit(type="nobody-serves-this")
    answer = api.http.post(f"/api/jobs/{pending}/stop")
    assert answer.status_code == 202, answer.text
    job = answer.json()
    assert (job["status"], job["fail_reason"]) == ("failed", "cancelled")
    assert api.http.post(f"/api/jobs/{pending}/stop").status_code == 202  # repeated
    assert api.http.post("/api/jobs/no-such-job/stop").status_code == 404


def test_an_agent_hears_of_a_stop_through_its_heartbeat(start_stack: Callable[..., Stack]) -> None:
    stack = start_stack()
    api = stack.api
    job_id = api.submit(type="agent-stop", heartbeat_timeout_ms=20_000)
    claim = api.http.post(
        "/api/jobs/claim", json={"worker_id": "agent-s", "types": ["agent-stop"], "wait": 10}
    )
    assert claim.status_code == 200, claim.text
    beat = {"worker_id": "agent-s"}
    assert api.http.post(f"/api/jobs/{job_id}/heartbeat", json=beat).status_code == 204
    api.wait_status(job_id, "running")
    assert api.http.post(f"/api/jobs/{job_id}/stop").status_code == 202
    api.wait_status(job_id, "stopped")
    answer = api.http.post(f"/api/jobs/{job_id}/heartbeat", json=beat)
    assert answer.status_code == 409
    body: dict[str, Any] = answer.json()
    assert body["stop"] is True
    done = api.http.post(f"/api/jobs/{job_id}/result", json={**beat, "result": {"late": True}})
    assert done.status_code == 409
    # The agent killed its solver and says so: answered `stopped`, nothing re-queued.
    report = api.http.post(f"/api/jobs/{job_id}/fail", json={**beat, "reason": "stopped"})
    assert report.status_code == 200, report.text
    assert report.json()["status"] == "stopped"
    job = api.job(job_id)
    assert (job["status"], job["attempts"]) == ("stopped", 1)
    other = api.http.post(f"/api/jobs/{job_id}/fail", json={"worker_id": "x", "reason": "stopped"})
    assert other.status_code == 409


def test_jobforge_stop_prints_the_status(start_stack: Callable[..., Stack]) -> None:
    stack = start_stack()
    job_id = stack.api.submit(type="nobody-serves-this")
    run = jobforge(stack.api.url, "stop", job_id)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == f"{job_id} cancelled"
    run = jobforge(stack.api.url, "stop", "no-such-job")
    assert run.returncode == 1
    assert len(run.stderr.strip().splitlines()) == 1
