"""Scheduling over REST, process level: job fields, groups, pools, targets and the
waiting reasons, through a real API and worker on the session's dev server."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from temporalio.client import Client

from tests.conftest import REGISTERED_TYPE, Api, Solver, Stack, wait_until, wait_until_async
from tests.procs import Proc
from worker.devserver import DevServer
from workflows import search_attributes

# A pool's or a target's counts: its open jobs by status.
NO_OPEN_JOBS = {"pending": 0, "assigned": 0, "running": 0, "stop_requested": 0}


@pytest.fixture
def name() -> str:
    return f"s-{uuid.uuid4().hex[:10]}"


@pytest.fixture(autouse=True)
def _worker(session_worker: Proc) -> Proc:
    return session_worker


@pytest.fixture
def failing(make_solver: Callable[[str], Solver], job_type: str) -> dict[str, Any]:
    """A job body whose every attempt fails (its solver exits 3)."""
    return make_solver("sys.exit(3)\n").spec(job_type)


def ok(response: Any, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


def waiting_for(api: Api, job_id: str, reason: str) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        job = api.job(job_id)
        return job if job["waiting_for"] == reason else None

    found: dict[str, Any] = wait_until(reached, timeout=30, what=f"waiting_for {reason}")
    return found


# -- job fields ---------------------------------------------------------------------------


def test_a_job_keeps_its_scheduling_fields_and_times_may_be_iso(api: Api, name: str) -> None:
    job_id = api.submit(
        type=REGISTERED_TYPE,
        group=name,
        pool=name,
        cost_units=3,
        target=f"tenant/{name}",
        earliest_start_at="2020-01-01T00:00:00Z",
        deadline_at="2100-01-01T01:00:00+01:00",
    )
    job = api.wait_status(job_id, "completed")
    assert (job["group"], job["pool"], job["cost_units"]) == (name, name, 3)
    assert job["target"] == f"tenant/{name}"
    assert job["earliest_start_at"] == 1_577_836_800_000
    assert job["deadline_at"] == 4_102_444_800_000
    assert job["max_attempts"] == 1  # a target job's default
    assert job["waiting_for"] is None


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"cost_units": 2}, "cost_units"),
        ({"cost_units": 0, "pool": "p"}, "cost_units"),
        ({"group": "bad name"}, "group"),
        ({"target": "a/b/c"}, "target"),
        ({"earliest_start_at": "2030-01-01T00:00:00"}, "earliest_start_at"),
        ({"earliest_start_at": True}, "earliest_start_at"),
        ({"deadline_at": 1_000}, "deadline_at"),
        ({"deadline_at": "2020-01-01T00:00:00Z"}, "deadline_at"),
        (
            {"earliest_start_at": 4_102_444_800_000, "deadline_at": 4_102_444_000_000},
            "deadline_at",
        ),
    ],
)
def test_a_bad_scheduling_field_is_a_422_naming_it(
    api: Api, extra: dict[str, Any], field: str
) -> None:
    answer = api.http.post("/api/jobs", json={"type": REGISTERED_TYPE, **extra})
    assert answer.status_code == 422, answer.text
    assert field in answer.text


# -- groups -------------------------------------------------------------------------------


def test_a_paused_group_holds_its_jobs_until_resumed(api: Api, name: str) -> None:
    first = api.submit(type=REGISTERED_TYPE, group=name)
    api.wait_status(first, "completed")
    # The group's counts are visibility's, which shows the end a moment after the job's
    # own read does.
    group = wait_until(
        lambda: (g := ok(api.http.get(f"/api/groups/{name}")))["counts"]["completed"] == 1 and g,
        timeout=30,
        what="the group's counts to show the completed job",
    )
    assert group["paused"] is False

    assert ok(api.http.post(f"/api/groups/{name}/pause"))["paused"] is True
    held = api.submit(type=REGISTERED_TYPE, group=name)
    job = waiting_for(api, held, "group_paused")
    assert job["status"] == "pending"
    wait_until(  # the list is cached METRICS_CACHE_MS, and visibility indexes the gate
        lambda: name in [g["group"] for g in ok(api.http.get("/api/groups"))],
        timeout=30,
        what="the group listed",
    )

    assert ok(api.http.post(f"/api/groups/{name}/resume"))["paused"] is False
    api.wait_status(held, "completed")


def test_a_groups_settings_change_and_an_unknown_group_is_a_404(api: Api, name: str) -> None:
    assert api.http.get(f"/api/groups/{name}").status_code == 404
    group = ok(api.http.patch(f"/api/groups/{name}", json={"max_parallel": 2, "weight": 3}))
    assert (group["max_parallel"], group["weight"]) == (2, 3)
    # A field left out stays as it is; null lifts the limit.
    group = ok(api.http.patch(f"/api/groups/{name}", json={"weight": 4}))
    assert (group["max_parallel"], group["weight"]) == (2, 4)
    group = ok(api.http.patch(f"/api/groups/{name}", json={"max_parallel": None}))
    assert (group["max_parallel"], group["weight"]) == (None, 4)
    answer = api.http.patch(f"/api/groups/{name}", json={"max_parallel": 0})
    assert answer.status_code == 422 and "max_parallel" in answer.text


def test_retry_failed_requeues_quarantined_jobs_with_their_history(
    api: Api, name: str, failing: dict[str, Any]
) -> None:
    job_id = api.submit(**failing, group=name, max_attempts=1)
    api.wait_status(job_id, "quarantined")
    # Retry-failed takes the jobs the group's list shows quarantined.
    api.wait_listed(job_id, "quarantined", group=name)
    answer = ok(api.http.post(f"/api/groups/{name}/retry-failed"))
    assert answer == {"requeued": [job_id]}

    def failed_twice() -> dict[str, Any] | None:
        job = api.job(job_id)
        return job if job["status"] == "quarantined" and job["attempts"] == 2 else None

    job = wait_until(failed_twice, timeout=30, what="the second attempt to fail")
    assert len(job["fail_history"]) == 2


def test_cancel_group_cancels_its_pending_jobs(api: Api, name: str) -> None:
    ok(api.http.post(f"/api/groups/{name}/pause"))
    ids = {api.submit(type=REGISTERED_TYPE, group=name) for _ in range(2)}
    # At once: the group's gate has each job from its submit's answer on, which the
    # group's list (visibility) may show a moment later.
    answer = ok(api.http.post(f"/api/groups/{name}/cancel"))
    assert set(answer["cancelled"]) == ids
    for job_id in ids:
        job = api.job(job_id)
        assert (job["status"], job["fail_reason"]) == ("failed", "cancelled")


# -- pools --------------------------------------------------------------------------------


def test_a_pool_admits_when_its_capacity_allows(api: Api, name: str) -> None:
    pool = ok(api.http.put(f"/api/pools/{name}", json={"capacity": 1}))
    assert pool == {
        "pool": name,
        "capacity": 1,
        "aging_step_s": None,
        "in_use": 0,
        "pending": 0,
        "running": 0,
        "counts": NO_OPEN_JOBS,
    }
    job_id = api.submit(type=REGISTERED_TYPE, pool=name, cost_units=2)
    waiting_for(api, job_id, "pool_capacity")
    # Its counts read visibility, which shows the job a moment after it is made.
    pool = wait_until(
        lambda: found if (found := ok(api.http.get(f"/api/pools/{name}")))["pending"] else None,
        timeout=30,
        what="the job counted",
    )
    assert (pool["pending"], pool["counts"]) == (1, {**NO_OPEN_JOBS, "pending": 1})
    ok(api.http.put(f"/api/pools/{name}", json={"capacity": 2}))
    api.wait_status(job_id, "completed")

    def given_back() -> dict[str, Any] | None:
        pool = ok(api.http.get(f"/api/pools/{name}"))
        return pool if (pool["in_use"], pool["pending"]) == (0, 0) else None

    wait_until(given_back, timeout=30, what="the units back and none pending")
    wait_until(
        lambda: name in [p["pool"] for p in ok(api.http.get("/api/pools"))],
        timeout=30,
        what="the pool listed",
    )
    answer = api.http.put(f"/api/pools/{name}", json={"capacity": -1})
    assert answer.status_code == 422 and "capacity" in answer.text


def test_a_pools_aging_step_is_null_until_set_and_a_bad_one_is_a_422(api: Api, name: str) -> None:
    put = f"/api/pools/{name}"
    assert ok(api.http.put(put, json={"capacity": 3, "aging_step_s": 30}))["aging_step_s"] == 30
    # Left out, it stays; null ends the aging.
    assert ok(api.http.put(put, json={"capacity": 4}))["aging_step_s"] == 30
    assert ok(api.http.put(put, json={"capacity": 4, "aging_step_s": None}))["aging_step_s"] is None
    assert ok(api.http.get(put))["aging_step_s"] is None
    for bad in (0, -1, "soon", 10**9):
        answer = api.http.put(put, json={"capacity": 4, "aging_step_s": bad})
        assert answer.status_code == 422 and "aging_step_s" in answer.text, answer.text


def test_a_pools_lock_is_one_owners_a_409_names_it_and_bad_input_is_a_422(
    api: Api, name: str
) -> None:
    lock = f"/api/pools/{name}/lock"
    taken = ok(api.http.post(lock, json={"owner": "a", "ttl_s": 600}))
    assert (taken["pool"], taken["owner"]) == (name, "a")
    assert taken["expires_at"] == taken["renewed_at"] + 600_000
    refused = api.http.post(lock, json={"owner": "b"})
    assert refused.status_code == 409, refused.text
    body = refused.json()
    assert (body["owner"], body["since"], body["expires_at"]) == (
        "a",
        taken["since"],
        taken["expires_at"],
    )
    assert body["error"].startswith(f"pool {name} is locked by a since ")
    for bad in ({"owner": "b", "ttl_s": 0}, {"owner": "b", "ttl_s": "soon"}, {"owner": ""}, {}):
        answer = api.http.post(lock, json=bad)
        assert answer.status_code == 422, answer.text
        assert ("ttl_s" if "ttl_s" in bad else "owner") in answer.text, answer.text
    assert api.http.delete(lock).status_code == 422
    # Only its owner gives it back.
    assert api.http.delete(lock, params={"owner": "b"}).status_code == 204
    assert api.http.post(lock, json={"owner": "b"}).status_code == 409
    assert api.http.delete(lock, params={"owner": "a"}).status_code == 204
    assert ok(api.http.post(lock, json={"owner": "b"}))["owner"] == "b"


# -- unknown gates ------------------------------------------------------------------------


def test_an_unknown_target_group_or_pool_is_a_404_and_no_call_makes_one(
    api: Api, name: str
) -> None:
    calls = [
        ("GET", f"/api/targets/{name}", None),
        ("POST", f"/api/targets/{name}/resume", None),
        ("POST", f"/api/targets/{name}/resume", {"job": "skip"}),
        ("GET", f"/api/groups/{name}", None),
        ("POST", f"/api/groups/{name}/resume", None),
        ("POST", f"/api/groups/{name}/retry-failed", None),
        ("POST", f"/api/groups/{name}/cancel", None),
        ("GET", f"/api/pools/{name}", None),
        ("DELETE", f"/api/pools/{name}/lock?owner=a", None),
    ]
    for method, path, body in calls:
        answer = api.http.request(method, path, json=body)
        assert answer.status_code == 404, (method, path, answer.text)
        kind = path.split("/")[2].removesuffix("s")
        assert answer.json()["error"] == f"{kind} {name} not found", answer.text
    # Asked again, each is still unknown: none of the calls above started one.
    for method, path, body in calls:
        assert api.http.request(method, path, json=body).status_code == 404, path
    # A setting makes a pool (as runforge's daemon does), as a job naming it would.
    assert ok(api.http.put(f"/api/pools/{name}", json={"capacity": 2}))["capacity"] == 2
    assert ok(api.http.get(f"/api/pools/{name}"))["capacity"] == 2


# -- targets ------------------------------------------------------------------------------


def test_a_failed_job_halts_its_target_until_resumed(
    api: Api, name: str, failing: dict[str, Any]
) -> None:
    target = f"tenant/{name}"
    halting = api.submit(**failing, target=target)
    api.wait_status(halting, "quarantined")

    def halted() -> dict[str, Any] | None:
        view = ok(api.http.get(f"/api/targets/{target}"))
        return view if view["halted"] else None

    view = wait_until(halted, timeout=30, what="the target to halt")
    assert view["halted_by"] == halting
    # The list shows the target as a read of it does. Both read again each time: a read
    # taken while visibility still counted the halting job running would never match.
    wait_until(
        lambda: ok(api.http.get(f"/api/targets/{target}")) in ok(api.http.get("/api/targets")),
        timeout=30,
        what="the target listed as read",
    )
    later = api.submit(type=REGISTERED_TYPE, target=target)
    waiting_for(api, later, "target_halted")

    view = ok(api.http.post(f"/api/targets/{target}/resume", json={"job": "skip"}))
    assert view["halted"] is False
    api.wait_status(later, "completed")
    assert api.job(halting)["status"] == "quarantined"


def test_resume_with_retry_runs_the_halting_job_again_first(
    api: Api, name: str, failing: dict[str, Any]
) -> None:
    halting = api.submit(**failing, target=name)
    api.wait_status(halting, "quarantined")
    wait_until(lambda: ok(api.http.get(f"/api/targets/{name}"))["halted"], timeout=30, what="halt")
    ok(api.http.post(f"/api/targets/{name}/resume"))

    def failed_again() -> dict[str, Any] | None:
        job = api.job(halting)
        return job if job["status"] == "quarantined" and job["attempts"] == 2 else None

    wait_until(failed_again, timeout=30, what="the retried job to fail again")
    # The target's view is its memo, which follows the gate by a moment.
    wait_until(
        lambda: ok(api.http.get(f"/api/targets/{name}"))["halted_by"] == halting,
        timeout=30,
        what="the target halted by the job again",
    )


# -- waiting reasons -----------------------------------------------------------------------


def test_a_job_nobody_serves_says_no_worker(start_stack: Callable[..., Stack]) -> None:
    stack = start_stack()
    job_id = stack.api.submit(type="nobody-serves-this")
    job = waiting_for(stack.api, job_id, "no_worker")
    assert job["status"] == "pending"


def test_a_job_with_a_future_start_says_start_time(api: Api) -> None:
    job_id = api.submit(type=REGISTERED_TYPE, earliest_start_at=4_102_444_800_000)
    job = waiting_for(api, job_id, "start_time")
    assert job["status"] == "pending"
    answer = api.http.delete(f"/api/jobs/{job_id}")
    assert answer.status_code == 204


# -- admission-only (001) --------------------------------------------------------------------


async def test_an_admission_only_job_is_taken_now_or_refused_with_retry_after(
    api: Api, temporal: DevServer, name: str
) -> None:
    ok(api.http.put(f"/api/pools/{name}", json={"capacity": 2}))
    body = {"type": REGISTERED_TYPE, "pool": name, "admission": "reject"}
    # Admitted: it holds both units while it waits at its paused group.
    ok(api.http.post(f"/api/groups/{name}/pause"))
    first = ok(api.http.post("/api/jobs", json={**body, "cost_units": 2, "group": name}), 201)
    assert ok(api.http.get(f"/api/pools/{name}"))["in_use"] == 2

    refused = api.http.post("/api/jobs", json=body)
    assert refused.status_code == 429, refused.text
    answer = refused.json()
    assert answer["reason"] == "pool_full"
    assert answer["retry_after_s"] >= 1
    assert refused.headers["Retry-After"] == str(answer["retry_after_s"])
    too_big = api.http.post("/api/jobs", json={**body, "cost_units": 3})
    assert too_big.status_code == 422 and "cost_units" in too_big.text

    ok(api.http.post(f"/api/groups/{name}/resume"))
    api.wait_status(first["id"], "completed")
    # A job reads completed a moment before its units are back (it gives them back
    # after its last transition, so no record shows two leases at once).
    wait_until(
        lambda: ok(api.http.get(f"/api/pools/{name}"))["in_use"] == 0,
        timeout=30,
        what="the units back",
    )
    second = ok(api.http.post("/api/jobs", json=body), 201)
    api.wait_status(second["id"], "completed")
    # Nothing was made for the refused submissions: two jobs ever named the pool.
    client = await Client.connect(temporal.address)
    query = f"{search_attributes.POOL.name} = '{name}'"

    async def counted() -> int | None:  # visibility shows the second a moment after
        found = (await client.count_workflows(query)).count
        return found if found >= 2 else None

    assert await wait_until_async(counted, timeout=30, what="both jobs counted") == 2


def test_admission_reject_needs_a_pool(api: Api) -> None:
    answer = api.http.post("/api/jobs", json={"type": REGISTERED_TYPE, "admission": "reject"})
    assert answer.status_code == 422 and "admission" in answer.text


def test_a_retry_while_its_pool_is_full_is_a_429_and_leaves_the_job_as_it_ended(
    api: Api, name: str
) -> None:
    """An admission-only job re-queued by an operator passes its pool again, as a submit
    does: refused while the pool is full (nothing written), taken once it has room."""
    ok(api.http.put(f"/api/pools/{name}", json={"capacity": 1}))
    body = {"type": REGISTERED_TYPE, "pool": name, "admission": "reject"}
    done = ok(api.http.post("/api/jobs", json=body), 201)
    api.wait_status(done["id"], "completed")
    wait_until(
        lambda: ok(api.http.get(f"/api/pools/{name}"))["in_use"] == 0,
        timeout=30,
        what="the unit back",
    )
    # Another job holds the pool's unit while it waits at its paused group.
    ok(api.http.post(f"/api/groups/{name}/pause"))
    holder = ok(api.http.post("/api/jobs", json={**body, "group": name}), 201)

    refused = api.http.post(f"/api/ops/jobs/{done['id']}/requeue")

    assert refused.status_code == 429, refused.text
    assert refused.json()["reason"] == "pool_full"
    assert refused.headers["Retry-After"] == str(refused.json()["retry_after_s"])
    assert api.job(done["id"])["status"] == "completed"
    ok(api.http.post(f"/api/groups/{name}/resume"))
    api.wait_status(holder["id"], "completed")
    wait_until(
        lambda: api.http.post(f"/api/ops/jobs/{done['id']}/requeue").status_code == 200,
        timeout=30,
        what="the retry taken once the unit is back",
    )
    rerun = api.wait_status(done["id"], "completed")
    assert [t["reason"] for t in rerun["transitions"]].count("requeued") == 1


def test_a_retry_after_its_deadline_passed_drops_the_deadline_and_runs(api: Api, name: str) -> None:
    ok(api.http.post(f"/api/groups/{name}/pause"))
    deadline_at = int(time.time() * 1000) + 1500
    body = {"type": REGISTERED_TYPE, "group": name, "deadline_at": deadline_at}
    job_id = ok(api.http.post("/api/jobs", json=body), 201)["id"]
    ended = api.wait_status(job_id, "failed")
    assert ended["fail_reason"] == "deadline_exceeded"
    ok(api.http.post(f"/api/groups/{name}/resume"))

    again = ok(api.http.post(f"/api/ops/jobs/{job_id}/requeue"))

    assert again["status"] == "pending" and again["deadline_at"] is None
    assert api.wait_status(job_id, "completed")["deadline_at"] is None
