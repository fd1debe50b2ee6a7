"""Bulk submit (`POST /api/jobs/batch`) over real HTTP against the real API and Temporal:
partial failure, duplicates and retries, size limits, tenancy, and the CLI's
`submit --from-file`."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from tests.conftest import ROOT, SECRET, Api, wait_until
from tests.test_cli import JOBFORGE, cli_env
from worker.devserver import DevServer

pytestmark = pytest.mark.usefixtures("session_worker")

BATCH = "/api/jobs/batch"
SMALL_BODY_LIMIT = 4096


@pytest.fixture(scope="module")
def quiet(quiet_api: Api) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=quiet_api.url, headers={"Authorization": f"Bearer {SECRET}"}, timeout=60
    ) as client:
        yield client


@pytest.fixture
def job_type() -> str:
    """A fresh job type: listing it shows this test's jobs only."""
    return f"batch-{uuid.uuid4().hex[:10]}"


def listed(client: httpx.Client, job_type: str) -> set[str]:
    response = client.get("/api/jobs", params={"type": job_type, "limit": 500})
    assert response.status_code == 200, response.text
    return {job["id"] for job in response.json()}


def listed_exactly(client: httpx.Client, job_type: str, ids: set[str]) -> None:
    """Once every job of `ids` is listed (visibility lags a start), the type lists no
    other: a refused item made nothing."""
    wait_until(lambda: listed(client, job_type) >= ids, what=f"{len(ids)} jobs listed")
    assert listed(client, job_type) == ids


def batch(client: httpx.Client, jobs: list[Any], **headers: str) -> dict[str, Any]:
    response = client.post(BATCH, json={"jobs": jobs}, headers=headers)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    assert [item["index"] for item in answer["results"]] == list(range(len(jobs)))
    return answer


def refusal(item: dict[str, Any], code: int, field: str) -> str:
    assert item.get("code") == code, item
    assert item["field"] == field, item
    assert item["error"].startswith(f"{field}: "), item
    assert "id" not in item or code == 409, item
    message: str = item["error"]
    return message


async def runs_of(temporal: DevServer, job_id: str) -> list[str]:
    client = await Client.connect(temporal.address)
    return [e.run_id async for e in client.list_workflows(f"WorkflowId = '{job_id}'")]


# -- partial failure -------------------------------------------------------------------


def test_a_batch_makes_its_valid_items_and_names_each_bad_ones_field(
    quiet: httpx.Client, job_type: str
) -> None:
    past = int(time.time() * 1000) - 60_000
    jobs: list[Any] = [
        {"type": job_type, "params": {"n": 0}},
        {"type": job_type, "priority": "high"},
        {"type": job_type, "params": {"n": 2}, "priority": 7},
        "not an object",
        {"type": job_type, "bogus": 1},
        {"type": job_type, "deadline_at": past},
        {"type": job_type, "id": ""},
        {"type": job_type, "container": {"image": "x"}, "solver_url": "ftp://x/y"},
        {"type": job_type, "params": {"n": 8}},
    ]

    answer = batch(quiet, jobs)

    results = answer["results"]
    refusal(results[1], 422, "jobs[1].priority")
    refusal(results[3], 422, "jobs[3]")
    refusal(results[4], 422, "jobs[4].bogus")
    assert "past" in refusal(results[5], 422, "jobs[5].deadline_at")
    refusal(results[6], 422, "jobs[6].id")
    assert results[7]["code"] == 422 and results[7]["field"].startswith("jobs[7]."), results[7]
    made = {i: results[i] for i in (0, 2, 8)}
    assert all(item["status"] == "pending" and item["created"] for item in made.values())
    assert answer["created"] == 3 and answer["existing"] == 0 and answer["failed"] == 6
    for i, item in made.items():
        job = quiet.get(f"/api/jobs/{item['id']}").json()
        assert (job["type"], job["params"]) == (job_type, jobs[i]["params"])
    assert quiet.get(f"/api/jobs/{made[2]['id']}").json()["priority"] == 7
    listed_exactly(quiet, job_type, {item["id"] for item in made.values()})


# -- duplicates ------------------------------------------------------------------------


