"""001, the admission queue (`001_*`), against its own routes, names and units: job
intents admitted against a pool's capacity in cost units, dispatched to the addon's own
worker (Model A: poll `/dispatchable`, claim, heartbeat, report), and the MVP's
admission-only answer with `retry_after_sec`."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.conftest import Api, wait_until

pytestmark = pytest.mark.usefixtures("session_worker")

BASE = "/api/system/scheduler/queue"
POOL = f"sys-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def hub(start_api: Callable[..., Api]) -> Api:
    """An API whose attempt queues only this module claims from, on its own pool."""
    return start_api(
        TEMPORAL_ACTIVITY_QUEUE_PREFIX=f"c001-{uuid.uuid4().hex[:8]}-", SCHEDULER_POOL=POOL
    )


@pytest.fixture
def addon() -> str:
    return f"visuals{uuid.uuid4().hex[:6]}"


def ok(response: httpx.Response, code: int = 200) -> Any:
    assert response.status_code == code, response.text
    return response.json()


def submit(hub: Api, addon: str, **body: Any) -> dict[str, Any]:
    answer: dict[str, Any] = ok(
        hub.http.post(
            f"{BASE}/jobs/submit",
            json={"addon_id": addon, "job_type": "indexing", "cost_units": 30, **body},
        )
    )
    return answer


def intent(hub: Api, job_id: str) -> dict[str, Any]:
    got: dict[str, Any] = ok(hub.http.get(f"{BASE}/jobs/{job_id}"))
    return got


def claim(hub: Api, addon: str, worker: str, wait: float = 10) -> dict[str, Any] | None:
    answer = hub.http.post(
        f"{BASE}/jobs/claim", json={"addon_id": addon, "worker_id": worker, "wait_sec": wait}
    )
    if answer.status_code == 204:
        return None
    claimed: dict[str, Any] = ok(answer)
    return claimed


def dispatchable(hub: Api, addon: str) -> list[str]:
    rows = ok(hub.http.get(f"{BASE}/dispatchable", params={"addon_id": addon}))
    return [row["job_id"] for row in rows]


def test_an_intent_is_admitted_dispatched_run_by_the_addons_worker_and_done(
    hub: Api, addon: str
) -> None:
    submitted = submit(
        hub,
        addon,
        priority="HIGH",
        constraints={"cpu_heavy": True},
        expected_duration_sec=120,
        payload={"path": "/some/dir"},
        tags=["nightly"],
        earliest_start_at="2020-01-01T00:00:00Z",
        max_runtime_sec=90,
    )
    job_id = submitted["job_id"]
    assert submitted["state"] in ("QUEUED", "DISPATCHING")
    wait_until(lambda: job_id in dispatchable(hub, addon), timeout=30, what="dispatchable")
    assert intent(hub, job_id)["state"] == "DISPATCHING"

    claimed = claim(hub, addon, "addon-worker-1")
    assert claimed is not None and claimed["job_id"] == job_id
    assert claimed["state"] == "DISPATCHING" and claimed["lease_id"]
    lease = claimed["lease_id"]
    assert (
        ok(hub.http.post(f"{BASE}/jobs/{job_id}/heartbeat", json={"lease_id": lease}))["state"]
        == "RUNNING"
    )
    wait_until(lambda: intent(hub, job_id)["state"] == "RUNNING", timeout=30, what="RUNNING")
    done = ok(hub.http.post(f"{BASE}/jobs/{job_id}/done", json={"lease_id": lease, "result": 7}))
    assert done["state"] == "DONE"

    got = intent(hub, job_id)
    assert (got["state"], got["result"], got["attempts"]) == ("DONE", 7, 1)
    assert (got["addon_id"], got["job_type"], got["cost_units"]) == (addon, "indexing", 30)
    assert (got["priority"], got["max_runtime_sec"], got["payload"]) == (
        "HIGH",
        90.0,
        {"path": "/some/dir"},
    )
    assert (got["constraints"], got["tags"], got["expected_duration_sec"]) == (
        {"cpu_heavy": True},
        ["nightly"],
        120.0,
    )
    names = [event["event"] for event in got["events"]]
    # The pool is shared with the module's other tests: an intent that found it full
    # for a moment waited, and its events say so (a DENIED before it was admitted).
    denied = names.count("DENIED")
    assert names == [
        "SUBMITTED",
        *["DENIED"] * denied,
        "ADMITTED",
        "DISPATCHING",
        "RUNNING",
        "DONE",
    ]
    running = got["events"][3 + denied]
    assert running["lease_id"] == lease and running["worker_id"] == "addon-worker-1"

    def listed_done() -> list[str]:
        rows = ok(hub.http.get(f"{BASE}/jobs", params={"state": "DONE"}))
        return [row["job_id"] for row in rows]

    # The list reads visibility, which holds the DONE a moment after the job's own read.
    wait_until(lambda: job_id in listed_done(), timeout=30, what="DONE listed")
    assert listed_done().count(job_id) == 1


def test_admission_only_denies_with_retry_after_and_queues_nothing(hub: Api, addon: str) -> None:
    holder = submit(hub, addon, cost_units=100)  # the whole pool (capacity 100)
    wait_until(lambda: holder["job_id"] in dispatchable(hub, addon), timeout=30, what="admitted")
    denied = submit(hub, addon, cost_units=10, admission_only=True)
    assert denied["approved"] is False
    assert denied["reason"] and denied["retry_after_sec"] >= 1
    assert denied.get("job_id") is None
    queued = submit(hub, addon, cost_units=10)  # queue mode: it waits, denied for now
    seen = wait_until(
        lambda: (got := intent(hub, queued["job_id"]))["events"][-1]["event"] == "DENIED" and got,
        timeout=30,
        what="the intent denied for now",
    )
    assert seen["state"] == "QUEUED"
    assert seen["events"][-1]["reason"] == "pool_capacity"

    cancelled = ok(hub.http.post(f"{BASE}/jobs/{holder['job_id']}/cancel"))
    assert cancelled["state"] == "CANCELED"
    wait_until(lambda: queued["job_id"] in dispatchable(hub, addon), timeout=30, what="admitted")
    approved = submit(hub, addon, cost_units=10, admission_only=True)
    assert approved["approved"] is True and approved["job_id"]


def test_a_failed_attempt_is_queued_again_and_its_old_lease_is_refused(
    hub: Api, addon: str
) -> None:
    job_id = submit(hub, addon)["job_id"]
    first = claim(hub, addon, "w-1")
    assert first is not None and first["job_id"] == job_id
    failed = ok(
        hub.http.post(
            f"{BASE}/jobs/{job_id}/failed", json={"lease_id": first["lease_id"], "reason": "disk"}
        )
    )
    assert failed["state"] == "QUEUED"
    second = claim(hub, addon, "w-2")
    assert second is not None and second["job_id"] == job_id
    assert second["lease_id"] != first["lease_id"]
    stale = hub.http.post(f"{BASE}/jobs/{job_id}/heartbeat", json={"lease_id": first["lease_id"]})
    assert stale.status_code == 409
    forged = hub.http.post(f"{BASE}/jobs/{job_id}/heartbeat", json={"lease_id": "x:1:w"})
    assert forged.status_code == 422 and "lease_id" in forged.text


def test_an_intent_no_worker_starts_in_time_goes_from_dispatching_back_to_queued(
    start_api: Callable[..., Api], addon: str
) -> None:
    hub = start_api(
        TEMPORAL_ACTIVITY_QUEUE_PREFIX=f"c001-{uuid.uuid4().hex[:8]}-",
        SCHEDULER_POOL=f"sys-{uuid.uuid4().hex[:8]}",
        JOB_DISPATCH_TIMEOUT_MS="1000",
    )
    job_id = submit(hub, addon)["job_id"]

    def timed_out() -> dict[str, Any] | None:
        got = intent(hub, job_id)
        return got if any(e["reason"] == "dispatch_timeout" for e in got["events"]) else None

    got = wait_until(timed_out, timeout=30, what="DISPATCHING back to QUEUED")
    names = [(event["event"], event["reason"]) for event in got["events"]]
    back = names.index(("QUEUED", "dispatch_timeout"))
    assert names[:back] == [
        ("SUBMITTED", None),
        ("ADMITTED", "admitted"),
        ("DISPATCHING", "dispatchable"),
    ]
    assert got["attempts"] == 0
    # It is dispatched again, and the addon's worker that comes takes it once.
    claimed = claim(hub, addon, "late-worker", wait=30)
    assert claimed is not None and claimed["job_id"] == job_id
    lease = claimed["lease_id"]
    ok(hub.http.post(f"{BASE}/jobs/{job_id}/heartbeat", json={"lease_id": lease}))
    done = ok(hub.http.post(f"{BASE}/jobs/{job_id}/done", json={"lease_id": lease, "result": 1}))
    assert done["state"] == "DONE"
    assert intent(hub, job_id)["attempts"] == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"priority": "URGENT"}, "priority"),
        ({"max_runtime_sec": 0}, "max_runtime_sec"),
        ({"job_type": "has.dot"}, "job_type"),
        ({"cost_units": 0}, "cost_units"),
        ({"earliest_start_at": "tomorrow"}, "earliest_start_at"),
        ({"payload": {"x": "y" * 70_000}}, "payload"),
        ({"max_runtime_sec": 1.5e308}, "max_runtime_sec"),
        ({"tags": ["\udcff"]}, "tags"),
        ({"earliest_start_at": "0069-12-04T16:41:56Z"}, "earliest_start_at"),
    ],
)
def test_a_bad_intent_is_a_422_naming_the_designs_field(
    hub: Api, addon: str, body: dict[str, Any], field: str
) -> None:
    # As JSON text with escapes: a lone surrogate cannot be sent as UTF-8.
    text = json.dumps({"addon_id": addon, "job_type": "indexing", "cost_units": 30, **body})
    answer = hub.http.post(
        f"{BASE}/jobs/submit", content=text, headers={"Content-Type": "application/json"}
    )
    assert answer.status_code == 422, answer.text
    assert field in answer.text


def test_metrics_show_the_queue_by_state_per_addon_and_the_admission_decisions(
    hub: Api, addon: str
) -> None:
    job_id = submit(hub, addon, cost_units=5)["job_id"]
    wait_until(lambda: job_id in dispatchable(hub, addon), timeout=30, what="admitted")
    submit(hub, addon, cost_units=5, admission_only=True)

    def scraped() -> str | None:
        text = hub.http.get("/metrics").text
        return (
            text
            if f'jobforge_001_addon_jobs{{addon_id="{addon}",state="QUEUED"}}' in text
            else None
        )

    text = wait_until(scraped, timeout=30, what="the addon's series")
    assert 'jobforge_001_queue_jobs{state="QUEUED"}' in text
    assert "jobforge_001_oldest_queued_age_seconds" in text
    assert 'jobforge_001_admission_decisions_total{decision="approved",reason="admitted"}' in text
    assert 'jobforge_001_admission_decisions_total{decision="queued",reason="submitted"}' in text


def test_an_addon_worker_outside_available_hosts_is_refused_as_every_claimer_is(
    start_api: Callable[..., Api], addon: str
) -> None:
    guarded = start_api(
        AVAILABLE_HOSTS="rack-1",
        SCHEDULER_POOL=POOL,
        # Its own attempt queues: the session's worker, which serves every type on the
        # default ones, must not take the intent first.
        TEMPORAL_ACTIVITY_QUEUE_PREFIX=f"c001-guarded-{uuid.uuid4().hex[:8]}-",
    )
    try:
        submit(guarded, addon, cost_units=1)  # the addon's type exists: a claim polls it
        answer = guarded.http.post(
            f"{BASE}/jobs/claim", json={"addon_id": addon, "worker_id": "elsewhere"}
        )
        assert answer.status_code == 403, answer.text
        assert claim(guarded, addon, "rack-1") is not None  # a listed host claims it
    finally:
        guarded.proc.stop(timeout=15)
