"""The dashboard's Charts and Bulk action panels in a real (headless) Chromium against
real API and worker processes."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import Api, needs_chromium
from tests.procs import wait_until
from tests.test_dashboard import sign_in

pytestmark = [pytest.mark.usefixtures("session_worker"), needs_chromium]


@pytest.fixture(scope="module")
def quiet_api(start_api: Callable[..., Api]) -> Api:
    """An API whose attempts go to task queues no worker polls: its jobs stay pending."""
    return start_api(TEMPORAL_ACTIVITY_QUEUE_PREFIX=f"unserved-{uuid.uuid4().hex[:8]}-")


def test_the_charts_panel_draws_the_hours_series(page: Page, quiet_api: Api) -> None:
    quiet_api.submit(type=f"chart-{uuid.uuid4().hex[:8]}")
    sign_in(page, quiet_api)
    charts = page.locator("#charts")
    expect(charts).to_be_visible(timeout=30_000)
    expect(charts.locator("figure.chart-box")).to_have_count(4)
    jobs = charts.locator('figure[data-chart="Jobs per minute"]')
    # Sixty minutes of counts (zeros included): a line with a point a minute.
    completed = jobs.locator('path[data-series="completed"]')
    expect(completed).to_have_attribute("d", re.compile(r"^M0\.0,[\d.]+( L[\d.]+,[\d.]+){59}$"))
    expect(page.locator("#charts-summary")).to_contain_text("last hour")


def test_the_bulk_panel_counts_confirms_and_cancels(page: Page, quiet_api: Api) -> None:
    job_type = f"bulkui-{uuid.uuid4().hex[:8]}"
    ids = [quiet_api.submit(type=job_type) for _ in range(2)]
    counted = {"filter": {"type": job_type, "status": "pending"}}
    wait_until(
        lambda: quiet_api.http.post("/api/jobs/bulk/count", json=counted).json()["matched"] == 2,
        what="the jobs counted",
    )
    sign_in(page, quiet_api)
    panel = page.locator("#bulk")
    expect(panel).to_be_visible()
    panel.locator("#bulk-status").fill("pending")
    panel.locator("#bulk-type").fill(job_type)
    panel.locator("#bulk-action").select_option("cancel")
    panel.locator("#bulk-count").click()
    expect(panel.locator("#bulk-message")).to_have_text("cancel 2 jobs?")
    panel.locator("#bulk-confirm").click()
    expect(panel.locator("#bulk-message")).to_have_attribute("data-state", "done", timeout=30_000)
    expect(panel.locator("#bulk-message")).to_contain_text("done 2, failed 0")
    assert all(quiet_api.job(i)["fail_reason"] == "cancelled" for i in ids)
