"""The charts' series (`GET /api/stats/series`) against a real API and Temporal: jobs
that complete show up in the minutes they completed in, with wait and run times, from
the API's memory."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import REGISTERED_TYPE, Api
from tests.procs import wait_until
from tests.test_tenancy import create_token

pytestmark = pytest.mark.usefixtures("session_worker")

SERIES = "/api/stats/series"
JOBS = 5


def series(api: Api) -> dict[str, Any]:
    answer = api.http.get(SERIES)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def test_completed_jobs_show_in_the_series_with_their_wait_and_run_times(
    start_api: Callable[..., Api],
) -> None:
    api = start_api()
    # Its rebuild from visibility runs once, in the background; then only the feed adds.
    before = wait_until(lambda: (s := series(api))["rebuilt"] and s, what="the rebuild")
    assert len(before["minutes"]) == 60
    ids = [api.submit(type=REGISTERED_TYPE) for _ in range(JOBS)]
    for job_id in ids:
        api.wait_status(job_id, "completed", timeout=120)
    ended = [
        next(t["ts"] for t in api.job(job_id)["transitions"] if t["status"] == "completed")
        for job_id in ids
    ]
    # Other tests' jobs may complete meanwhile on the same Temporal: at least ours.
    minutes = {ts - ts % 60_000 for ts in ended}

    def counted() -> dict[str, Any] | None:
        now = series(api)
        grew = sum(
            now["completed"][now["minutes"].index(m)]
            - (before["completed"][before["minutes"].index(m)] if m in before["minutes"] else 0)
            for m in minutes
        )
        return now if grew >= JOBS else None

    after = wait_until(counted, timeout=60, what=f"{JOBS} completions in the series")
    last = max(minutes)
    at = after["minutes"].index(last)
    assert after["run_p50_ms"][at] is not None and after["run_p95_ms"][at] is not None
    assert after["hour"]["wait_p50_ms"] is not None
    assert after["hour"]["wait_p95_ms"] >= after["hour"]["wait_p50_ms"]
    assert after["hour"]["run_p95_ms"] >= after["hour"]["run_p50_ms"]

    # A new API process (a restart) rebuilds those minutes from visibility.
    restarted = start_api()
    rebuilt = wait_until(lambda: (s := series(restarted))["rebuilt"] and s, what="rebuild")
    assert sum(rebuilt["completed"][rebuilt["minutes"].index(m)] for m in minutes) >= JOBS
    assert rebuilt["hour"]["run_p50_ms"] is not None


def test_the_series_is_the_admins(api: Api) -> None:
    producer = create_token(api, "producer", "charts")
    answer = api.http.get(SERIES, headers={"Authorization": f"Bearer {producer['token']}"})
    assert answer.status_code == 403, answer.text
