"""The dashboard's scheduling panels (groups, pools, targets, a job's target and waiting
reason) in a real (headless) Chromium against real API and worker processes."""

from __future__ import annotations

import re
import socket
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Locator, Page, expect

from tests.conftest import REGISTERED_TYPE, Api, Solver, needs_chromium, wait_until
from tests.test_dashboard import GATED_SOLVER, LIVE_TIMEOUT_MS, row, sign_in

pytestmark = [
    pytest.mark.usefixtures("session_worker"),
    needs_chromium,
]


@pytest.fixture
def name() -> str:
    """A fresh group, pool or target name per test."""
    return f"d-{uuid.uuid4().hex[:10]}"


def ok(response: Any) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def group_item(page: Page, group: str) -> Locator:
    """The groups panel's entry for a group."""
    return page.locator(f'#group-list li[data-group="{group}"]')


def pool_item(page: Page, pool: str) -> Locator:
    """The pools panel's entry for a pool."""
    return page.locator(f'#pool-list li[data-pool="{pool}"]')


def target_item(page: Page, target: str) -> Locator:
    """The targets panel's entry for a target."""
    return page.locator(f'#target-list li[data-target="{target}"]')


def test_a_paused_group_shows_as_paused_and_its_resume_button_resumes_it(
    page: Page, api: Api, name: str
) -> None:
    ok(api.http.post(f"/api/groups/{name}/pause"))
    held = api.submit(type=REGISTERED_TYPE, group=name)
    sign_in(page, api)

    item = group_item(page, name)
    expect(item).to_have_attribute("data-paused", "true")
    expect(item.locator('[data-field="state"]')).to_have_text("paused")
    expect(item.locator('[data-field="max-parallel"]')).to_have_text("max_parallel ∞")
    expect(item.locator('[data-field="weight"]')).to_have_text("weight 1")
    expect(item.locator('.count-chip[data-status="pending"]')).to_have_attribute("data-count", "1")
    expect(item.locator("button.group-pause")).to_have_count(0)

    item.locator("button.group-resume").click()
    expect(item).to_have_attribute("data-paused", "false")
    expect(item.locator("button.group-pause")).to_have_text("Pause")
    assert ok(api.http.get(f"/api/groups/{name}"))["paused"] is False
    api.wait_status(held, "completed")
    expect(item.locator('.count-chip[data-status="completed"]')).to_have_attribute(
        "data-count", "1"
    )

    # And Pause pauses it again.
    item.locator("button.group-pause").click()
    expect(item).to_have_attribute("data-paused", "true")
    assert ok(api.http.get(f"/api/groups/{name}"))["paused"] is True
    ok(api.http.post(f"/api/groups/{name}/resume"))


def test_a_pool_panel_shows_capacity_and_units_in_use(
    page: Page,
    api: Api,
    name: str,
    job_type: str,
    make_solver: Callable[[str], Solver],
    tmp_path: Path,
) -> None:
    ok(api.http.put(f"/api/pools/{name}", json={"capacity": 3}))
    release = tmp_path / "release"
    solver = make_solver(GATED_SOLVER)
    job_id = api.submit(
        **solver.spec(job_type, pool=name, cost_units=2, params={"release": str(release)})
    )
    try:
        api.wait_status(job_id, "running")
        sign_in(page, api)
        item = pool_item(page, name)
        expect(item.locator('[data-field="capacity"]')).to_have_text("3")
        expect(item.locator('[data-field="in-use"]')).to_have_text("2")
        expect(item.locator('[data-field="running"]')).to_have_text("1 running")
        expect(item).to_have_attribute("data-full", "false")
    finally:
        release.touch()
    api.wait_status(job_id, "completed")
    # The panel follows on its own cadence: the units come back.
    expect(item.locator('[data-field="in-use"]')).to_have_text("0", timeout=LIVE_TIMEOUT_MS)


def test_a_job_waiting_at_a_paused_group_says_group_paused_in_its_detail(
    page: Page, api: Api, name: str, job_type: str, make_solver: Callable[[str], Solver]
) -> None:
    ok(api.http.post(f"/api/groups/{name}/pause"))
    job_id = api.submit(**make_solver('print("{}")\n').spec(job_type, group=name))
    try:
        sign_in(page, api, job_type=job_type)
        expect(row(page, job_id)).to_have_attribute("data-status", "pending")
        row(page, job_id).click()
        expect(page.locator("#detail-id")).to_have_text(job_id)
        expect(page.locator("#detail-group")).to_contain_text(name)
        expect(page.locator("#detail-group [data-group]")).to_have_attribute("data-paused", "true")
        expect(page.locator("#detail-pool")).to_have_count(0)
        # The open detail of a pending job is re-read on the panels' cadence, so a reason
        # the gate gives after the first read shows without a click.
        waiting = page.locator("#detail-waiting-for [data-waiting-for]")
        expect(waiting).to_have_attribute("data-waiting-for", "group_paused")
        expect(waiting).to_contain_text("group_paused")

        # Resumed from the detail (it covers the groups panel): the job runs.
        page.locator("#detail-group-resume").click()
        expect(group_item(page, name)).to_have_attribute("data-paused", "false")
        expect(row(page, job_id)).to_have_attribute(
            "data-status", "completed", timeout=LIVE_TIMEOUT_MS
        )
        expect(page.locator("#detail-waiting-for")).to_have_count(0)
    finally:
        ok(api.http.post(f"/api/groups/{name}/resume"))
    api.wait_status(job_id, "completed")


