"""`GET /api/audit`: who changed which job and when, from the jobs' transitions."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.conftest import Api, wait_until

# A cancel and a stop are updates of the job's workflow: its worker must run.
pytestmark = pytest.mark.usefixtures("session_worker")


def entries_of(api: Api, job_id: str) -> list[dict[str, Any]]:
    """The audit entries of one job, newest first."""
    response = api.http.get("/api/audit", params={"limit": 200})
    assert response.status_code == 200, response.text
    return [e for e in response.json()["entries"] if e["job_id"] == job_id]


def test_a_cancel_and_a_stop_are_audited_with_their_caller(api: Api, job_type: str) -> None:
    # A type no worker serves: both jobs stay pending until the caller acts.
    cancelled = api.submit(type=job_type)
    stopped = api.submit(type=job_type)
    untouched = api.submit(type=job_type)
    assert api.http.delete(f"/api/jobs/{cancelled}").status_code == 204
    assert api.http.post(f"/api/jobs/{stopped}/stop").status_code == 202

    for job_id in (cancelled, stopped):
        wait_until(lambda j=job_id: entries_of(api, j), timeout=30, what=f"{job_id} audited")  # type: ignore[misc]
        [entry] = entries_of(api, job_id)
        assert entry["by"] == "bootstrap"
        assert entry["status"] == "failed"
        assert entry["reason"] == "cancelled"
        assert entry["type"] == job_type
    assert entries_of(api, untouched) == []


def test_the_audit_limit_is_checked(api: Api) -> None:
    for limit in (0, 201, "x"):
        response = api.http.get("/api/audit", params={"limit": limit})
        assert response.status_code == 422, response.text
        assert "limit" in response.json()["error"]


def gate_entries(api: Api, gate: str) -> list[dict[str, Any]]:
    """The audit entries of one gate (`<kind> <name>`), newest first."""
    response = api.http.get("/api/audit", params={"limit": 200})
    assert response.status_code == 200, response.text
    return [e for e in response.json()["entries"] if e["gate"] == gate]


def test_a_group_pause_and_a_pool_capacity_change_are_audited_with_their_caller(
    api: Api,
) -> None:
    name = f"audit-{uuid.uuid4().hex[:8]}"
    assert api.http.post(f"/api/groups/{name}/pause").status_code == 200
    assert api.http.put(f"/api/pools/{name}", json={"capacity": 7}).status_code == 200

    for gate, action, detail in (
        (f"group {name}", "pause", None),
        (f"pool {name}", "configure", "capacity=7"),
    ):
        wait_until(lambda g=gate: gate_entries(api, g), timeout=30, what=f"{gate} audited")  # type: ignore[misc]
        [entry] = gate_entries(api, gate)
        assert entry["by"] == "bootstrap"
        assert (entry["action"], entry["detail"]) == (action, detail)
        assert entry["job_id"] is None and entry["ts"] > 0
