"""Fault battery, tenants (scenario T2, docs/reliability.md): two tenants, each with its
own native worker and HTTP agent, and a worker without a tenant, take jobs submitted
at once by the three; one tenant's native worker is killed and restarted mid-run.
Nothing is lost (L R D M) and no claim crosses tenants (T2, `faultkit.check_tenants`).

Each tenant submits with its own producer token, and its agent holds its own worker
token (acme's names no tenant: its token is its tenant; bravo's also sends a matching
WORKER_TENANT). Jobs without a tenant are submitted with the bootstrap secret.

Load: JOBFORGE_FAULT_LOAD=reduced (default, CI) or full (`make faults`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests import faultkit
from tests.conftest import Stack, base_env, wait_until
from tests.procs import Proc
from worker.devserver import DevServer


@pytest.mark.slow(40)
@pytest.mark.timeout(900 if faultkit.FULL else 300)
def test_two_tenants_workers_and_agents_claim_only_their_own_tenants_jobs(
    start_stack: Callable[..., Stack],
    spawn: Callable[..., Proc],
    temporal: DevServer,
    job_type: str,
    tmp_path: Path,
) -> None:
    n = faultkit.scale(12, 120)
    tag = uuid.uuid4().hex[:6]
    tenants: list[str | None] = [f"acme-{tag}", f"bravo-{tag}", None]
    solver = faultkit.write_solver(tmp_path / "bin")
    log = tmp_path / "runs.log"
    stack = start_stack(JOB_HEARTBEAT_TIMEOUT_S="3")
    caches: list[Path] = []
    workers: dict[str, str | None] = {}

    def native(name: str, tenant: str | None) -> Proc:
        cache = tmp_path / f"cache-{name}"
        caches.append(cache)
        workers[name] = tenant
        env = {"WORKER_CORES": "2", "SOLVER_CACHE_DIR": str(cache)}
        if tenant is not None:
            env["WORKER_TENANT"] = tenant
        return stack.worker(job_type, name, **env)

    def token(role: str, tenant: str) -> str:
        body = {"name": f"{role}-{tenant}", "role": role, "tenant": tenant}
        answer = stack.api.http.post("/api/tokens", json=body)
        assert answer.status_code == 201, answer.text
        secret: str = answer.json()["token"]
        return secret

    natives = {tenant: native(f"native-{tenant or 'plain'}", tenant) for tenant in tenants}
    producers: dict[str | None, httpx.Client] = {None: stack.api.http}
    for tenant in tenants[:2]:
        assert tenant is not None
        producers[tenant] = httpx.Client(
            base_url=stack.api.url,
            headers={"Authorization": f"Bearer {token('producer', tenant)}"},
            timeout=30,
        )
        name = f"agent-{tenant}"
        cache = tmp_path / f"cache-{name}"
        caches.append(cache)
        workers[name] = tenant
        env = base_env(
            temporal,
            HUB_URL=stack.api.url,
            FORGE_INGEST_SECRET=token("worker", tenant),
            NODE_ID=name,
            WORKER_CORES="2",
            WORKER_TYPES=json.dumps([job_type]),
            SOLVER_CACHE_DIR=str(cache),
        )
        if tenant == tenants[1]:
            env["WORKER_TENANT"] = tenant  # its own: accepted
        agent = spawn(["agent"], env)
        agent.wait_for("ready", timeout=30)
        stack.procs.append(agent)

    def submit_all(tenant: str | None) -> dict[str, tuple[str, str | None]]:
        made: dict[str, tuple[str, str | None]] = {}
        for i in range(n):
            run = f"{tenant or 'plain'}-{i}-{uuid.uuid4().hex[:6]}"
            params = faultkit.run_params(run, log, sleep_s=1.5)
            spec = solver.spec(job_type, params=params, max_attempts=4)
            # The producer's token stamps its tenant (none in the body).
            answer = producers[tenant].post("/api/jobs", json=spec)
            assert answer.status_code == 201, answer.text
            made[answer.json()["id"]] = (run, tenant)
        return made

    with ThreadPoolExecutor(len(tenants)) as pool:
        made = {
            job_id: value
            for batch in pool.map(submit_all, tenants)
            for job_id, value in batch.items()
        }

    # The fault: acme's native worker dies while it runs a job, and comes back.
    victim = f"native-{tenants[0]}"

    def running_there() -> bool:
        for status in ("assigned", "running"):
            params = {"status": status, "type": job_type}
            listed = stack.api.http.get("/api/jobs", params=params).json()
            if any(job["worker_id"] == victim for job in listed):
                return True
        return False

    wait_until(running_there, timeout=60, what=f"{victim} to run a job")
    natives[tenants[0]].kill()
    natives[tenants[0]] = native(victim, tenants[0])

    tags = {job_id: run for job_id, (run, _) in made.items()}
    jobs = faultkit.assert_invariants(
        stack.api.http, list(made), tags, log, timeout=faultkit.scale(150, 600)
    )
    expected = {job_id: tenant for job_id, (_, tenant) in made.items()}
    problems = faultkit.check_tenants(jobs, workers, expected)
    assert not problems, "\n".join(problems[:50])
    # The check had teeth: each tenant's jobs ran, on its own workers.
    by_tenant = {
        tenant: {job["worker_id"] for job in jobs.values() if job["tenant"] == tenant}
        for tenant in tenants
    }
    assert all(by_tenant[tenant] for tenant in tenants), by_tenant
    assert not faultkit.check_quiet(solver.path, caches, timeout=20)
    for tenant in tenants[:2]:
        producers[tenant].close()
