"""Job logs, process level: a native worker writes its solver's stdout and stderr to the
shared log store as they come; `GET /api/jobs/{id}/logs` reads them labelled by stream,
per attempt, or follows them as server-sent events; agents upload theirs by offset."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Api, Solver, wait_until
from tests.procs import Proc

TALKER = """
print("first out", flush=True)
print("first err", file=sys.stderr, flush=True)
gate = params.get("gate")
while gate and not os.path.exists(gate):
    time.sleep(0.02)
print("second err", file=sys.stderr, flush=True)
print(json.dumps({"done": True}))
if params.get("fail"):
    sys.exit(3)
"""


@pytest.fixture(autouse=True)
def _worker(session_worker: Proc) -> Proc:
    return session_worker


def lines(api: Api, job_id: str, **query: Any) -> list[tuple[str, str]]:
    answer = api.http.get(f"/api/jobs/{job_id}/logs", params=query)
    assert answer.status_code == 200, answer.text
    return [(line["stream"], line["text"]) for line in answer.json()["lines"]]


def test_a_jobs_output_is_stored_per_attempt_and_labelled_by_stream(
    api: Api, job_type: str, make_solver: Callable[[str], Solver]
) -> None:
    solver = make_solver(TALKER)
    job_id = api.submit(**solver.spec(job_type, params={"fail": True}, max_attempts=2))
    api.wait_status(job_id, "quarantined")
    expected = [
        ("stdout", "first out"),
        ("stderr", "first err"),
        ("stderr", "second err"),
        ("stdout", '{"done": true}'),
    ]
    for attempt in (1, 2):
        got = lines(api, job_id, attempt=attempt)
        assert sorted(got) == sorted(expected)  # the two streams interleave as they come
        assert [text for stream, text in got if stream == "stderr"] == ["first err", "second err"]
    assert sorted(lines(api, job_id)) == sorted(expected)  # the last attempt by default
    answer = api.http.get(f"/api/jobs/{job_id}/logs", params={"attempt": 1, "offset": 10**6})
    assert answer.json()["lines"] == []
    # The last-lines view: the last N, and the offset to go on from (the end).
    whole = api.http.get(f"/api/jobs/{job_id}/logs").json()
    last = api.http.get(f"/api/jobs/{job_id}/logs", params={"last": 2}).json()
    assert last["lines"] == whole["lines"][-2:]
    assert last["next_offset"] == whole["next_offset"]
    both = api.http.get(f"/api/jobs/{job_id}/logs", params={"last": 2, "offset": 5})
    assert both.status_code == 422 and "last" in both.text
    assert api.http.get("/api/jobs/no-such-job/logs").status_code == 404


def test_following_a_running_job_streams_its_lines_until_it_ends(
    api: Api, job_type: str, make_solver: Callable[[str], Solver], tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    solver = make_solver(TALKER)
    job_id = api.submit(**solver.spec(job_type, params={"gate": str(gate)}))
    api.wait_status(job_id, "running")
    wait_until(lambda: ("stderr", "first err") in lines(api, job_id), timeout=30)
    events: list[tuple[str, Any]] = []
    with api.http.stream(
        "GET", f"/api/jobs/{job_id}/logs", headers={"Accept": "text/event-stream"}
    ) as stream:
        name = ""
        for raw in stream.iter_lines():
            if raw.startswith("event: "):
                name = raw.removeprefix("event: ")
            elif raw.startswith("data: "):
                events.append((name, json.loads(raw.removeprefix("data: "))))
                if name == "log" and events[-1][1]["text"] == "first err":
                    gate.touch()  # the rest is written while we follow
                if name == "end":
                    break
    texts = [data["text"] for name, data in events if name == "log"]
    assert "second err" in texts and '{"done": true}' in texts
    assert events[-1] == ("end", {"status": "completed"})


def sse(
    api: Api, job_id: str, params: dict[str, str] | None = None, **headers: str
) -> list[tuple[str, str | None, Any]]:
    """Follow a job's log to its `end` event: (event, id, data) each. A stream that does
    not end within the read timeout fails the test."""
    events: list[tuple[str, str | None, Any]] = []
    with api.http.stream(
        "GET",
        f"/api/jobs/{job_id}/logs",
        params={"follow": "1", **(params or {})},
        headers=headers,
        timeout=httpx.Timeout(30, read=15),
    ) as stream:
        assert stream.status_code == 200, stream.read()
        name, event_id = "", None
        for raw in stream.iter_lines():
            if raw.startswith("event: "):
                name, event_id = raw.removeprefix("event: "), None
            elif raw.startswith("id: "):
                event_id = raw.removeprefix("id: ")
            elif raw.startswith("data: "):
                events.append((name, event_id, json.loads(raw.removeprefix("data: "))))
                if name == "end":
                    break
    return events


def test_each_followed_line_has_its_own_id_and_last_event_id_resumes_after_it(
    api: Api, job_type: str, make_solver: Callable[[str], Solver]
) -> None:
    job_id = api.submit(**make_solver(TALKER).spec(job_type))
    api.wait_status(job_id, "completed")  # its four lines are in one chunk

    events = sse(api, job_id)
    ids = [int(event_id or -1) for name, event_id, _ in events if name == "log"]
    resumed = sse(api, job_id, **{"Last-Event-ID": str(ids[1])})

    texts = [data["text"] for name, _, data in events if name == "log"]
    assert len(texts) == 4
    assert ids == sorted(set(ids))  # one id each, the offset after the line
    assert ids[-1] == api.http.get(f"/api/jobs/{job_id}/logs").json()["next_offset"]
    assert [data["text"] for name, _, data in resumed if name == "log"] == texts[2:]
    assert [event_id for name, event_id, _ in resumed if name == "log"] == list(map(str, ids[2:]))
    # `last=1`: the stream starts with the last line.
    tail = sse(api, job_id, {"last": "1"})
    assert [(data["text"], event_id) for name, event_id, data in tail if name == "log"] == [
        (texts[-1], str(ids[-1]))
    ]


def test_following_a_job_cancelled_before_it_ran_ends_at_once(
    start_api: Callable[..., Api],
) -> None:
    # No worker polls this API's queues: a job waits with its first attempt granted.
    hub = start_api(TEMPORAL_ACTIVITY_QUEUE_PREFIX="logs-cancelled-")
    granted = hub.submit(type="never-runs")
    wait_until(lambda: hub.job(granted)["attempt"] == 1, timeout=30)
    # One that waits for its start time has no attempt at all.
    later = hub.submit(type="never-runs", earliest_start_at=4102444800000)
    for job_id in (granted, later):
        assert hub.http.delete(f"/api/jobs/{job_id}").status_code == 204
        hub.wait_status(job_id, "failed")
        assert sse(hub, job_id) == [("end", None, {"status": "failed"})]
    assert hub.job(later)["attempt"] == 0


def test_an_agents_upload_is_idempotent_per_offset(
    start_api: Callable[..., Api], tmp_path: Path
) -> None:
    hub = start_api(TEMPORAL_ACTIVITY_QUEUE_PREFIX="logs-agent-")
    job_id = hub.submit(type="agent-logs")
    claim = hub.http.post(
        "/api/jobs/claim", json={"worker_id": "agent-l", "types": ["agent-logs"], "wait": 10}
    )
    assert claim.status_code == 200, claim.text
    chunk_a = [{"stream": "stdout", "text": "a1"}, {"stream": "stderr", "text": "a2"}]
    chunk_b = [{"stream": "stdout", "text": "b1"}]

    def upload(offset: int, chunk: list[dict[str, str]]) -> httpx.Response:
        body = {"worker_id": "agent-l", "attempt": 1, "offset": offset, "lines": chunk}
        return hub.http.post(f"/api/jobs/{job_id}/logs", json=body)

    first = upload(0, chunk_a)
    assert first.status_code == 200, first.text
    middle = first.json()["next_offset"]
    early = upload(middle + 5, chunk_b)  # out of order: refused, with where to resume
    assert early.status_code == 409 and early.json()["expected_offset"] == middle
    assert upload(0, chunk_a).json()["next_offset"] == middle  # a duplicate: no change
    end = upload(middle, chunk_b).json()["next_offset"]
    assert end > middle
    assert lines(hub, job_id) == [("stdout", "a1"), ("stderr", "a2"), ("stdout", "b1")]
    assert upload(0, chunk_a[:1]).json()["next_offset"] == end  # a retried part: no change
    # Bytes below the end that are not the stored ones: refused with the end, kept out.
    differ = upload(0, chunk_b)
    assert differ.status_code == 409, differ.text
    assert differ.json()["expected_offset"] == end
    straddle = upload(middle, [*chunk_a, *chunk_b])
    assert straddle.status_code == 409 and straddle.json()["expected_offset"] == end
    assert lines(hub, job_id) == [("stdout", "a1"), ("stderr", "a2"), ("stdout", "b1")]
    other = hub.http.post(
        f"/api/jobs/{job_id}/logs",
        json={"worker_id": "someone-else", "attempt": 1, "offset": end, "lines": chunk_b},
    )
    assert other.status_code == 409
    bad = hub.http.post(f"/api/jobs/{job_id}/logs", json={"worker_id": "agent-l", "attempt": 0})
    assert bad.status_code == 422
    # A lone surrogate cannot be stored as UTF-8: a 422 naming the line, not a 500.
    surrogate = hub.http.post(
        f"/api/jobs/{job_id}/logs",
        content=json.dumps(
            {
                "worker_id": "agent-l",
                "attempt": 1,
                "offset": end,
                "lines": [{"stream": "stdout", "text": "\ud800"}],
            }
        ),
        headers={"Content-Type": "application/json"},
    )
    assert surrogate.status_code == 422, surrogate.text
    assert surrogate.json()["detail"][0]["field"] == "lines.0.text"
