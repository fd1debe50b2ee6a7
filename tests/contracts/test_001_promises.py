"""001's promises beyond the first routes: `/dispatchable` lists every admitted intent
of the addon in pages, whatever the backlog behind them; `deadline_at` makes an intent
urgent at the pool and never fails it (§7); the audit events keep every DENIED with its
reason, `group_paused` among them (§9)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.conftest import Api, wait_until
from tests.contracts.test_001_admission import BASE, claim, dispatchable, intent, ok, submit

pytestmark = pytest.mark.usefixtures("session_worker")


@pytest.fixture
def hub(start_api: Callable[..., Api]) -> Api:
    """An API on its own pool (capacity 100) and attempt queues no worker polls; an
    admitted intent stays admitted for the whole test."""
    return start_api(
        TEMPORAL_ACTIVITY_QUEUE_PREFIX=f"c001p-{uuid.uuid4().hex[:8]}-",
        SCHEDULER_POOL=f"sys-{uuid.uuid4().hex[:8]}",
        JOB_DISPATCH_TIMEOUT_MS="600000",
    )


def addon_id() -> str:
    return f"addon{uuid.uuid4().hex[:6]}"


def denied(hub: Api, job_id: str) -> list[str]:
    return [e["reason"] for e in intent(hub, job_id)["events"] if e["event"] == "DENIED"]


def test_dispatchable_pages_through_every_admitted_intent_behind_a_backlog(hub: Api) -> None:
    addon = addon_id()
    first = submit(hub, addon, cost_units=50)["job_id"]
    second = submit(hub, addon, cost_units=50)["job_id"]
    backlog = [submit(hub, addon, cost_units=10)["job_id"] for _ in range(3)]
    wait_until(
        lambda: all(denied(hub, job_id) == ["pool_capacity"] for job_id in backlog),
        timeout=30,
        what="the backlog waiting for the pool",
    )
    assert intent(hub, first)["state"] == intent(hub, second)["state"] == "DISPATCHING"

    url = f"{BASE}/dispatchable"
    page = hub.http.get(url, params={"addon_id": addon, "limit": 1})
    assert [row["job_id"] for row in ok(page)] == [first]
    token = page.headers["Next-Page-Token"]
    last = hub.http.get(url, params={"addon_id": addon, "limit": 1, "page_token": token})
    assert [row["job_id"] for row in ok(last)] == [second]
    assert "Next-Page-Token" not in last.headers
    assert dispatchable(hub, addon) == [first, second]
    bad = hub.http.get(url, params={"addon_id": addon, "page_token": "no way"})
    assert bad.status_code == 422 and "page_token" in bad.text


def test_a_passed_deadline_makes_an_intent_urgent_and_never_fails_it(hub: Api) -> None:
    addon = addon_id()
    holder = submit(hub, addon, cost_units=100)["job_id"]
    wait_until(lambda: holder in dispatchable(hub, addon), timeout=30, what="the holder")
    plain = submit(hub, addon, cost_units=60)["job_id"]
    deadline = (datetime.now(UTC) + timedelta(seconds=2)).replace(microsecond=0)
    sent = deadline.isoformat().replace("+00:00", "Z")
    urgent = submit(hub, addon, cost_units=60, deadline_at=sent)["job_id"]

    def past_deadline_and_queued() -> bool:
        got = intent(hub, urgent)
        assert got["state"] == "QUEUED", got  # never failed by its deadline
        return time.time() > deadline.timestamp() + 2

    wait_until(past_deadline_and_queued, timeout=30, what="the deadline passed")
    got = intent(hub, urgent)
    assert datetime.fromisoformat(got["deadline_at"]) == datetime.fromisoformat(sent)
    assert [e["event"] for e in got["events"]][-1] == "DENIED"

    ok(hub.http.post(f"{BASE}/jobs/{holder}/cancel"))
    # The urgent intent, submitted later, is admitted first; the plain one still waits.
    wait_until(lambda: urgent in dispatchable(hub, addon), timeout=30, what="urgent admitted")
    assert intent(hub, plain)["state"] == "QUEUED"
    claimed = claim(hub, addon, "addon-worker")
    assert claimed is not None and claimed["job_id"] == urgent
    lease = claimed["lease_id"]
    ok(hub.http.post(f"{BASE}/jobs/{urgent}/heartbeat", json={"lease_id": lease}))
    done = ok(hub.http.post(f"{BASE}/jobs/{urgent}/done", json={"lease_id": lease}))
    assert done["state"] == "DONE"


def test_events_keep_every_denied_with_its_reason_and_a_paused_group(hub: Api) -> None:
    holder_addon, addon = addon_id(), addon_id()
    holder = submit(hub, holder_addon, cost_units=100)["job_id"]
    wait_until(lambda: holder in dispatchable(hub, holder_addon), timeout=30, what="the holder")
    job_id = submit(hub, addon, cost_units=10)["job_id"]
    wait_until(lambda: denied(hub, job_id) == ["pool_capacity"], timeout=30, what="pool wait")
    ok(hub.http.post(f"/api/groups/{addon}/pause"))  # recalls its group lease
    ok(hub.http.post(f"{BASE}/jobs/{holder}/cancel"))

    def paused_too() -> dict[str, Any] | None:
        got = intent(hub, job_id)
        reasons = [e["reason"] for e in got["events"] if e["event"] == "DENIED"]
        return got if reasons == ["pool_capacity", "group_paused"] else None

    got = wait_until(paused_too, timeout=30, what="DENIED group_paused after pool_capacity")
    assert got["state"] == "QUEUED"
    assert all(e["at"] for e in got["events"] if e["event"] == "DENIED")

    ok(hub.http.post(f"/api/groups/{addon}/resume"))
    wait_until(lambda: job_id in dispatchable(hub, addon), timeout=30, what="admitted")
    names = [(e["event"], e["reason"]) for e in intent(hub, job_id)["events"]]
    assert names == [
        ("SUBMITTED", None),
        ("DENIED", "pool_capacity"),
        ("DENIED", "group_paused"),
        ("ADMITTED", "admitted"),
        ("DISPATCHING", "dispatchable"),
    ]