@pytest.mark.parametrize("how", ["skip", "retry"])
def test_a_halted_targets_resume_buttons_resume_it(
    page: Page,
    api: Api,
    name: str,
    job_type: str,
    make_solver: Callable[[str], Solver],
    how: str,
) -> None:
    target = f"tenant/{name}"
    failing = api.submit(**make_solver("sys.exit(3)\n").spec(job_type, target=target))
    api.wait_status(failing, "quarantined")
    wait_until(
        lambda: ok(api.http.get(f"/api/targets/{target}"))["halted"],
        timeout=30,
        what="the target to halt",
    )
    later = api.submit(**make_solver('print("{}")\n').spec(job_type, target=target))

    sign_in(page, api, job_type=job_type)
    row(page, later).click()
    panel = page.locator("#detail-target")
    expect(panel).to_have_attribute("data-target", target)
    expect(panel).to_have_attribute("data-halted", "true")
    expect(page.locator("#target-state")).to_have_text("halted")
    expect(page.locator("#target-halted-by")).to_have_text(failing)
    expect(page.locator("#target-counts")).to_contain_text("1 pending")
    expect(page.locator("#detail-waiting-for [data-waiting-for]")).to_have_attribute(
        "data-waiting-for", "target_halted"
    )

    page.locator(f"#target-resume-{how}").click()
    expect(page.locator("#target-message")).to_have_text(f"Resumed ({how}).")
    if how == "skip":
        assert ok(api.http.get(f"/api/targets/{target}"))["halted"] is False
        expect(panel).to_have_attribute("data-halted", "false")
        expect(page.locator("#target-resume-skip")).to_have_count(0)
        api.wait_status(later, "completed")
        assert api.job(failing)["status"] == "quarantined"
    else:
        # The halting job runs again, first; it fails again and halts the target again.
        def failed_twice() -> dict[str, Any] | None:
            job = api.job(failing)
            return job if job["status"] == "quarantined" and job["attempts"] == 2 else None

        wait_until(failed_twice, timeout=30, what="the retried job to fail again")
        assert api.job(later)["status"] == "pending"
        expect(page.locator("#target-halted-by")).to_have_text(failing)
        ok(api.http.post(f"/api/targets/{target}/resume", json={"job": "skip"}))
        api.wait_status(later, "completed")
    expect(row(page, later)).to_have_attribute("data-status", "completed", timeout=LIVE_TIMEOUT_MS)


def test_a_halted_target_shows_in_the_targets_panel_and_its_skip_button_resumes_it(
    page: Page, api: Api, name: str, job_type: str, make_solver: Callable[[str], Solver]
) -> None:
    target = f"tenant/{name}"
    failing = api.submit(**make_solver("sys.exit(3)\n").spec(job_type, target=target))
    api.wait_status(failing, "quarantined")
    later = api.submit(**make_solver('print("{}")\n').spec(job_type, target=target))

    def listed_halted() -> bool:
        views = ok(api.http.get("/api/targets"))
        return any(view["target"] == target and view["halted"] for view in views)

    wait_until(listed_halted, timeout=30, what="the target listed as halted")
    sign_in(page, api)

    item = target_item(page, target)
    expect(item).to_have_attribute("data-halted", "true")
    expect(item.locator('[data-field="state"]')).to_have_text("halted")
    expect(item.locator('[data-field="halted-by"] button')).to_have_text(failing)
    expect(item.locator('[data-field="running"]')).to_have_text("0 running")
    expect(item.locator('[data-field="pending"]')).to_have_text(
        "1 pending", timeout=LIVE_TIMEOUT_MS
    )
    expect(item.locator("button.target-resume-retry")).to_have_text("Resume (retry)")

    # The halting job is a link to its detail (which covers the panel: closed again).
    item.locator('[data-field="halted-by"] button').click()
    expect(page.locator("#detail-id")).to_have_text(failing)
    expect(page.locator("#detail-target")).to_have_attribute("data-halted", "true")
    page.locator("#close-detail").click()

    item.locator("button.target-resume-skip").click()
    expect(item).to_have_attribute("data-halted", "false")
    expect(item.locator('[data-field="state"]')).to_have_text("open")
    expect(item.locator("button.target-resume-skip")).to_have_count(0)
    expect(item.locator('[data-field="halted-by"]')).to_have_count(0)
    view = ok(api.http.get(f"/api/targets/{target}"))
    assert view["halted"] is False
    assert view["halted_by"] is None
    api.wait_status(later, "completed")
    assert api.job(failing)["status"] == "quarantined"
    # The panel follows on its own cadence: the later job is no longer pending.
    expect(item.locator('[data-field="pending"]')).to_have_text(
        "0 pending", timeout=LIVE_TIMEOUT_MS
    )
    expect(item).to_have_attribute("data-halted", "false")


