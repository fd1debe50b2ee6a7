"""Remote workers over plain HTTP: the worker routes bridged onto Temporal."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from tests.conftest import SECRET, Api, Proc, Solver, base_env, wait_until
from worker.devserver import DevServer
from workflows.models import RUNNING_REPORT_DELAY_S
from workflows.names import REPORT_SIGNAL

pytestmark = pytest.mark.usefixtures("session_worker")

# Long enough that a loaded machine does not time out a claim before its result.
HEARTBEAT_TIMEOUT_S = "20"
QUEUE_PREFIX = f"http-{uuid.uuid4().hex[:8]}-"
# The bridge holds a `running` report 0.5 s after the first heartbeat; a loaded box
# takes a while more to apply it.
RUNNING_READ_DEADLINE_S = 5.0


@pytest.fixture(scope="module")
def hub(start_api: Callable[..., Api]) -> Api:
    """An API whose attempt queues only this module polls (its own queue prefix)."""
    return start_api(
        TEMPORAL_ACTIVITY_QUEUE_PREFIX=QUEUE_PREFIX,
        JOB_HEARTBEAT_TIMEOUT_S=HEARTBEAT_TIMEOUT_S,
    )


def claim(hub: Api, worker_id: str, **extra: Any) -> httpx.Response:
    """POST /api/jobs/claim."""
    return hub.http.post("/api/jobs/claim", json={"worker_id": worker_id, **extra})


def report_signals(temporal: DevServer, job_id: str) -> int:
    """How many attempt reports (signals) the job's workflow history holds."""

    async def count() -> int:
        client = await Client.connect(temporal.address, namespace=temporal.namespace)
        history = await client.get_workflow_handle(job_id).fetch_history()
        return sum(
            1
            for event in history.events
            if event.HasField("workflow_execution_signaled_event_attributes")
            and event.workflow_execution_signaled_event_attributes.signal_name == REPORT_SIGNAL
        )

    return asyncio.run(count())


def claimed(hub: Api, worker_id: str, job_type: str, wait: float = 10) -> dict[str, Any]:
    """Claim a job of `job_type`, which must be there."""
    response = claim(hub, worker_id, types=[job_type], wait=wait)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_a_claimed_job_runs_through_heartbeat_and_result_to_completed(
    hub: Api, job_type: str, temporal: DevServer
) -> None:
    job_id = hub.submit(type=job_type, params={"x": 1}, max_runtime_ms=60_000)

    response = claim(hub, "agent-a", types=[job_type], wait=10)
    assert response.status_code == 200, response.text
    # Where the claim's time went: each part as `name;dur=<ms>`.
    timing = [part.strip().split(";dur=") for part in response.headers["server-timing"].split(",")]
    assert [name for name, _ in timing] == ["wait", "prepare", "claim", "answer"]
    assert all(float(ms) >= 0 for _, ms in timing)
    job = response.json()
    assert job["id"] == job_id
    assert job["status"] == "assigned"
    assert job["params"] == {"x": 1}
    assert job["max_runtime_ms"] == 60_000
    assert job["attempt"] == 1
    read = wait_until(
        lambda: (got := hub.job(job_id))["status"] == "assigned" and got,
        timeout=10,
        what="the claim applied",
    )
    # The claim answers the whole Job (the spec's), as a read of the job then shows it.
    shared = (
        "type",
        "params",
        "priority",
        "created_at",
        "max_attempts",
        "attempts",
        "worker_id",
        "claimed_at",
        "fail_history",
        "attempt",
        "status",
    )
    assert {key: job[key] for key in shared} == {key: read[key] for key in shared}
    assert job["job_id"] == job_id and job["heartbeat_timeout_ms"] > 0

    before = time.time() * 1000
    beat = hub.http.post(f"/api/jobs/{job_id}/heartbeat", json={"worker_id": "agent-a"})
    assert beat.status_code == 204, beat.text
    after = time.time() * 1000
    # A job that goes on past the first heartbeat reads `running` soon after it: the
    # bridge holds the report RUNNING_REPORT_DELAY_S (a loaded box: some slack).
    running = wait_until(
        lambda: (got := hub.job(job_id))["status"] == "running" and got,
        timeout=RUNNING_READ_DEADLINE_S,
        what="running after the first heartbeat",
    )
    assert before <= running["heartbeat_at"] <= after
    assert report_signals(temporal, job_id) == 1

    done = hub.http.post(
        f"/api/jobs/{job_id}/result", json={"worker_id": "agent-a", "result": {"y": 2}}
    )
    assert done.status_code == 200, done.text
    job = hub.wait_status(job_id, "completed")
    assert job["result"] == {"y": 2}
    assert job["worker_id"] == "agent-a"
    assert [t["status"] for t in job["transitions"]] == [
        "pending",
        "assigned",
        "running",
        "completed",
    ]

    again = hub.http.post(
        f"/api/jobs/{job_id}/result", json={"worker_id": "agent-a", "result": {"y": 2}}
    )
    assert again.status_code == 200, again.text
    other = hub.http.post(
        f"/api/jobs/{job_id}/result", json={"worker_id": "agent-a", "result": {"y": 3}}
    )
    assert other.status_code == 409, other.text
    assert hub.job(job_id)["result"] == {"y": 2}
    assert claim(hub, "agent-a", types=[job_type]).status_code == 204


