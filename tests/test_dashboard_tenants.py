"""The dashboard signed in with a tenant's token, in a real (headless) Chromium against
real API and worker processes: a badge names the tenant and the role, it lists only that
tenant's jobs (live ones too), and the buttons its role may not use are not shown."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import Api, needs_chromium
from tests.test_dashboard import LIVE_TIMEOUT_MS, row

pytestmark = [
    pytest.mark.usefixtures("session_worker"),
    needs_chromium,
]


def create_token(api: Api, role: str, tenant: str | None) -> dict[str, Any]:
    body = {"name": f"{role}-{uuid.uuid4().hex[:6]}", "role": role, "tenant": tenant}
    answer = api.http.post("/api/tokens", json=body)
    assert answer.status_code == 201, answer.text
    created: dict[str, Any] = answer.json()
    return created


def submit(api: Api, token: str, job_type: str) -> str:
    answer = api.http.post(
        "/api/jobs", json={"type": job_type}, headers={"Authorization": f"Bearer {token}"}
    )
    assert answer.status_code == 201, answer.text
    job_id: str = answer.json()["id"]
    return job_id


def sign_in_with(page: Page, api: Api, token: str, job_type: str) -> None:
    page.goto(api.url)
    page.locator("#token-input").fill(token)
    page.locator("#login-button").click()
    expect(page.locator("#login-form")).to_be_hidden()
    expect(page.locator('#status-chips [data-count="pending"]')).to_have_text(re.compile(r"^\d+$"))
    page.locator("#type-filter").fill(job_type)
    expect(page.locator("#jobs-body")).to_have_attribute("data-filter-type", job_type)


def test_a_tenants_reader_sees_its_tenant_with_a_badge_and_no_buttons_it_may_not_use(
    page: Page, api: Api, job_type: str
) -> None:
    tag = uuid.uuid4().hex[:6]
    acme, bravo = f"acme-{tag}", f"bravo-{tag}"
    reader = create_token(api, "reader", acme)
    producer = create_token(api, "producer", acme)
    other = create_token(api, "producer", bravo)
    # No worker serves the type: the jobs stay pending (cancellable and stoppable).
    mine = submit(api, producer["token"], job_type)
    theirs = submit(api, other["token"], job_type)
    plain = api.submit(type=job_type)

    sign_in_with(page, api, reader["token"], job_type)
    badge = page.locator("#principal-badge")
    expect(badge).to_be_visible()
    expect(badge).to_have_text(f"{acme} · reader")
    expect(badge).to_have_attribute("data-tenant", acme)
    expect(row(page, mine)).to_be_visible(timeout=LIVE_TIMEOUT_MS)
    # A job made after sign-in reaches the page live (the tenant's own event stream);
    # bravo's, made before it, and the one without a tenant never do.
    later = submit(api, producer["token"], job_type)
    theirs_later = submit(api, other["token"], job_type)
    expect(row(page, later)).to_be_visible(timeout=LIVE_TIMEOUT_MS)
    for job_id in (theirs, plain, theirs_later):
        expect(row(page, job_id)).to_have_count(0)
    expect(page.locator('#status-chips [data-count="pending"]')).not_to_have_text("0")

    # The open job shows no Cancel, Stop or Retry: a reader may only read.
    row(page, mine).click()
    expect(page.locator("#temporal-link")).to_be_visible()
    expect(page.locator("#job-detail")).to_contain_text(mine)
    for button in ("#cancel-button", "#stop-button", "#retry-button"):
        expect(page.locator(button)).to_have_count(0)

    # The same job, signed in with acme's producer token: Cancel and Stop are there, the
    # operator's Retry is not.
    page.locator("#close-detail").click()
    page.locator("#sign-out").click()
    sign_in_with(page, api, producer["token"], job_type)
    expect(badge).to_have_text(f"{acme} · producer")
    row(page, mine).click()
    expect(page.locator("#cancel-button")).to_be_visible()
    expect(page.locator("#stop-button")).to_be_visible()
    expect(page.locator("#retry-button")).to_have_count(0)
    for job_id in (mine, theirs, plain, later, theirs_later):
        api.http.delete(f"/api/jobs/{job_id}")
