"""`job:progress` on the event stream, process level: a native worker's solver writes
progress lines, an agent sends progress in its heartbeat, and SSE clients of a real API
get each job's progress when it changed, at most once per PROGRESS_PUBLISH_MS, live only
(no event id); beyond EVENTS_PROGRESS_MAX_JOBS running jobs are read in turns. One
in-process test: a feed that starts after other jobs ran does not hold events back
(a job's progress waits for its job:running)."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
from temporalio.client import Client

from api.event_feed import EventFeed
from api.job_service import JobService
from tests.conftest import Api, Solver, wait_until
from tests.helpers import Collector, Listed, Sse, Visibility
from tests.procs import Proc
from workflows.models import JobStatus, Transition

pytestmark = pytest.mark.usefixtures("session_worker")

# Writes a progress line every 0.05 s for 3 s, then answers.
STEADY_SOLVER = """
for step in range(1, 61):
    print(f"JOBFORGE_PROGRESS {step / 60:.4f} step {step}", file=sys.stderr, flush=True)
    time.sleep(0.05)
print(json.dumps({"done": True}))
"""


def until_gate(progress: str, limit_s: int) -> str:
    """A solver that prints the progress line `progress` (an f-string of `step`) every
    0.05 s until `gate` exists (`limit_s` at most)."""
    return f"""
step = 0
deadline = time.time() + {limit_s}
while not os.path.exists(params["gate"]) and time.time() < deadline:
    step += 1
    print({progress}, file=sys.stderr, flush=True)
    time.sleep(0.05)
print(json.dumps({{"done": True}}))
"""


# STEADY_SOLVER's steps until `gate` exists: a test ends it once it has seen what it
# waits for, however late the first publish round came.
STEADY_UNTIL_GATE_SOLVER = until_gate('f"JOBFORGE_PROGRESS {step / 1000:.4f} step {step}"', 30)
# Counts steps in its progress until `gate` exists.
TICKING_SOLVER = until_gate('f"JOBFORGE_PROGRESS 0.5 tick {step}"', 60)

# STEADY_SOLVER for 6 s: several publish rounds of 1 s fit even when the first comes late.
LONG_STEADY_SOLVER = STEADY_SOLVER.replace("range(1, 61)", "range(1, 121)").replace(
    "step / 60", "step / 120"
)

# Runs as long as STEADY_SOLVER, and says nothing of its progress.
SILENT_SOLVER = """
print("working", file=sys.stderr, flush=True)
time.sleep(3)
print(json.dumps({"done": True}))
"""

# One progress line, then another once `gate` exists; answers when `gate.done` exists.
GATED_SOLVER = """
def wait_for(path):
    deadline = time.time() + 60
    while not os.path.exists(path) and time.time() < deadline:
        time.sleep(0.02)