@pytest.mark.parametrize("end", ["result", "fail"])
def test_a_short_agent_job_is_recorded_assigned_running_and_ended_from_its_report(
    hub: Api, job_type: str, temporal: DevServer, end: str
) -> None:
    # An agent whose solver ends right after its start heartbeat: its `running` report,
    # held by the bridge, never goes out; the result (or failure) carries the start.
    job_id = hub.submit(type=job_type, params={}, max_attempts=1)
    assert claimed(hub, "agent-s", job_type)["id"] == job_id
    before = time.time() * 1000
    beat = hub.http.post(f"/api/jobs/{job_id}/heartbeat", json={"worker_id": "agent-s"})
    assert beat.status_code == 204, beat.text
    after = time.time() * 1000
    if end == "result":
        body: dict[str, Any] = {"worker_id": "agent-s", "result": {"ok": True}}
    else:
        body = {"worker_id": "agent-s", "reason": "solver_error: exit 3"}
    ended = hub.http.post(f"/api/jobs/{job_id}/{end}", json=body)
    assert ended.status_code == 200, ended.text
    ended_ms = time.time() * 1000

    final = "completed" if end == "result" else "quarantined"
    job = hub.wait_status(job_id, final)
    moves = [(t["status"], t["ts"]) for t in job["transitions"]]
    expected = ["pending", "assigned", "running"]
    expected += ["completed"] if end == "result" else ["failed", "quarantined"]
    assert [status for status, _ in moves] == expected
    assert [ts for _, ts in moves] == sorted(ts for _, ts in moves)
    # Running from the first heartbeat, not from the end: the start time it carried.
    assert before <= job["heartbeat_at"] <= after
    if ended_ms - before < RUNNING_REPORT_DELAY_S * 1000:
        # Ended within the hold (on a loaded box the end may come later, and the report
        # then goes out as it should; tests/test_agent_hold.py pins both in process).
        assert report_signals(temporal, job_id) == 0


def test_a_heartbeat_and_a_result_on_two_replicas_record_the_job_in_order(
    hub: Api, job_type: str, start_api: Callable[..., Api]
) -> None:
    # The heartbeat's replica holds the running report; the result reaches the other,
    # which knows no start time: the job is recorded running at its result. The held
    # report then finds the job closed, which changes nothing.
    other = start_api(
        TEMPORAL_ACTIVITY_QUEUE_PREFIX=QUEUE_PREFIX, JOB_HEARTBEAT_TIMEOUT_S=HEARTBEAT_TIMEOUT_S
    )
    job_id = hub.submit(type=job_type, params={})
    assert claimed(hub, "agent-m", job_type)["id"] == job_id
    before = time.time() * 1000
    beat = other.http.post(f"/api/jobs/{job_id}/heartbeat", json={"worker_id": "agent-m"})
    assert beat.status_code == 204, beat.text
    body = {"worker_id": "agent-m", "result": {"r": 1}}
    assert hub.http.post(f"/api/jobs/{job_id}/result", json=body).status_code == 200

    job = hub.wait_status(job_id, "completed")
    moves = [(t["status"], t["ts"]) for t in job["transitions"]]
    assert [status for status, _ in moves] == ["pending", "assigned", "running", "completed"]
    assert [ts for _, ts in moves] == sorted(ts for _, ts in moves)
    assert before <= job["heartbeat_at"] <= moves[-1][1]
    assert (job["result"], job["attempts"]) == ({"r": 1}, 1)
    # Both replicas still serve the job's reads and the next claims.
    assert other.job(job_id)["status"] == "completed"
    assert claim(other, "agent-m", types=[job_type], wait=0).status_code == 204


