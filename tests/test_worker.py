"""Worker processes under stress: SIGKILL, SIGTERM with a grace period, priority order.

Every test runs its own API and workers on private task queues (`start_stack`), so
the session worker, which takes every type's solver_url jobs, never takes these jobs.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client

from tests.conftest import Solver, Stack, pid_alive, wait_until, wait_until_async
from tests.helpers import statuses
from worker.devserver import DevServer

# A solver that blocks until `params["release"]` exists (or 120 s pass), counting its
# runs in `params["runs"]` and recording its pid and its child's in `params["pids"]`.
GATED_SOLVER = """
import subprocess
runs_file = params["runs"]
run = len(open(runs_file).read().split()) + 1 if os.path.exists(runs_file) else 1
open(runs_file, "a").write(f"{run}\\n")
if run <= params.get("block_runs", 1):
    child = subprocess.Popen(["sleep", "600"])
    open(params["pids"], "a").write(f"{os.getpid()} {child.pid}\\n")
    parent = os.getppid()
    deadline = time.monotonic() + 120
    # Orphaned (its worker was SIGKILLed): nothing is left to wait for.
    while not os.path.exists(params["release"]) and os.getppid() == parent:
        if time.monotonic() > deadline:
            sys.exit(3)
        time.sleep(0.02)
    child.kill()
