"""`jobforge schedule` as a user runs it, against the session's API: options → request →
one line out, or one error line. What schedules do is proven in test_schedules."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator

import pytest

from tests.conftest import REGISTERED_TYPE, Api
from tests.procs import wait_until
from tests.test_cli import jobforge, ok, one_error_line

pytestmark = pytest.mark.usefixtures("session_worker")


@pytest.fixture
def schedule_id(api: Api) -> Iterator[str]:
    made = f"cli-{uuid.uuid4().hex[:10]}"
    yield made
    api.http.delete(f"/api/schedules/{made}")


def test_a_schedule_is_made_shown_paused_triggered_backfilled_and_deleted(
    api: Api, schedule_id: str, job_type: str
) -> None:
    job = json.dumps({"type": REGISTERED_TYPE, "priority": 2})
    line = ok(
        jobforge(api.url, "schedule", "create", schedule_id, "--cron", "0 3 * * *", "--job", job)
    )
    assert line.startswith(f"{schedule_id}  active cron '0 3 * * *'  {REGISTERED_TYPE}  next 20")

    assert ok(jobforge(api.url, "schedule", "pause", schedule_id)).startswith(
        f"paused schedule {schedule_id}: {schedule_id}  paused"
    )
    ok(jobforge(api.url, "schedule", "trigger", schedule_id))
    fired = wait_until(
        lambda: (
            (shown := json.loads(ok(jobforge(api.url, "schedule", "show", schedule_id, "--json"))))
            and shown["recent"]
            and shown["recent"][0]["status"] == "completed"
            and shown
        ),
        timeout=60,
        what="the triggered job completed",
    )
    job_id = fired["recent"][0]["job_id"]
    assert api.job(job_id)["priority"] == 2
    out = ok(jobforge(api.url, "schedule", "show", schedule_id))
    assert f"{job_id} completed" in out
    assert "Paused       yes" in out

    ok(
        jobforge(
            api.url,
            "schedule",
            "backfill",
            schedule_id,
            "--start",
            "2026-01-01T00:00:00Z",
            "--end",
            "2026-01-03T00:00:00Z",
            "--overlap",
            "allow_all",
        )
    )
    wait_until(
        lambda: (
            json.loads(ok(jobforge(api.url, "schedule", "show", schedule_id, "--json")))["fired"]
            == 3
        ),
        timeout=60,
        what="the two backfilled firings",
    )
    assert schedule_id in ok(jobforge(api.url, "schedule", "resume", schedule_id))
    wait_until(
        lambda: schedule_id in ok(jobforge(api.url, "schedule", "list")),
        timeout=30,
        what="the schedule listed",
    )
    listed = json.loads(ok(jobforge(api.url, "schedules", "--json")))
    assert [s["id"] for s in listed if s["id"] == schedule_id] == [schedule_id]
    assert ok(jobforge(api.url, "schedule", "delete", schedule_id)) == (
        f"deleted schedule {schedule_id}\n"
    )
    gone = one_error_line(jobforge(api.url, "schedule", "show", schedule_id))
    assert "404" in gone


def test_a_bad_schedule_is_one_error_line(api: Api, schedule_id: str) -> None:
    both = jobforge(
        api.url,
        "schedule",
        "create",
        schedule_id,
        "--every",
        "5",
        "--cron",
        "* * * * *",
        "--job",
        '{"type": "t"}',
    )
    assert one_error_line(both) == "error: give --cron EXPR or --every S (one of them)"
    assert both.returncode == 2
    bad = jobforge(
        api.url,
        "schedule",
        "create",
        schedule_id,
        "--every",
        "5",
        "--overlap",
        "sometimes",
        "--job",
        '{"type": "t"}',
    )
    assert bad.returncode == 1
    assert "HTTP 422: overlap" in one_error_line(bad)
    assert "(set by --overlap)" in one_error_line(bad)


@pytest.mark.parametrize("command", ["create", "backfill"])
def test_schedule_help_names_values_by_metavar(command: str) -> None:
    out = ok(jobforge("http://unused", "schedule", command, "--help"))
    assert not re.search(r"<\w+>|\{\w+\}", out), out
    assert re.search(rf"Usage: jobforge schedule {command} \[OPTIONS\] ID\s", out), out
    if command == "create":
        assert re.search(r"--job\s+JSON\s", out), out
        assert re.search(r"--every\s+S\s", out), out
