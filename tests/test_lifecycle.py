"""A job's life end to end: real dev server, API and worker processes, real solvers."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from tests.conftest import REGISTERED_TYPE, Api, Proc, Solver, pid_alive, wait_until
from worker.devserver import DevServer

pytestmark = pytest.mark.usefixtures("session_worker")


def statuses(job: dict[str, object]) -> list[str]:
    """The job's recorded status sequence."""
    transitions = job["transitions"]
    assert isinstance(transitions, list)
    return [t["status"] for t in transitions]


async def temporal_status(temporal: DevServer, job_id: str) -> WorkflowExecutionStatus | None:
    """The job workflow's execution status, as the Temporal UI shows it."""
    client = await Client.connect(temporal.address)
    return (await client.get_workflow_handle(job_id).describe()).status


async def test_a_job_completes_with_its_result_and_hash(
    api: Api, job_type: str, make_solver: Callable[[str], Solver], temporal: DevServer
) -> None:
    solver = make_solver('print(json.dumps({"doubled": params["x"] * 2}))\n')
    job_id = api.submit(**solver.spec(job_type, params={"x": 21}))

    job = api.wait_status(job_id, "completed")

    assert job["result"] == {"doubled": 42}
    expected = hashlib.sha256(b'{"doubled": 42}\n').hexdigest()
    assert job["result_hash"] == expected
    assert job["attempts"] == 1
    assert job["worker_id"] == "session-worker"
    assert statuses(job) == ["pending", "assigned", "running", "completed"]
    assert job["created_at"] <= job["claimed_at"] <= job["completed_at"]
    assert await temporal_status(temporal, job_id) == WorkflowExecutionStatus.COMPLETED


def test_each_failed_attempt_is_one_log_line_without_a_traceback(
    api: Api, job_type: str, make_solver: Callable[[str], Solver], session_worker: Proc
) -> None:
    solver = make_solver("sys.exit(5)\n")
    job_id = api.submit(**solver.spec(job_type, max_attempts=2))
    api.wait_status(job_id, "quarantined")

    def failure_lines() -> list[tuple[str, str]]:
        lines = session_worker.output().splitlines()
        return [
            (line, lines[i + 1] if i + 1 < len(lines) else "")
            for i, line in enumerate(lines)
            if job_id in line and "Completing activity as failed" in line
        ]

    found = wait_until(lambda: len(failure_lines()) == 2 and failure_lines(), what="2 lines")
    for line, following in found:
        assert "ApplicationError: solver_exit: solver exited with code 5" in line
        assert not following.startswith("Traceback")


async def test_a_checksum_mismatch_quarantines_without_running_the_solver(
    api: Api, job_type: str, make_solver: Callable[[str], Solver], tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    solver = make_solver(f"open({str(marker)!r}, 'w').write('ran')\n")
    spec = solver.spec(job_type, max_attempts=3)
    spec["solver_checksum"] = "0" * 64

    job = api.wait_status(api.submit(**spec), "quarantined")

    assert job["fail_reason"].startswith("solver_checksum_mismatch")
    assert job["attempts"] == 1
    assert not marker.exists()


async def test_max_runtime_kills_the_whole_process_group_and_quarantines(
    api: Api, job_type: str, make_solver: Callable[[str], Solver], tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    solver = make_solver(
        f"""
        import subprocess
        child = subprocess.Popen(["sleep", "600"])
        open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{child.pid}}")
        time.sleep(600)
        """
    )
    job_id = api.submit(**solver.spec(job_type, max_runtime_ms=1500, max_attempts=3))

    job = api.wait_status(job_id, "quarantined")

    assert job["fail_reason"].startswith("max_runtime_exceeded")
    assert job["attempts"] == 1
    for pid in map(int, pids.read_text().split()):
        wait_until(lambda pid=pid: not pid_alive(pid), timeout=10, what=f"pid {pid} to exit")


async def test_a_job_with_no_solver_url_runs_the_solver_registered_for_its_type(
    api: Api,
) -> None:
    job_id = api.submit(type=REGISTERED_TYPE, params={"n": 3})

    job = api.wait_status(job_id, "completed")

    assert job["result"] == {"registered": True, "argv": ["--params", '{"n":3}']}