@pytest.mark.parametrize("grouped", [False, True], ids=["ungated", "grouped"])
def test_a_claim_answers_the_job_exactly_as_a_read_right_after_it_shows_it(
    hub: Api, job_type: str, grouped: bool
) -> None:
    spec: dict[str, Any] = {"type": job_type, "params": {"x": 1}, "meta": {"m": "n"}}
    if grouped:
        spec["group"] = f"claims-{uuid.uuid4().hex[:8]}"
    job_id = hub.submit(**spec)

    answer = claimed(hub, "agent-r", job_type)
    read = hub.job(job_id)

    # The spec's Job, then the attempt's own fields: heartbeat_timeout_ms is the
    # attempt's (the job's own field is what its spec asked: here nothing).
    attempt = {key: answer.pop(key) for key in ("job_id", "heartbeat_timeout_ms", "claim_first")}
    assert attempt == {
        "job_id": job_id,
        "heartbeat_timeout_ms": int(HEARTBEAT_TIMEOUT_S) * 1000,
        "claim_first": grouped,
    }
    assert read.pop("heartbeat_timeout_ms") is None
    assert answer == read
    assert read["status"] == "assigned" and read["worker_id"] == "agent-r"
    done = hub.http.post(f"/api/jobs/{job_id}/result", json={"worker_id": "agent-r", "result": 1})
    assert done.status_code == 200, done.text


def test_a_result_with_an_idempotency_key_is_accepted_once_and_repeats_are_no_ops(
    hub: Api, job_type: str
) -> None:
    job_id = hub.submit(type=job_type)
    claimed(hub, "agent-k", job_type)
    headers = {"X-Idempotency-Key": "result-1"}
    body = {"worker_id": "agent-k", "result": "text result"}

    first = hub.http.post(f"/api/jobs/{job_id}/result", json=body, headers=headers)
    hub.wait_status(job_id, "completed")
    repeat = hub.http.post(f"/api/jobs/{job_id}/result", json=body, headers=headers)
    different = hub.http.post(
        f"/api/jobs/{job_id}/result", json=body, headers={"X-Idempotency-Key": "result-2"}
    )

    assert (first.status_code, repeat.status_code, different.status_code) == (200, 200, 409)
    job = hub.job(job_id)
    assert job["result"] == "text result"
    assert [t["status"] for t in job["transitions"]][-1] == "completed"
    assert len(job["transitions"]) == 4


def test_failures_reported_over_http_requeue_then_quarantine(hub: Api, job_type: str) -> None:
    job_id = hub.submit(type=job_type, max_attempts=2)

    claimed(hub, "agent-f", job_type)
    first = hub.http.post(
        f"/api/jobs/{job_id}/fail", json={"worker_id": "agent-f", "reason": "solver crashed"}
    )
    assert first.status_code == 200, first.text
    assert first.json()["status"] == "pending"
    job = hub.wait_status(job_id, "pending")
    assert job["fail_history"][0]["reason"] == "solver crashed"
    assert job["fail_history"][0]["worker_id"] == "agent-f"

    second_claim = claimed(hub, "agent-g", job_type)
    assert second_claim["attempt"] == 2
    second = hub.http.post(
        f"/api/jobs/{job_id}/fail", json={"worker_id": "agent-g", "reason": "again"}
    )
    assert second.json()["status"] == "quarantined"
    job = hub.wait_status(job_id, "quarantined")
    assert job["attempts"] == 2
    assert [f["worker_id"] for f in job["fail_history"]] == ["agent-f", "agent-g"]


def test_claim_with_types_only_takes_jobs_of_those_types(hub: Api, job_type: str) -> None:
    other_type = f"{job_type}-other"
    other_id = hub.submit(type=other_type)
    wanted_id = hub.submit(type=job_type)

    assert claimed(hub, "agent-t", job_type)["id"] == wanted_id
    assert claim(hub, "agent-t", types=[job_type]).status_code == 204
    assert claimed(hub, "agent-t", other_type)["id"] == other_id


