"""The job detail's controls in a real (headless) Chromium against real API and worker
processes: a running job's progress bar (moved by job:progress events, in its row too),
its log view, and the Stop and Retry buttons."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.conftest import Api, Solver, needs_chromium
from tests.procs import wait_until
from tests.test_dashboard import LIVE_TIMEOUT_MS, row, sign_in

pytestmark = [
    pytest.mark.usefixtures("session_worker"),
    needs_chromium,
]

# Talks on both streams and reports progress, then waits for `gate.1`, says more, and
# waits for `gate.2` (60 s at most each) before answering.
TALKING_SOLVER = """
def wait_for(path):
    deadline = time.time() + 60
    while not os.path.exists(path) and time.time() < deadline:
        time.sleep(0.05)

gate = params["gate"]
print("first out", flush=True)
print("first err", file=sys.stderr, flush=True)
print("JOBFORGE_PROGRESS 0.4 crunching numbers", file=sys.stderr, flush=True)
wait_for(gate + ".1")
print("late out", flush=True)
print("late err", file=sys.stderr, flush=True)
print("JOBFORGE_PROGRESS 0.8 almost there", file=sys.stderr, flush=True)
wait_for(gate + ".2")
print(json.dumps({"done": True}))
"""

# Runs until stopped (or for 60 s).
ENDLESS_SOLVER = """
print("JOBFORGE_PROGRESS 0.1 started", file=sys.stderr, flush=True)
deadline = time.time() + 60
while time.time() < deadline:
    time.sleep(0.05)
