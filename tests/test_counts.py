"""Counts that add up, in one vocabulary, process level: every count names a status or
`cancelled` (workflows/job_states.py COUNT_KINDS), a job is counted once, and the list
filtered by a count's name (`GET /api/jobs?status=`) holds that many jobs.

Visibility is read directly (not through the API under test) to know when the jobs'
statuses have landed there; the API's counts are then read once, uncached."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from temporalio.client import Client

from tests.conftest import REGISTERED_TYPE, Api, Solver, Stack, wait_until_async
from tests.procs import Proc
from tests.test_cli import jobforge, ok
from worker.devserver import DevServer
from workflows import search_attributes
from workflows.job_states import COUNT_KINDS
from workflows.search_attributes import JOBS

# Counts made for each read, so that a read after a change sees it.
UNCACHED = {"METRICS_CACHE_MS": "0"}
SOLVER = """
mode = params.get("mode", "ok")
if mode == "fail":
    sys.exit(3)
while mode == "hang":
    time.sleep(0.05)
print(json.dumps({"ok": True}))
"""
LATER_MS = 3_600_000  # a start time an hour away: the job waits, pending, meanwhile


def counts(api: Api, **query: str) -> dict[str, int]:
    answer = api.http.get("/api/jobs/counts", params=query)
    assert answer.status_code == 200, answer.text
    counted: dict[str, int] = answer.json()
    return counted


def listed(api: Api, **query: str) -> list[str]:
    """Ids from `GET /api/jobs` (one page of up to 500)."""
    answer = api.http.get("/api/jobs", params={"limit": "500", **query})
    assert answer.status_code == 200, answer.text
    return [job["id"] for job in answer.json()]


def paged(api: Api, **query: str) -> list[str]:
    """Ids from the dashboard's `GET /api/jobs/page`."""
    answer = api.http.get("/api/jobs/page", params={"limit": "200", **query})
    assert answer.status_code == 200, answer.text
    return [job["id"] for job in answer.json()["jobs"]]


def only(**nonzero: int) -> dict[str, int]:
    """Counts with every kind, zero unless given."""
    return {kind: nonzero.get(kind, 0) for kind in COUNT_KINDS}


async def settle(
    temporal: DevServer, where: str, statuses: dict[str, int], canceled: list[str]
) -> None:
    """Wait until visibility holds `statuses` (JobforgeStatus → how many) for the jobs
    matching `where`, and shows each of `canceled` closed Canceled (a cancel or a stop
    sets the status first, then closes the execution)."""
    client = await Client.connect(temporal.address)

    async def count(query: str) -> int:
        return (await client.count_workflows(query)).count

    async def landed() -> bool:
        for status, n in statuses.items():
            if await count(f"{JOBS} AND {where} AND JobforgeStatus = '{status}'") != n:
                return False
        for job_id in canceled:
            if await count(f"WorkflowId = '{job_id}' AND ExecutionStatus = 'Canceled'") != 1:
                return False
        return True

    await wait_until_async(landed, timeout=60, what=f"visibility to show {statuses}")


def of_type(job_type: str) -> str:
    return f"{search_attributes.TYPE.name} = '{job_type}'"


def cancel(api: Api, job_id: str) -> None:
    answer = api.http.delete(f"/api/jobs/{job_id}")
    assert answer.status_code == 204, answer.text


def later() -> int:
    return int(time.time() * 1000) + LATER_MS


async def test_a_stopped_job_counts_once_as_stopped_and_not_as_cancelled(
    start_stack: Callable[..., Stack],
    make_solver: Callable[[str], Solver],
    job_type: str,
    temporal: DevServer,
) -> None:
    stack = start_stack(**UNCACHED)
    stack.worker(job_type, f"counts-{job_type}")
    api = stack.api
    job_id = api.submit(**make_solver(SOLVER).spec(job_type, params={"mode": "hang"}))
    api.wait_status(job_id, "running")
    answer = api.http.post(f"/api/jobs/{job_id}/stop")
    assert answer.status_code == 202, answer.text
    api.wait_status(job_id, "stopped", timeout=60)

    await settle(temporal, of_type(job_type), {"stopped": 1}, canceled=[job_id])

    assert counts(api, type=job_type) == only(stopped=1)
    assert listed(api, type=job_type, status="stopped") == [job_id]
    assert listed(api, type=job_type, status="cancelled") == []