print(json.dumps({"run": run}))
"""


@dataclass
class Gated:
    """GATED_SOLVER on disk, with its bookkeeping files under `files`."""

    solver: Solver
    files: Path

    def spec(self, job_type: str, **extra: Any) -> dict[str, Any]:
        """A job spec running the solver, with the bookkeeping files as params."""
        params = {
            "runs": str(self.files / "runs"),
            "pids": str(self.files / "pids"),
            "release": str(self.files / "release"),
            **extra.pop("params", {}),
        }
        return self.solver.spec(job_type, params=params, **extra)

    def pids(self) -> list[int]:
        """Every solver and child pid it recorded."""
        path = self.files / "pids"
        return [int(pid) for pid in path.read_text().split()] if path.exists() else []

    def release(self) -> None:
        """Let every blocked run finish."""
        (self.files / "release").touch()


@pytest.fixture
def gated(make_solver: Callable[[str], Solver], tmp_path: Path) -> Gated:
    """GATED_SOLVER, its bookkeeping files under tmp_path."""
    return Gated(make_solver(GATED_SOLVER), tmp_path)


def running_on(stack: Stack, job_id: str, worker_id: str) -> Callable[[], bool]:
    """A condition: the job is running on `worker_id`."""

    def check() -> bool:
        job = stack.api.job(job_id)
        return bool(job["status"] == "running" and job["worker_id"] == worker_id)

    return check


def wait_failed_attempt(stack: Stack, job_id: str, what: str) -> dict[str, Any]:
    """The job, once it has a failed attempt on record (polled for 20 s at most)."""
    failed: dict[str, Any] = wait_until(
        lambda: (job := stack.api.job(job_id))["fail_history"] and job, timeout=20, what=what
    )
    return failed


def complete_on_node_b(stack: Stack, job_type: str, job_id: str) -> dict[str, Any]:
    """Start a worker on node-b and wait for the job to complete there."""
    stack.worker(job_type, "node-b")
    job = stack.api.wait_status(job_id, "completed", "quarantined")
    assert job["status"] == "completed"
    assert job["worker_id"] == "node-b"
    return job


async def test_a_killed_workers_job_is_requeued_after_the_heartbeat_timeout_and_done_elsewhere(
    start_stack: Callable[..., Stack],
    job_type: str,
    gated: Gated,
) -> None:
    stack = start_stack(JOB_HEARTBEAT_TIMEOUT_S="2")
    job_id = stack.api.submit(**gated.spec(job_type, max_attempts=3))
    worker_a = stack.worker(job_type, "node-a")
    wait_until(running_on(stack, job_id, "node-a"), what="the job to run on node-a")

    worker_a.kill()
    requeued = wait_failed_attempt(stack, job_id, what="the attempt to time out")
    assert requeued["status"] == "pending"
    job = complete_on_node_b(stack, job_type, job_id)

    assert job["result"] == {"run": 2}
    assert job["attempts"] == 2
    assert [(f["reason"], f["worker_id"]) for f in job["fail_history"]] == [
        ("heartbeat_timeout", "node-a")
    ]
    assert statuses(job) == [
        "pending",
        "assigned",
        "running",
        "failed",
        "pending",
        "assigned",
        "running",
        "completed",
    ]
    failed = next(t for t in job["transitions"] if t["status"] == "failed")
    assert failed["reason"] == "heartbeat_timeout"
    assert failed["worker_id"] == "node-a"


async def test_sigterm_stops_claiming_and_lets_the_running_job_finish_within_the_grace_period(
    start_stack: Callable[..., Stack],
    job_type: str,
    gated: Gated,
) -> None:
    stack = start_stack()
    worker_a = stack.worker(job_type, "node-a", WORKER_CORES="1", WORKER_SHUTDOWN_GRACE_S="30")
    first = stack.api.submit(**gated.spec(job_type))
    wait_until(running_on(stack, first, "node-a"), what="the first job to run")
    second = stack.api.submit(**gated.spec(job_type))

    worker_a.process.send_signal(signal.SIGTERM)
    wait_until(lambda: "shutting down" in worker_a.output(), what="node-a to begin shutdown")
    gated.release()
    assert worker_a.process.wait(30) == 0, worker_a.output()

    done = stack.api.job(first)
    assert done["status"] == "completed"
    assert done["worker_id"] == "node-a"
    assert done["fail_history"] == []
    waiting = stack.api.job(second)
    assert waiting["status"] == "pending"
    assert waiting["attempts"] == 0

    later = complete_on_node_b(stack, job_type, second)
    assert later["attempts"] == 1
    assert later["fail_history"] == []


async def test_a_shutdown_says_so_once_and_leaves_no_task_pending(
    start_stack: Callable[..., Stack], job_type: str, gated: Gated
) -> None:
    # A stack of its own: the worker discovers (and logs) every type its API registered.
    stack = start_stack(shared=False)
    # Many task queues, so many SDK Worker objects: four types, each with a host queue,
    # two with a registered solver; and the workflows, with type discovery.
    types = [f"{job_type}-{i}" for i in range(4)]
    worker = stack.start_worker(
        **stack.queues,
        NODE_ID="node-quiet",
        WORKER_HOST="host-quiet",
        WORKER_SOLVERS=json.dumps({types[0]: ["true"], types[1]: ["true"]}),
        WORKER_SHUTDOWN_GRACE_S="1",
        ready="ready: workflows=True",
    )
    stack.procs.append(worker)
    # A job of each type: discovery serves them all; one runs through the shutdown.
    ids = [stack.api.submit(**gated.spec(name)) for name in types]
    # Any of them: which runs first is the worker's choice (a loaded box once kept the
    # first one waiting past a minute while the others ran).
    checks = [running_on(stack, job_id, "node-quiet") for job_id in ids]
    wait_until(lambda: any(check() for check in checks), timeout=120, what="a job to run on it")
    wait_until(lambda: worker.output().count("serving job type") == 4, what="every type served")

    worker.process.send_signal(signal.SIGTERM)
    assert worker.process.wait(30) == 0, worker.output()

    out = worker.output()
    assert out.count("shutting down: no new claims") == 1, out
    assert "Beginning worker shutdown" not in out, out
    assert "Task was destroyed" not in out and " ERROR " not in out, out
    gated.release()


async def test_a_job_outlasting_the_shutdown_grace_is_requeued_as_worker_shutdown_and_run_again(
    start_stack: Callable[..., Stack],
    job_type: str,
    gated: Gated,
) -> None:
    # The default 60 s heartbeat timeout: a re-queue within 20 s is the shutdown report.
    stack = start_stack()
    worker_a = stack.worker(job_type, "node-a", WORKER_SHUTDOWN_GRACE_S="2")
    job_id = stack.api.submit(**gated.spec(job_type, max_attempts=3))
    wait_until(running_on(stack, job_id, "node-a"), what="the job to run on node-a")
    pids = wait_until(gated.pids, what="the solver to start its child")
    assert len(pids) == 2 and all(pid_alive(pid) for pid in pids)

    worker_a.process.send_signal(signal.SIGTERM)
    requeued = wait_failed_attempt(
        stack, job_id, what="the attempt to be reported failed at shutdown"
    )
    assert worker_a.process.wait(30) == 0, worker_a.output()

    assert requeued["status"] == "pending"
    assert requeued["attempts"] == 1
    [failure] = requeued["fail_history"]
    assert failure["reason"].startswith("worker_shutdown"), failure
    assert failure["worker_id"] == "node-a"
    for pid in pids:
        wait_until(lambda pid=pid: not pid_alive(pid), timeout=10, what=f"pid {pid} to exit")

    job = complete_on_node_b(stack, job_type, job_id)
    assert job["result"] == {"run": 2}
    assert job["attempts"] == 2
    assert statuses(job) == [
        "pending",
        *["assigned", "running", "failed", "pending"],
        *["assigned", "running", "completed"],
    ]


async def attempt_scheduled(temporal: DevServer, job_ids: list[str]) -> bool:
    """Whether every job's first attempt is in its task queue's backlog."""
    client = await Client.connect(temporal.address)
    for job_id in job_ids:
        desc = await client.get_workflow_handle(job_id).describe()
        if not desc.raw_description.pending_activities:
            return False
    return True


async def test_a_backlog_runs_by_priority_then_in_submission_order(
    start_stack: Callable[..., Stack],
    job_type: str,
    make_solver: Callable[[str], Solver],
    tmp_path: Path,
    temporal: DevServer,
) -> None:
    stack = start_stack()
    order = tmp_path / "order"
    solver = make_solver(f'open({str(order)!r}, "a").write(f"{{params[\'seq\']}}\\n")\n')
    # Priorities 20, 5, 0 and -20 map to Temporal keys 10, 25, 30 and 50 (of 59).
    priorities = [0, 5, -20, 20, 0, 5, 20, -20]
    job_ids: list[str] = []
    for seq, priority in enumerate(priorities):
        job_ids.append(
            stack.api.submit(**solver.spec(job_type, priority=priority, params={"seq": seq}))
        )
        # Within a priority key Temporal is FIFO by when an attempt reaches the queue,
        # which for jobs submitted milliseconds apart can differ from submission order
        # (concurrent workflow tasks); so each job's attempt is queued before the next.
        await wait_until_async(
            lambda: attempt_scheduled(temporal, job_ids[-1:]), what="the attempt to be queued"
        )

    stack.worker(job_type, "node-a", WORKER_CORES="1")
    for job_id in job_ids:
        assert stack.api.wait_status(job_id, "completed", "quarantined")["status"] == "completed"

    ran = [int(line) for line in order.read_text().split()]
    expected = sorted(range(len(priorities)), key=lambda seq: (-priorities[seq], seq))
    assert expected == [3, 6, 1, 5, 0, 4, 2, 7]
    assert ran == expected


async def test_a_job_waiting_for_a_slot_on_a_busy_worker_keeps_heartbeating(
    start_stack: Callable[..., Stack],
    gated: Gated,
    tmp_path: Path,
    temporal: DevServer,
) -> None:
    # One core, two types: the second type's task is held while the first job runs.
    stack = start_stack(JOB_HEARTBEAT_TIMEOUT_S="2")
    busy_type, waiting_type = "busy-" + tmp_path.name[-8:], "waiting-" + tmp_path.name[-8:]
    stack.worker(f"{busy_type},{waiting_type}", "node-a", WORKER_CORES="1")
    busy = stack.api.submit(**gated.spec(busy_type))
    wait_until(running_on(stack, busy, "node-a"), what="the busy job to run")
    waiting = stack.api.submit(**gated.spec(waiting_type))
    client = await Client.connect(temporal.address)

    async def held_past_two_timeouts() -> bool:
        desc = await client.get_workflow_handle(waiting).describe()
        pending = desc.raw_description.pending_activities
        if not pending:
            return False
        assert [p.activity_id for p in pending] == ["attempt-1"], pending
        [attempt] = pending
        if attempt.state != PendingActivityState.PENDING_ACTIVITY_STATE_STARTED:
            return False
        started = attempt.last_started_time.ToMilliseconds()
        return bool(attempt.last_heartbeat_time.ToMilliseconds() - started > 4000)

    await wait_until_async(held_past_two_timeouts, timeout=20, what="two heartbeat timeouts")
    assert stack.api.job(waiting)["status"] == "pending"
    gated.release()

    job = stack.api.wait_status(waiting, "completed", "quarantined")
    assert job["status"] == "completed"
    assert job["attempts"] == 1
    assert job["fail_history"] == []
    assert stack.api.wait_status(busy, "completed")["attempts"] == 1


async def test_a_solver_does_not_outlive_a_worker_killed_with_sigkill(
    start_stack: Callable[..., Stack],
    job_type: str,
    make_solver: Callable[[str], Solver],
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "solver.pid"
    solver = make_solver(
        f"""
        open({str(pid_file)!r}, "w").write(str(os.getpid()))
        time.sleep(600)
        """
    )
    stack = start_stack()
    stack.api.submit(**solver.spec(job_type, max_runtime_ms=600_000))
    worker = stack.worker(job_type, "node-doomed")
    pid = int(wait_until(lambda: pid_file.exists() and pid_file.read_text(), what="the solver"))

    worker.kill()

    wait_until(lambda: not pid_alive(pid), timeout=10, what="the orphaned solver to die")


# Runs two solvers the way a worker process does (`watch_solvers_by_pidfd` at its entry
# point): one that prints its result, one killed at its max runtime; prints what they
# left and the threads started meanwhile.
WATCHED_SOLVERS = """
import asyncio, json, threading
from activities.runner import run_solver, watch_solvers_by_pidfd

started = []
start = threading.Thread.start
def noting(thread):
    started.append(thread.name)
    start(thread)

async def main():
    watch_solvers_by_pidfd()
    threading.Thread.start = noting
    limits = dict(max_output_bytes=1024, log_tail_bytes=1024)
    done = await run_solver(["/bin/sh", "-c", "printf {}"], max_runtime_s=30, **limits)
    slow = await run_solver(["sleep", "30"], max_runtime_s=0.3, stop_grace_s=5, **limits)
    print(json.dumps([done.exit_code, done.stdout.decode(), slow.timed_out, started]))

asyncio.run(main())
"""


@pytest.mark.process  # a fresh interpreter (tests/tiers.py)
def test_a_worker_learns_of_its_solvers_exits_without_a_thread_for_each() -> None:
    """A worker process starts no thread per solver to wait for its exit (Python 3.11's
    default did: one waitpid thread per process), and its solvers' exits, results and
    kills at max runtime are seen as before."""
    ran = subprocess.run(
        [sys.executable, "-c", WATCHED_SOLVERS],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parent.parent,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    exit_code, stdout, timed_out, threads = json.loads(ran.stdout)
    assert (exit_code, stdout, timed_out) == (0, "{}", True)
    assert threads == []
