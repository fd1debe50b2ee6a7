"""Recurring jobs, process level (docs/scheduling.md, "Recurring jobs"): Temporal
Schedules on the session's dev server that fire jobs through the real API and worker."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from api.event_feed import EventKey
from tests.conftest import REGISTERED_TYPE, Api, Solver, Stack
from tests.helpers import Collector
from tests.procs import wait_until

pytestmark = pytest.mark.usefixtures("session_worker")

JAN_1 = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)


def ok(response: httpx.Response, code: int = 200) -> Any:
    assert response.status_code == code, response.text
    return response.json() if response.content else None


@pytest.fixture
def schedule_id() -> str:
    return f"s-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def make_schedule(api: Api) -> Iterator[Callable[..., dict[str, Any]]]:
    """Factory: POST /api/schedules (201); every schedule made is deleted after the test,
    so none fires on into the session's other tests."""
    made: list[str] = []

    def make(http: httpx.Client | None = None, **body: Any) -> dict[str, Any]:
        answer = (http or api.http).post("/api/schedules", json=body)
        made.append(body["id"])
        created: dict[str, Any] = ok(answer, 201)
        return created

    yield make
    for schedule_id in made:
        api.http.delete(f"/api/schedules/{schedule_id}")


def schedule(api: Api, schedule_id: str) -> dict[str, Any]:
    found: dict[str, Any] = ok(api.http.get(f"/api/schedules/{schedule_id}"))
    return found


def jobs_of(api: Api, job_type: str) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = ok(api.http.get("/api/jobs", params={"type": job_type}))
    return listed


def fired_at_least(api: Api, schedule_id: str, count: int) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        found = schedule(api, schedule_id)
        return found if found["fired"] >= count else None

    found: dict[str, Any] = wait_until(reached, timeout=60, what=f"{count} firings")
    return found


def listed_jobs(api: Api, job_type: str, count: int) -> list[dict[str, Any]]:
    """The jobs of a type, once visibility lists `count` of them."""

    def listed() -> list[dict[str, Any]] | None:
        jobs = jobs_of(api, job_type)
        return jobs if len(jobs) >= count else None

    found: list[dict[str, Any]] = wait_until(listed, timeout=30, what=f"{count} jobs")
    return found


def test_a_schedule_every_2_s_fires_normal_jobs_of_its_spec(
    api: Api, make_schedule: Callable[..., dict[str, Any]], schedule_id: str, job_type: str
) -> None:
    # No worker serves the type: each firing's job stays pending, so allow_all lets the
    # schedule go on firing.
    created = make_schedule(
        id=schedule_id,
        interval=2,
        overlap="allow_all",
        job={"type": job_type, "priority": 7, "params": {"n": 1}, "tenant": "acme"},
    )
    assert (created["interval"], created["cron"], created["overlap"]) == (2, None, "allow_all")
    assert created["paused"] is False
    assert created["next_firings"]
    times = created["next_firings"]
    assert all(b - a == 2000 for a, b in itertools.pairwise(times))

    fired_at_least(api, schedule_id, 2)
    jobs = listed_jobs(api, job_type, 2)
    for job in jobs:
        assert job["id"].startswith(f"{schedule_id}-")
        assert (job["type"], job["priority"], job["tenant"]) == (job_type, 7, "acme")
        assert (job["status"], job["params"]) == ("pending", {"n": 1})
        one = api.job(job["id"])  # the firing's id reads as a job's
        assert (one["id"], one["created_at"]) == (job["id"], job["created_at"])
        assert one["transitions"][0]["by"] == f"schedule {schedule_id}"
    # Each was created when it fired, not when the schedule was made.
    assert len({job["created_at"] for job in jobs}) == len(jobs)
    # The visibility row is the job's own, by its search attributes, as a submitted one's.
    listed = ok(api.http.get("/api/jobs", params={"type": job_type, "status": "pending"}))
    assert {job["id"] for job in jobs} <= {job["id"] for job in listed}
    found = schedule(api, schedule_id)
    assert {firing["job_id"] for firing in found["recent"]} >= {job["id"] for job in jobs}
    assert {firing["status"] for firing in found["recent"] if firing["status"]} == {"pending"}