def test_the_panels_cost_one_list_call_each_per_refresh(page: Page, api: Api) -> None:
    def paths() -> list[str]:
        """The paths the page has fetched so far, from its resource timing."""
        urls: list[str] = page.evaluate(
            "performance.getEntriesByType('resource').map((entry) => entry.name)"
        )
        return [re.sub(r"\?.*", "", url.removeprefix(api.url)) for url in urls]

    sign_in(page, api)
    expect(page.locator("#group-list li").first).to_be_visible()
    expect(page.locator("#target-list li").first).to_be_visible()

    # Two refreshes after the first paint: still one read per panel each, none per job.
    def refreshed_twice() -> list[str] | None:
        found = paths()
        return found if found.count("/api/workers") >= 3 else None

    seen = wait_until(
        refreshed_twice,
        timeout=30,
        what="two refreshes of the panels",
    )
    refreshes = seen.count("/api/workers")
    assert refreshes - 1 <= seen.count("/api/groups") <= refreshes + 1
    assert refreshes - 1 <= seen.count("/api/pools") <= refreshes + 1
    assert refreshes - 1 <= seen.count("/api/targets") <= refreshes + 1
    lists = {"/api/jobs/page", "/api/jobs/counts", "/api/jobs/events"}
    per_item = [
        path
        for path in seen
        if path.startswith(("/api/groups/", "/api/pools/", "/api/targets/"))
        or (path.startswith("/api/jobs/") and path not in lists)
    ]
    assert per_item == []


def test_a_pinned_jobs_detail_shows_its_host_fields_and_waiting_for_host(
    page: Page, api: Api, job_type: str, make_solver: Callable[[str], Solver]
) -> None:
    solver = make_solver('print("{}")\n')
    nowhere = f"nowhere-{uuid.uuid4().hex[:6]}"
    waiting = api.submit(**solver.spec(job_type, require_host=nowhere))
    ran = api.submit(**solver.spec(job_type, preferred_host="session-worker"))
    api.wait_status(ran, "completed")
    try:
        sign_in(page, api, job_type=job_type)
        row(page, waiting).click()
        expect(page.locator("#detail-id")).to_have_text(waiting)
        expect(page.locator("#detail-require-host")).to_have_text(nowhere)
        reason = page.locator("#detail-waiting-for [data-waiting-for]")
        expect(reason).to_have_attribute("data-waiting-for", "host")
        expect(page.locator("#detail-host")).to_have_count(0)

        row(page, ran).click()
        expect(page.locator("#detail-id")).to_have_text(ran)
        expect(page.locator("#detail-preferred-host")).to_have_text("session-worker")
        expect(page.locator("#detail-host")).to_have_text(socket.gethostname())
    finally:
        api.http.delete(f"/api/jobs/{waiting}")


def test_a_burst_of_job_events_rereads_the_panels_before_their_cadence(
    page: Page, api: Api, name: str
) -> None:
    """The page's timers are Playwright's fake clock, paused after the first read and
    moved by hand: the regular read (PANELS_EVERY_MS, 5 s after the first) has not come
    when the clock has moved 1.5 s past the job's row, so the panels' read that follows
    is the one the job's events asked for."""

    pools_reads: list[str] = []
    page.on(
        "requestfinished",
        lambda request: (
            pools_reads.append(request.url) if re.search(r"/api/pools(\?|$)", request.url) else None
        ),
    )

    def reads() -> int:
        page.evaluate("0")  # the sync API hands its events over while it waits on a call
        return len(pools_reads)

    def page_now() -> int:
        now: int = page.evaluate("Date.now()")
        return now

    def pause() -> bool:
        try:  # a moment ahead of the page's time, which moves on meanwhile
            page.clock.pause_at((page_now() + 200) / 1000)  # seconds
        except PlaywrightError as error:
            if "to the past" not in str(error):
                raise
            return False
        return True

    page.clock.install()
    sign_in(page, api)
    wait_until(lambda: reads() == 1, timeout=30, what="the panels' first read")
    # The regular read is due 5 s after the first read ended, which was before this.
    regular_at = page_now() + 5000 - 200
    wait_until(pause, timeout=10, what="the page's clock paused")
    first = reads()
    job_id = api.submit(type=REGISTERED_TYPE, pool=name)

    def listed() -> bool:
        page.clock.run_for(50)  # the stream's events are handled on a 50 ms timer
        return row(page, job_id).count() == 1

    # Polled twice a second: 0.1 s of the page's time per second of the test's.
    wait_until(listed, timeout=30, interval=0.5, what="the job's row from its event")
    assert reads() == first, "the panels were read again before the events asked"
    assert page_now() + 1500 < regular_at, "too close to the regular read to tell them apart"
    page.clock.run_for(1500)
    wait_until(lambda: reads() > first, timeout=10, what="the panels read after the events")