async def test_a_retried_batch_makes_nothing_twice_and_a_repeated_id_is_its_first_items_job(
    quiet: httpx.Client, job_type: str, temporal: DevServer
) -> None:
    tag = uuid.uuid4().hex[:8]
    jobs = [
        {"id": f"a-{tag}", "type": job_type, "params": {"n": 1}},
        {"id": f"b-{tag}", "type": job_type, "params": {"n": 2}},
        {"id": f"a-{tag}", "type": job_type, "params": {"n": 1}},
        {"id": f"b-{tag}", "type": job_type, "params": {"n": 3}},
        {"type": job_type, "id": f"c-{tag}", "params": {"n": 4}, "max_attempts": 1},
    ]

    first = batch(quiet, jobs)["results"]
    again = batch(quiet, jobs)["results"]

    a, b, c = first[0]["id"], first[1]["id"], first[4]["id"]
    assert len({a, b, c}) == 3
    assert [r.get("created") for r in first] == [True, True, False, None, True]
    assert first[2] == {
        "index": 2,
        "id": a,
        "status": "pending",
        "created": False,
        "duplicate_of": 0,
    }
    assert refusal(first[3], 409, "jobs[3].id")
    assert first[3]["duplicate_of"] == 1
    # The retry: every item names the job its id made, none is made again.
    assert [r.get("id") for r in again] == [a, b, a, None, c]
    assert [r.get("created") for r in again] == [False] * 3 + [None, False]
    assert [r.get("status") for r in again] == ["pending"] * 3 + [None, "pending"]
    # A key used with another body, in a later batch: 409 naming the job it made.
    changed = batch(quiet, [{"id": f"c-{tag}", "type": job_type, "params": {"n": 5}}])
    assert refusal(changed["results"][0], 409, "jobs[0].id")
    assert changed["results"][0]["id"] == c
    # The item's id is the key of POST /api/jobs: the same job either way.
    single = quiet.post(
        "/api/jobs",
        json={"type": job_type, "params": {"n": 2}},
        headers={"Idempotency-Key": f"b-{tag}"},
    )
    assert single.status_code == 201, single.text
    assert single.json()["id"] == b
    listed_exactly(quiet, job_type, {a, b, c})
    for job_id in (a, b, c):
        assert len(await runs_of(temporal, job_id)) == 1


def test_a_keyed_item_answers_a_job_that_already_ended_with_its_status(
    api: Api, job_type: str
) -> None:
    key = f"done-{uuid.uuid4().hex[:8]}"
    item = {"id": key, "type": job_type}
    job_id = batch(api.http, [item])["results"][0]["id"]
    assert api.http.delete(f"/api/jobs/{job_id}").status_code == 204

    again = batch(api.http, [item])["results"][0]

    assert again == {"index": 0, "id": job_id, "status": "failed", "created": False}


# -- size limits -----------------------------------------------------------------------


def test_an_empty_batch_or_one_over_a_thousand_items_is_a_422_naming_jobs(
    quiet: httpx.Client, job_type: str
) -> None:
    for jobs in ([], [{"type": job_type}] * 1001):
        response = quiet.post(BATCH, json={"jobs": jobs})
        assert response.status_code == 422, response.text
        assert response.json()["error"].startswith("jobs: "), response.text
    for body in ({}, {"jobs": {"type": job_type}}, [{"type": job_type}]):
        response = quiet.post(BATCH, json=body)
        assert response.status_code == 422, response.text
    listed_exactly(quiet, job_type, set())


def test_a_thousand_items_are_one_batch_each_answered(quiet: httpx.Client, job_type: str) -> None:
    # Items refused on their own (a string priority), so the bound is tested without
    # starting a thousand workflows.
    answer = batch(quiet, [{"type": job_type, "priority": str(i)} for i in range(1000)])

    assert (answer["created"], answer["failed"]) == (0, 1000)
    assert answer["results"][999]["field"] == "jobs[999].priority"


@pytest.fixture(scope="module")
def small_api(start_api: Callable[..., Api]) -> Api:
    """An API that takes request bodies up to 4 KiB."""
    return start_api(API_MAX_BODY_BYTES=str(SMALL_BODY_LIMIT))


def test_a_batch_body_over_the_limit_answers_413_and_makes_nothing(
    small_api: Api, job_type: str
) -> None:
    jobs = [{"type": job_type, "params": {"s": "x" * 500}} for _ in range(10)]
    body = json.dumps({"jobs": jobs}).encode()
    assert len(body) > SMALL_BODY_LIMIT

    response = small_api.http.post(
        BATCH, content=body, headers={"Content-Type": "application/json"}
    )

    assert response.status_code == 413, response.text
    assert str(SMALL_BODY_LIMIT) in response.json()["error"]
    listed_exactly(small_api.http, job_type, set())


# -- tenancy ---------------------------------------------------------------------------


def token(api: Api, role: str, tenant: str | None) -> httpx.Client:
    made = api.http.post(
        "/api/tokens",
        json={"name": f"batch-{uuid.uuid4().hex[:6]}", "role": role, "tenant": tenant},
    )
    assert made.status_code == 201, made.text
    return httpx.Client(
        base_url=api.url, headers={"Authorization": f"Bearer {made.json()['token']}"}, timeout=60
    )


