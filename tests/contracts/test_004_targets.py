"""004, the tenant lease queue (`004_*`), against its own routes and words: jobs of a
target run one at a time; an interrupt pauses the job and halts the target until the
job is resumed; an expired lease is an ERROR that halts it too; a queued job's cancel is
CANCELED. The jobs are claimed over the HTTP agent protocol, so the test holds each
lease itself."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.conftest import Api, wait_until

pytestmark = pytest.mark.usefixtures("session_worker")

QUEUE_PREFIX = f"c004-{uuid.uuid4().hex[:8]}-"


@pytest.fixture(scope="module")
def hub(start_api: Callable[..., Api]) -> Api:
    """An API whose attempt queues only this module claims from."""
    return start_api(TEMPORAL_ACTIVITY_QUEUE_PREFIX=QUEUE_PREFIX)


@pytest.fixture
def tenant() -> str:
    return f"acme{uuid.uuid4().hex[:6]}"


def ok(response: httpx.Response, code: int = 200) -> Any:
    assert response.status_code == code, response.text
    return response.json()


class Target:
    """One target of one tenant, through 004's routes."""

    def __init__(self, hub: Api, tenant: str, name: str, job_type: str) -> None:
        self.hub, self.tenant, self.name, self.job_type = hub, tenant, name, job_type
        self.base = f"/targets/{name}/jobs"
        self.headers = {"X-Tenant": tenant}

    def create(self, **body: Any) -> dict[str, Any]:
        created: dict[str, Any] = ok(
            self.hub.http.post(
                self.base, json={"type": self.job_type, **body}, headers=self.headers
            ),
            201,
        )
        return created

    def job(self, job_id: str) -> dict[str, Any]:
        job: dict[str, Any] = ok(self.hub.http.get(f"{self.base}/{job_id}", headers=self.headers))
        return job

    def post(self, job_id: str, action: str, slash: str = "/") -> httpx.Response:
        return self.hub.http.post(f"{self.base}/{job_id}/{action}{slash}", headers=self.headers)

    def wait_status(self, job_id: str, status: str) -> dict[str, Any]:
        return wait_until(
            lambda: (job := self.job(job_id))["status"] == status and job,
            timeout=30,
            what=f"{job_id} {status}",
        )

    def claim(self, worker_id: str, wait: float = 10) -> dict[str, Any] | None:
        # The tenant's worker loop: its jobs wait on the tenant's own queues.
        answer = self.hub.http.post(
            "/api/jobs/claim",
            json={"worker_id": worker_id, "types": [self.job_type], "wait": wait},
            headers=self.headers,
        )
        if answer.status_code == 204:
            return None
        claimed: dict[str, Any] = ok(answer)
        return claimed

    def beat(self, job_id: str, worker_id: str) -> httpx.Response:
        return self.hub.http.post(f"/api/jobs/{job_id}/heartbeat", json={"worker_id": worker_id})


@pytest.fixture
def target(hub: Api, tenant: str, job_type: str) -> Target:
    return Target(hub, tenant, "site-1", job_type)


def test_an_interrupt_pauses_the_job_and_halts_the_target_until_the_job_is_resumed(
    target: Target,
) -> None:
    first = target.create(params={"n": 1})
    second = target.create(params={"n": 2})
    assert (first["status"], first["tenant"], first["target_id"]) == (
        "QUEUED",
        target.tenant,
        "site-1",
    )
    assert first["lease_owner"] is None and first["cancel_requested"] is False

    claimed = target.claim("w-1")
    assert claimed is not None and claimed["id"] == first["id"]
    assert target.claim("w-2", wait=1) is None  # one job of a target at a time
    assert target.beat(first["id"], "w-1").status_code == 204
    running = target.wait_status(first["id"], "RUNNING")
    assert running["lease_owner"] == "w-1" and running["lease_expires_at"]

    answer = ok(target.post(first["id"], "cancel"))
    assert (answer["status"], answer["cancel_requested"]) in (("RUNNING", True), ("PAUSED", False))
    # The owner sees the cancel at its heartbeat, cancels its execution and says so (004
    # §"Cancellation"); until then the job runs on and still holds its target.
    seen = target.beat(first["id"], "w-1")
    assert seen.status_code == 409 and seen.json()["stop"] is True, seen.text
    assert target.job(first["id"])["status"] == "RUNNING"
    reported = target.hub.http.post(
        f"/api/jobs/{first['id']}/fail", json={"worker_id": "w-1", "reason": "stopped"}
    )
    assert reported.status_code == 200, reported.text
    paused = target.wait_status(first["id"], "PAUSED")
    assert paused["message"] == "Job was interrupted by user"
    assert paused["lease_owner"] is None
    # The target halts: the second job stays queued with nobody else holding the target.
    assert target.claim("w-2", wait=2) is None
    assert target.job(second["id"])["status"] == "QUEUED"
    halted = ok(target.hub.http.get(f"/api/targets/{target.tenant}/site-1"))
    assert (halted["halted"], halted["halted_by"]) == (True, first["id"])

    resumed = ok(target.post(first["id"], "resume", slash=""))  # the path without the slash
    assert resumed["status"] == "QUEUED"
    again = target.claim("w-3")
    assert again is not None and again["id"] == first["id"]  # the resumed job goes first


