"""An HTTP agent's job logs: a real `jobforge agent` uploads its solver's stdout and
stderr while it runs (POST /api/jobs/{id}/logs), and the API then holds them byte for
byte; in process, the uploader resumes where the hub says and never fails the job."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest

from engine import log_store
from engine.log_store import LINE_MAX, LogLine, LogStore
from tests.conftest import Api, Solver, base_env, wait_until
from tests.procs import Proc
from worker.agent import Hub, LogUploader
from worker.devserver import DevServer
from workflows.models import ClaimedJob

QUEUE_PREFIX = f"agent-logs-{uuid.uuid4().hex[:8]}-"
LONG = "x" * (LINE_MAX + 10)
STDOUT = ["out 1", "  spaced\tand tabbed  ", "", "unicode: héllo ✓ 𝄞", *map(str, range(2500))]
STDERR = ["err 1", "JOBFORGE_PROGRESS 0.5 half", "err 2", LONG]
# The solver prints the first lines, waits for the gate (so the test sees them uploaded
# while it runs), then the rest; its last stderr line has no newline.
TALKER = f"""
out, err = {STDOUT!r}, {STDERR!r}
print(out[0], flush=True)
print(err[0], file=sys.stderr, flush=True)
while not os.path.exists(params["gate"]):
    time.sleep(0.02)
for line in out[1:]:
    print(line)
sys.stdout.flush()
for line in err[1:-1]:
    print(line, file=sys.stderr, flush=True)
sys.stderr.write(err[-1])
"""


@pytest.fixture(scope="module")
def hub(start_api: Callable[..., Api]) -> Api:
    """An API whose attempt queues only this module's agent polls."""
    return start_api(TEMPORAL_ACTIVITY_QUEUE_PREFIX=QUEUE_PREFIX, JOB_HEARTBEAT_TIMEOUT_S="20")


@pytest.fixture
def agent(
    hub: Api, job_type: str, spawn: Callable[..., Proc], tmp_path: Path, temporal: DevServer
) -> Iterator[Proc]:
    proc = spawn(
        ["agent"],
        base_env(
            temporal,
            HUB_URL=hub.url,
            NODE_ID=f"agent-logs-{uuid.uuid4().hex[:6]}",
            WORKER_TYPES=json.dumps([job_type]),
            JOB_POLL_INTERVAL_MS="2000",
            SOLVER_CACHE_DIR=str(tmp_path / "agent-cache"),
        ),
    )
    wait_until(lambda: "ready" in proc.output(), timeout=30, what="agent to start")
    yield proc
    proc.stop()


def log_lines(hub: Api, job_id: str) -> list[tuple[str, str]]:
    answer = hub.http.get(f"/api/jobs/{job_id}/logs")
    assert answer.status_code == 200, answer.text
    return [(line["stream"], line["text"]) for line in answer.json()["lines"]]


