"""Fault battery, dispatch timeout: workers take attempts at the moment their dispatch
timeout fires (docs/reliability.md, scenario 15).

Pool jobs with dispatch timeouts of 100 to 300 ms are submitted before any worker runs, so
they are granted, not taken, and sent back, over and over. Then a one-slot native worker
and a one-slot HTTP agent start, and take the attempts one at a time while the others'
timeouts keep firing: takes and timeouts meet at every moment. L R D M O, with one
solver run per job (no fault costs an attempt here), N (tests/faultkit.py: never
counted twice, never counted when not taken) and C (no pool over its capacity).
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests import faultkit
from tests.conftest import Proc, Stack, base_env, wait_until
from worker.devserver import DevServer

POOLS = {"dispatch-a": 3, "dispatch-b": 2}
GROUPS = ("addon-1", "addon-2", "addon-3")
TIMEOUTS_MS = (100, 150, 200, 300)


@pytest.mark.slow(40)
@pytest.mark.timeout(900 if faultkit.FULL else 300)
def test_attempts_taken_as_their_dispatch_timeout_fires_run_once_and_count_once(
    start_stack: Callable[..., Stack],
    spawn: Callable[..., Proc],
    temporal: DevServer,
    job_type: str,
    tmp_path: Path,
) -> None:
    n = faultkit.scale(24, 300)
    rng = random.Random(15)
    solver = faultkit.write_solver(tmp_path / "bin")
    log = tmp_path / "runs.log"
    stack = start_stack(JOB_HEARTBEAT_TIMEOUT_S="10")
    http = stack.api.http
    pools = {f"{name}-{uuid.uuid4().hex[:6]}": cap for name, cap in POOLS.items()}
    for pool, capacity in pools.items():
        faultkit.call_retrying(http, "PUT", f"/api/pools/{pool}", {"capacity": capacity})

    tags: dict[str, str] = {}
    for i in range(n):
        tag = f"d{i}-{uuid.uuid4().hex[:6]}"
        spec = solver.spec(
            job_type,
            params=faultkit.run_params(tag, log, sleep_s=0.05),
            pool=rng.choice(sorted(pools)),
            group=rng.choice(GROUPS),
            dispatch_timeout_ms=rng.choice(TIMEOUTS_MS),
        )
        tags[stack.api.submit(**spec)] = tag
    ids = list(tags)

    def sent_back_so_far() -> int:
        return sum(
            t.get("reason") == faultkit.DISPATCH_TIMEOUT
            for job_id in ids
            for t in faultkit.get_job(http, job_id)["transitions"]
        )

    # Before any worker runs: as many attempts sent back as there are jobs, and still
    # cycling, so the workers' takes race the timeouts that follow.
    wait_until(
        lambda: sent_back_so_far() >= n,
        timeout=120,
        interval=1,
        what="attempts sent back before any worker runs",
    )
    caches = [tmp_path / "cache-native", tmp_path / "cache-agent"]
    stack.worker(job_type, "native-1", WORKER_CORES="1", SOLVER_CACHE_DIR=str(caches[0]))
    agent = spawn(
        ["agent"],
        base_env(
            temporal,
            HUB_URL=stack.api.url,
            NODE_ID="agent-1",
            WORKER_CORES="1",
            WORKER_TYPES=json.dumps([job_type]),
            SOLVER_CACHE_DIR=str(caches[1]),
        ),
    )
    stack.procs.append(agent)

    began = time.monotonic()
    jobs = faultkit.assert_invariants(http, ids, tags, log, timeout=faultkit.scale(180, 900))
    took_s = round(time.monotonic() - began, 1)
    runs = faultkit.read_runs(log)
    problems = [
        f"{tag}: {len(runs[tag])} solver runs" for tag in tags.values() if len(runs[tag]) != 1
    ]
    problems += faultkit.check_counted(jobs)
    problems += faultkit.check_capacity(jobs, pools)
    problems += faultkit.wait_pools_idle(http, pools, timeout=30)
    problems += faultkit.check_quiet(solver.path, caches)
    sent_back = sum(
        1
        for job in jobs.values()
        for t in job["transitions"]
        if t.get("reason") == faultkit.DISPATCH_TIMEOUT
    )
    summary: dict[str, Any] = {
        "jobs": len(jobs),
        "dispatch_timeouts": sent_back,
        "attempts": sum(job["attempts"] for job in jobs.values()),
        "by_worker": {
            worker: sum(1 for job in jobs.values() if job["worker_id"] == worker)
            for worker in ("native-1", "agent-1")
        },
        "peak_in_use": {pool: faultkit.peak_in_use(jobs, pool) for pool in pools},
        "seconds_after_workers_started": took_s,
    }
    print(f"dispatch race: {json.dumps(summary)}")  # noqa: T201 - the run's figures
    assert not problems, "\n".join(problems[:50])
    assert sent_back >= n, "attempts sent back before the workers ran are missing"
    assert all(job["attempts"] == 1 and not job["fail_history"] for job in jobs.values())
