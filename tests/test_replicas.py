"""Two API replicas and two workers against one dev server: one truth.

Each test runs a stack of its own (`start_stack`: replica 1 and a workflow worker on
private task queues), a second API process on the same queues (replica 2) and two
activity workers, node-a and node-b, of one core each. Jobs submitted through either
replica run, list, count, read and stream identically through both; a replica killed
in the middle of a stream is resumed on the other with `Last-Event-ID`.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.event_feed import Position
from tests.conftest import Api, Solver, Stack, wait_until
from tests.helpers import Collector, Sse, read_events
from tests.log_stores import S3Server
from worker.devserver import DevServer

LIFE = ["job:created", "job:assigned", "job:running", "job:completed"]
NODES = {"node-a", "node-b"}
# Counts read uncached, so both replicas answer from visibility when asked.
UNCACHED = {"METRICS_CACHE_MS": "0"}
# Generous: the machine running these may be busy with other suites.
DEADLINE_S = 90.0


@dataclass
class Replicas:
    """Replica 1 (the stack's API) and replica 2, on the same task queues."""

    stack: Stack
    second: Api

    @property
    def first(self) -> Api:
        """The stack's own API."""
        return self.stack.api

    @property
    def both(self) -> tuple[Api, Api]:
        """(replica 1, replica 2)."""
        return self.first, self.second


@pytest.fixture
def replicas(
    start_stack: Callable[..., Stack], start_api: Callable[..., Api], job_type: str
) -> Replicas:
    """Replica 1 with a workflow worker, replica 2 on the same queues, and node-a and
    node-b serving `job_type` one job at a time each."""
    stack = start_stack(**UNCACHED)
    second = start_api(**stack.queues, **UNCACHED)
    stack.procs.append(second.proc)  # stopped with the stack
    for node in sorted(NODES):
        stack.worker(job_type, node, WORKER_CORES="1")
    return Replicas(stack, second)


@dataclass
class Gate:
    """A solver that prints its `i` once the gate file exists (its jobs stay running
    until the test opens the gate)."""

    solver: Solver
    path: Path

    def spec(self, job_type: str, i: int) -> dict[str, Any]:
        """A job of `job_type` numbered `i`."""
        return self.solver.spec(job_type, params={"i": i, "gate": str(self.path)})

    def open(self) -> None:
        """Let every waiting job finish."""
        self.path.touch()


@pytest.fixture
def gate(make_solver: Callable[[str], Solver], tmp_path: Path) -> Gate:
    """A closed gate."""
    solver = make_solver(
        """
        while not os.path.exists(params["gate"]):
            time.sleep(0.02)
        print(json.dumps({"i": params["i"]}))
        """
    )
    return Gate(solver, tmp_path / "gate-open")


# -- reading the event stream ------------------------------------------------------


@dataclass
class Stream(Collector):
    """A Collector on one replica, started and joined by the test."""

    thread: threading.Thread | None = None

    def start(self) -> Stream:
        """Connect; return once the replica answered 200 (or the attempt failed)."""
        self.thread = self.run(DEADLINE_S)
        assert self.connected.wait(30), f"no answer from {self.url}"
        assert self.error is None, self.error
        return self

    def join(self) -> None:
        """Wait for the reader to stop."""
        assert self.thread is not None
        self.thread.join(DEADLINE_S + 10)
        assert not self.thread.is_alive(), "the stream reader did not stop"

    def completed(self, ids: set[str]) -> set[str]:
        """Those of `ids` whose completion this stream has seen."""
        return {e.job_id for e in list(self.events) if e.event == "job:completed"} & ids


def events_of(api: Api) -> str:
    """The event stream's URL on a replica."""
    return f"{api.url}/api/jobs/events"


def completes(ids: set[str]) -> Callable[[list[Sse]], bool]:
    """Done once every job of `ids` has its completed event."""
    return lambda events: {e.job_id for e in events if e.event == "job:completed"} >= ids


def per_job(events: list[Sse]) -> dict[str, list[tuple[int, int, str]]]:
    """Each job's transitions as (time, seq, event), in arrival order. A transition's own
    key, not its id: one that a feed saw only after its stream passed the key is sent at
    the stream's position (`<key>+<n>`), so the same transition may carry different ids
    on two connections (api/event_feed.py)."""
    grouped: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    for sse in events:
        grouped[sse.job_id].append((sse.data["ts"], sse.data["seq"], sse.event))
    return dict(grouped)


def positions_grow(events: list[Sse]) -> bool:
    """Whether the events' ids, as stream positions, only grow."""
    found = [position for sse in events if (position := Position.parse(sse.id)) is not None]
    assert len(found) == len(events), [sse.id for sse in events]
    return all(a < b for a, b in itertools.pairwise(found))


def once(events: list[Sse]) -> tuple[list[Sse], list[Sse]]:
    """The events with each transition (job, seq) at its first arrival only, and the
    later arrivals of one already there."""
    seen: set[tuple[str, int]] = set()
    first: list[Sse] = []
    again: list[Sse] = []
    for sse in events:
        transition = (sse.job_id, sse.data["seq"])
        (again if transition in seen else first).append(sse)
        seen.add(transition)
    return first, again


def lives(events: list[Sse]) -> dict[str, list[str]]:
    """The event names per job, in arrival order."""
    return {job_id: [name for *_, name in seq] for job_id, seq in per_job(events).items()}


# -- helpers -------------------------------------------------------------------------


def submit_alternately(replicas: Replicas, specs: list[dict[str, Any]]) -> list[str]:
    """Submit the specs in turn through replica 1, replica 2, replica 1, …"""
    return [replicas.both[i % 2].submit(**spec) for i, spec in enumerate(specs)]


def running_nodes(api: Api, ids: list[str]) -> set[str] | None:
    """The nodes running jobs of `ids`, once both nodes run one."""
    nodes = {job["worker_id"] for job in map(api.job, ids) if job["status"] == "running"}
    return nodes if nodes == NODES else None


def listed(api: Api, params: dict[str, Any], ids: set[str]) -> list[dict[str, Any]] | None:
    """`GET /api/jobs` once it lists exactly `ids`, all completed."""
    response = api.http.get("/api/jobs", params=params)
    assert response.status_code == 200, response.text
    jobs: list[dict[str, Any]] = response.json()
    if {job["id"] for job in jobs} == ids and all(job["status"] == "completed" for job in jobs):
        return jobs
    return None


def counted(api: Api, job_type: str, completed: int) -> dict[str, int] | None:
    """`GET /api/jobs/counts?type=` once it counts `completed` completed jobs."""
    response = api.http.get("/api/jobs/counts", params={"type": job_type})
    assert response.status_code == 200, response.text
    counts: dict[str, int] = response.json()
    return counts if counts["completed"] == completed else None


# -- tests -----------------------------------------------------------------------------


def test_jobs_through_either_replica_run_list_count_read_and_claim_the_same_through_both(
    replicas: Replicas, job_type: str, gate: Gate
) -> None:
    first, second = replicas.both
    ids = submit_alternately(replicas, [gate.spec(job_type, i) for i in range(6)])
    # One core each and a closed gate: the first two jobs are held by different nodes.
    wait_until(
        lambda: running_nodes(second, ids),
        timeout=DEADLINE_S,
        what="node-a and node-b to run one job each",
    )
    gate.open()

    for i, job_id in enumerate(ids):
        done = [api.wait_status(job_id, "completed", timeout=DEADLINE_S) for api in (first, second)]
        assert done[0] == done[1], job_id
        assert done[0]["result"] == {"i": i}
        assert done[0]["worker_id"] in NODES
        assert [t["status"] for t in done[0]["transitions"]] == [
            "pending",
            "assigned",
            "running",
            "completed",
        ]

    # Lists: the same jobs, in the same order, with the same statuses and results.
    query = {"type": job_type}
    lists = [
        wait_until(
            lambda api=api: listed(api, query, set(ids)),
            timeout=DEADLINE_S,
            what=f"{api.url} to list the completed jobs",
        )
        for api in (first, second)
    ]
    assert lists[0] == lists[1]
    assert {job["id"]: job["result"] for job in lists[0]} == {
        job_id: {"i": i} for i, job_id in enumerate(ids)
    }
    # Priority order, found with counts, agrees too.
    by_priority = [
        api.http.get("/api/jobs", params={**query, "order": "priority"}) for api in (first, second)
    ]
    assert [r.status_code for r in by_priority] == [200, 200], by_priority[0].text
    assert by_priority[0].json() == by_priority[1].json()
    assert {job["id"] for job in by_priority[0].json()} == set(ids)

    # Counts, uncached on both.
    counts = [
        wait_until(
            lambda api=api: counted(api, job_type, len(ids)),
            timeout=DEADLINE_S,
            what=f"{api.url} to count the completed jobs",
        )
        for api in (first, second)
    ]
    assert counts[0] == counts[1]
    assert {status: n for status, n in counts[0].items() if n} == {"completed": len(ids)}

    # An HTTP agent claims through replica 2 a job submitted through replica 1 (a type no
    # native worker serves), beats through replica 1 and reports through replica 2.
    http_type = f"{job_type}-http"
    job_id = first.submit(type=http_type, params={"x": 1})
    claim = second.http.post(
        "/api/jobs/claim", json={"worker_id": "agent-r", "types": [http_type], "wait": 20}
    )
    assert claim.status_code == 200, claim.text
    assert claim.json()["id"] == job_id
    assert claim.json()["params"] == {"x": 1}
    beat = first.http.post(f"/api/jobs/{job_id}/heartbeat", json={"worker_id": "agent-r"})
    assert beat.status_code == 204, beat.text
    # Its running report goes out from replica 1 0.5 s after the heartbeat (held there).
    wait_until(
        lambda: second.job(job_id)["status"] == "running", timeout=DEADLINE_S, what="running"
    )
    report = second.http.post(
        f"/api/jobs/{job_id}/result", json={"worker_id": "agent-r", "result": {"y": 2}}
    )
    assert report.status_code == 200, report.text
    done = [api.wait_status(job_id, "completed", timeout=DEADLINE_S) for api in (first, second)]
    assert done[0] == done[1]
    assert (done[0]["result"], done[0]["worker_id"]) == ({"y": 2}, "agent-r")
    counts = [
        wait_until(
            lambda api=api: counted(api, http_type, 1),
            timeout=DEADLINE_S,
            what=f"{api.url} to count the claimed job",
        )
        for api in (first, second)
    ]
    assert counts[0] == counts[1]


def test_streams_on_two_replicas_agree_and_a_killed_one_resumes_on_the_other(
    replicas: Replicas, job_type: str, gate: Gate
) -> None:
    first, second = replicas.both
    query = {"type": job_type}
    expected: set[str] = set()
    total = 4 + 6
    # One client per replica, connected before any job exists. The one on replica 1
    # reads until its replica dies; the one on replica 2 until every job completed.
    on_first = Stream(events_of(first), query, lambda _: False).start()
    on_second = Stream(
        events_of(second),
        query,
        lambda events: len(expected) == total and completes(expected)(events),
    ).start()

    # Phase 1, both replicas up: each client sees every job's whole life, and the same
    # transitions per job as the other.
    opened = Gate(gate.solver, gate.path.with_name("always-open"))
    opened.open()
    batch1 = set(submit_alternately(replicas, [opened.spec(job_type, i) for i in range(4)]))
    expected |= batch1
    for stream in (on_first, on_second):
        wait_until(
            lambda stream=stream: stream.completed(batch1) == batch1,
            timeout=DEADLINE_S,
            what=f"the stream {stream.url} to see batch 1 complete",
        )
    seen = [[e for e in list(s.events) if e.job_id in batch1] for s in (on_first, on_second)]
    assert per_job(seen[0]) == per_job(seen[1])
    assert lives(seen[0]) == dict.fromkeys(batch1, LIFE)

    # Phase 2: jobs held running by a closed gate (two run, four wait). Once replica 1's
    # client has seen all of them created and two running, replica 1 is killed.
    batch2 = set(submit_alternately(replicas, [gate.spec(job_type, i) for i in range(6)]))
    expected |= batch2

    def mid_stream() -> bool:
        names = [e.event for e in list(on_first.events) if e.job_id in batch2]
        return names.count("job:created") == len(batch2) and names.count("job:running") >= 2

    wait_until(mid_stream, timeout=DEADLINE_S, what="replica 1's client to be mid-batch")
    first.proc.kill()
    on_first.join()
    assert isinstance(on_first.error, httpx.TransportError), on_first.error  # cut off
    last_id = on_first.events[-1].id

    # While the client is away the two running jobs complete (the other client sees
    # it); then it reconnects to replica 2 with the last id it received, and gets what
    # it missed followed by the live events of the four jobs still to run.
    gate.open()
    wait_until(
        lambda: len(on_second.completed(batch2)) >= 2,
        timeout=DEADLINE_S,
        what="two jobs to complete while the client is away",
    )
    resumed = Stream(events_of(second), query, completes(batch2), last_event_id=last_id).start()
    resumed.join()
    on_second.join()
    assert resumed.error is None, resumed.error
    assert on_second.error is None, on_second.error

    # Nothing missed: every job's whole life across the two connections, as the client
    # that stayed on replica 2 saw it. Repeated only what replica 2's feed saw late: it
    # sends such a transition to a client resuming from before its position there, and
    # cannot know that replica 1 had sent it (api/event_feed.py); nothing else.
    joined = on_first.events + resumed.events
    assert len({e.id for e in joined}) == len(joined), "an id was repeated"
    distinct, repeats = once(joined)
    assert all("+" in e.id for e in repeats), [(e.id, e.event) for e in repeats]
    assert lives(distinct) == dict.fromkeys(expected, LIFE)
    assert per_job(distinct) == per_job(on_second.events)
    assert positions_grow(joined) and positions_grow(on_second.events)
    # The resumed connection started after the last id, in the stream's global order.
    after = Position.parse(last_id)
    assert after is not None and all(position(e) > after for e in resumed.events)
    assert not {e.job_id for e in on_first.events if e.event == "job:completed"} & batch2


def position(sse: Sse) -> Position:
    """An event's id (`<ts>-<job id>-<seq>`, `+<n>` for one sent late) as its position."""
    found = Position.parse(sse.id)
    assert found is not None, sse.id
    return found


# -- one log store for every replica and worker ------------------------------------------

# The solver prints two lines, waits for the gate, prints two more.
TALKER = """
print("out before", flush=True)
print("err before", file=sys.stderr, flush=True)
while not os.path.exists(params["gate"]):
    time.sleep(0.02)
print("err after", file=sys.stderr, flush=True)
print(json.dumps({"done": params["i"]}))
"""


def log_texts(api: Api, job_id: str, **query: Any) -> list[str]:
    """`GET /api/jobs/{id}/logs` on one replica: the texts of its lines."""
    answer = api.http.get(f"/api/jobs/{job_id}/logs", params=query)
    assert answer.status_code == 200, answer.text
    return [line["text"] for line in answer.json()["lines"]]


def followed(api: Api, job_id: str) -> tuple[list[str], dict[str, Any]]:
    """Follow a job's log on one replica to its end: the texts, and the end's data."""
    texts: list[str] = []
    with api.http.stream(
        "GET", f"/api/jobs/{job_id}/logs", params={"follow": "1"}, timeout=DEADLINE_S
    ) as response:
        assert response.status_code == 200, response.read()
        for sse in read_events(response):
            if sse.event == "end":
                return texts, sse.data
            texts.append(sse.data["text"])
    raise AssertionError(f"the log of {job_id} on {api.url} ended without an end event")


def test_replicas_and_a_worker_on_one_s3_log_store_see_the_same_logs(
    start_stack: Callable[..., Stack],
    start_api: Callable[..., Api],
    s3_server: S3Server,
    make_solver: Callable[[str], Solver],
    job_type: str,
    tmp_path: Path,
    temporal: DevServer,
) -> None:
    """The compose stack's layout: two API replicas and a native worker keep logs in one
    bucket and nothing on their own disks. A native job's lines, written by the worker,
    are read and followed on the replica that did not start it; an agent's chunks sent
    to either replica, some to both, make one log that both read alike."""
    bucket = s3_server.bucket()
    env = s3_server.env(bucket)
    stack = start_stack(**UNCACHED, **env)
    second = start_api(**stack.queues, **UNCACHED, **env)
    stack.procs.append(second.proc)
    stack.worker(job_type, "node-s3", WORKER_CORES="1", **env)
    replicas = Replicas(stack, second)
    first = stack.api

    gate = tmp_path / "gate"
    job_id = first.submit(**make_solver(TALKER).spec(job_type, params={"gate": str(gate), "i": 1}))
    first.wait_status(job_id, "running", timeout=DEADLINE_S)
    # While it runs: replica 2 reads what the worker stored, then follows the rest.
    wait_until(
        lambda: sorted(log_texts(second, job_id)) == ["err before", "out before"],
        timeout=DEADLINE_S,
        what="the worker's first lines on replica 2",
    )
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        follow = pool.submit(followed, second, job_id)
        gate.touch()
        texts, end = follow.result(timeout=DEADLINE_S + 10)
    assert end == {"status": "completed"}
    assert sorted(texts) == sorted(["out before", "err before", "err after", '{"done": 1}'])
    assert log_texts(first, job_id) == log_texts(second, job_id)
    assert log_texts(first, job_id, last=2) == log_texts(second, job_id)[-2:]

    # An agent's attempt: its chunks go to one replica or the other, some to both.
    agent_type = f"{job_type}-agent"
    agent_job = first.submit(type=agent_type)
    claim = second.http.post(
        "/api/jobs/claim", json={"worker_id": "agent-s3", "types": [agent_type], "wait": 30}
    )
    assert claim.status_code == 200 and claim.json()["id"] == agent_job, claim.text
    offset = 0
    sent: list[str] = []
    for i in range(6):
        chunk = [{"stream": "stdout", "text": f"chunk {i} line {j}"} for j in range(3)]
        body = {"worker_id": "agent-s3", "attempt": 1, "offset": offset, "lines": chunk}
        # Every third to both replicas (a retry that reached another one), the rest in turn.
        targets = (first, second) if i % 3 == 0 else (replicas.both[i % 2],)
        ends = set()
        for api in targets:
            answer = api.http.post(f"/api/jobs/{agent_job}/logs", json=body)
            assert answer.status_code == 200, answer.text
            ends.add(answer.json()["next_offset"])
        assert len(ends) == 1, ends  # the same end through either replica
        offset = ends.pop()
        sent += [line["text"] for line in chunk]
    assert log_texts(first, agent_job) == log_texts(second, agent_job) == sent

    # Nothing on a replica's or the worker's disk: all of it is in the bucket.
    assert not (temporal.data_dir / "job-logs" / job_id).exists()
    assert not (temporal.data_dir / "job-logs" / agent_job).exists()
    keys = s3_server.keys(bucket)
    assert any(key.startswith(f"jobforge/logs/{job_id}/1/") for key in keys), keys
    assert any(key.startswith(f"jobforge/logs/{agent_job}/1/") for key in keys), keys