@pytest.mark.usefixtures("session_worker")
def test_an_agents_solver_output_is_uploaded_while_it_runs_and_kept_byte_for_byte(
    hub: Api, agent: Proc, job_type: str, make_solver: Callable[[str], Solver], tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    solver = make_solver(TALKER)
    job_id = hub.submit(**solver.spec(job_type, params={"gate": str(gate)}))

    def first_two() -> list[tuple[str, str]] | None:
        got = log_lines(hub, job_id)
        return got if len(got) >= 2 else None

    early: list[tuple[str, str]] = wait_until(
        first_two, timeout=30, what="the first lines uploaded while the solver runs"
    )
    assert sorted(early) == [("stderr", "err 1"), ("stdout", "out 1")]
    # The solver waits for the gate: the lines came while it runs. Its first heartbeat
    # (which makes the job running) travels apart from the upload, and may come second.
    hub.wait_status(job_id, "running", timeout=30)
    gate.touch()
    job = hub.wait_status(job_id, "completed", timeout=60)

    got = log_lines(hub, job_id)
    assert [text for stream, text in got if stream == "stdout"] == STDOUT
    # A line longer than LINE_MAX is kept in LINE_MAX pieces, as on a native worker.
    assert [text for stream, text in got if stream == "stderr"] == [
        *STDERR[:-1],
        LONG[:LINE_MAX],
        LONG[LINE_MAX:],
    ]
    assert len(got) == len(STDOUT) + len(STDERR) + 1
    assert job["result"] == "\n".join(STDOUT) + "\n"  # stdout is still the result
    assert "Traceback" not in agent.output()


class FakeHub:
    """Answers the uploader's calls from a script; records what it was sent."""

    def __init__(self, answers: list[httpx.Response | None]) -> None:
        self.answers = answers
        self.sent: list[dict[str, Any]] = []

    async def call_once(self, method: str, path: str, **kwargs: Any) -> httpx.Response | None:
        assert (method, path) == ("POST", "/api/jobs/j1/logs")
        self.sent.append(dict(kwargs["json"]))
        return self.answers.pop(0) if self.answers else httpx.Response(200, json={})


def uploader(fake: object) -> LogUploader:
    job = ClaimedJob.model_validate(
        {
            "job_id": "j1",
            "id": "j1",
            "type": "t",
            "params": {},
            "max_runtime_ms": 60_000,
            "attempt": 2,
            "status": "assigned",
            "worker_id": "w1",
            "heartbeat_timeout_ms": 60_000,
            "claimed_at": 0,
            "priority": 0,
            "created_at": 0,
            "max_attempts": 3,
        }
    )
    return LogUploader(cast(Hub, fake), job, "w1")


def test_the_uploader_cuts_lines_per_stream_and_resumes_where_a_409_says() -> None:
    fake = FakeHub(
        [
            httpx.Response(409, json={"error": "past the end", "expected_offset": 7}),
            httpx.Response(200, json={"next_offset": 7 + 33}),
        ]
    )
    logs = uploader(fake)
    logs.offset = 30  # as if the hub had lost what it acknowledged
    logs.write("stdout", b"one\ntw")
    logs.write("stderr", b"err\n")
    logs.write("stdout", b"o")

    asyncio.run(logs.close())

    assert [body["offset"] for body in fake.sent] == [30, 7]
    assert fake.sent[1] == {
        "worker_id": "w1",
        "attempt": 2,
        "offset": 7,
        "lines": [
            {"stream": "stdout", "text": "one"},
            {"stream": "stderr", "text": "err"},
            {"stream": "stdout", "text": "two"},
        ],
    }
    assert logs.offset == 40


class StoreHub:
    """The upload route in process, on a real log store: 200 with `next_offset`, or
    409 with `expected_offset`."""

    def __init__(self, store: LogStore) -> None:
        self.store = store
        self.sent: list[int] = []

    async def call_once(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        assert (method, path) == ("POST", "/api/jobs/j1/logs")
        body = kwargs["json"]
        self.sent.append(body["offset"])
        lines = [LogLine.model_validate(line) for line in body["lines"]]
        try:
            after = await self.store.append_at("j1", 2, body["offset"], lines, 1 << 20)
        except log_store.UploadConflictError as err:
            return httpx.Response(409, json={"expected_offset": err.expected_offset})
        return httpx.Response(200, json={"next_offset": after})


async def test_a_chunk_that_differs_from_the_stored_log_is_resent_at_its_end(
    any_log_store: LogStore,
) -> None:
    store = any_log_store
    stored = [LogLine(stream="stdout", text="stored before")]
    end = await store.append_at("j1", 2, 0, stored, 1 << 20)
    fake = StoreHub(store)
    logs = uploader(fake)
    logs.write("stderr", b"mine\n")  # sent at offset 0, where other bytes are stored

    await logs.close()

    assert fake.sent == [0, end]
    assert (await store.read("j1", 2))[0] == [*stored, LogLine(stream="stderr", text="mine")]
    assert logs.offset == await store.size("j1", 2)


def test_an_unreachable_hub_costs_lines_never_the_job() -> None:
    fake = FakeHub([None, None, None, httpx.Response(200, json={"next_offset": 12})])
    logs = uploader(fake)
    logs.write("stdout", b"lost\n")

    async def run() -> None:
        for _ in range(3):  # three ticks fail: the batch is dropped
            await logs._upload_pending()
        logs.write("stdout", b"kept\n")
        await logs.close()

    asyncio.run(run())

    assert [body["lines"] for body in fake.sent] == [
        *[[{"stream": "stdout", "text": "lost"}]] * 3,
        [{"stream": "stdout", "text": "kept"}],
    ]
    assert logs.offset == 12


def test_a_409_without_an_offset_stops_the_upload() -> None:
    fake = FakeHub([httpx.Response(409, json={"error": "not held by w1"})])
    logs = uploader(fake)
    logs.write("stderr", b"a\n")
    asyncio.run(logs.close())
    logs.write("stderr", b"b\n")
    asyncio.run(logs.close())
    assert len(fake.sent) == 1