def test_a_tenants_producer_submits_only_in_its_tenant(api: Api, job_type: str) -> None:
    tag = uuid.uuid4().hex[:6]
    acme, bravo = f"acme-{tag}", f"bravo-{tag}"
    with (
        token(api, "producer", acme) as producer,
        token(api, "producer", bravo) as other,
        token(api, "reader", acme) as reader,
        token(api, "worker", acme) as worker,
    ):
        jobs = [
            {"type": job_type, "id": "same"},
            {"type": job_type, "tenant": bravo},
            {"type": job_type, "group": f"{bravo}/g"},
            {"type": job_type, "tenant": acme, "params": {"n": 3}},
        ]
        results = batch(producer, jobs)["results"]
        elsewhere = batch(other, [{"type": job_type, "id": "same"}])["results"][0]

        refusal(results[1], 403, "jobs[1].tenant")
        refusal(results[2], 422, "jobs[2].group")
        mine = {results[0]["id"], results[3]["id"]}
        for job_id in mine:
            assert producer.get(f"/api/jobs/{job_id}").json()["tenant"] == acme
            assert other.get(f"/api/jobs/{job_id}").status_code == 404
        # Each tenant's ids are its own: the same id is another job in another tenant.
        assert elsewhere["created"] is True and elsewhere["id"] not in mine
        assert other.get(f"/api/jobs/{elsewhere['id']}").json()["tenant"] == bravo
        for caller in (reader, worker):
            response = caller.post(BATCH, json={"jobs": [{"type": job_type}]})
            assert response.status_code == 403, response.text
        listed_exactly(producer, job_type, mine)
        listed_exactly(api.http, job_type, {*mine, elsewhere["id"]})


# -- the CLI ---------------------------------------------------------------------------


def jobforge(url: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run `jobforge ARGS` to completion with the bootstrap secret, `stdin` as its input."""
    return subprocess.run(
        [str(JOBFORGE), *args],
        cwd=ROOT,
        env=cli_env(url, SECRET),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_submit_from_a_file_sends_every_good_line_and_names_the_bad_ones(
    quiet_api: Api, job_type: str, tmp_path: Path
) -> None:
    lines = [
        json.dumps({"type": job_type, "params": {"n": 1}}),
        json.dumps({"type": job_type, "priority": "high"}),
        "",
        "{not json",
        json.dumps({"type": job_type, "params": {"n": 5}}),
    ]
    path = tmp_path / "jobs.jsonl"
    path.write_text("\n".join(lines) + "\n")

    result = jobforge(quiet_api.url, "submit", "--from-file", str(path), "--batch-size", "2")

    assert result.returncode == 1, (result.stdout, result.stderr)
    ids = result.stdout.split()
    assert len(ids) == 2
    assert "line 2: priority: " in result.stderr
    assert "line 4: " in result.stderr and "JSON" in result.stderr
    assert "2 of 4 failed" in result.stderr
    params = [quiet_api.http.get(f"/api/jobs/{job_id}").json()["params"] for job_id in ids]
    assert params == [{"n": 1}, {"n": 5}]
    listed_exactly(quiet_api.http, job_type, set(ids))


def test_submit_from_stdin_prints_one_id_per_line_and_exits_0(
    quiet_api: Api, job_type: str
) -> None:
    lines = "".join(json.dumps({"type": job_type, "params": {"i": i}}) + "\n" for i in range(5))
    result = jobforge(quiet_api.url, "submit", "--from-file", "-", stdin=lines)

    assert result.returncode == 0, (result.stdout, result.stderr)
    ids = result.stdout.split()
    assert len(set(ids)) == 5
    listed_exactly(quiet_api.http, job_type, set(ids))


def test_submit_from_a_file_with_a_type_or_a_job_option_or_no_file_exits_2(
    quiet_api: Api, job_type: str, tmp_path: Path
) -> None:
    path = tmp_path / "jobs.jsonl"
    path.write_text(json.dumps({"type": job_type}) + "\n")

    with_type = jobforge(quiet_api.url, "submit", job_type, "--from-file", str(path))
    with_option = jobforge(quiet_api.url, "submit", "--priority", "3", "--from-file", str(path))
    missing = jobforge(quiet_api.url, "submit", "--from-file", str(tmp_path / "nope.jsonl"))

    assert with_type.returncode == with_option.returncode == missing.returncode == 2
    assert "TYPE" in with_type.stderr
    assert "--priority" in with_option.stderr
    assert "nope.jsonl" in missing.stderr
    listed_exactly(quiet_api.http, job_type, set())