def test_a_fired_job_runs_to_completion_on_a_worker(
    api: Api, make_schedule: Callable[..., dict[str, Any]], schedule_id: str
) -> None:
    make_schedule(id=schedule_id, cron="0 0 1 1 *", paused=True, job={"type": REGISTERED_TYPE})
    assert schedule(api, schedule_id)["fired"] == 0
    ok(api.http.post(f"/api/schedules/{schedule_id}/trigger"))
    firing = fired_at_least(api, schedule_id, 1)["recent"][0]
    job = api.wait_status(firing["job_id"], "completed")
    assert job["result"]["registered"] is True
    assert job["created_at"] >= firing["started_at"] - 1000


def test_a_paused_schedule_fires_nothing_until_resumed(
    api: Api, make_schedule: Callable[..., dict[str, Any]], schedule_id: str, job_type: str
) -> None:
    make_schedule(id=schedule_id, interval=2, overlap="allow_all", job={"type": job_type})
    fired_at_least(api, schedule_id, 1)
    paused = ok(api.http.post(f"/api/schedules/{schedule_id}/pause"))
    assert (paused["paused"], paused["note"]) == (True, "paused by bootstrap")
    count = paused["fired"]
    # Quiet over two of the schedule's own times: the next two it had when paused (a
    # paused schedule's describe keeps them), and a second's slack for its timer. The
    # dev server runs on this machine's clock. Every look in between sees no firing.
    due = paused["next_firings"][1] + 1000

    def passed_two_times() -> dict[str, Any] | None:
        found = schedule(api, schedule_id)
        assert found["fired"] == count, found
        return found if time.time() * 1000 > due else None

    wait_until(passed_two_times, timeout=30, what="two times of the schedule to pass")
    assert len(listed_jobs(api, job_type, count)) == count

    resumed = ok(api.http.post(f"/api/schedules/{schedule_id}/resume"))
    assert (resumed["paused"], resumed["note"]) == (False, "resumed by bootstrap")
    assert resumed["fired"] == count  # the times passed while paused did not fire
    fired_at_least(api, schedule_id, count + 1)
    listed_jobs(api, job_type, count + 1)


def test_overlap_skip_fires_nothing_while_the_last_job_is_open(
    api: Api, make_schedule: Callable[..., dict[str, Any]], schedule_id: str, job_type: str
) -> None:
    # Nobody claims the first job: it stays pending, so every later time is skipped.
    make_schedule(id=schedule_id, interval=2, overlap="skip", job={"type": job_type})

    def skipped_twice() -> dict[str, Any] | None:
        found = schedule(api, schedule_id)
        return found if found["skipped_overlap"] >= 2 else None

    found = wait_until(skipped_twice, timeout=60, what="two skipped firings")
    assert found["fired"] == 1
    (only,) = found["recent"]
    assert found["running"] == [only["job_id"]]
    assert [job["id"] for job in listed_jobs(api, job_type, 1)] == [only["job_id"]]


def test_a_backfill_of_a_minute_fires_each_10_s_time_in_it_both_ends_included(
    api: Api, make_schedule: Callable[..., dict[str, Any]], schedule_id: str, job_type: str
) -> None:
    make_schedule(
        id=schedule_id, interval=10, paused=True, overlap="allow_all", job={"type": job_type}
    )
    done = ok(
        api.http.post(
            f"/api/schedules/{schedule_id}/backfill",
            json={"start": "2026-01-01T00:00:00Z", "end": JAN_1 + 60_000},
        )
    )
    assert done["paused"] is True  # a backfill fires a paused schedule too
    jobs = listed_jobs(api, job_type, 7)
    times = [f"2026-01-01T00:0{s // 60}:{s % 60:02d}Z" for s in range(0, 61, 10)]
    assert sorted(job["id"] for job in jobs) == [f"{schedule_id}-{t}" for t in times]
    assert fired_at_least(api, schedule_id, 7)["fired"] == 7