def test_a_waiting_claimer_gets_a_job_submitted_during_its_long_poll(
    hub: Api, job_type: str
) -> None:
    async def scenario() -> tuple[httpx.Response, str]:
        async with httpx.AsyncClient(
            base_url=hub.url, headers={"Authorization": f"Bearer {SECRET}"}, timeout=30
        ) as http:
            waiting = asyncio.create_task(
                http.post(
                    "/api/jobs/claim",
                    json={"worker_id": "agent-w", "types": [job_type], "wait": 20},
                )
            )
            await asyncio.sleep(0.5)  # let the claim start waiting before the job exists
            submitted = await http.post("/api/jobs", json={"type": job_type})
            return await waiting, submitted.json()["id"]

    response, job_id = asyncio.run(scenario())
    assert response.status_code == 200, response.text
    assert response.json()["id"] == job_id


def test_only_the_holder_may_heartbeat_report_or_fail(hub: Api, job_type: str) -> None:
    job_id = hub.submit(type=job_type)
    claimed(hub, "agent-h", job_type)

    for path, body in [
        ("heartbeat", {"worker_id": "intruder"}),
        ("result", {"worker_id": "intruder", "result": 1}),
        ("fail", {"worker_id": "intruder", "reason": "x"}),
    ]:
        response = hub.http.post(f"/api/jobs/{job_id}/{path}", json=body)
        assert response.status_code == 409, (path, response.text)
    assert hub.job(job_id)["status"] == "assigned"


def test_a_vanished_claimer_loses_the_job_and_its_late_calls_are_refused(
    start_api: Callable[..., Api], job_type: str
) -> None:
    hub = start_api(TEMPORAL_ACTIVITY_QUEUE_PREFIX=QUEUE_PREFIX, JOB_HEARTBEAT_TIMEOUT_S="3")
    job_id = hub.submit(type=job_type, max_attempts=3)
    claimed(hub, "agent-dead", job_type)
    beat = hub.http.post(f"/api/jobs/{job_id}/heartbeat", json={"worker_id": "agent-dead"})
    assert beat.status_code == 204

    job = hub.wait_status(job_id, "pending", timeout=30)
    assert job["fail_history"][0]["reason"] == "heartbeat_timeout"
    assert job["fail_history"][0]["worker_id"] == "agent-dead"

    rerun = claimed(hub, "agent-alive", job_type)
    assert rerun["attempt"] == 2
    late = hub.http.post(
        f"/api/jobs/{job_id}/result", json={"worker_id": "agent-dead", "result": "late"}
    )
    assert late.status_code == 409, late.text
    assert (
        hub.http.post(f"/api/jobs/{job_id}/heartbeat", json={"worker_id": "agent-dead"}).status_code
        == 409
    )
    done = hub.http.post(
        f"/api/jobs/{job_id}/result", json={"worker_id": "agent-alive", "result": "ok"}
    )
    assert done.status_code == 200
    assert hub.wait_status(job_id, "completed")["result"] == "ok"


def test_a_cancel_reaches_the_claimer_through_its_heartbeat(hub: Api, job_type: str) -> None:
    job_id = hub.submit(type=job_type)
    claimed(hub, "agent-c", job_type)

    assert hub.http.delete(f"/api/jobs/{job_id}").status_code == 204
    beat = hub.http.post(f"/api/jobs/{job_id}/heartbeat", json={"worker_id": "agent-c"})

    assert beat.status_code == 409
    assert beat.json()["cancelled"] is True
    job = hub.job(job_id)
    assert (job["status"], job["fail_reason"]) == ("failed", "cancelled")


def test_registered_workers_are_listed_with_liveness_and_held_jobs(hub: Api, job_type: str) -> None:
    worker_id = f"agent-{uuid.uuid4().hex[:6]}"
    register = hub.http.post(
        "/api/workers/register",
        json={
            "worker_id": worker_id,
            "name": "Worker 01",
            "cores": 8,
            "ram_gb": 16,
            "tags": ["gpu"],
        },
    )
    assert register.status_code == 204, register.text
    hub.submit(type=job_type)
    claimed(hub, worker_id, job_type)

    def listed() -> dict[str, Any] | None:
        for worker in hub.http.get("/api/workers").json():
            if worker["worker_id"] == worker_id and worker["active_jobs"] == 1:
                return dict(worker)
        return None

    worker = wait_until(listed, timeout=15, what="the worker with one held job")
    assert worker["name"] == "Worker 01"
    assert (worker["cores"], worker["ram_gb"], worker["tags"]) == (8, 16.0, ["gpu"])
    assert worker["alive"] is True
    assert worker["kind"] == "agent"
    natives = [w for w in hub.http.get("/api/workers").json() if w["kind"] == "native"]
    assert any(w["worker_id"] == "session-worker" for w in natives)


