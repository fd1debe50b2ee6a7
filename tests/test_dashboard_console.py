"""The dashboard's addresses, filters, attempt timeline and audit view in a real
(headless) Chromium against real API and worker processes."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.conftest import Api, Solver, needs_chromium
from tests.test_dashboard import LIVE_TIMEOUT_MS, row, sign_in

pytestmark = [
    pytest.mark.usefixtures("session_worker"),
    needs_chromium,
]


def test_a_job_link_opened_in_a_new_tab_shows_the_job_after_sign_in(
    browser: Browser, api: Api, job_type: str
) -> None:
    job_id = api.submit(type=job_type)  # no worker serves this type: it stays pending
    tab = browser.new_context().new_page()  # no token in this tab's session yet
    try:
        tab.goto(f"{api.url}/#/jobs/{job_id}")
        expect(tab.locator("#login-form")).to_be_visible()
        sign_in(tab, api, query=f"#/jobs/{job_id}")

        expect(tab.locator("#job-detail")).to_be_visible()
        expect(tab.locator("#detail-id")).to_have_text(job_id)
        assert tab.evaluate("location.hash") == f"#/jobs/{job_id}"
        expect(tab.locator("#detail-timeline .attempt .phase[data-phase=pending]")).to_have_count(1)
    finally:
        tab.context.close()


def test_back_and_forward_walk_filters_and_jobs(page: Page, api: Api, job_type: str) -> None:
    job_id = api.submit(type=job_type)
    sign_in(page, api, job_type=job_type)
    assert "type=" + job_type in page.evaluate("location.hash")
    page.locator('#status-chips .chip[data-status="pending"]').click()
    expect(page.locator("#jobs-body")).to_have_attribute("data-filter-status", "pending")
    listed = page.evaluate("location.hash")
    assert "status=pending" in listed
    row(page, job_id).click()
    expect(page.locator("#detail-id")).to_have_text(job_id)
    assert page.evaluate("location.hash").startswith(f"#/jobs/{job_id}")

    page.go_back()
    expect(page.locator("#job-detail")).to_be_hidden()
    assert page.evaluate("location.hash") == listed
    page.go_back()
    expect(page.locator("#jobs-body")).to_have_attribute("data-filter-status", "")
    expect(page.locator('#status-chips .chip[data-status="all"]')).to_have_attribute(
        "aria-pressed", "true"
    )
    page.go_forward()
    expect(page.locator("#jobs-body")).to_have_attribute("data-filter-status", "pending")
    page.go_forward()
    expect(page.locator("#detail-id")).to_have_text(job_id)
    page.keyboard.press("Escape")  # closing goes back to the list's address
    expect(page.locator("#job-detail")).to_be_hidden()
    assert page.evaluate("location.hash") == listed


def test_a_click_whose_press_and_release_straddle_a_reread_of_the_page_opens_the_job(
    page: Page, api: Api, job_type: str
) -> None:
    job_id = api.submit(type=job_type)
    sign_in(page, api, job_type=job_type)
    box = row(page, job_id).bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + 20, box["y"] + box["height"] / 2)
    page.mouse.down()
    # The page is read again and drawn between the press and the release, as the event
    # stream's re-reads do on a busy system.
    page.evaluate("loadPage()")
    page.mouse.up()

    expect(page.locator("#detail-id")).to_have_text(job_id)


def test_filters_live_in_the_address_and_narrow_the_table(
    page: Page, api: Api, job_type: str
) -> None:
    tag = uuid.uuid4().hex[:8]
    grouped = api.submit(type=job_type, group=f"g-{tag}", pool=f"p-{tag}")
    plain = api.submit(type=job_type)
    sign_in(page, api, query=f"#/jobs?type={job_type}&id={plain[:-3]}")
    expect(page.locator("#id-filter")).to_have_value(plain[:-3])
    expect(page.locator("#jobs-body tr")).to_have_count(1)
    expect(row(page, plain)).to_be_visible()

    # A group's own address: the table holds its jobs, its panel on top.
    page.evaluate(f"location.hash = '#/groups/g-{tag}'")
    expect(page.locator("#entity-view")).to_have_attribute("data-kind", "group")
    expect(page.locator("#entity-name")).to_have_text(f"g-{tag}")
    expect(row(page, grouped)).to_be_visible()
    expect(row(page, plain)).to_have_count(0)

    # A filter typed in is put in the address.
    page.evaluate("location.hash = '#/jobs'")
    page.locator("#pool-filter").fill(f"p-{tag}")
    expect(page.locator("#jobs-body")).to_have_attribute("data-filter-pool", f"p-{tag}")
    assert f"pool=p-{tag}" in page.evaluate("location.hash")
    expect(page.locator("#jobs-body tr")).to_have_count(1)
    expect(row(page, grouped)).to_be_visible()
    page.locator("#worker-filter").fill("no such worker")
    expect(page.locator("#worker-filter")).to_have_js_property("validity.valid", False)


def test_each_attempt_is_a_bar_with_its_worker_and_why_it_ended(
    page: Page, api: Api, job_type: str, make_solver: Callable[[str], Solver]
) -> None:
    broken = make_solver('print("no", file=sys.stderr)\nsys.exit(3)\n')
    job_id = api.submit(**broken.spec(job_type, max_attempts=2))
    sign_in(page, api, query=f"#/jobs/{job_id}")
    attempts = page.locator("#detail-timeline .attempt")
    expect(attempts).to_have_count(2, timeout=LIVE_TIMEOUT_MS)
    expect(page.locator("#detail-timeline .attempt[data-end=failed]")).to_have_count(
        2, timeout=LIVE_TIMEOUT_MS
    )
    for attempt in attempts.all():
        worker = attempt.get_attribute("data-worker")
        assert worker, "each attempt names its worker"
        expect(attempt.locator(".attempt-meta")).to_contain_text(worker)
        expect(attempt.locator(".phase[data-phase=running]")).to_have_count(1)
        expect(attempt.locator(".phase").first).to_have_attribute("data-phase", "pending")
    expect(attempts.first.locator(".attempt-end")).to_contain_text("solver_exit")
    expect(attempts.first.locator(".attempt-end")).to_contain_text("re-queued")
    expect(attempts.last.locator(".attempt-end")).to_contain_text("quarantined")
    expect(attempts.last).not_to_have_attribute("data-host", "")


def test_the_audit_view_lists_who_cancelled_a_job(page: Page, api: Api, job_type: str) -> None:
    job_id = api.submit(type=job_type)
    assert api.http.delete(f"/api/jobs/{job_id}").status_code == 204
    sign_in(page, api, query="#/audit")
    expect(page.locator("#audit")).to_be_visible()
    expect(page.locator("#jobs-section")).to_be_hidden()
    entry = page.locator(f'#audit-body tr[data-job-id="{job_id}"]')
    expect(entry).to_have_attribute("data-by", "bootstrap")
    expect(entry).to_contain_text("cancelled")
    entry.locator("a").click()  # the job's own address
    expect(page.locator("#detail-id")).to_have_text(job_id)
    expect(page.locator("#jobs-section")).to_be_visible()