def test_a_schedule_can_be_changed_listed_and_deleted(
    api: Api, make_schedule: Callable[..., dict[str, Any]], schedule_id: str, job_type: str
) -> None:
    make_schedule(id=schedule_id, cron="0 3 * * *", paused=True, job={"type": job_type})
    changed = ok(
        api.http.patch(
            f"/api/schedules/{schedule_id}",
            json={
                "interval": 3600,
                "overlap": "buffer_one",
                "note": "hourly",
                "job": {"type": job_type, "priority": 3},
            },
        )
    )
    assert (changed["cron"], changed["interval"], changed["overlap"]) == (None, 3600, "buffer_one")
    assert (changed["note"], changed["job"]["priority"], changed["paused"]) == ("hourly", 3, True)
    resumed = ok(api.http.post(f"/api/schedules/{schedule_id}/resume"))
    assert (resumed["paused"], resumed["note"]) == (False, "hourly")  # its own note stays
    wait_until(
        lambda: schedule_id in [s["id"] for s in ok(api.http.get("/api/schedules"))],
        timeout=30,
        what="the schedule listed",
    )
    ok(api.http.delete(f"/api/schedules/{schedule_id}"), 204)
    assert api.http.get(f"/api/schedules/{schedule_id}").status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"cron": "* * * * *", "interval": 5}, "cron"),
        ({}, "cron"),
        ({"interval": 5, "overlap": "sometimes"}, "overlap"),
        ({"interval": 0}, "interval"),
        ({"cron": "not a cron"}, "cron"),
        ({"interval": 5, "job": {"type": "no spaces please"}}, "job.type"),
        ({"interval": 5, "job": {"type": "t", "priority": "high"}}, "job.priority"),
        (
            {"interval": 5, "job": {"type": "t", "deadline_at": 4_102_444_800_000}},
            "job.deadline_at",
        ),
        ({"interval": 5, "job": {"type": "t", "tenant": "a", "group": "b/g"}}, "job.group"),
        ({"interval": 5, "job": None}, "job"),
        ({"interval": 5, "catchup_window_s": 3}, "catchup_window_s"),
    ],
)
def test_a_bad_schedule_is_a_422_naming_the_field(
    api: Api, schedule_id: str, body: dict[str, Any], field: str
) -> None:
    sent = {"id": schedule_id, "job": {"type": "t"}, **body}
    answer = api.http.post("/api/schedules", json=sent)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"].startswith(field), answer.text
    assert api.http.get(f"/api/schedules/{schedule_id}").status_code == 404


def test_a_second_schedule_of_the_same_id_is_a_409(
    api: Api, make_schedule: Callable[..., dict[str, Any]], schedule_id: str
) -> None:
    make_schedule(id=schedule_id, interval=60, paused=True, job={"type": "t"})
    answer = api.http.post(
        "/api/schedules", json={"id": schedule_id, "interval": 30, "job": {"type": "t"}}
    )
    assert answer.status_code == 409, answer.text
    assert schedule(api, schedule_id)["interval"] == 60


def test_a_tenants_schedule_is_its_own(
    api: Api, make_schedule: Callable[..., dict[str, Any]], schedule_id: str, job_type: str
) -> None:
    tag = uuid.uuid4().hex[:6]
    acme, bravo = f"acme-{tag}", f"bravo-{tag}"

    def client(tenant: str) -> httpx.Client:
        body = {"name": f"p-{tenant}", "role": "producer", "tenant": tenant}
        token = ok(api.http.post("/api/tokens", json=body), 201)["token"]
        return httpx.Client(
            base_url=api.url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        )

    with client(acme) as owner, client(bravo) as other:
        created = make_schedule(
            owner, id=schedule_id, interval=3600, paused=True, job={"type": job_type}
        )
        assert (created["tenant"], created["job"]["tenant"]) == (acme, acme)
        refused = owner.post(
            "/api/schedules",
            json={"id": f"{schedule_id}-x", "interval": 60, "job": {"type": "t", "group": "g"}},
        )
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"].startswith("job.group")
        for method, path in [
            ("GET", ""),
            ("PATCH", ""),
            ("POST", "/pause"),
            ("POST", "/trigger"),
            ("DELETE", ""),
        ]:
            answer = other.request(
                method, f"/api/schedules/{schedule_id}{path}", json={} if method != "GET" else None
            )
            assert answer.status_code == 404, (method, path, answer.text)
        wait_until(
            lambda: [s["id"] for s in ok(owner.get("/api/schedules"))] == [schedule_id],
            timeout=30,
            what="acme's schedule listed to acme",
        )
        assert ok(other.get("/api/schedules")) == []
        ok(owner.post(f"/api/schedules/{schedule_id}/trigger"))
        (job,) = listed_jobs(api, job_type, 1)
        assert job["tenant"] == acme
        assert job["id"] in {j["id"] for j in ok(owner.get("/api/jobs", params={"type": job_type}))}
        assert ok(other.get("/api/jobs", params={"type": job_type})) == []