@pytest.mark.slow(27)
def test_twenty_concurrent_claimers_complete_two_hundred_jobs_exactly_once(
    hub: Api, job_type: str
) -> None:
    job_ids = {hub.submit(type=job_type, params={"i": i}) for i in range(200)}
    claims: list[tuple[str, int]] = []

    async def claimer(http: httpx.AsyncClient, worker_id: str) -> None:
        while True:
            response = await http.post(
                "/api/jobs/claim",
                json={"worker_id": worker_id, "types": [job_type], "wait": 2},
            )
            if response.status_code == 204:
                return
            assert response.status_code == 200, response.text
            job = response.json()
            claims.append((job["id"], job["attempt"]))
            done = await http.post(
                f"/api/jobs/{job['id']}/result",
                json={"worker_id": worker_id, "result": job["params"]},
            )
            assert done.status_code == 200, done.text

    async def run_all() -> None:
        async with httpx.AsyncClient(
            base_url=hub.url, headers={"Authorization": f"Bearer {SECRET}"}, timeout=60
        ) as http:
            await asyncio.gather(*(claimer(http, f"claimer-{n}") for n in range(20)))

    asyncio.run(run_all())

    assert Counter(claims).most_common(1)[0][1] == 1, "a claim was handed out twice"
    assert {job_id for job_id, _ in claims} == job_ids

    def all_completed() -> bool:
        listed = hub.http.get(
            "/api/jobs", params={"type": job_type, "status": "completed", "limit": 500}
        ).json()
        return len(listed) == 200

    wait_until(all_completed, timeout=60, interval=0.5, what="200 completed jobs")
    for job in hub.http.get("/api/jobs", params={"type": job_type, "limit": 500}).json():
        assert job["attempts"] == 1
        assert job["result"] == job["params"]


def test_an_agent_and_a_native_worker_drain_one_queue_together(
    hub: Api,
    job_type: str,
    spawn: Callable[..., Proc],
    start_worker: Callable[..., Proc],
    make_solver: Callable[[str], Solver],
    tmp_path: Path,
    temporal: DevServer,
) -> None:
    solver = make_solver("time.sleep(0.2); print(json.dumps(params))\n")
    env = {
        "TEMPORAL_ACTIVITY_QUEUE_PREFIX": QUEUE_PREFIX,
        "SOLVER_CACHE_DIR": str(tmp_path / "native-cache"),
        "WORKER_TYPES": job_type,
    }
    native = start_worker(WORKER_RUN_WORKFLOWS="false", NODE_ID="native-1", WORKER_CORES="2", **env)
    agent = spawn(
        ["agent"],
        base_env(
            temporal,
            HUB_URL=hub.url,
            NODE_ID="agent-1",
            WORKER_CORES="2",
            WORKER_TYPES=json.dumps([job_type]),
            JOB_POLL_INTERVAL_MS="5000",
            SOLVER_CACHE_DIR=str(tmp_path / "agent-cache"),
        ),
    )
    wait_until(lambda: "ready" in agent.output(), timeout=30, what="agent to start")
    try:
        ids = [hub.submit(**solver.spec(job_type, params={"i": i})) for i in range(20)]
        jobs = [hub.wait_status(job_id, "completed", timeout=60) for job_id in ids]
    finally:
        agent.stop()
        native.stop()
    assert [job["result"] for job in jobs] == [{"i": i} for i in range(20)]
    assert {job["worker_id"] for job in jobs} == {"native-1", "agent-1"}
    # Each job ran once, but for what the product does on an overloaded box: an attempt
    # whose holder went unheard for the heartbeat timeout (20 s) is failed and run again.
    # Any other extra attempt (a claim handed back but counted, a failure) is a defect,
    # and every extra attempt is a recorded failure, never a silent second count.
    stories = "\n".join(_attempt_story(job) for job in jobs if job["attempts"] != 1)
    for job in jobs:
        reasons = [failure["reason"] for failure in job["fail_history"]]
        assert job["attempts"] == 1 + len(reasons), stories
        assert set(reasons) <= {"heartbeat_timeout"}, stories


