"""Bulk actions by filter (`POST /api/jobs/bulk`) over real HTTP against the real API
and Temporal: exactly the matching jobs are acted on, progress reaches `done`, bad
bodies are 422s naming their field, a tenant reaches only its own jobs."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import SECRET, Api
from tests.procs import wait_until
from tests.test_cli import JOBFORGE, cli_env
from tests.test_tenancy import bearer, create_token

pytestmark = pytest.mark.usefixtures("session_worker")

BULK = "/api/jobs/bulk"


@pytest.fixture(scope="module")
def quiet_api(start_api: Callable[..., Api]) -> Api:
    """An API whose attempts go to task queues no worker polls: its jobs stay pending."""
    return start_api(TEMPORAL_ACTIVITY_QUEUE_PREFIX=f"unserved-{uuid.uuid4().hex[:8]}-")


@pytest.fixture(scope="module")
def quiet(quiet_api: Api) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=quiet_api.url, headers={"Authorization": f"Bearer {SECRET}"}, timeout=60
    ) as client:
        yield client


def fresh_type() -> str:
    return f"bulk-{uuid.uuid4().hex[:10]}"


def submit(client: httpx.Client, job_type: str, count: int, **extra: Any) -> list[str]:
    ids = []
    for _ in range(count):
        answer = client.post("/api/jobs", json={"type": job_type, **extra})
        assert answer.status_code == 201, answer.text
        ids.append(answer.json()["id"])
    return ids


def matched(client: httpx.Client, body: dict[str, Any]) -> int:
    answer = client.post(f"{BULK}/count", json={"filter": body})
    assert answer.status_code == 200, answer.text
    count: int = answer.json()["matched"]
    return count


def finished(client: httpx.Client, op_id: str) -> dict[str, Any]:
    """Poll the operation until it is done."""

    def done() -> dict[str, Any] | None:
        answer = client.get(f"{BULK}/{op_id}")
        assert answer.status_code == 200, answer.text
        progress: dict[str, Any] = answer.json()
        return progress if progress["state"] == "done" else None

    result: dict[str, Any] = wait_until(done, timeout=60, what=f"bulk {op_id} done")
    return result


def test_a_bulk_cancel_cancels_exactly_the_matching_jobs(quiet: httpx.Client) -> None:
    job_type, other_type = fresh_type(), fresh_type()
    chosen = submit(quiet, job_type, 12)
    others = submit(quiet, other_type, 3)
    wanted = {"status": "pending", "type": job_type}
    wait_until(lambda: matched(quiet, wanted) == len(chosen), what="the jobs counted")

    answer = quiet.post(BULK, json={"filter": wanted, "action": "cancel"})
    assert answer.status_code == 202, answer.text
    progress = finished(quiet, answer.json()["id"])

    assert (progress["matched"], progress["done"], progress["failed"]) == (12, 12, 0)
    for job_id in chosen:
        job = quiet.get(f"/api/jobs/{job_id}").json()
        assert job["status"] == "failed" and job["fail_reason"] == "cancelled", job
    for job_id in others:
        assert quiet.get(f"/api/jobs/{job_id}").json()["status"] == "pending"


def test_a_bulk_action_whose_filter_matches_nothing_is_done_with_nothing(
    quiet: httpx.Client,
) -> None:
    answer = quiet.post(BULK, json={"filter": {"type": fresh_type()}, "action": "stop"})
    assert answer.status_code == 202, answer.text
    progress = finished(quiet, answer.json()["id"])
    assert (progress["matched"], progress["done"], progress["failed"]) == (0, 0, 0)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"filter": {"type": "x"}, "action": "explode"}, "action"),
        ({"filter": {"type": "x"}}, "action"),
        ({"filter": {}, "action": "cancel"}, "filter"),
        ({"filter": {"status": "nope"}, "action": "cancel"}, "status"),
        ({"filter": {"colour": "red"}, "action": "cancel"}, "colour"),
    ],
)
def test_a_bad_bulk_body_is_a_422_naming_its_field(
    quiet: httpx.Client, body: dict[str, Any], field: str
) -> None:
    answer = quiet.post(BULK, json=body)
    assert answer.status_code == 422, answer.text
    assert field in answer.text


def test_an_unknown_operation_is_a_404(quiet: httpx.Client) -> None:
    answer = quiet.get(f"{BULK}/bulk-{uuid.uuid4().hex}")
    assert answer.status_code == 404, answer.text


def test_a_tenants_bulk_reaches_only_its_own_jobs(api: Api) -> None:
    job_type = fresh_type()
    mine = create_token(api, "producer", f"t{uuid.uuid4().hex[:6]}")
    theirs = create_token(api, "producer", f"t{uuid.uuid4().hex[:6]}")
    with (
        httpx.Client(base_url=api.url, headers=bearer(mine["token"]), timeout=60) as me,
        httpx.Client(base_url=api.url, headers=bearer(theirs["token"]), timeout=60) as them,
    ):
        own = submit(me, job_type, 2, earliest_start_at=4_000_000_000_000)
        other = submit(them, job_type, 2, earliest_start_at=4_000_000_000_000)
        wanted = {"type": job_type, "status": "pending"}
        wait_until(lambda: matched(me, wanted) == 2 and matched(them, wanted) == 2)

        # Re-queue is the admin's; naming another tenant is a 403.
        assert me.post(BULK, json={"filter": wanted, "action": "requeue"}).status_code == 403
        named = {**wanted, "tenant": theirs["tenant"]}
        assert me.post(BULK, json={"filter": named, "action": "cancel"}).status_code == 403

        answer = me.post(BULK, json={"filter": wanted, "action": "cancel"})
        assert answer.status_code == 202, answer.text
        op_id = answer.json()["id"]
        assert them.get(f"{BULK}/{op_id}").status_code == 404
        progress = finished(me, op_id)
        assert (progress["matched"], progress["done"]) == (2, 2)
        assert all(me.get(f"/api/jobs/{i}").json()["fail_reason"] == "cancelled" for i in own)
        assert all(them.get(f"/api/jobs/{i}").json()["status"] == "pending" for i in other)


def jobforge(api: Api, *args: str, answer: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(JOBFORGE), "bulk", *args],
        env=cli_env(api.url, SECRET),
        input=answer,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_cli_asks_with_the_count_then_cancels(quiet: httpx.Client, quiet_api: Api) -> None:
    job_type = fresh_type()
    ids = submit(quiet, job_type, 3)
    wanted = {"status": "pending", "type": job_type}
    wait_until(lambda: matched(quiet, wanted) == 3, what="the jobs counted")
    args = ("cancel", "--status", "pending", "--type", job_type)

    refused = jobforge(quiet_api, *args, answer="n\n")
    assert refused.returncode == 1, refused.stderr
    assert "cancel 3 jobs" in refused.stdout
    assert all(quiet.get(f"/api/jobs/{i}").json()["status"] == "pending" for i in ids)

    done = jobforge(quiet_api, *args, answer="y\n")
    assert done.returncode == 0, done.stderr
    assert "matched 3, done 3, failed 0" in done.stdout
    assert all(quiet.get(f"/api/jobs/{i}").json()["fail_reason"] == "cancelled" for i in ids)


def test_the_cli_refuses_an_empty_filter_before_any_call(quiet_api: Api) -> None:
    answer = jobforge(quiet_api, "stop", "--yes")
    assert answer.returncode == 2
    assert "name at least one filter" in answer.stderr
