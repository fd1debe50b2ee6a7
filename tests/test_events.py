"""The live event stream: complete, ordered per job, resumable, filterable."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from email.utils import parsedate_to_datetime
from pathlib import Path

import httpx
import pytest

from tests.conftest import SECRET, Api, Solver
from tests.helpers import Collector, Sse

pytestmark = pytest.mark.usefixtures("session_worker")

LIFE = ["job:created", "job:assigned", "job:running", "job:completed"]


def by_job(events: list[Sse]) -> dict[str, list[Sse]]:
    """Events grouped by job id, in arrival order."""
    grouped: dict[str, list[Sse]] = defaultdict(list)
    for sse in events:
        grouped[sse.data["id"]].append(sse)
    return grouped


def finished(count: int) -> Callable[[list[Sse]], bool]:
    """Done once `count` jobs have their completed event."""
    return lambda events: sum(e.event == "job:completed" for e in events) >= count


@pytest.fixture
def shell_solver(tmp_path: Path) -> Solver:
    """A solver that starts fast: a shell script printing {}."""
    path = tmp_path / "noop.sh"
    path.write_text("#!/bin/sh\necho '{}'\n")
    path.chmod(0o755)
    return Solver(path)


@pytest.mark.slow(23)
def test_a_burst_of_200_jobs_yields_each_jobs_whole_life_once_and_in_order(
    api: Api, job_type: str, shell_solver: Solver
) -> None:
    collector = Collector(f"{api.url}/api/jobs/events", {"type": job_type}, finished(200))
    thread = collector.run(deadline_s=240)
    assert collector.connected.wait(15)

    ids = {api.submit(**shell_solver.spec(job_type, params={"i": i})) for i in range(200)}
    thread.join(250)

    assert collector.error is None, collector.error
    grouped = by_job(collector.events)
    assert set(grouped) == ids
    incomplete = {
        job_id: [e.event for e in events]
        for job_id, events in grouped.items()
        if [e.event for e in events] != LIFE
    }
    for job_id in list(incomplete)[:3]:
        incomplete[job_id].append(str(api.job(job_id)["transitions"]))
    assert not incomplete, (len(incomplete), list(incomplete.items())[:3])
    for events in grouped.values():
        assert [e.data["seq"] for e in events] == [1, 2, 3, 4]
    assert len({e.id for e in collector.events}) == len(collector.events)


def test_resuming_with_last_event_id_loses_nothing_and_repeats_nothing(
    api: Api, job_type: str, make_solver: Callable[[str], Solver]
) -> None:
    solver = make_solver('print("{}")\n')
    url = f"{api.url}/api/jobs/events"
    first = Collector(url, {"type": job_type}, lambda events: len(events) >= 10)
    thread = first.run(deadline_s=60)
    assert first.connected.wait(15)
    ids = {api.submit(**solver.spec(job_type)) for _ in range(20)}
    thread.join(70)
    assert first.error is None, first.error
    assert len(first.events) >= 10

    already = sum(e.event == "job:completed" for e in first.events)
    second = Collector(
        url, {"type": job_type}, finished(20 - already), last_event_id=first.events[-1].id
    )
    reading = second.run(deadline_s=180)
    # Every job runs to its end first: a missing event below is one the stream lost,
    # not a job still waiting for a busy worker.
    for job_id in ids:
        api.wait_status(job_id, "completed", timeout=120)
    # The stream may lag on a loaded box: it has until the collector's own deadline to
    # bring every job's end; what it has not brought by then is lost.
    reading.join(180)
    assert not reading.is_alive(), "the resumed stream did not end within its deadline"
    assert second.error is None, second.error
    ids_seen = [e.id for e in first.events + second.events]
    assert len(ids_seen) == len(set(ids_seen)), "an event was repeated"
    grouped = by_job(first.events + second.events)
    assert set(grouped) == ids
    for events in grouped.values():
        assert [e.event for e in events] == LIFE


def test_since_replays_what_changed_after_that_time_before_the_live_events(
    api: Api, job_type: str, make_solver: Callable[[str], Solver]
) -> None:
    solver = make_solver('print("{}")\n')
    before = api.http.get("/api/jobs/page", params={"type": job_type})
    since_ms = int(parsedate_to_datetime(before.headers["date"]).timestamp() * 1000) - 1000
    ids = {api.submit(**solver.spec(job_type)) for _ in range(3)}
    for job_id in ids:
        api.wait_status(job_id, "completed", timeout=60)

    # The stream opens after every job ended: all it brings is the replay.
    collector = Collector(
        f"{api.url}/api/jobs/events", {"type": job_type, "since": since_ms}, finished(3)
    )
    collector.run(deadline_s=60).join(70)

    assert collector.error is None, collector.error
    grouped = by_job(collector.events)
    assert set(grouped) == ids
    assert all([e.event for e in events] == LIFE for events in grouped.values())


@pytest.mark.parametrize("since", ["-1", "soon"])
def test_a_bad_since_is_a_422_naming_it(api: Api, since: str) -> None:
    response = api.http.get("/api/jobs/events", params={"since": since})

    assert response.status_code == 422, response.text
    assert "since" in response.text


def test_the_stream_filters_by_status_and_type(
    api: Api, job_type: str, make_solver: Callable[[str], Solver]
) -> None:
    solver = make_solver('print("{}")\n')
    other_type = f"{job_type}-b"
    collector = Collector(
        f"{api.url}/api/jobs/events",
        {"type": job_type, "status": "completed"},
        finished(3),
    )
    thread = collector.run(deadline_s=60)
    assert collector.connected.wait(15)
    for _ in range(3):
        api.submit(**solver.spec(other_type))
        api.submit(**solver.spec(job_type))
    thread.join(70)

    assert collector.error is None, collector.error
    assert len(collector.events) == 3
    assert {e.event for e in collector.events} == {"job:completed"}
    assert {e.data["type"] for e in collector.events} == {job_type}


def test_the_stream_needs_a_token_when_the_operator_asks_for_it(
    start_api: Callable[..., Api],
) -> None:
    locked = start_api(EVENTS_REQUIRE_TOKEN="true")
    url = f"{locked.url}/api/jobs/events"
    with httpx.Client(timeout=10) as http:
        assert http.get(url).status_code == 401
        assert http.get(url, params={"token": "123.abc"}).status_code == 401
        token = locked.http.post("/api/events/token").json()["token"]
        assert SECRET not in token
        with http.stream("GET", url, params={"token": token}) as response:
            assert response.status_code == 200


def test_a_cancel_is_sent_as_the_specs_job_failed_with_fail_reason_cancelled(api: Api) -> None:
    idle = "nobody-serves-this-cancel"
    collector = Collector(
        f"{api.url}/api/jobs/events",
        {"type": idle},
        lambda events: any(e.data.get("fail_reason") == "cancelled" for e in events),
    )
    thread = collector.run(deadline_s=60)
    assert collector.connected.wait(15)
    job_id = api.submit(type=idle)
    assert api.http.delete(f"/api/jobs/{job_id}").status_code == 204
    thread.join(70)

    assert collector.error is None, collector.error
    mine = [e for e in collector.events if e.data["id"] == job_id]
    assert [(e.event, e.data["status"], e.data["fail_reason"]) for e in mine] == [
        ("job:created", "pending", None),
        ("job:failed", "failed", "cancelled"),
    ]
