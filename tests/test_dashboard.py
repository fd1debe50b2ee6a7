"""The dashboard in a real (headless) Chromium against real API and worker processes."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Locator, Page, Route, expect

from tests.conftest import SECRET, Api, Solver, needs_chromium

LIVE_TIMEOUT_MS = 45_000
# Runs until the file `params["release"]` exists (60 s at most), then answers 42.
GATED_SOLVER = (
    "deadline = time.time() + 60\n"
    'while not os.path.exists(params["release"]) and time.time() < deadline:\n'
    "    time.sleep(0.05)\n"
    'print(json.dumps({"answer": 42}))\n'
)

pytestmark = [
    pytest.mark.usefixtures("session_worker"),
    needs_chromium,
]


def sign_in(page: Page, api: Api, *, job_type: str | None = None, query: str = "") -> None:
    """Open the dashboard, enter the token, wait for counts; optionally filter by type."""
    page.goto(f"{api.url}/{query}")
    page.locator("#token-input").fill(SECRET)
    page.locator("#login-button").click()
    expect(page.locator("#login-form")).to_be_hidden()
    expect(page.locator('#status-chips [data-count="completed"]')).to_have_text(
        re.compile(r"^\d+$")
    )
    if job_type is not None:
        page.locator("#type-filter").fill(job_type)
        expect(page.locator("#jobs-body")).to_have_attribute("data-filter-type", job_type)


def row(page: Page, job_id: str) -> Locator:
    """The jobs table row of a job."""
    return page.locator(f'#jobs-body tr[data-job-id="{job_id}"]')


def test_the_favicon_is_served_without_a_token_and_the_page_links_it(page: Page, api: Api) -> None:
    page.goto(f"{api.url}/")
    href = page.locator('link[rel="icon"]').get_attribute("href")
    assert href is not None
    icon = httpx.get(page.evaluate("href => new URL(href, location.href).href", href))
    direct = httpx.get(f"{api.url}/favicon.ico")

    assert icon.status_code == 200, icon.text
    assert icon.headers["content-type"] == "image/x-icon"
    assert icon.content.startswith(b"\x00\x00\x01\x00")  # an ICO header
    assert direct.content == icon.content


def test_a_wrong_token_is_refused_and_asked_for_again(page: Page, api: Api) -> None:
    page.goto(api.url)
    expect(page.locator("#login-form")).to_be_visible()
    page.locator("#token-input").fill("not-the-secret")
    page.locator("#login-button").click()
    expect(page.locator("#login-error")).to_contain_text("refused")
    expect(page.locator("#login-form")).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('jobforge.token')") is None

    sign_in(page, api)
    assert page.evaluate("sessionStorage.getItem('jobforge.token')") == SECRET
    page.reload()  # the token is kept for the session: no form this time
    expect(page.locator("#login-form")).to_be_hidden()
    expect(page.locator('#status-chips [data-count="all"]')).to_have_text(re.compile(r"^\d+$"))


def test_jobs_appear_and_change_live_filter_by_status_and_link_to_temporal(
    page: Page, api: Api, job_type: str, make_solver: Callable[[str], Solver], tmp_path: Path
) -> None:
    sign_in(page, api, job_type=job_type)
    expect(page.locator("#jobs-empty")).to_be_visible()
    page.evaluate("window.notReloaded = true")

    # Runs until the test has seen it running (a timed run can be over before the page
    # shows it on a busy machine).
    gated = make_solver(GATED_SOLVER)
    release = tmp_path / "release"
    broken = make_solver('print("no", file=sys.stderr)\nsys.exit(3)\n')
    done_id = api.submit(**gated.spec(job_type, params={"release": str(release)}))
    expect(row(page, done_id)).to_be_visible()
    expect(row(page, done_id)).to_have_attribute("data-status", "running")
    release.touch()
    expect(row(page, done_id)).to_have_attribute(
        "data-status", "completed", timeout=LIVE_TIMEOUT_MS
    )
    expect(row(page, done_id).locator('[data-field="attempts"]')).to_have_text("1")
    expect(row(page, done_id).locator('[data-field="worker"]')).not_to_have_text("—")

    failed_id = api.submit(**broken.spec(job_type, max_attempts=1))
    expect(page.locator("#jobs-body tr").first).to_have_attribute("data-job-id", failed_id)
    expect(row(page, failed_id)).to_have_attribute(
        "data-status", "quarantined", timeout=LIVE_TIMEOUT_MS
    )
    assert page.evaluate("window.notReloaded") is True
    expect(page.locator('#status-chips [data-count="completed"]')).to_have_text("1")
    expect(page.locator('#status-chips [data-count="quarantined"]')).to_have_text("1")

    # The completed chip shows only completed jobs; clicking it again shows all.
    page.locator('#status-chips .chip[data-status="completed"]').click()
    expect(row(page, failed_id)).to_have_count(0)
    expect(page.locator("#jobs-body tr")).to_have_count(1)
    expect(page.locator('#jobs-body tr[data-status="completed"]')).to_have_count(1)
    expect(row(page, done_id)).to_be_visible()
    page.locator('#status-chips .chip[data-status="completed"]').click()
    expect(page.locator("#jobs-body tr")).to_have_count(2)

    # The detail panel: attempts, result, the Temporal UI link; no cancel once done.
    config = api.http.get("/api/config").json()
    row(page, done_id).click()
    expect(page.locator("#detail-id")).to_have_text(done_id)
    expect(page.locator("#detail-attempts")).to_have_text("1 / 3")
    expect(page.locator("#detail-result")).to_contain_text('"answer": 42')
    expect(page.locator("#detail-transitions tbody tr")).to_have_count(4)
    link = page.locator("#temporal-link")
    assert link.get_attribute("href") == (
        f"{config['temporal_ui_url']}/namespaces/default/workflows/{done_id}"
    )
    expect(page.locator("#cancel-button")).to_have_count(0)

    row(page, failed_id).click()
    expect(page.locator("#detail-id")).to_have_text(failed_id)
    expect(page.locator("#detail-failures tbody tr")).to_have_count(1)


def test_a_refused_cancel_shows_the_apis_409(
    page: Page, api: Api, job_type: str, make_solver: Callable[[str], Solver]
) -> None:
    solver = make_solver('print("{}")\n')
    job_id = api.submit(**solver.spec(job_type))
    api.wait_status(job_id, "completed")
    sign_in(page, api, job_type=job_type)
    expect(row(page, job_id)).to_have_attribute("data-status", "completed")

    # A stale page: the detail still says pending, so the button is there.
    def stale(route: Route) -> None:
        if route.request.method != "GET":
            route.continue_()
            return
        response = route.fetch()
        route.fulfill(response=response, json={**response.json(), "status": "pending"})

    page.route(f"**/api/jobs/{job_id}", stale)
    row(page, job_id).click()
    page.locator("#cancel-button").click()
    expect(page.locator("#cancel-message")).to_contain_text("Not cancelled")
    expect(page.locator("#cancel-message")).to_contain_text("completed")
    assert api.job(job_id)["status"] == "completed"
    page.unroute_all(behavior="ignoreErrors")


def test_the_cancel_button_cancels_a_pending_job(
    page: Page,
    quiet_api: Api,
    job_type: str,
    make_solver: Callable[[str], Solver],
) -> None:
    # Nothing polls this API's activity queues, so its jobs stay pending.
    lonely = quiet_api
    sign_in(page, lonely, job_type=job_type)
    job_id = lonely.submit(**make_solver('print("{}")\n').spec(job_type))
    expect(row(page, job_id)).to_have_attribute("data-status", "pending")

    row(page, job_id).click()
    expect(page.locator("#detail-id")).to_have_text(job_id)
    page.locator("#cancel-button").click()
    expect(page.locator("#cancel-message")).to_have_text("Cancelled.")
    expect(row(page, job_id)).to_have_attribute("data-status", "failed")
    expect(row(page, job_id).locator('[data-field="status"]')).to_have_text("cancelled")
    expect(page.locator("#cancel-button")).to_have_count(0)
    job = lonely.job(job_id)
    assert (job["status"], job["fail_reason"]) == ("failed", "cancelled")


def test_the_fleet_shows_workers_with_liveness_and_active_jobs(
    page: Page, api: Api, job_type: str, make_solver: Callable[[str], Solver], tmp_path: Path
) -> None:
    release = tmp_path / "release"
    solver = make_solver(GATED_SOLVER)
    job_id = api.submit(**solver.spec(job_type, params={"release": str(release)}))
    try:
        api.wait_status(job_id, "running")
        sign_in(page, api)
        worker = page.locator('#fleet-list .worker[data-worker-id="session-worker"]')
        expect(worker).to_have_attribute("data-alive", "true")
        expect(worker.locator(".dot.alive")).to_have_count(1)
        expect(worker.locator(".active-jobs")).to_have_text(re.compile(r"^[1-9]\d* active$"))
    finally:
        release.touch()
    assert api.wait_status(job_id, "completed")["status"] == "completed"


def test_the_fleet_shows_each_workers_host_telemetry_compactly(page: Page, api: Api) -> None:
    quiet, busy = f"quiet-{uuid.uuid4().hex[:6]}", f"busy-{uuid.uuid4().hex[:6]}"
    for worker_id in (quiet, busy):
        register = api.http.post("/api/workers/register", json={"worker_id": worker_id})
        assert register.status_code == 204, register.text
    info = {
        "cpu_percent": 37.4,
        "mem_used_bytes": 6 * 2**30,
        "mem_total_bytes": 16 * 2**30,
        "disk_free_bytes": 120 * 2**30,
        "load_avg": [1.5, 1.25, 0.75],
        "running_jobs": 2,
        "version": "9.8.7",
    }
    beat = api.http.post(f"/api/workers/{busy}/heartbeat", json={"info": info})
    assert beat.status_code == 204, beat.text

    sign_in(page, api)

    host = page.locator(f'#fleet-list .worker[data-worker-id="{busy}"] .host')
    expect(host.locator('[data-field="cpu"]')).to_have_text("CPU 37%", timeout=LIVE_TIMEOUT_MS)
    expect(host.locator('[data-field="mem"]')).to_have_text("mem 6.0/16.0 GB")
    expect(host.locator('[data-field="load"]')).to_have_text("load 1.50")
    expect(host.locator('[data-field="running"]')).to_have_text("2 running")
    expect(host.locator('[data-field="version"]')).to_have_text("v9.8.7")
    expect(host).to_have_text("CPU 37% · mem 6.0/16.0 GB · load 1.50 · 2 running · v9.8.7")
    # Registered but no heartbeat with telemetry yet: no host line at all.
    expect(page.locator(f'#fleet-list .worker[data-worker-id="{quiet}"]')).to_be_visible()
    expect(page.locator(f'#fleet-list .worker[data-worker-id="{quiet}"] .host')).to_have_count(0)
    # It reported neither cores nor memory: it says so, not a default of 1 core, 1 GB.
    expect(page.locator(f'#fleet-list .worker[data-worker-id="{quiet}"]')).to_contain_text(
        "agent · cores not reported · memory not reported · heartbeat"
    )
    # The native session worker sends its own (read from /proc) with its heartbeat.
    native = page.locator('#fleet-list .worker[data-worker-id="session-worker"] .host')
    expect(native.locator('[data-field="version"]')).to_have_text("v0.1.0")
    expect(native.locator('[data-field="mem"]')).to_have_text(
        re.compile(r"^mem \d+\.\d/\d+\.\d GB$")
    )


def test_with_events_require_token_the_stream_uses_a_stream_token(
    page: Page,
    start_api: Callable[..., Api],
    job_type: str,
    make_solver: Callable[[str], Solver],
) -> None:
    guarded = start_api(EVENTS_REQUIRE_TOKEN="true")
    try:
        sign_in(page, guarded, job_type=job_type)
        expect(page.locator("#stream-status")).to_have_text("live")
        job_id = guarded.submit(**make_solver('print("{}")\n').spec(job_type))
        expect(row(page, job_id)).to_have_attribute(
            "data-status", "completed", timeout=LIVE_TIMEOUT_MS
        )
    finally:
        guarded.proc.stop(timeout=15)


def test_an_earlier_transition_of_the_same_millisecond_does_not_turn_a_row_back(
    page: Page, api: Api, job_type: str, make_solver: Callable[[str], Solver]
) -> None:
    # A job may go assigned, running and completed within one millisecond, and a stream
    # that replays from before the page's read sends those transitions after the row
    # was read completed: their `seq` says they came first.
    job_id = api.submit(**make_solver('print("{}")\n').spec(job_type))
    job = api.wait_status(job_id, "completed")
    last = job["transitions"][-1]
    sign_in(page, api, job_type=job_type)
    page.locator('#status-chips .chip[data-status="completed"]').click()
    expect(row(page, job_id)).to_have_attribute("data-status", "completed")
    running = next(t for t in job["transitions"] if t["status"] == "running")
    event = {
        **running,
        "event": "job:running",
        "id": job_id,
        "type": job_type,
        "priority": job["priority"],
        "created_at": job["created_at"],
        "ts": last["ts"],
    }
    # The stream's handler takes the event; what the row shows after it (None: gone).
    deliver = (
        "event => { handleEvent(event, new Map());"
        " const tr = document.querySelector(`#jobs-body tr[data-job-id='${event.id}']`);"
        " return tr ? tr.dataset.status : null; }"
    )

    assert page.evaluate(deliver, event) == "completed"
    # One after it in the same millisecond does change the row (and takes it out of
    # the completed filter).
    assert page.evaluate(deliver, {**event, "seq": last["seq"] + 1}) is None


def test_a_replayed_transition_from_before_the_read_does_not_put_another_pages_job_on_top(
    page: Page, api: Api, job_type: str, make_solver: Callable[[str], Solver]
) -> None:
    # A stream opened after a page replays from before its read: the jobs of page 2 that
    # completed then are already on page 2, not new to page 1.
    solver = make_solver('print("{}")\n')
    ids = [api.submit(**solver.spec(job_type, params={"i": i})) for i in range(3)]
    jobs = {job_id: api.wait_status(job_id, "completed") for job_id in ids}
    sign_in(page, api, job_type=job_type, query="?limit=2")
    page.locator('#status-chips .chip[data-status="completed"]').click()
    rows = page.locator("#jobs-body tr")
    expect(rows).to_have_count(2)
    expect(page.locator("#next-page")).to_be_enabled()
    shown = [tr.get_attribute("data-job-id") for tr in rows.all()]
    [elsewhere] = [job_id for job_id in ids if job_id not in shown]
    job = jobs[elsewhere]
    completed = {
        **job["transitions"][-1],
        "event": "job:completed",
        "id": elsewhere,
        "type": job_type,
        "priority": job["priority"],
        "created_at": job["created_at"],
    }
    # The stream's batch handler takes the events; the rows on screen after it.
    deliver = (
        "events => { state.queued.push(...events); flushEvents();"
        " return [...document.querySelectorAll('#jobs-body tr')].map(tr => tr.dataset.jobId); }"
    )

    assert page.evaluate(deliver, [completed]) == shown
    # A job that completes after the read is new to page 1: on top at once.
    later = {**completed, "ts": completed["ts"] + 3_600_000}
    assert page.evaluate(deliver, [later]) == [elsewhere, shown[0]]


def test_pages_are_walked_with_next_and_prev(
    page: Page, api: Api, job_type: str, make_solver: Callable[[str], Solver]
) -> None:
    solver = make_solver('print("{}")\n')
    ids = {api.submit(**solver.spec(job_type, params={"i": i})) for i in range(5)}
    for job_id in ids:
        api.wait_status(job_id, "completed")
    sign_in(page, api, job_type=job_type, query="?limit=2")
    page.locator('#status-chips .chip[data-status="completed"]').click()
    expect(page.locator("#jobs-body")).to_have_attribute("data-filter-status", "completed")
    # The filter is in the address at once; its first page is read when Next is back.
    expect(page.locator("#next-page")).to_be_enabled()

    def shown() -> list[str]:
        return [tr.get_attribute("data-job-id") or "" for tr in page.locator("#jobs-body tr").all()]

    rows = page.locator("#jobs-body tr")
    seen: list[list[str]] = []
    for number, count in [(1, 2), (2, 2), (3, 1)]:
        expect(page.locator("#jobs-body")).to_have_attribute("data-page", str(number))
        expect(page.locator("#page-info")).to_have_text(f"Page {number}")
        expect(rows).to_have_count(count)
        seen.append(shown())
        if number < 3:
            page.locator("#next-page").click()
    expect(page.locator("#next-page")).to_be_disabled()
    assert sorted(job_id for ids_on_page in seen for job_id in ids_on_page) == sorted(ids)

    page.locator("#prev-page").click()
    expect(page.locator("#page-info")).to_have_text("Page 2")
    expect(rows.first).to_have_attribute("data-job-id", seen[1][0])
    assert shown() == seen[1]


def test_chips_catch_up_with_counts_the_api_reuses_for_a_while(
    page: Page, start_api: Callable[..., Api], job_type: str, make_solver: Callable[[str], Solver]
) -> None:
    # Counts are reused METRICS_CACHE_MS: the re-read right after the job's events gets
    # the count from before them, so the page reads once more after that window.
    slow = start_api(METRICS_CACHE_MS="5000")
    sign_in(page, slow, job_type=job_type)
    completed = page.locator('#status-chips [data-count="completed"]')
    expect(completed).to_have_text("0")

    job_id = slow.submit(**make_solver('print("{}")\n').spec(job_type))
    slow.wait_status(job_id, "completed")

    expect(completed).to_have_text("1", timeout=15_000)
