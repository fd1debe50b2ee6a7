"""The solver cache on real workers: one download per hash, durable, self-healing.

Each test runs its own API and workers on private task queues (`start_stack`).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable
from pathlib import Path

from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client

from tests.conftest import PYTHON, GatedServer, SolverServer, Stack
from worker.devserver import DevServer

SOLVER = f"""#!{PYTHON}
import json, sys
params = json.loads(sys.argv[2])
print(json.dumps({{"n": params["n"], "square": params["n"] ** 2}}))
"""
CHECKSUM = hashlib.sha256(SOLVER.encode()).hexdigest()


def assert_cache_is_clean(cache: Path) -> None:
    """No temp files left, and every cached solver hashes to its name."""
    names = sorted(p.name for p in cache.iterdir())
    assert not [n for n in names if n.startswith(".part-")], names
    solvers = [cache / n for n in names if not n.startswith(".")]
    assert solvers, names
    for path in solvers:
        assert hashlib.sha256(path.read_bytes()).hexdigest() == path.name
    assert [n for n in names if n.startswith(".")] == [f".{p.name}.lock" for p in solvers]


def run_jobs(stack: Stack, job_type: str, url: str, numbers: range) -> list[str]:
    """Submit one job per number with the shared solver; return their ids."""
    return [
        stack.api.submit(type=job_type, solver_url=url, solver_checksum=CHECKSUM, params={"n": n})
        for n in numbers
    ]


def assert_completed(stack: Stack, job_ids: list[str], numbers: range) -> None:
    """Every job completed with its square."""
    for job_id, n in zip(job_ids, numbers, strict=True):
        job = stack.api.wait_status(job_id, "completed", "quarantined")
        assert job["status"] == "completed", job
        assert job["result"] == {"n": n, "square": n * n}


async def test_concurrent_jobs_with_one_uncached_solver_download_it_once(
    start_stack: Callable[..., Stack],
    job_type: str,
    gated_server: GatedServer,
    tmp_path: Path,
    temporal: DevServer,
) -> None:
    stack = start_stack()
    cache = tmp_path / "cache"
    (gated_server.root / "solver.py").write_text(SOLVER)
    stack.worker(job_type, "node-a", WORKER_CORES="5", SOLVER_CACHE_DIR=str(cache))
    numbers = range(5)
    job_ids = run_jobs(stack, job_type, gated_server.url("solver.py"), numbers)

    # The first download stalls until all five attempts are on the worker at once.
    client = await Client.connect(temporal.address)

    async def all_started() -> bool:
        for job_id in job_ids:
            desc = await client.get_workflow_handle(job_id).describe()
            states = [p.state for p in desc.raw_description.pending_activities]
            if states != [PendingActivityState.PENDING_ACTIVITY_STATE_STARTED]:
                return False
        return True

    deadline = time.monotonic() + 30
    while not (gated_server.held["/solver.py"] and await all_started()):
        assert time.monotonic() < deadline, "the five attempts never ran at once"
        await asyncio.sleep(0.05)
    gated_server.gate.set()

    assert_completed(stack, job_ids, numbers)
    assert gated_server.hits["/solver.py"] == 1
    assert_cache_is_clean(cache)


def test_the_cache_survives_a_worker_restart(
    start_stack: Callable[..., Stack],
    job_type: str,
    solver_server: SolverServer,
    tmp_path: Path,
) -> None:
    stack = start_stack()
    cache = tmp_path / "cache"
    (solver_server.root / "solver.py").write_text(SOLVER)
    url = solver_server.url("solver.py")
    first = stack.worker(job_type, "node-a", SOLVER_CACHE_DIR=str(cache))
    assert_completed(stack, run_jobs(stack, job_type, url, range(1, 2)), range(1, 2))
    assert solver_server.hits["/solver.py"] == 1
    assert first.stop() == 0

    stack.worker(job_type, "node-b", SOLVER_CACHE_DIR=str(cache))
    job_ids = run_jobs(stack, job_type, url, range(2, 4))
    assert_completed(stack, job_ids, range(2, 4))

    assert stack.api.job(job_ids[-1])["worker_id"] == "node-b"
    assert solver_server.hits["/solver.py"] == 1
    assert_cache_is_clean(cache)


def test_a_corrupt_cached_solver_is_fetched_again_and_the_job_completes(
    start_stack: Callable[..., Stack],
    job_type: str,
    solver_server: SolverServer,
    tmp_path: Path,
) -> None:
    stack = start_stack()
    cache = tmp_path / "cache"
    (solver_server.root / "solver.py").write_text(SOLVER)
    url = solver_server.url("solver.py")
    stack.worker(job_type, "node-a", SOLVER_CACHE_DIR=str(cache))
    assert_completed(stack, run_jobs(stack, job_type, url, range(1, 2)), range(1, 2))
    cached = cache / CHECKSUM
    assert cached.read_text() == SOLVER

    cached.chmod(0o755)
    cached.write_text(SOLVER.replace('"square"', '"evil"'))
    job_ids = run_jobs(stack, job_type, url, range(2, 3))

    assert_completed(stack, job_ids, range(2, 3))
    job = stack.api.job(job_ids[0])
    assert job["attempts"] == 1
    assert job["fail_history"] == []
    assert solver_server.hits["/solver.py"] == 2
    assert cached.read_text() == SOLVER
    assert_cache_is_clean(cache)