def test_the_list_shows_a_held_jobs_lease_as_get_does(target: Target) -> None:
    created = target.create()
    assert target.claim("w-1") is not None
    assert target.beat(created["id"], "w-1").status_code == 204
    running = target.wait_status(created["id"], "RUNNING")

    def listed() -> dict[str, Any] | None:
        rows = ok(target.hub.http.get(target.base, headers=target.headers))
        row = next((row for row in rows if row["id"] == created["id"]), None)
        return row if row is not None and row["status"] == "RUNNING" else None

    def agreeing() -> dict[str, Any] | None:
        # Read once the two agree: the held `running` report lands 0.5 s after the beat,
        # and one read may come before it and the other after.
        row = listed()
        return row if row is not None and row == target.job(created["id"]) else None

    row = wait_until(agreeing, timeout=30, what="the list and GET to show it alike, RUNNING")
    assert running["lease_expires_at"] is not None
    assert row["lease_expires_at"] is not None and row["lease_owner"] == "w-1"


def test_an_expired_lease_is_an_error_without_retry_that_halts_the_target(
    target: Target,
) -> None:
    retried = target.hub.http.post(
        target.base, json={"type": target.job_type, "max_attempts": 3}, headers=target.headers
    )
    assert retried.status_code == 422 and "max_attempts" in retried.text
    job = target.create(heartbeat_timeout_ms=1000)
    later = target.create()
    claimed = target.claim("w-dead")
    assert claimed is not None and claimed["id"] == job["id"]
    # No heartbeat: the lease expires.
    failed = wait_until(
        lambda: (seen := target.job(job["id"]))["status"] == "ERROR" and seen,
        timeout=30,
        what="the lease to expire",
    )
    assert failed["message"] == "Lease expired: the worker stopped renewing it"
    assert failed["attempts"] == 1
    assert target.claim("w-2", wait=2) is None
    assert target.job(later["id"])["status"] == "QUEUED"
    refused = target.post(later["id"], "resume")
    assert refused.status_code == 409 and "QUEUED" in refused.text


def test_a_queued_job_is_canceled_and_the_tenant_is_required_and_scopes_jobs(
    target: Target, hub: Api
) -> None:
    job = target.create()
    canceled = ok(target.post(job["id"], "cancel", slash=""))
    assert canceled["status"] == "CANCELED"
    # The list reads visibility, which shows a job a moment after it is made.
    listed = wait_until(
        lambda: ok(hub.http.get(target.base, headers=target.headers)),
        timeout=30,
        what="the job listed",
    )
    assert [row["id"] for row in listed] == [job["id"]]
    assert listed[0]["status"] == "CANCELED"

    missing = hub.http.get(target.base)
    assert missing.status_code == 422 and "X-Tenant" in missing.text
    by_query = ok(hub.http.get(target.base, params={"tenant": target.tenant}))
    assert [row["id"] for row in by_query] == [job["id"]]
    other = hub.http.get(f"{target.base}/{job['id']}", headers={"X-Tenant": "someone-else"})
    assert other.status_code == 404
    clash = hub.http.post(
        target.base, json={"type": target.job_type, "target": "x/y"}, headers=target.headers
    )
    assert clash.status_code == 422 and "target" in clash.text
    # A group or pool outside the tenant is refused here, and no job is made (a job
    # made with it would never run: nothing may fail where the workflow reads it).
    for field in ("group", "pool"):
        wrong = hub.http.post(
            target.base, json={"type": target.job_type, field: "shared"}, headers=target.headers
        )
        assert wrong.status_code == 422 and field in wrong.text, wrong.text
    assert [row["id"] for row in ok(hub.http.get(target.base, headers=target.headers))] == [
        job["id"]
    ]


def test_a_cancel_while_assigned_pauses_the_job_and_halts_the_target_as_while_running(
    target: Target,
) -> None:
    first = target.create(params={"n": 1})
    second = target.create(params={"n": 2})
    claimed = target.claim("w-1")
    assert claimed is not None and claimed["id"] == first["id"]
    # Claimed, no heartbeat yet: assigned, which 004 shows RUNNING.
    assigned = ok(target.hub.http.get(f"/api/jobs/{first['id']}"))
    assert assigned["status"] == "assigned"
    assert target.job(first["id"])["status"] == "RUNNING"

    answer = ok(target.post(first["id"], "cancel"))
    assert (answer["status"], answer["cancel_requested"]) == ("RUNNING", True)
    # Its owner sees the cancel at its first heartbeat and says it stopped.
    seen = target.beat(first["id"], "w-1")
    assert seen.status_code == 409 and seen.json()["stop"] is True, seen.text
    reported = target.hub.http.post(
        f"/api/jobs/{first['id']}/fail", json={"worker_id": "w-1", "reason": "stopped"}
    )
    assert reported.status_code == 200, reported.text
    paused = target.wait_status(first["id"], "PAUSED")
    assert paused["message"] == "Job was interrupted by user"
    assert target.claim("w-2", wait=2) is None
    assert target.job(second["id"])["status"] == "QUEUED"
    halted = ok(target.hub.http.get(f"/api/targets/{target.tenant}/site-1"))
    assert (halted["halted"], halted["halted_by"]) == (True, first["id"])
