"""The dashboard's Schedules panel in a real (headless) Chromium against real API and
worker processes: a schedule's timing, next firing and last job, and its buttons."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.conftest import REGISTERED_TYPE, Api, needs_chromium, wait_until
from tests.test_dashboard import sign_in

pytestmark = [
    pytest.mark.usefixtures("session_worker"),
    needs_chromium,
]


@pytest.fixture
def schedule_id(api: Api) -> Iterator[str]:
    made = f"d-{uuid.uuid4().hex[:10]}"
    yield made
    api.http.delete(f"/api/schedules/{made}")


def schedule(api: Api, schedule_id: str) -> dict[str, Any]:
    answer = api.http.get(f"/api/schedules/{schedule_id}")
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def schedule_item(page: Page, schedule_id: str) -> Locator:
    """The Schedules panel's entry for a schedule."""
    return page.locator(f'#schedule-list li[data-schedule="{schedule_id}"]')


def test_the_panel_shows_a_schedule_and_its_buttons_pause_trigger_and_resume_it(
    page: Page, api: Api, schedule_id: str
) -> None:
    # Weekly: an interval fires at the multiples of it since the epoch, so an hourly
    # one made at 14:59:50 fires at 15:00 before the panel shows "not fired yet".
    body = {"id": schedule_id, "interval": 7 * 86400, "job": {"type": REGISTERED_TYPE}}
    created = api.http.post("/api/schedules", json=body)
    assert created.status_code == 201, created.text
    sign_in(page, api)

    item = schedule_item(page, schedule_id)
    expect(item).to_have_attribute("data-paused", "false", timeout=30_000)
    expect(item.locator('[data-field="state"]')).to_have_text("active")
    expect(item.locator('[data-field="when"]')).to_have_text("every 168 h 0 min")
    expect(item.locator('[data-field="type"]')).to_have_text(REGISTERED_TYPE)
    expect(item.locator('[data-field="next"]')).to_contain_text("next ")
    expect(item.locator('[data-field="last"]')).to_have_text("not fired yet")

    item.locator("button.schedule-pause").click()
    expect(item).to_have_attribute("data-paused", "true")
    expect(item.locator('[data-field="next"]')).to_have_text("no next firing")
    assert schedule(api, schedule_id)["paused"] is True

    # A trigger fires a paused schedule too; its job shows as the last one, and runs.
    item.locator("button.schedule-trigger").click()
    fired = wait_until(
        lambda: schedule(api, schedule_id)["recent"], timeout=30, what="the triggered firing"
    )
    # The panel's next read (PANELS_EVERY_MS) shows it.
    expect(item.locator('[data-field="last"] button[data-job]')).to_have_attribute(
        "data-job", fired[-1]["job_id"], timeout=30_000
    )
    expect(item.locator('[data-field="last-status"]')).to_have_text("completed", timeout=30_000)

    item.locator("button.schedule-resume").click()
    expect(item).to_have_attribute("data-paused", "false")
    assert schedule(api, schedule_id)["paused"] is False
