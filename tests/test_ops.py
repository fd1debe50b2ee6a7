"""Operator overrides over REST and the CLI, process level: quarantine, re-queue and
cancel any job that has not ended, audited `by: "ops"`; cleanup of old closed jobs."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.conftest import Api, Solver, Stack, wait_until
from tests.procs import Proc
from tests.test_cli import jobforge
from worker.devserver import DevServer


@pytest.fixture(autouse=True)
def _worker(session_worker: Proc) -> Proc:
    return session_worker


def last(job: dict[str, Any]) -> dict[str, Any]:
    step: dict[str, Any] = job["transitions"][-1]
    return step


def test_ops_fail_quarantines_a_pending_job_and_a_second_is_a_409(
    start_stack: Callable[..., Stack],
) -> None:
    api = start_stack().api
    job_id = api.submit(type="nobody-serves-this")
    answer = api.http.post(f"/api/ops/jobs/{job_id}/fail", json={"reason": "bad data"})
    assert answer.status_code == 200, answer.text
    job = answer.json()
    assert (job["status"], job["fail_reason"]) == ("quarantined", "bad data")
    assert (last(job)["status"], last(job)["by"]) == ("quarantined", "ops: bootstrap")
    again = api.http.post(f"/api/ops/jobs/{job_id}/fail", json={"reason": "again"})
    assert again.status_code == 409 and again.json()["status"] == "quarantined"
    assert api.http.post(f"/api/ops/jobs/{job_id}/fail", json={}).status_code == 422
    assert api.http.post("/api/ops/jobs/nope/fail", json={"reason": "x"}).status_code == 404


def test_ops_requeue_ends_an_agents_attempt_and_starts_another(
    start_stack: Callable[..., Stack],
) -> None:
    api = start_stack().api
    # The agent falls silent after the re-queue: its attempt ends at its heartbeat
    # timeout (its work may still run until then), and the job is pending again.
    job_id = api.submit(type="ops-agent", heartbeat_timeout_ms=5_000)
    body = {"worker_id": "agent-o", "types": ["ops-agent"], "wait": 10}
    first = api.http.post("/api/jobs/claim", json=body)
    assert first.status_code == 200, first.text
    beat = {"worker_id": "agent-o"}
    assert api.http.post(f"/api/jobs/{job_id}/heartbeat", json=beat).status_code == 204
    api.wait_status(job_id, "running")
    assert api.http.post(f"/api/jobs/{job_id}/heartbeat", json=beat).status_code == 204

    answer = api.http.post(f"/api/ops/jobs/{job_id}/requeue")
    assert answer.status_code == 200, answer.text
    job = api.wait_status(job_id, "pending")
    assert (last(job)["reason"], last(job)["by"]) == ("requeued", "ops: bootstrap")
    assert api.http.post(f"/api/jobs/{job_id}/heartbeat", json=beat).status_code == 409
    second = api.http.post("/api/jobs/claim", json=body)
    assert second.status_code == 200, second.text
    assert second.json()["attempt"] == 2
    result = api.http.post(f"/api/jobs/{job_id}/result", json={**beat, "result": {"ok": 1}})
    assert result.status_code == 200, result.text
    assert api.wait_status(job_id, "completed")["attempts"] == 2


def test_ops_cancel_ends_a_pending_job(start_stack: Callable[..., Stack]) -> None:
    api = start_stack().api
    job_id = api.submit(type="nobody-serves-this")
    answer = api.http.post(f"/api/ops/jobs/{job_id}/cancel")
    assert answer.status_code == 202, answer.text
    assert (answer.json()["status"], answer.json()["fail_reason"]) == ("failed", "cancelled")


@pytest.mark.slow(22)
def test_cleanup_deletes_old_closed_jobs_of_a_type_with_their_logs(
    api: Api, job_type: str, make_solver: Callable[[str], Solver], temporal: DevServer
) -> None:
    solver = make_solver('print(json.dumps({"ok": True}))\n')
    ids = [api.submit(**solver.spec(job_type)) for _ in range(2)]
    for job_id in ids:
        api.wait_status(job_id, "completed")
    log_dirs = [temporal.data_dir / "job-logs" / job_id for job_id in ids]
    assert all(directory.is_dir() for directory in log_dirs)
    kept = api.http.post(
        "/api/ops/cleanup", json={"older_than_s": 3600, "statuses": ["completed"], "type": job_type}
    )
    assert kept.json() == {"deleted": 0}
    bad = api.http.post("/api/ops/cleanup", json={"older_than_s": 0, "statuses": ["running"]})
    assert bad.status_code == 422 and "statuses" in bad.text
    # An age that is no number, or so large that its cutoff is before year 1: a 422.
    for path in ("/api/ops/cleanup", "/ops/queue/cleanup"):
        for age in (False, "60", 1e300):
            bad = api.http.post(path, json={"older_than_s": age})
            assert bad.status_code == 422 and "older_than_s" in bad.text, (path, age, bad.text)

    run = jobforge(api.url, "ops", "cleanup", "--older-than", "0s", "--type", job_type)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "deleted 2"
    assert not any(directory.exists() for directory in log_dirs)
    for job_id in ids:  # Temporal deletes in the background
        wait_until(
            lambda job_id=job_id: api.http.get(f"/api/jobs/{job_id}").status_code == 404,
            timeout=120,
            what=f"{job_id} deleted",
        )


def test_jobforge_ops_fail_and_a_bad_duration(start_stack: Callable[..., Stack]) -> None:
    api = start_stack().api
    job_id = api.submit(type="nobody-serves-this")
    run = jobforge(api.url, "ops", "fail", job_id, "--reason", "by hand")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == f"{job_id} quarantined"
    assert api.job(job_id)["fail_reason"] == "by hand"
    run = jobforge(api.url, "ops", "cleanup", "--older-than", "soon")
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        "error: --older-than: 'soon' is not a duration (like 90s, 15m, 12h, 7d)"
    ]


# -- retry: any ended job can be re-queued ---------------------------------------------


def _listed(api: Api, job_type: str) -> list[dict[str, Any]]:
    answer = api.http.get("/api/jobs", params={"type": job_type, "limit": 50})
    assert answer.status_code == 200, answer.text
    jobs: list[dict[str, Any]] = answer.json()
    return jobs


def _agent_run(api: Api, job_type: str, job_id: str, *, fail: str | None = None) -> int:
    """Claim the job's next attempt as an HTTP agent and end it; the attempt's number."""
    body = {"worker_id": "agent-r", "types": [job_type], "wait": 10}
    claimed = api.http.post("/api/jobs/claim", json=body)
    assert claimed.status_code == 200, claimed.text
    assert claimed.json()["id"] == job_id
    beat = {"worker_id": "agent-r"}
    if fail is None:
        done = api.http.post(f"/api/jobs/{job_id}/result", json={**beat, "result": {"ok": 1}})
    else:
        done = api.http.post(f"/api/jobs/{job_id}/fail", json={**beat, "reason": fail})
    assert done.status_code == 200, done.text
    attempt: int = claimed.json()["attempt"]
    return attempt


def test_a_quarantined_job_is_retried_under_its_id_with_its_history_and_listed_once(
    start_stack: Callable[..., Stack],
) -> None:
    api = start_stack().api
    job_type = f"retry-{uuid.uuid4().hex[:8]}"
    job_id = api.submit(type=job_type, max_attempts=1)
    assert _agent_run(api, job_type, job_id, fail="solver_exit: 3") == 1
    api.wait_status(job_id, "quarantined")

    answer = api.http.post(f"/api/ops/jobs/{job_id}/requeue")
    assert answer.status_code == 200, answer.text
    job = answer.json()
    assert (job["id"], job["status"]) == (job_id, "pending")
    assert (last(job)["reason"], last(job)["by"]) == ("requeued", "ops: bootstrap")
    # One job, not two runs: the closed run is gone from lists and counts.
    wait_until(lambda: [j["id"] for j in _listed(api, job_type)] == [job_id], timeout=20)
    assert _listed(api, job_type)[0]["status"] == "pending"

    def counted_once() -> bool:
        counts = api.http.get("/api/jobs/counts", params={"type": job_type}).json()
        return bool(sum(counts.values()) == 1 and counts.get("pending") == 1)

    wait_until(counted_once, timeout=20)

    # max_attempts more attempts; its history goes on.
    assert _agent_run(api, job_type, job_id) == 2
    job = api.wait_status(job_id, "completed")
    assert job["attempts"] == 2
    assert [f["reason"] for f in job["fail_history"]] == ["solver_exit: 3"]
    steps = [t["status"] for t in job["transitions"]]
    assert steps == [
        "pending", "assigned", "failed", "quarantined",
        "pending", "assigned", "running", "completed",
    ]  # fmt: skip
    assert [t["seq"] for t in job["transitions"]] == list(range(1, len(steps) + 1))


def test_completed_cancelled_and_stopped_jobs_are_retried_too(
    start_stack: Callable[..., Stack],
) -> None:
    api = start_stack().api
    job_type = f"retry-{uuid.uuid4().hex[:8]}"
    job_id = api.submit(type=job_type)
    _agent_run(api, job_type, job_id)
    api.wait_status(job_id, "completed")
    assert api.http.post(f"/api/ops/jobs/{job_id}/requeue").status_code == 200
    job = api.wait_status(job_id, "pending")
    assert job["result"] is None
    assert api.http.delete(f"/api/jobs/{job_id}").status_code == 204
    job = api.wait_status(job_id, "failed")
    assert job["fail_reason"] == "cancelled"

    def closed() -> bool:
        return _listed(api, job_type)[0].get("status") == "failed"

    wait_until(closed, timeout=20)
    again = api.http.post(f"/api/ops/jobs/{job_id}/requeue")
    assert again.status_code == 200, again.text
    assert again.json()["status"] == "pending"
    # Its second attempt was scheduled, never claimed, when it was cancelled.
    assert _agent_run(api, job_type, job_id) == 3
    job = api.wait_status(job_id, "completed")
    assert job["attempts"] == 2
    assert [t["status"] for t in job["transitions"]].count("pending") == 3
    wait_until(lambda: len(_listed(api, job_type)) == 1, timeout=20)


def test_a_job_submitted_with_an_idempotency_key_keeps_it_when_retried(
    start_stack: Callable[..., Stack],
) -> None:
    api = start_stack().api
    job_type = f"retry-{uuid.uuid4().hex[:8]}"
    body = {"type": job_type, "max_attempts": 1}
    key = {"Idempotency-Key": f"k-{uuid.uuid4().hex}"}
    first = api.http.post("/api/jobs", json=body, headers=key)
    assert first.status_code in (200, 201), first.text
    job_id = first.json()["id"]
    _agent_run(api, job_type, job_id, fail="boom")
    api.wait_status(job_id, "quarantined")
    assert api.http.post(f"/api/ops/jobs/{job_id}/requeue").status_code == 200
    same = api.http.post("/api/jobs", json=body, headers=key)
    assert same.status_code in (200, 201), same.text
    assert (same.json()["id"], same.json()["status"]) == (job_id, "pending")
    wait_until(lambda: len(_listed(api, job_type)) == 1, timeout=20)


def _uuid7_at(ms: int) -> str:
    """A generated job id (UUIDv7) made at `ms`."""
    value = (ms << 80) | (0x7 << 76) | (0b10 << 62) | (uuid.uuid4().int & ((1 << 62) - 1))
    return uuid.UUID(int=value).hex


def test_a_retry_of_a_job_past_retention_is_a_410_and_of_an_unknown_one_a_404(
    start_stack: Callable[..., Stack],
) -> None:
    api = start_stack().api
    job_id = api.submit(type="nobody-serves-this")
    assert uuid.UUID(hex=job_id).version == 7  # a generated id says when it was made
    now = int(time.time() * 1000)
    old = _uuid7_at(now - 400 * 24 * 3600 * 1000)  # older than any retention
    gone = api.http.post(f"/api/ops/jobs/{old}/requeue")
    assert gone.status_code == 410, gone.text
    assert "retention" in gone.json()["error"]
    for unknown in (_uuid7_at(now), uuid.uuid4().hex):
        assert api.http.post(f"/api/ops/jobs/{unknown}/requeue").status_code == 404


def test_retries_of_one_closed_job_at_once_make_one_run(
    start_stack: Callable[..., Stack],
) -> None:
    api = start_stack().api
    job_type = f"retry-{uuid.uuid4().hex[:8]}"
    job_id = api.submit(type=job_type, max_attempts=1)
    _agent_run(api, job_type, job_id, fail="boom")
    api.wait_status(job_id, "quarantined")
    with ThreadPoolExecutor(5) as callers:
        answers = list(
            callers.map(lambda _: api.http.post(f"/api/ops/jobs/{job_id}/requeue"), range(5))
        )
    assert [a.status_code for a in answers] == [200] * 5, [a.text for a in answers]
    wait_until(lambda: [j["id"] for j in _listed(api, job_type)] == [job_id], timeout=20)
    job = api.job(job_id)
    assert [t["reason"] for t in job["transitions"]].count("requeued") == 1
    assert _agent_run(api, job_type, job_id) == 2
    assert api.wait_status(job_id, "completed")["attempts"] == 2