print("{}")
"""


def log_line(page: Page, stream: str, text: str) -> Locator:
    """A line of the log view, by its stream label and text."""
    return page.locator(f'#log-lines .log-line[data-stream="{stream}"]', has_text=text).locator(
        ".log-text"
    )


def job_when(api: Api, job_id: str, check: Callable[[dict[str, Any]], bool], what: str) -> Any:
    def read() -> dict[str, Any] | None:
        job = api.job(job_id)
        return job if check(job) else None

    return wait_until(read, timeout=30, what=what)


def talking_job_signed_in(
    page: Page, api: Api, job_type: str, make_solver: Callable[[str], Solver], gate: str
) -> str:
    """A TALKING_SOLVER job running with its first progress, and the dashboard open."""
    job_id = api.submit(**make_solver(TALKING_SOLVER).spec(job_type, params={"gate": gate}))
    job_when(
        api,
        job_id,
        lambda j: j["status"] == "running" and (j["progress"] or {}).get("fraction") == 0.4,
        "the job running with its first progress",
    )
    sign_in(page, api, job_type=job_type)
    return job_id


def test_a_running_jobs_progress_and_log_lines_show_and_follow_it(
    page: Page, api: Api, job_type: str, make_solver: Callable[[str], Solver], tmp_path: Path
) -> None:
    gate = str(tmp_path / "gate")
    job_id = talking_job_signed_in(page, api, job_type, make_solver, gate)
    row(page, job_id).click()
    expect(page.locator("#detail-id")).to_have_text(job_id)

    progress = page.locator("#detail-progress")
    expect(progress).to_have_attribute("data-fraction", "0.4")
    expect(page.locator("#detail-progress-percent")).to_have_text("40%")
    expect(page.locator("#detail-progress-message")).to_have_text("crunching numbers")
    expect(progress.locator('[role="progressbar"]')).to_have_attribute("aria-valuenow", "40")

    # Both streams, each labelled; stderr styled apart from stdout.
    expect(log_line(page, "stdout", "first out")).to_have_text("first out")
    expect(log_line(page, "stderr", "first err")).to_have_text("first err")
    expect(
        page.locator('#log-lines .log-line[data-stream="stderr"] .log-stream').first
    ).to_have_text("stderr")
    out_color = log_line(page, "stdout", "first out").evaluate("e => getComputedStyle(e).color")
    err_color = log_line(page, "stderr", "first err").evaluate("e => getComputedStyle(e).color")
    assert out_color != err_color
    expect(page.locator("#log-attempt")).to_have_count(0)  # one attempt: no selector
    expect(page.locator("#detail-logs .log-controls")).to_have_text("attempt 1")

    # Lines written after the view opened are followed; the bar moves on the next beat.
    Path(gate + ".1").touch()
    expect(log_line(page, "stdout", "late out")).to_have_text("late out", timeout=LIVE_TIMEOUT_MS)
    expect(log_line(page, "stderr", "late err")).to_have_text("late err")
    expect(progress).to_have_attribute("data-fraction", "0.8", timeout=LIVE_TIMEOUT_MS)
    expect(page.locator("#detail-progress-message")).to_have_text("almost there")

    Path(gate + ".2").touch()
    expect(row(page, job_id)).to_have_attribute("data-status", "completed", timeout=LIVE_TIMEOUT_MS)
    expect(page.locator("#detail-progress")).to_have_count(0)
    expect(page.locator("#stop-button")).to_have_count(0)
    # Each line once: the view read on from where it was, not from the start again.
    expect(page.locator("#log-lines .log-line", has_text="first out")).to_have_count(1)
    expect(page.locator("#log-lines .log-line", has_text="late err")).to_have_count(1)


def test_a_running_jobs_progress_bars_move_with_the_event_stream(
    page: Page, api: Api, job_type: str, make_solver: Callable[[str], Solver], tmp_path: Path
) -> None:
    gate = str(tmp_path / "gate")
    job_id = talking_job_signed_in(page, api, job_type, make_solver, gate)
    # A page of rows carries no progress: the row's bar comes from the stream.
    row_bar = row(page, job_id).locator(".row-progress")
    expect(row_bar).to_have_attribute("data-fraction", "0.4", timeout=LIVE_TIMEOUT_MS)
    expect(row_bar).to_have_attribute("title", "40% · crunching numbers")
    row(page, job_id).click()
    expect(page.locator("#detail-progress")).to_have_attribute("data-fraction", "0.4")

    # From now on the job cannot be read: only job:progress events can move the bars.
    job_url = re.compile(rf"/api/jobs/{job_id}$")
    page.route(job_url, lambda route: route.abort())
    Path(gate + ".1").touch()
    expect(page.locator("#detail-progress")).to_have_attribute(
        "data-fraction", "0.8", timeout=LIVE_TIMEOUT_MS
    )
    expect(page.locator("#detail-progress-message")).to_have_text("almost there")
    expect(page.locator("#detail-progress-percent")).to_have_text("80%")
    expect(row_bar).to_have_attribute("data-fraction", "0.8")
    page.unroute(job_url)

    Path(gate + ".2").touch()
    expect(row(page, job_id)).to_have_attribute("data-status", "completed", timeout=LIVE_TIMEOUT_MS)
    expect(row_bar).to_have_count(0)
    expect(page.locator("#detail-progress")).to_have_count(0)


def test_the_stop_button_stops_a_running_job(
    page: Page, api: Api, job_type: str, make_solver: Callable[[str], Solver]
) -> None:
    job_id = api.submit(**make_solver(ENDLESS_SOLVER).spec(job_type))
    api.wait_status(job_id, "running")
    sign_in(page, api, job_type=job_type)
    expect(row(page, job_id)).to_have_attribute("data-status", "running")
    row(page, job_id).click()
    expect(page.locator("#detail-id")).to_have_text(job_id)

    page.locator("#stop-button").click()
    message = page.locator("#stop-message")
    expect(message).to_contain_text("Stop accepted")
    assert message.get_attribute("data-status") in ("stop_requested", "stopped")

    api.wait_status(job_id, "stopped")
    expect(row(page, job_id)).to_have_attribute("data-status", "stopped", timeout=LIVE_TIMEOUT_MS)
    expect(row(page, job_id).locator(".badge.s-stopped")).to_have_text("stopped")
    expect(page.locator("#job-detail .actions .badge")).to_have_text("stopped")
    expect(page.locator("#stop-button")).to_have_count(0)
    expect(page.locator('#status-chips [data-count="stopped"]')).to_have_text(
        "1", timeout=LIVE_TIMEOUT_MS
    )


def test_the_retry_button_requeues_a_cancelled_job_under_its_id(
    page: Page, api: Api, job_type: str, make_solver: Callable[[str], Solver]
) -> None:
    # Not before an hour from now: the job stays pending, before and after its retry.
    later = int(time.time() * 1000) + 3_600_000
    job_id = api.submit(**make_solver('print("{}")\n').spec(job_type, earliest_start_at=later))
    sign_in(page, api, job_type=job_type)
    row(page, job_id).click()
    badge = page.locator("#job-detail .actions .badge")
    expect(badge).to_have_text("pending")
    expect(page.locator("#stop-button")).to_be_visible()
    expect(page.locator("#retry-button")).to_have_count(0)  # an open job: no retry

    assert api.http.delete(f"/api/jobs/{job_id}").status_code == 204
    job_when(
        api,
        job_id,
        lambda j: (j["status"], j["fail_reason"]) == ("failed", "cancelled"),
        "the job cancelled",
    )
    expect(badge).to_have_text("cancelled", timeout=LIVE_TIMEOUT_MS)
    retry = page.locator("#retry-button")
    expect(retry).to_have_attribute("title", re.compile(r"^POST /api/ops/jobs/\{id\}/requeue: "))
    retry.click()
    message = page.locator("#retry-message")
    expect(message).to_have_text("Retry accepted: pending.")
    expect(message).to_have_attribute("data-status", "pending")
    expect(badge).to_have_text("pending")
    expect(page.locator("#detail-id")).to_have_text(job_id)
    expect(page.locator("#retry-button")).to_have_count(0)
    expect(page.locator("#stop-button")).to_be_visible()
    expect(row(page, job_id)).to_have_attribute("data-status", "pending", timeout=LIVE_TIMEOUT_MS)

    job = api.job(job_id)
    assert job["status"] == "pending"
    last = job["transitions"][-1]
    assert (last["status"], last["reason"], last["by"]) == ("pending", "requeued", "ops: bootstrap")
    # The cancel before it is still on record: the same job went on.
    assert "cancelled" in [t["reason"] for t in job["transitions"][:-1]]
    assert api.http.delete(f"/api/jobs/{job_id}").status_code == 204


def test_the_log_view_keeps_only_the_last_lines(
    page: Page, api: Api, job_type: str, make_solver: Callable[[str], Solver]
) -> None:
    solver = make_solver('for i in range(2500):\n    print(f"line {i}")\nprint("{}")\n')
    job_id = api.submit(**solver.spec(job_type))
    api.wait_status(job_id, "completed")
    sign_in(page, api, job_type=job_type)
    row(page, job_id).click()

    lines = page.locator("#log-lines")
    expect(lines).to_have_attribute("data-count", "2000")
    expect(page.locator("#log-dropped")).to_contain_text("earlier lines not shown")
    expect(lines.locator(".log-line").last).to_contain_text("{}")
    expect(lines.locator(".log-line", has_text="line 2499")).to_have_count(1)
    expect(lines.locator(".log-line", has_text="line 0")).to_have_count(0)