def _attempt_story(job: dict[str, Any]) -> str:
    """A job's attempts, failures and transitions, for a failure message."""
    moves = [
        f"{t['status']} #{t['attempt']} {t.get('worker_id') or '-'} @{t['ts']}"
        + (f" ({t['reason']})" if t.get("reason") else "")
        for t in job["transitions"]
    ]
    return (
        f"job {job['id']}: attempts {job['attempts']}, worker {job['worker_id']}, "
        f"fail_history {job['fail_history']}, transitions {moves}"
    )


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/workers/register", {"worker_id": "w", "ram_gb": False}, "ram_gb"),
        ("/api/workers/register", {"worker_id": "w", "ram_gb": "16"}, "ram_gb"),
        ("/api/workers/register", {"worker_id": "w", "cores": True}, "cores"),
        ("/api/workers/register", {"worker_id": "w", "cores": 2.5}, "cores"),
        ("/api/workers/register", {"worker_id": "w", "cores": 0}, "cores"),
        ("/api/workers/register", {"worker_id": "bad id"}, "worker_id"),
        ("/api/workers/register", {"worker_id": "w", "kind": "robot"}, "kind"),
        ("/api/jobs/claim", {"worker_id": "w", "wait": True}, "wait"),
        ("/api/jobs/claim", {"worker_id": "w", "wait": "5"}, "wait"),
        ("/api/jobs/claim", {"worker_id": "w", "wait": 31}, "wait"),
        ("/api/jobs/claim", {"worker_id": "w", "types": ["has space"]}, "types"),
        ("/api/jobs/claim", {"worker_id": "w", "solver_types": ["a#b"]}, "solver_types"),
        ("/api/workers/register", {"worker_id": "w", "solver_types": ["a@b"]}, "solver_types"),
    ],
)
def test_a_worker_request_with_a_bad_field_answers_422_naming_it(
    hub: Api, path: str, body: dict[str, Any], field: str
) -> None:
    response = hub.http.post(path, json=body)

    assert response.status_code == 422, response.text
    assert field in response.json()["error"]


def agent_variables() -> set[str]:
    """Every environment variable `jobforge agent` reads, from its settings classes."""
    from pydantic import AliasChoices
    from pydantic_settings import BaseSettings

    from worker.agent import AgentSettings
    from worker.hub_client import HubSettings
    from worker.settings import ContainerSettings, SolverSettings, WorkerSettings

    def name(prefix: str, field: str, alias: object) -> str:
        """The variable a field reads: its alias, the first of its choices (the documented
        name; the others are fallbacks), or the prefixed field name."""
        if isinstance(alias, AliasChoices) and isinstance(alias.choices[0], str):
            return alias.choices[0]
        return alias if isinstance(alias, str) else f"{prefix}{field}".upper()

    def names(cls: type[BaseSettings]) -> set[str]:
        prefix = cls.model_config.get("env_prefix", "")
        return {
            name(prefix, field_name, field.validation_alias)
            for field_name, field in cls.model_fields.items()
            if not field.exclude
        }

    native_only = {"WORKER_RUN_WORKFLOWS", "WORKER_TYPE_POLL_MS", "WORKER_METRICS_PORT"}
    every = set().union(
        *map(names, (HubSettings, AgentSettings, WorkerSettings, SolverSettings, ContainerSettings))
    )
    return every - native_only


def test_the_agent_env_example_names_every_setting_and_an_agent_runs_from_it(
    hub: Api, spawn: Callable[..., Proc], temporal: DevServer, tmp_path: Path
) -> None:
    example = Path(__file__).parent.parent / "docs" / "agent.env.example"
    named = {
        line.lstrip("# ").split("=", 1)[0]
        for line in example.read_text().splitlines()
        if "=" in line and line.lstrip("# ").split("=", 1)[0].isupper()
    }
    assert named == agent_variables()

    worker_id = f"from-env-file-{uuid.uuid4().hex[:6]}"
    env_file = tmp_path / "agent.env"
    env_file.write_text(
        example.read_text()
        .replace("HUB_URL=http://127.0.0.1:8000", f"HUB_URL={hub.url}")
        .replace("FORGE_INGEST_SECRET=", f"FORGE_INGEST_SECRET={SECRET}")
        .replace("# NODE_ID=", f"NODE_ID={worker_id}")
        .replace("# WORKER_ENABLED=true", "WORKER_ENABLED=false")
    )
    env = {k: v for k, v in base_env(temporal).items() if k not in agent_variables()}
    proc = spawn(["agent", "--env-file", str(env_file)], env)
    assert proc.process.wait(timeout=60) == 0, proc.output()
    # The record's row reaches visibility (and its memo) a moment after registering.
    wait_until(
        lambda: worker_id in {w["worker_id"] for w in hub.http.get("/api/workers").json()},
        timeout=30,
        what=f"{worker_id} listed",
    )