async def test_the_list_filtered_by_cancelled_holds_exactly_the_cancelled_jobs(
    start_stack: Callable[..., Stack], job_type: str, temporal: DevServer
) -> None:
    stack = start_stack(**UNCACHED)  # no worker serves the type: its jobs stay pending
    api = stack.api
    waiting, *cancelled = (api.submit(type=job_type) for _ in range(3))
    for job_id in cancelled:
        cancel(api, job_id)

    await settle(temporal, of_type(job_type), {"pending": 1, "failed": 2}, canceled=cancelled)

    assert counts(api, type=job_type) == only(pending=1, cancelled=2)
    assert sorted(listed(api, type=job_type, status="cancelled")) == sorted(cancelled)
    assert sorted(listed(api, type=job_type, status="cancelled", order="priority")) == sorted(
        cancelled
    )
    assert sorted(paged(api, type=job_type, status="cancelled")) == sorted(cancelled)
    assert listed(api, type=job_type, status="failed") == []
    assert listed(api, type=job_type, status="pending") == [waiting]
    out = ok(jobforge(api.url, "list", "--status", "cancelled", "--type", job_type))
    assert sorted(line.split()[0] for line in out.splitlines()) == sorted(cancelled)
    assert {line.split()[1] for line in out.splitlines()} == {"cancelled"}
    cancel(api, waiting)


async def test_a_groups_counts_file_a_cancelled_job_under_cancelled(
    api: Api, session_worker: Proc, temporal: DevServer
) -> None:
    group = f"c-{uuid.uuid4().hex[:10]}"
    assert api.http.post(f"/api/groups/{group}/pause").status_code == 200
    job_id = api.submit(type=REGISTERED_TYPE, group=group)
    cancel(api, job_id)

    where = f"{search_attributes.GROUP.name} = '{group}'"
    await settle(temporal, where, {"failed": 1}, canceled=[job_id])

    answer = api.http.get(f"/api/groups/{group}")
    assert answer.status_code == 200, answer.text
    assert answer.json()["counts"] == only(cancelled=1)


async def test_every_count_names_a_filter_that_lists_that_many_jobs(
    start_stack: Callable[..., Stack],
    make_solver: Callable[[str], Solver],
    job_type: str,
    temporal: DevServer,
) -> None:
    stack = start_stack(**UNCACHED)
    stack.worker(job_type, f"counts-{job_type}")
    api = stack.api
    solver = make_solver(SOLVER)
    pool = f"none-{uuid.uuid4().hex[:8]}"
    assert api.http.put(f"/api/pools/{pool}", json={"capacity": 0}).status_code == 200

    done = api.submit(**solver.spec(job_type))
    broken = api.submit(**solver.spec(job_type, params={"mode": "fail"}, max_attempts=1))
    stopped = api.submit(**solver.spec(job_type, params={"mode": "hang"}))
    waiting = api.submit(**solver.spec(job_type, earliest_start_at=later()))
    cancelled = api.submit(**solver.spec(job_type, earliest_start_at=later()))
    # Its pool has no room: never assigned, it fails `deadline_exceeded`.
    late = api.submit(
        **solver.spec(job_type, pool=pool, cost_units=1, deadline_at=int(time.time() * 1000) + 2000)
    )
    api.wait_status(stopped, "running")
    assert api.http.post(f"/api/jobs/{stopped}/stop").status_code == 202
    cancel(api, cancelled)
    ended = {
        done: "completed",
        broken: "quarantined",
        stopped: "stopped",
        late: "failed",
    }
    for job_id, status in ended.items():
        api.wait_status(job_id, status, timeout=60)

    statuses = {"pending": 1, "completed": 1, "quarantined": 1, "stopped": 1, "failed": 2}
    await settle(temporal, of_type(job_type), statuses, canceled=[stopped, cancelled])

    counted = counts(api, type=job_type)
    assert counted == only(pending=1, completed=1, quarantined=1, stopped=1, failed=1, cancelled=1)
    assert sum(counted.values()) == len(listed(api, type=job_type)) == 6
    for kind, n in counted.items():
        assert len(listed(api, type=job_type, status=kind)) == n, kind
    assert listed(api, type=job_type, status="failed") == [late]
    assert listed(api, type=job_type, status="cancelled") == [cancelled]
    cancel(api, waiting)
