"""The solver cache on real workers: one download per hash, durable, self-healing.

Each test runs its own API and workers on private task queues (`start_stack`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client

from tests.conftest import PYTHON, GatedServer, Proc, SolverServer, Stack, wait_until_async
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


def serve(server: SolverServer | GatedServer) -> str:
    """Put SOLVER on `server`; return its URL."""
    (server.root / "solver.py").write_text(SOLVER)
    return server.url("solver.py")


@dataclass
class CacheStack:
    """A stack of the test's own whose workers for `job_type` share the solver cache `cache`."""

    stack: Stack
    job_type: str
    cache: Path

    def worker(self, node_id: str, **env: str) -> Proc:
        """A worker for `job_type` with the shared cache."""
        return self.stack.worker(self.job_type, node_id, SOLVER_CACHE_DIR=str(self.cache), **env)

    def run_jobs(self, url: str, numbers: range) -> list[str]:
        """Submit one job per number with the shared solver; return their ids."""
        return [
            self.stack.api.submit(
                type=self.job_type, solver_url=url, solver_checksum=CHECKSUM, params={"n": n}
            )
            for n in numbers
        ]

    def assert_completed(self, job_ids: list[str], numbers: range) -> None:
        """Every job completed with its square."""
        for job_id, n in zip(job_ids, numbers, strict=True):
            job = self.stack.api.wait_status(job_id, "completed", "quarantined")
            assert job["status"] == "completed", job
            assert job["result"] == {"n": n, "square": n * n}

    def complete(self, url: str, numbers: range) -> list[str]:
        """Run one job per number to completion; return their ids."""
        job_ids = self.run_jobs(url, numbers)
        self.assert_completed(job_ids, numbers)
        return job_ids


@pytest.fixture
def cache_stack(start_stack: Callable[..., Stack], job_type: str, tmp_path: Path) -> CacheStack:
    """A fresh stack and job type, with the cache at tmp_path/cache."""
    return CacheStack(start_stack(), job_type, tmp_path / "cache")


async def test_concurrent_jobs_with_one_uncached_solver_download_it_once(
    cache_stack: CacheStack,
    gated_server: GatedServer,
    temporal: DevServer,
) -> None:
    url = serve(gated_server)
    cache_stack.worker("node-a", WORKER_CORES="5")
    numbers = range(5)
    job_ids = cache_stack.run_jobs(url, numbers)

    # The first download stalls until all five attempts are on the worker at once.
    client = await Client.connect(temporal.address)

    async def all_started() -> bool:
        for job_id in job_ids:
            desc = await client.get_workflow_handle(job_id).describe()
            states = [p.state for p in desc.raw_description.pending_activities]
            if states != [PendingActivityState.PENDING_ACTIVITY_STATE_STARTED]:
                return False
        return True

    async def held_with_all_started() -> bool:
        return bool(gated_server.held["/solver.py"]) and await all_started()

    await wait_until_async(held_with_all_started, what="the five attempts to run at once")
    gated_server.gate.set()

    cache_stack.assert_completed(job_ids, numbers)
    assert gated_server.hits["/solver.py"] == 1
    assert_cache_is_clean(cache_stack.cache)


def test_the_cache_survives_a_worker_restart(
    cache_stack: CacheStack,
    solver_server: SolverServer,
) -> None:
    url = serve(solver_server)
    first = cache_stack.worker("node-a")
    cache_stack.complete(url, range(1, 2))
    assert solver_server.hits["/solver.py"] == 1
    assert first.stop() == 0

    cache_stack.worker("node-b")
    job_ids = cache_stack.complete(url, range(2, 4))

    assert cache_stack.stack.api.job(job_ids[-1])["worker_id"] == "node-b"
    assert solver_server.hits["/solver.py"] == 1
    assert_cache_is_clean(cache_stack.cache)


def test_a_corrupt_cached_solver_is_fetched_again_and_the_job_completes(
    cache_stack: CacheStack,
    solver_server: SolverServer,
) -> None:
    url = serve(solver_server)
    cache_stack.worker("node-a")
    cache_stack.complete(url, range(1, 2))
    cached = cache_stack.cache / CHECKSUM
    assert cached.read_text() == SOLVER

    cached.chmod(0o755)
    cached.write_text(SOLVER.replace('"square"', '"evil"'))

    job_ids = cache_stack.complete(url, range(2, 3))
    job = cache_stack.stack.api.job(job_ids[0])
    assert job["attempts"] == 1
    assert job["fail_history"] == []
    assert solver_server.hits["/solver.py"] == 2
    assert cached.read_text() == SOLVER
    assert_cache_is_clean(cache_stack.cache)
