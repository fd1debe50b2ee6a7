"""Stop over REST, process level: a native worker's solver that ignores SIGTERM is
killed after STOP_GRACE_S, and only then does the job read `stopped` (`stop_requested`
while it lives); an HTTP agent hears of it through its heartbeat's 409 and ends it with
its `stopped` report; terminal jobs answer 409; the CLI's `jobforge stop`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus

from tests.conftest import Solver, Stack, pid_alive
from tests.procs import wait_until
from tests.test_cancel import wait_execution_status
from tests.test_cli import jobforge
from worker.devserver import DevServer

STUBBORN = """
import signal
signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(params["pid_file"], "w") as out:
    out.write(str(os.getpid()))
print("JOBFORGE_PROGRESS 0.1 started", file=sys.stderr, flush=True)
time.sleep(60)
"""
STOP_GRACE_S = 2


def watch_stop(
    status: Callable[[], str], present: Callable[[], bool], *, timeout: float
) -> Counter[tuple[str, bool]]:
    """Poll a stopped job until it reads `stopped`: each (status, work present) seen.

    The work is looked for after the status is read, and work once gone never comes
    back, so ("stop_requested", True) means both held at one instant, and
    ("stopped", True) that the work outlived the job's `stopped`."""
    seen: Counter[tuple[str, bool]] = Counter()

    def stopped() -> bool:
        now = status()
        seen[(now, present())] += 1
        return now == "stopped"

    wait_until(stopped, timeout=timeout, what="the job to read stopped")
    return seen


async def test_a_stopped_solver_is_killed_and_the_job_reads_stopped_only_once_it_is_gone(
    start_stack: Callable[..., Stack],
    make_solver: Callable[[str], Solver],
    tmp_path: Path,
    temporal: DevServer,
) -> None:
    stack = start_stack()
    stack.worker("stubborn", "stop-worker", STOP_GRACE_S=str(STOP_GRACE_S))
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
    assert answer.json()["status"] == "stop_requested"
    # It ignores SIGTERM: SIGKILL after STOP_GRACE_S (2 s), the SIGTERM within a heartbeat.
    seen = watch_stop(
        lambda: api.job(job_id)["status"], lambda: pid_alive(pid), timeout=STOP_GRACE_S + 15
    )
    assert ("stopped", True) not in seen, f"read stopped while solver {pid} lived: {seen}"
    assert seen[("stop_requested", True)] > 0, seen
    assert not pid_alive(pid)
    job = api.job(job_id)
    assert job["fail_reason"] == "stopped"
    statuses = [t["status"] for t in job["transitions"]]
    assert statuses[-2:] == ["stop_requested", "stopped"]
    await wait_execution_status(temporal, job_id, WorkflowExecutionStatus.CANCELED)

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


def test_an_agent_hears_of_a_stop_through_its_heartbeat_and_its_report_ends_it(
    start_stack: Callable[..., Stack],
) -> None:
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
    answer = api.http.post(f"/api/jobs/{job_id}/stop")
    assert answer.status_code == 202 and answer.json()["status"] == "stop_requested"
    # The agent's solver may still run: the job waits for the agent to say it is gone.
    answer = api.http.post(f"/api/jobs/{job_id}/heartbeat", json=beat)
    assert answer.status_code == 409
    body: dict[str, Any] = answer.json()
    assert body["stop"] is True
    done = api.http.post(f"/api/jobs/{job_id}/result", json={**beat, "result": {"late": True}})
    assert done.status_code == 409
    assert api.job(job_id)["status"] == "stop_requested"
    # The agent killed its solver and says so: answered `stopped`, nothing re-queued.
    report = api.http.post(f"/api/jobs/{job_id}/fail", json={**beat, "reason": "stopped"})
    assert report.status_code == 200, report.text
    assert report.json()["status"] == "stopped"
    # Well within the heartbeat timeout (20 s): the report ended it, not the timeout.
    job = api.wait_status(job_id, "stopped", timeout=10)
    assert (job["attempts"], job["fail_history"]) == (1, [])
    assert [t["status"] for t in job["transitions"]][-2:] == ["stop_requested", "stopped"]
    other = api.http.post(f"/api/jobs/{job_id}/fail", json={"worker_id": "x", "reason": "stopped"})
    assert other.status_code == 409
    again = api.http.post(f"/api/jobs/{job_id}/fail", json={**beat, "reason": "stopped"})
    assert again.status_code == 200 and again.json()["status"] == "stopped"


def test_jobforge_stop_prints_the_status(start_stack: Callable[..., Stack]) -> None:
    stack = start_stack()
    job_id = stack.api.submit(type="nobody-serves-this")
    run = jobforge(stack.api.url, "stop", job_id)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == f"{job_id} cancelled"
    run = jobforge(stack.api.url, "stop", "no-such-job")
    assert run.returncode == 1
    assert len(run.stderr.strip().splitlines()) == 1
