"""DELETE /api/jobs/{id}: pending and assigned jobs are cancelled, running ones are not.

Each test runs its own API and workers on private task queues (`start_stack`), so no
other worker takes its jobs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from tests.conftest import PYTHON, GatedServer, Solver, Stack, wait_until, wait_until_async
from tests.helpers import statuses
from worker.devserver import DevServer


async def execution_status(temporal: DevServer, job_id: str) -> WorkflowExecutionStatus | None:
    """The job workflow's execution status, as the Temporal UI shows it."""
    client = await Client.connect(temporal.address)
    return (await client.get_workflow_handle(job_id).describe()).status


async def wait_execution_status(
    temporal: DevServer, job_id: str, expected: WorkflowExecutionStatus
) -> None:
    """Poll until the execution has `expected` status (it follows the API's answer)."""
    handle = (await Client.connect(temporal.address)).get_workflow_handle(job_id)

    async def reached() -> bool:
        return (await handle.describe()).status == expected

    await wait_until_async(reached, what=f"the execution to be {expected.name}")


@pytest.fixture
def pending_job(
    start_stack: Callable[..., Stack], job_type: str, make_solver: Callable[[str], Solver]
) -> tuple[Stack, str]:
    """A stack and a job on it that stays pending: no worker serves its type."""
    stack = start_stack()
    return stack, stack.api.submit(**make_solver("print('ran')\n").spec(job_type))


async def test_cancelling_a_cancelled_job_again_is_still_204(
    pending_job: tuple[Stack, str],
    temporal: DevServer,
) -> None:
    stack, job_id = pending_job

    first = stack.api.http.delete(f"/api/jobs/{job_id}")
    second = stack.api.http.delete(f"/api/jobs/{job_id}")
    await wait_execution_status(temporal, job_id, WorkflowExecutionStatus.CANCELED)
    third = stack.api.http.delete(f"/api/jobs/{job_id}")

    assert [first.status_code, second.status_code, third.status_code] == [204, 204, 204]
    job = stack.api.job(job_id)
    assert job["status"] == "failed"
    assert job["fail_reason"] == "cancelled"
    assert statuses(job) == ["pending", "failed"]


async def test_cancelling_an_assigned_job_mid_download_means_its_solver_never_runs(
    start_stack: Callable[..., Stack],
    job_type: str,
    make_solver: Callable[[str], Solver],
    gated_server: GatedServer,
    tmp_path: Path,
    temporal: DevServer,
) -> None:
    stack = start_stack()
    marker = tmp_path / "ran"
    script = f"#!{PYTHON}\nopen({str(marker)!r}, 'w').write('ran')\nprint('ran')\n"
    (gated_server.root / "solver.py").write_text(script)
    checksum = hashlib.sha256(script.encode()).hexdigest()
    stack.worker(job_type, "node-a", WORKER_CORES="1", SOLVER_CACHE_DIR=str(tmp_path / "cache"))
    job_id = stack.api.submit(
        type=job_type, solver_url=gated_server.url("solver.py"), solver_checksum=checksum
    )
    job = stack.api.wait_status(job_id, "assigned")
    assert job["worker_id"] == "node-a"
    wait_until(lambda: gated_server.held["/solver.py"], what="the download to stall")

    response = stack.api.http.delete(f"/api/jobs/{job_id}")
    assert response.status_code == 204, response.text
    # The rest of the solver arrives after the cancel; it must still not run.
    gated_server.gate.set()
    await wait_execution_status(temporal, job_id, WorkflowExecutionStatus.CANCELED)

    # node-a has one slot: once a later job has run, the cancelled attempt is over.
    later = make_solver("print('later')\n")
    later_id = stack.api.submit(**later.spec(job_type))
    assert stack.api.wait_status(later_id, "completed")["worker_id"] == "node-a"
    assert not marker.exists(), "the cancelled job's solver ran"
    job = stack.api.job(job_id)
    assert job["status"] == "failed"
    assert job["fail_reason"] == "cancelled"
    assert statuses(job) == ["pending", "assigned", "failed"]


async def test_cancelling_a_running_then_a_completed_job_is_refused_with_its_status(
    start_stack: Callable[..., Stack],
    job_type: str,
    make_solver: Callable[[str], Solver],
    tmp_path: Path,
    temporal: DevServer,
) -> None:
    stack = start_stack()
    release = tmp_path / "release"
    solver = make_solver(
        f"""
        deadline = time.monotonic() + 60
        while not os.path.exists({str(release)!r}) and time.monotonic() < deadline:
            time.sleep(0.02)
        print(json.dumps({{"done": True}}))
        """
    )
    stack.worker(job_type, "node-a")
    job_id = stack.api.submit(**solver.spec(job_type))
    stack.api.wait_status(job_id, "running")

    while_running = stack.api.http.delete(f"/api/jobs/{job_id}")

    assert while_running.status_code == 409, while_running.text
    assert while_running.json()["status"] == "running"
    release.touch()
    job = stack.api.wait_status(job_id, "completed", "failed", "quarantined")
    assert job["status"] == "completed"
    assert job["result"] == {"done": True}
    assert job["fail_reason"] is None
    assert statuses(job) == ["pending", "assigned", "running", "completed"]
    assert await execution_status(temporal, job_id) == WorkflowExecutionStatus.COMPLETED
    # Closed: the update finds no execution, and the read tells it apart from a cancel.
    once_completed = stack.api.http.delete(f"/api/jobs/{job_id}")
    assert once_completed.status_code == 409, once_completed.text
    assert once_completed.json()["status"] == "completed"
    assert stack.api.job(job_id)["status"] == "completed"