print("JOBFORGE_PROGRESS 0.4 first half", file=sys.stderr, flush=True)
wait_for(params["gate"])
print("JOBFORGE_PROGRESS 0.8 second half", file=sys.stderr, flush=True)
wait_for(params["gate"] + ".done")
print(json.dumps({"done": True}))
"""

TRANSITION_FIELDS = {
    "event",
    "id",
    "type",
    "priority",
    "created_at",
    "status",
    "seq",
    "ts",
    "attempt",
    "attempts",
    "worker_id",
    "reason",
    "by",
    "fail_reason",
    "tenant",
}


@dataclass
class Stream:
    """A client of `GET /api/jobs/events` for one job type, stamping each event's
    arrival (monotonic s), until `done` says so."""

    api: Api
    job_type: str
    done: Callable[[list[Sse]], bool]
    params: dict[str, Any] = field(default_factory=dict)
    arrivals: list[float] = field(default_factory=list)

    def start(self, deadline_s: float = 60) -> Collector:
        def arrived(events: list[Sse]) -> bool:
            # Called once per event as it is read: its arrival time.
            self.arrivals.append(time.monotonic())
            return self.done(events)

        collector = Collector(
            f"{self.api.url}/api/jobs/events", {"type": self.job_type, **self.params}, arrived
        )
        self.collector = collector
        self.thread = collector.run(deadline_s)
        assert collector.connected.wait(15)
        assert collector.error is None, collector.error
        return collector

    def finish(self, timeout: float = 70) -> list[Sse]:
        self.thread.join(timeout)
        assert self.collector.error is None, self.collector.error
        return self.collector.events

    def progress(self) -> list[tuple[float, Sse]]:
        """The job:progress events so far, with their arrival times."""
        arrivals = list(self.arrivals)  # the reader thread appends the event first
        events = self.collector.events[: len(arrivals)]
        return [
            (at, sse)
            for at, sse in zip(arrivals, events, strict=True)
            if sse.event == "job:progress"
        ]


def completed(job_id: str) -> Callable[[list[Sse]], bool]:
    return lambda events: any(e.event == "job:completed" and e.job_id == job_id for e in events)


def fractions(events: list[tuple[float, Sse]]) -> list[float]:
    return [sse.data["progress"]["fraction"] for _, sse in events]


def test_a_solvers_progress_lines_reach_the_stream_as_job_progress_events(
    api: Api, job_type: str, make_solver: Callable[[str], Solver], tmp_path: Path
) -> None:
    stream = Stream(api, job_type, lambda events: any(e.event == "job:completed" for e in events))
    stream.start()
    finished_only = Stream(api, job_type, stream.done, params={"status": "completed"})
    finished_only.start()

    gate = tmp_path / "gate"
    solver = make_solver(STEADY_UNTIL_GATE_SOLVER)
    job_id = api.submit(**solver.spec(job_type, params={"gate": str(gate)}))
    # Rounds read progress once a second from when visibility lists the job running:
    # it runs until two have come, however late the first.
    wait_until(lambda: len(stream.progress()) >= 2, timeout=30, what="two progress events")
    gate.touch()
    events = stream.finish()
    assert [e.data["status"] for e in finished_only.finish()] == ["completed"]

    names = [e.event for e in events]
    progress = stream.progress()
    assert len(progress) >= 2, names
    # Between the job's running and completed events, never before or after.
    running, done = names.index("job:running"), names.index("job:completed")
    assert all(e.event != "job:progress" for e in events[:running] + events[done:]), names
    run_event = events[running]
    for _, sse in progress:
        assert sse.job_id == job_id
        # Shaped as the job's running event, plus its progress; no event id (live only).
        assert set(sse.data) == TRANSITION_FIELDS | {"progress"}
        assert {k: sse.data[k] for k in TRANSITION_FIELDS - {"event"}} == {
            k: run_event.data[k] for k in TRANSITION_FIELDS - {"event"}
        }
        assert sse.id == ""
        assert sse.data["progress"]["message"].startswith("step ")
        assert sse.data["progress"]["at"] >= run_event.data["ts"] - 1000
    # Each a change, in the solver's order.
    seen = fractions(progress)
    assert seen == sorted(set(seen)), seen
    # At most one per PROGRESS_PUBLISH_MS (1 s).
    ran_s = (events[done].data["ts"] - run_event.data["ts"]) / 1000
    assert len(progress) <= ran_s + 2, (len(progress), ran_s)


def test_a_job_that_writes_no_progress_sends_no_progress_events(
    api: Api, job_type: str, make_solver: Callable[[str], Solver]
) -> None:
    stream = Stream(api, job_type, lambda events: any(e.event == "job:completed" for e in events))
    stream.start()
    api.submit(**make_solver(SILENT_SOLVER).spec(job_type))
    names = [e.event for e in stream.finish()]
    assert names == ["job:created", "job:assigned", "job:running", "job:completed"]


def test_a_client_gets_a_jobs_current_progress_once_and_then_each_change(
    api: Api, job_type: str, make_solver: Callable[[str], Solver], tmp_path: Path
) -> None:
    gate = str(tmp_path / "gate")
    job_id = api.submit(**make_solver(GATED_SOLVER).spec(job_type, params={"gate": gate}))
    wait_until(
        lambda: (api.job(job_id).get("progress") or {}).get("fraction") == 0.4,
        timeout=30,
        what="the first progress",
    )
    # Connected after the job started: the current progress comes first.
    stream = Stream(api, job_type, completed(job_id))
    stream.start()
    wait_until(lambda: stream.progress(), timeout=15, what="the current progress")
    Path(gate).touch()
    wait_until(lambda: 0.8 in fractions(stream.progress()), timeout=15, what="the change")
    Path(gate + ".done").touch()
    events = stream.finish()
    assert fractions(stream.progress()) == [0.4, 0.8]
    # Its assigned and running events too, if the stream had not sent them yet: its
    # progress comes after them.
    names = [e.event for e in events]
    assert names[-1] == "job:completed", names
    first = names.index("job:progress")
    assert set(names[:first]) <= {"job:assigned", "job:running"}, names
    assert "job:running" not in names[first:], names


# -- the API's own bound, and agents ------------------------------------------------------


@dataclass
class FastHub:
    """An API reading progress once a second, one running job per round, and a native
    worker (two jobs at once) that sends it to Temporal ten times a second, on activity
    queues of their own."""

    api: Api
    worker: Proc
    job_type: str


@pytest.fixture(scope="module")
def fast_hub(
    start_api: Callable[..., Api],
    start_worker: Callable[..., Proc],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[FastHub]:
    prefix = f"progress-events-{uuid.uuid4().hex[:8]}-"
    job_type = f"t-{uuid.uuid4().hex[:12]}"
    api = start_api(
        TEMPORAL_ACTIVITY_QUEUE_PREFIX=prefix,
        PROGRESS_PUBLISH_MS="1000",
        EVENTS_PROGRESS_MAX_JOBS="1",
    )
    worker = start_worker(
        WORKER_RUN_WORKFLOWS="false",
        WORKER_CORES="2",
        WORKER_TYPES=job_type,
        TEMPORAL_ACTIVITY_QUEUE_PREFIX=prefix,
        PROGRESS_PUBLISH_MS="100",
        NODE_ID="fast-progress",
        SOLVER_CACHE_DIR=str(tmp_path_factory.mktemp("fast-cache")),
    )
    yield FastHub(api, worker, job_type)
    worker.stop(timeout=10)


def test_the_stream_sends_a_jobs_progress_at_most_once_per_progress_publish_ms(
    fast_hub: FastHub, make_solver: Callable[[str], Solver]
) -> None:
    api = fast_hub.api
    stream = Stream(api, fast_hub.job_type, lambda _: False)
    stream.start()
    job_id = api.submit(**make_solver(LONG_STEADY_SOLVER).spec(fast_hub.job_type))
    stream.done = completed(job_id)
    events = stream.finish()
    progress = stream.progress()
    assert len(progress) >= 2, [e.event for e in events]
    # The worker sent a new value every 0.1 s; the API read it once a second: rounds start
    # a second apart, so over the run there are at most as many events as seconds, and
    # one. (Not the gaps between arrivals: a round slowed by a busy box sends late, and
    # the next, on time, arrives soon after it: 0.31 s once, run 92.)
    names = [e.event for e in events]
    ran_s = (
        events[names.index("job:completed")].data["ts"]
        - events[names.index("job:running")].data["ts"]
    ) / 1000
    assert len(progress) <= ran_s + 1, (len(progress), ran_s)


def test_beyond_the_cap_running_jobs_are_read_in_turns(
    fast_hub: FastHub, make_solver: Callable[[str], Solver]
) -> None:
    api = fast_hub.api
    stream = Stream(api, fast_hub.job_type, lambda _: False)
    stream.start()
    solver = make_solver(LONG_STEADY_SOLVER)
    ids = [api.submit(**solver.spec(fast_hub.job_type, params={"n": n})) for n in range(2)]
    stream.done = lambda events: all(completed(job_id)(events) for job_id in ids)
    stream.finish()
    for job_id in ids:
        # When each read progress was printed (the worker's clock), not when its event
        # reached this client: a loaded box delivers events in bursts.
        printed = [
            sse.data["progress"]["at"] / 1000
            for _, sse in stream.progress()
            if sse.job_id == job_id
        ]
        assert printed, job_id
        # One job per round (1 s), two running: each is read every other round, so its
        # reads are about 2 s apart (1 s if every job were read every round). The median:
        # one round that ran late makes the next gap short.
        gaps = sorted(b - a for a, b in itertools.pairwise(printed))
        assert not gaps or gaps[len(gaps) // 2] >= 1.5, gaps


def test_an_agents_progress_is_sent_when_it_changes_not_on_every_heartbeat(
    fast_hub: FastHub, make_solver: Callable[[str], Solver], tmp_path: Path
) -> None:
    api = fast_hub.api
    agent_type = f"agent-{uuid.uuid4().hex[:8]}"
    stream = Stream(api, agent_type, lambda _: False, {"type": [agent_type, fast_hub.job_type]})
    stream.start()
    # A native job whose progress changes all the time: each of its events is a round.
    gate = tmp_path / "gate"
    ticker = api.submit(
        **make_solver(TICKING_SOLVER).spec(fast_hub.job_type, params={"gate": str(gate)})
    )

    def rounds() -> int:
        return sum(sse.job_id == ticker for _, sse in stream.progress())

    def mine() -> list[float]:
        return [
            sse.data["progress"]["fraction"] for _, sse in stream.progress() if sse.job_id != ticker
        ]

    wait_until(rounds, timeout=30, what="the ticking job's progress")
    job_id = api.submit(type=agent_type)
    claim = api.http.post(
        "/api/jobs/claim", json={"worker_id": "agent-p", "types": [agent_type], "wait": 10}
    )
    assert claim.status_code == 200, claim.text

    def beat(fraction: float) -> None:
        response = api.http.post(
            f"/api/jobs/{job_id}/heartbeat",
            json={"worker_id": "agent-p", "progress": {"fraction": fraction, "message": "m"}},
        )
        assert response.status_code == 204, response.text

    beat(0.5)
    wait_until(mine, timeout=15, what="the agent's progress")
    # The same progress again (the API stamps a new `at`): not news, for two rounds.
    beat(0.5)
    after = rounds()
    wait_until(lambda: rounds() >= after + 2, timeout=15, what="two more rounds")
    assert mine() == [0.5]
    beat(0.75)
    wait_until(lambda: 0.75 in mine(), timeout=15, what="the change")
    stream.done = completed(job_id)
    result = api.http.post(
        f"/api/jobs/{job_id}/result", json={"worker_id": "agent-p", "result": {"ok": True}}
    )
    assert result.status_code == 200, result.text
    stream.finish()
    gate.touch()
    assert mine() == [0.5, 0.75]


# -- in process -------------------------------------------------------------------------


async def test_jobs_that_ran_before_the_feed_started_do_not_delay_its_events() -> None:
    now = int(time.time() * 1000)
    before = Listed(
        "earlier",
        [
            Transition(seq=1, status=JobStatus.PENDING, ts=now - 9000, attempt=0),
            Transition(seq=2, status=JobStatus.COMPLETED, ts=now - 8000, attempt=1),
        ],
    )
    feed = EventFeed(cast(Client, Visibility([before])), cast(JobService, None))
    for _ in range(20):
        await feed.tick()
    # Their transitions are never sent, and their age is not visibility lag: the settle
    # window (and the look-back) stay as set, so a new job's job:running, and then its
    # progress, come out at once.
    assert feed.lag_ms == 0