def test_a_fired_jobs_events_stream_and_resume_after_its_own_event_id(
    api: Api,
    make_schedule: Callable[..., dict[str, Any]],
    schedule_id: str,
    job_type: str,
    make_solver: Callable[[str], Solver],
) -> None:
    solver = make_solver('print("{}")\n')
    url = f"{api.url}/api/jobs/events"
    first = Collector(url, {"type": job_type}, lambda events: len(events) >= 4)
    thread = first.run(deadline_s=60)
    assert first.connected.wait(15)
    make_schedule(id=schedule_id, cron="0 0 1 1 *", paused=True, job=solver.spec(job_type))
    ok(api.http.post(f"/api/schedules/{schedule_id}/trigger"))
    thread.join(70)
    assert first.error is None, first.error
    job_id = first.events[0].job_id
    assert job_id.startswith(f"{schedule_id}-")
    assert [e.event for e in first.events] == [
        "job:created",
        "job:assigned",
        "job:running",
        "job:completed",
    ]
    # An event id holds the job's id, '-' and ':' in it: a resume after the first event
    # brings the three after it, and nothing else.
    second = Collector(
        url, {"type": job_type}, lambda events: len(events) >= 3, last_event_id=first.events[0].id
    )
    second.run(deadline_s=60).join(70)
    assert second.error is None, second.error
    assert [e.id for e in second.events] == [e.id for e in first.events[1:]]


def test_an_event_id_of_a_fired_job_parses_back_to_its_key() -> None:
    key = EventKey(1_767_225_600_000, "nightly-2026-01-01T00:00:00Z", 3)
    assert EventKey.parse(key.encode()) == key
    assert EventKey.parse("12-abc-x") is None


def test_firings_while_no_worker_is_up_are_kept_and_run_once_one_is(
    start_stack: Callable[..., Stack], job_type: str, make_solver: Callable[[str], Solver]
) -> None:
    stack = start_stack()
    api = stack.api
    stack.procs[1].kill()  # its only workflow worker: nothing runs any job's workflow
    solver = make_solver('print("{}")\n')
    schedule_id = f"s-{uuid.uuid4().hex[:10]}"
    body = {"id": schedule_id, "interval": 2, "overlap": "allow_all", "job": solver.spec(job_type)}
    ok(api.http.post("/api/schedules", json=body), 201)
    try:
        fired_at_least(api, schedule_id, 2)
        paused = ok(api.http.post(f"/api/schedules/{schedule_id}/pause"))
        # Temporal started each firing's workflow with no worker to run it.
        assert len(paused["recent"]) == paused["fired"] >= 2
        stack.worker(job_type, f"{schedule_id}-back", WORKER_RUN_WORKFLOWS="true")
        for firing in paused["recent"]:
            api.wait_status(firing["job_id"], "completed", timeout=60)
    finally:
        api.http.delete(f"/api/schedules/{schedule_id}")


def test_a_fired_job_passes_its_group_as_a_submitted_one_does(
    api: Api, make_schedule: Callable[..., dict[str, Any]], schedule_id: str
) -> None:
    group = f"g-{uuid.uuid4().hex[:10]}"
    ok(api.http.post(f"/api/groups/{group}/pause"))
    make_schedule(
        id=schedule_id, cron="0 0 1 1 *", paused=True, job={"type": REGISTERED_TYPE, "group": group}
    )
    ok(api.http.post(f"/api/schedules/{schedule_id}/trigger"))
    job_id = fired_at_least(api, schedule_id, 1)["recent"][0]["job_id"]
    held = wait_until(
        lambda: (job := api.job(job_id))["waiting_for"] == "group_paused" and job,
        timeout=30,
        what="the job held by its paused group",
    )
    assert held["status"] == "pending"
    ok(api.http.post(f"/api/groups/{group}/resume"))
    assert api.wait_status(job_id, "completed")["group"] == group
