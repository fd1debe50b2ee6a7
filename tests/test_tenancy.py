"""Tenants, process level (docs/architecture.md, "Tenants"): a tenant's job is its own on
every route, in lists, counts, page tokens, the event stream and its replay, 004's routes,
the HTTP claim, an HTTP agent with a tenant's worker token and a native worker started
for one tenant. Every caller holds a real API token (`POST /api/tokens`, made with the
bootstrap secret), as a tenant's client would."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from api import access
from tests import procs
from tests.conftest import SECRET, Api, Solver, base_env, wait_until
from tests.helpers import Collector, Sse
from tests.procs import Proc
from worker.devserver import DevServer

pytestmark = pytest.mark.usefixtures("session_worker")

# How long a job is watched not to be taken (the session worker reads the type registry
# every 250 ms and takes a task within milliseconds once it polls a queue).
UNTOUCHED_S = 3.0


def create_token(api: Api, role: str, tenant: str | None = None) -> dict[str, Any]:
    """`POST /api/tokens` with the bootstrap secret: `{id, token, name, role, tenant}`."""
    body = {"name": f"{role}-{tenant or 'none'}-{uuid.uuid4().hex[:6]}", "role": role}
    answer = api.http.post("/api/tokens", json={**body, "tenant": tenant})
    assert answer.status_code == 201, answer.text
    created: dict[str, Any] = answer.json()
    return created


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def hub(api: Api) -> str:
    """The session's API: the real token check in front of everything."""
    return api.url


@pytest.fixture
def token_of(api: Api) -> Callable[..., str]:
    """Factory: a token of a role and tenant, made once per test (no role: the bootstrap
    secret)."""
    made: dict[tuple[str, str | None], str] = {}

    def token(role: str | None = None, tenant: str | None = None) -> str:
        if role is None:
            return SECRET
        if (role, tenant) not in made:
            made[role, tenant] = create_token(api, role, tenant)["token"]
        return made[role, tenant]

    return token


@pytest.fixture
def as_(token_of: Callable[..., str]) -> Iterator[Callable[..., httpx.Client]]:
    """Factory: a client of the hub holding a token of a role and tenant (no role: the
    bootstrap secret, an admin of every tenant)."""
    clients: list[httpx.Client] = []

    def make(url: str, role: str | None = None, tenant: str | None = None) -> httpx.Client:
        client = httpx.Client(base_url=url, headers=bearer(token_of(role, tenant)), timeout=30)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def tenants() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:6]
    return f"acme-{tag}", f"bravo-{tag}"


def ok(response: httpx.Response, code: int = 200) -> Any:
    assert response.status_code == code, response.text
    return response.json() if response.content else None


def submit(http: httpx.Client, _headers: dict[str, str] | None = None, **spec: Any) -> str:
    job_id: str = ok(http.post("/api/jobs", json=spec, headers=_headers), 201)["id"]
    return job_id


def refused(response: httpx.Response, code: int, field: str) -> str:
    """Assert the status and an error naming `field`; the message."""
    assert response.status_code == code, response.text
    message: str = response.json()["error"]
    assert message.startswith(field), message
    return message


# -- one job ---------------------------------------------------------------------------


# Every route that names a job, and a body it takes (a well-formed one, so what answers
# is the job's lookup). The test fails when a route that names a job is not here.
JOB_ROUTES: dict[str, Any] = {
    # 000
    "GET /api/jobs/{job_id}": None,
    "DELETE /api/jobs/{job_id}": None,
    "POST /api/jobs/{job_id}/stop": None,
    "GET /api/jobs/{job_id}/logs": None,
    "POST /api/jobs/{job_id}/logs": {"worker_id": "w", "attempt": 1, "offset": 0, "lines": []},
    "POST /api/jobs/{job_id}/heartbeat": {"worker_id": "w"},
    "POST /api/jobs/{job_id}/result": {"worker_id": "w", "result": 1},
    "POST /api/jobs/{job_id}/fail": {"worker_id": "w", "reason": "x"},
    "POST /api/ops/jobs/{job_id}/requeue": None,
    "POST /api/ops/jobs/{job_id}/fail": {"reason": "no"},
    "POST /api/ops/jobs/{job_id}/cancel": None,
    # 001
    "GET /api/system/scheduler/queue/jobs/{job_id}": None,
    "POST /api/system/scheduler/queue/jobs/{job_id}/cancel": None,
    "POST /api/system/scheduler/queue/jobs/{job_id}/heartbeat": {"lease_id": "x:1:w"},
    "POST /api/system/scheduler/queue/jobs/{job_id}/done": {"lease_id": "x:1:w"},
    "POST /api/system/scheduler/queue/jobs/{job_id}/failed": {"lease_id": "x:1:w", "reason": "x"},
    # 003
    "GET /status/{job_id}": None,
    "GET /job-info/{job_id}": None,
    "GET /file-logs/{job_id}": None,
    "GET /logs/{job_id}": None,
    "GET /progress/{job_id}": None,
    "GET /result/{job_id}": None,
    "POST /stop/{job_id}": None,
    "DELETE /job/{job_id}": None,
    "POST /ops/jobs/{job_id}/requeue": {"force": True},
    "POST /ops/jobs/{job_id}/fail": {"force": True},
    "POST /ops/jobs/{job_id}/cancel": {"force": True},
    # 004
    "GET /targets/{target_id}/jobs/{job_id}": None,
    "POST /targets/{target_id}/jobs/{job_id}/cancel": None,
    "POST /targets/{target_id}/jobs/{job_id}/resume": None,
}
# Routes that name the job in their body.
JOB_BODY_ROUTES: dict[str, Any] = {
    "POST /api/agent/job-status": {"status": "running", "worker_id": "w"},
}
# The designs without tenants refuse a tenant's caller on every route (a 403 whatever
# the id: it tells nothing about the job).
TENANTLESS_PREFIXES = ("/api/system/scheduler/", "/status/", "/job-info/", "/file-logs/")
TENANTLESS_003 = ("/logs/", "/progress/", "/result/", "/stop/", "/job/", "/ops/", "/api/agent/")


def tenantless_design(path: str) -> bool:
    return path.startswith(TENANTLESS_PREFIXES + TENANTLESS_003)


def caller_role(key: str) -> str | None:
    """The least role that may make this call (None: the admin's only)."""
    allowed = access.ROUTES[key]
    return next((role for role in ("producer", "worker", "reader") if role in allowed), None)


def test_a_tenants_job_is_a_404_to_another_tenant_on_every_route_that_names_a_job(
    hub: str, as_: Callable[..., httpx.Client], tenants: tuple[str, str], job_type: str
) -> None:
    assert set(JOB_ROUTES) == {key for key in access.ROUTES if "{job_id}" in key}
    acme, bravo = tenants
    owner = as_(hub, "producer", acme)
    # acme's job on its target site-1 (004), so 004's routes find it by their path too;
    # no worker of the type: it stays pending.
    job_id = ok(owner.post("/targets/site-1/jobs", json={"type": job_type}), 201)["id"]
    before = ok(owner.get(f"/api/jobs/{job_id}"))

    calls = [
        (key, key.split(" ")[1].format(job_id=job_id, target_id="site-1"), body)
        for key, body in JOB_ROUTES.items()
    ] + [
        (key, key.split(" ")[1], {**body, "job_id": job_id})
        for key, body in JOB_BODY_ROUTES.items()
    ]
    for key, path, body in calls:
        method = key.split(" ")[0]
        role = caller_role(key)
        # Bravo's caller: a bravo token of a role that may make the call, or an admin
        # acting as bravo (X-Tenant).
        if role is None:
            answer = as_(hub).request(method, path, json=body, headers={"X-Tenant": bravo})
        else:
            answer = as_(hub, role, bravo).request(method, path, json=body)
        expected = 403 if tenantless_design(path) else 404
        assert answer.status_code == expected, (key, "bravo", answer.text)
        assert job_id not in answer.text or expected == 404, (key, answer.text)
        if role is None:
            continue  # an admin without a tenant reaches every tenant's job
        # A caller of no tenant (jobs without one only).
        answer = as_(hub, role).request(method, path, json=body)
        if path.startswith("/targets/"):
            refused(answer, 422, "X-Tenant")  # 004 needs a tenant to act for
        else:
            assert answer.status_code == 404, (key, "no tenant", answer.text)

    after = ok(owner.get(f"/api/jobs/{job_id}"))
    unchanged = ("transitions", "attempts", "fail_history", "status", "worker_id", "result")
    assert {k: after[k] for k in unchanged} == {k: before[k] for k in unchanged}
    assert (after["tenant"], after["status"], after["target"]) == (
        acme,
        "pending",
        f"{acme}/site-1",
    )
    assert ok(as_(hub).get(f"/api/jobs/{job_id}"))["tenant"] == acme  # the admin's
    ok(owner.delete(f"/api/jobs/{job_id}"), 204)
    assert ok(owner.get(f"/api/jobs/{job_id}"))["fail_reason"] == "cancelled"


def test_a_tenants_004_job_is_a_404_to_another_tenant_and_resume_does_not_cross(
    hub: str, as_: Callable[..., httpx.Client], tenants: tuple[str, str], job_type: str
) -> None:
    acme, bravo = tenants
    owner = as_(hub, "producer", acme)
    created = ok(owner.post("/targets/site-1/jobs", json={"type": job_type}), 201)
    job_id = created["id"]
    assert created["tenant"] == acme
    # The core routes see it as acme's job, on acme's target.
    job = ok(owner.get(f"/api/jobs/{job_id}"))
    assert (job["tenant"], job["target"]) == (acme, f"{acme}/site-1")

    other = as_(hub, "producer", bravo)
    for path in ("", "/resume/", "/cancel/"):
        method = "GET" if not path else "POST"
        answer = other.request(method, f"/targets/site-1/jobs/{job_id}{path}")
        assert answer.status_code == 404, (path, answer.text)
    assert ok(other.get("/targets/site-1/jobs")) == []
    assert other.get(f"/api/targets/{acme}/site-1").status_code == 404
    assert all(view["target"] != f"{acme}/site-1" for view in ok(other.get("/api/targets")))
    # An admin names the tenant and reaches it.
    admin = as_(hub)
    seen = ok(admin.get(f"/targets/site-1/jobs/{job_id}", headers={"X-Tenant": acme}))
    assert seen["id"] == job_id
    ok(owner.post(f"/targets/site-1/jobs/{job_id}/cancel/"))


# -- naming a tenant -------------------------------------------------------------------


def test_naming_another_tenant_is_a_403_and_a_bad_tenant_name_a_422_naming_it(
    hub: str, as_: Callable[..., httpx.Client], tenants: tuple[str, str], job_type: str
) -> None:
    acme, bravo = tenants
    owner = as_(hub, "producer", acme)
    spoofed = {"X-Tenant": bravo}
    refused(owner.get("/api/jobs", headers=spoofed), 403, "X-Tenant")
    refused(owner.post("/api/jobs", json={"type": job_type}, headers=spoofed), 403, "X-Tenant")
    refused(owner.post("/api/jobs", json={"type": job_type, "tenant": bravo}), 403, "tenant")
    refused(
        owner.post("/targets/site-1/jobs", json={"type": job_type}, headers=spoofed),
        403,
        "X-Tenant",
    )
    refused(owner.get("/targets/site-1/jobs", params={"tenant": bravo}), 403, "tenant")
    refused(
        as_(hub, "worker", acme).post("/api/jobs/claim", json={"worker_id": "w"}, headers=spoofed),
        403,
        "X-Tenant",
    )
    # A token without a tenant reaches no tenant's jobs either.
    refused(as_(hub, "producer").get("/api/jobs", headers={"X-Tenant": acme}), 403, "X-Tenant")

    # The designs without tenants reach no tenant's jobs: their routes refuse a tenant.
    refused(owner.get("/jobs"), 403, "tenant")  # 003's list
    refused(owner.get("/api/system/scheduler/queue/jobs"), 403, "tenant")  # 001's

    admin = as_(hub)
    for bad in ("bad name", "-x", "a/b", "x" * 65):
        refused(admin.post("/api/jobs", json={"type": job_type, "tenant": bad}), 422, "tenant")
        refused(admin.get("/api/jobs", headers={"X-Tenant": bad}), 422, "X-Tenant")
        refused(admin.get("/api/jobs/events", headers={"X-Tenant": bad}), 422, "X-Tenant")
        refused(admin.get("/targets/site-1/jobs", headers={"X-Tenant": bad}), 422, "X-Tenant")
        refused(admin.get("/targets/site-1/jobs", params={"tenant": bad}), 422, "tenant")
    # An admin naming a tenant acts as it: the job is that tenant's.
    named = submit(admin, type=job_type, _headers={"X-Tenant": acme})
    assert ok(owner.get(f"/api/jobs/{named}"))["tenant"] == acme
    # A role's limits hold within its own tenant: acme's reader may not cancel acme's
    # job (403 naming the role), and the job is untouched.
    reader = as_(hub, "reader", acme)
    answer = reader.delete(f"/api/jobs/{named}")
    assert answer.status_code == 403, answer.text
    assert answer.json()["error"] == f"role reader may not DELETE /api/jobs/{named}"
    assert ok(owner.get(f"/api/jobs/{named}"))["status"] == "pending"
    ok(owner.delete(f"/api/jobs/{named}"), 204)
    # /metrics is open, but a token sent there is checked.
    forged = httpx.get(f"{hub}/metrics", headers=bearer("jf_" + "A" * 43), timeout=30)
    assert forged.status_code == 401, forged.text
    # A tenant's job names its gates <tenant>/<name>.
    refused(owner.post("/api/jobs", json={"type": job_type, "target": "t"}), 422, "target")
    refused(owner.post("/api/jobs", json={"type": job_type, "group": f"{bravo}/g"}), 422, "group")
    body = {"type": job_type, "tenant": acme, "pool": "p"}
    refused(admin.post("/api/jobs", json=body), 422, "pool")
    refused(admin.post("/api/jobs", json={"type": job_type, "group": f"{acme}/g"}), 422, "group")


# -- lists, counts, pages --------------------------------------------------------------


def listed(http: httpx.Client, job_type: str, **params: Any) -> set[str]:
    return {job["id"] for job in ok(http.get("/api/jobs", params={"type": job_type, **params}))}


def test_lists_counts_and_metrics_hold_only_the_callers_tenants_jobs(
    hub: str, as_: Callable[..., httpx.Client], tenants: tuple[str, str], job_type: str
) -> None:
    acme, bravo = tenants
    admin, tenantless = as_(hub), as_(hub, "producer")
    first, second = as_(hub, "producer", acme), as_(hub, "producer", bravo)
    mine = {submit(first, type=job_type) for _ in range(2)}
    theirs = {submit(second, type=job_type)}
    plain = {submit(tenantless, type=job_type), submit(admin, type=job_type)}
    every = mine | theirs | plain
    wait_until(lambda: listed(admin, job_type) == every, timeout=30, what="visibility")

    assert listed(first, job_type) == mine
    assert listed(second, job_type) == theirs
    assert listed(tenantless, job_type) == plain
    assert listed(as_(hub, "reader", acme), job_type, status="pending") == mine
    assert listed(admin, job_type, order="priority") == every
    assert listed(first, job_type, order="priority") == mine
    # An admin naming a tenant acts as it.
    named = admin.get("/api/jobs", params={"type": job_type}, headers={"X-Tenant": bravo})
    assert {job["id"] for job in ok(named)} == theirs

    def counted(http: httpx.Client) -> int:
        return sum(ok(http.get("/api/jobs/counts", params={"type": job_type})).values())

    wait_until(lambda: counted(first) == 2, timeout=30, what="acme's counts")
    assert counted(second) == 1
    page = ok(first.get("/api/jobs/page", params={"type": job_type}))
    assert {job["id"] for job in page["jobs"]} == mine
    assert all(job["tenant"] == acme for job in page["jobs"])
    # /metrics, acme's slice: its jobs only (fresh tenants: 2 pending, nothing else).
    text = first.get("/metrics").text
    assert 'jobforge_jobs{status="pending"} 2.0' in text, text
    assert "jobforge_job_events" not in text  # nothing process-wide
    for job_id in every:
        admin.delete(f"/api/jobs/{job_id}")


def test_a_page_token_from_one_scope_returns_nothing_in_another(
    hub: str, as_: Callable[..., httpx.Client], tenants: tuple[str, str], job_type: str
) -> None:
    acme, bravo = tenants
    first, second, admin = as_(hub, "producer", acme), as_(hub, "producer", bravo), as_(hub)
    mine = {submit(first, type=job_type) for _ in range(3)}
    wait_until(lambda: listed(first, job_type) == mine, timeout=30, what="visibility")

    for order in ("recent", "priority"):
        params: dict[str, str | int] = {"type": job_type, "limit": 1, "order": order}
        answer = first.get("/api/jobs", params=params)
        token = ok(answer) and answer.headers["Next-Page-Token"]
        assert ok(first.get("/api/jobs", params={**params, "page_token": token}))
        for other in (second, admin, as_(hub, "producer")):
            reused = other.get("/api/jobs", params={**params, "page_token": token})
            refused(reused, 422, "page_token")
    page = ok(first.get("/api/jobs/page", params={"type": job_type, "limit": 1}))
    reused = second.get(
        "/api/jobs/page",
        params={"type": job_type, "limit": 1, "page_token": page["next_page_token"]},
    )
    refused(reused, 422, "page_token")
    for job_id in mine:
        admin.delete(f"/api/jobs/{job_id}")


# -- the event stream ------------------------------------------------------------------


def collect(
    url: str,
    headers: dict[str, str],
    done: Callable[[list[Sse]], bool],
    last: str | None = None,
    params: dict[str, Any] | None = None,
) -> Collector:
    """A stream reader sending `headers` (none: the open stream), connected."""
    collector = Collector(
        f"{url}/api/jobs/events", params or {}, done, last_event_id=last, headers=headers
    )
    collector.run(60)
    assert collector.connected.wait(30)
    assert collector.error is None, collector.error
    return collector


def created(job_id: str) -> Callable[[list[Sse]], bool]:
    return lambda events: any(e.job_id == job_id and e.event == "job:created" for e in events)


def test_the_open_stream_carries_no_tenants_events_and_a_tenants_stream_only_its_own(
    hub: str,
    as_: Callable[..., httpx.Client],
    token_of: Callable[..., str],
    tenants: tuple[str, str],
    job_type: str,
) -> None:
    acme, bravo = tenants
    open_stream = collect(hub, {}, lambda _: False)
    acme_stream = collect(hub, bearer(token_of("reader", acme)), lambda _: False)
    admin_stream = collect(hub, bearer(SECRET), lambda _: False)
    # A forged token on the open stream is no token: the jobs without a tenant.
    forged_stream = collect(hub, bearer(token_of("reader", acme)[:-1] + "x"), lambda _: False)

    tenant_job = submit(as_(hub, "producer", acme), type=job_type)
    other_job = submit(as_(hub, "producer", bravo), type=job_type)
    # Both are sent before the next job's events: the feed emits in order.
    wait_until(
        lambda: (
            created(tenant_job)(admin_stream.events) and created(other_job)(admin_stream.events)
        ),
        timeout=30,
        what="the tenants' events",
    )
    plain_job = submit(as_(hub), type=job_type)
    wait_until(lambda: created(plain_job)(open_stream.events), timeout=30, what="the open stream")
    wait_until(lambda: created(plain_job)(admin_stream.events), timeout=30, what="the admin's")

    wait_until(lambda: created(plain_job)(forged_stream.events), timeout=30, what="forged")
    for stream in (open_stream, forged_stream):
        assert {e.job_id for e in stream.events} & {tenant_job, other_job} == set()
        assert all(e.data["tenant"] is None for e in stream.events)
    wait_until(lambda: created(tenant_job)(acme_stream.events), timeout=30, what="acme's event")
    assert {e.data["tenant"] for e in acme_stream.events} == {acme}


def test_a_replay_after_last_event_id_stays_in_the_callers_tenant(
    hub: str,
    as_: Callable[..., httpx.Client],
    token_of: Callable[..., str],
    tenants: tuple[str, str],
    job_type: str,
) -> None:
    acme, bravo = tenants
    admin_stream = collect(hub, bearer(SECRET), lambda _: False)
    marker = submit(as_(hub), type=job_type)
    wait_until(lambda: created(marker)(admin_stream.events), timeout=30, what="the marker")
    start = next(e.id for e in admin_stream.events if e.job_id == marker)
    acme_job = submit(as_(hub, "producer", acme), type=job_type)
    bravo_job = submit(as_(hub, "producer", bravo), type=job_type)
    wait_until(lambda: created(bravo_job)(admin_stream.events), timeout=30, what="bravo's job")

    # Resumed after the marker, once the feed is past both jobs: a replay, with bravo's
    # token and with a stream token (`?token=`, as a browser's) bravo's token asked for.
    replay = collect(hub, bearer(token_of("worker", bravo)), created(bravo_job), last=start)
    wait_until(lambda: created(bravo_job)(replay.events), timeout=30, what="the replay")
    assert {e.job_id for e in replay.events} == {bravo_job}
    issued = ok(as_(hub, "reader", bravo).post("/api/events/token"))["token"]
    by_stream_token = collect(hub, {}, created(bravo_job), last=start, params={"token": issued})
    wait_until(lambda: created(bravo_job)(by_stream_token.events), timeout=30, what="its replay")
    assert {e.job_id for e in by_stream_token.events} == {bravo_job}
    # acme's replay from the same id, up to an acme job made after bravo's: acme's jobs,
    # never bravo's.
    acme_last = submit(as_(hub, "producer", acme), type=job_type)
    wait_until(lambda: created(acme_last)(admin_stream.events), timeout=30, what="acme's last")
    acme_replay = collect(hub, bearer(token_of("reader", acme)), created(acme_last), last=start)
    wait_until(lambda: created(acme_last)(acme_replay.events), timeout=30, what="acme's replay")
    assert {e.job_id for e in acme_replay.events} == {acme_job, acme_last}
    everything = collect(hub, bearer(SECRET), created(bravo_job), last=start)
    wait_until(lambda: created(bravo_job)(everything.events), timeout=30, what="the admin's")
    assert {acme_job, bravo_job} <= {e.job_id for e in everything.events}


# -- claims and workers ----------------------------------------------------------------


def test_a_tenants_claim_takes_only_its_tenants_jobs(
    hub: str, as_: Callable[..., httpx.Client], tenants: tuple[str, str], job_type: str
) -> None:
    acme, bravo = tenants
    first, second, admin = as_(hub, "worker", acme), as_(hub, "worker", bravo), as_(hub)
    theirs = submit(as_(hub, "producer", bravo), type=job_type)
    plain = submit(admin, type=job_type)
    claim = {"worker_id": f"w-{acme}", "types": [job_type], "wait": 1.0}
    assert first.post("/api/jobs/claim", json=claim).status_code == 204

    mine = submit(as_(hub, "producer", acme), type=job_type)
    claimed = ok(first.post("/api/jobs/claim", json={**claim, "wait": 10}))
    assert (claimed["id"], claimed["tenant"]) == (mine, acme)
    assert (
        second.post(
            f"/api/jobs/{mine}/heartbeat", json={"worker_id": claim["worker_id"]}
        ).status_code
        == 404
    )
    ok(first.post(f"/api/jobs/{mine}/result", json={"worker_id": claim["worker_id"], "result": 1}))
    # The tenant-less claim and bravo's take theirs.
    took = ok(admin.post("/api/jobs/claim", json={**claim, "worker_id": "w-plain", "wait": 10}))
    assert took["id"] == plain
    took = ok(second.post("/api/jobs/claim", json={**claim, "worker_id": "w-bravo", "wait": 10}))
    assert took["id"] == theirs
    for job_id, http, worker in ((plain, admin, "w-plain"), (theirs, second, "w-bravo")):
        ok(http.post(f"/api/jobs/{job_id}/result", json={"worker_id": worker, "result": 1}))


@pytest.fixture
def tenant_worker(
    temporal: DevServer, tmp_path: Path, tenants: tuple[str, str], job_type: str
) -> Iterator[Proc]:
    """A native worker for acme only, of the test's type (no workflows)."""
    acme, _ = tenants
    env = base_env(
        temporal,
        WORKER_TENANT=acme,
        WORKER_TYPES=json.dumps([job_type]),
        WORKER_RUN_WORKFLOWS="false",
        NODE_ID=f"worker-{acme}",
        SOLVER_CACHE_DIR=str(tmp_path / "cache"),
    )
    proc = procs.spawn(procs.jobforge("worker"), tmp_path / "worker.log", env)
    try:
        proc.wait_for(f"serving job type {job_type}", timeout=30)
        yield proc
    finally:
        proc.stop(timeout=10)


def test_a_worker_for_one_tenant_runs_that_tenants_jobs_only(
    hub: str,
    as_: Callable[..., httpx.Client],
    tenants: tuple[str, str],
    job_type: str,
    make_solver: Callable[[str], Solver],
    tenant_worker: Proc,
    temporal: DevServer,
) -> None:
    acme, bravo = tenants
    solver = make_solver('print(json.dumps({"ok": True}))\n')
    admin = as_(hub)
    mine = [submit(as_(hub, "producer", acme), **solver.spec(job_type)) for _ in range(2)]
    theirs = submit(as_(hub, "producer", bravo), **solver.spec(job_type))
    plain = submit(admin, **solver.spec(job_type))

    def ended(job_id: str) -> dict[str, Any] | None:
        job: dict[str, Any] = ok(admin.get(f"/api/jobs/{job_id}"))
        return job if job["status"] == "completed" else None

    for job_id in mine:
        done = wait_until(partial(ended, job_id), timeout=30, what="acme's job")
        assert done["worker_id"] == f"worker-{acme}"
    # The session worker (no tenant) runs the job without a tenant; nobody runs bravo's.
    assert (
        wait_until(lambda: ended(plain), timeout=30, what="the plain job")["worker_id"]
        == "session-worker"
    )
    deadline = time.monotonic() + UNTOUCHED_S
    while time.monotonic() < deadline:
        job = ok(admin.get(f"/api/jobs/{theirs}"))
        assert (job["status"], job["attempts"], job["waiting_for"]) == (
            "pending",
            0,
            "no_worker",
        ), job
        time.sleep(0.1)
    admin.delete(f"/api/jobs/{theirs}")
    # The tenant costs the job path nothing: set at the start, never upserted, no marker.
    assert asyncio.run(tenant_set_in(temporal, mine[0])) == ["started"]


async def tenant_set_in(temporal: DevServer, job_id: str) -> list[str]:
    """Which events of a job's history set JobforgeTenant ("started", "upsert"), and
    "marker" for each marker."""
    client = await Client.connect(temporal.address)
    history = await client.get_workflow_handle(job_id).fetch_history()
    found = []
    for event in history.events:
        if event.HasField("workflow_execution_started_event_attributes"):
            fields = event.workflow_execution_started_event_attributes.search_attributes
            if "JobforgeTenant" in fields.indexed_fields:
                found.append("started")
        elif event.HasField("upsert_workflow_search_attributes_event_attributes"):
            fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes
            if "JobforgeTenant" in fields.indexed_fields:
                found.append("upsert")
        elif event.HasField("marker_recorded_event_attributes"):
            found.append("marker")
    return found


def start_agent(hub: str, temporal: DevServer, tmp_path: Path, name: str, **env: str) -> Proc:
    """An HTTP agent of the hub (`jobforge agent`); its token and tenant as given."""
    full = base_env(
        temporal,
        HUB_URL=hub,
        NODE_ID=name,
        WORKER_CORES="1",
        JOB_POLL_INTERVAL_MS="1000",
        SOLVER_CACHE_DIR=str(tmp_path / f"cache-{name}"),
        **env,
    )
    return procs.spawn(procs.jobforge("agent"), tmp_path / f"{name}.log", full)


def test_an_agent_with_a_tenants_worker_token_runs_that_tenants_jobs_only(
    hub: str,
    as_: Callable[..., httpx.Client],
    token_of: Callable[..., str],
    tenants: tuple[str, str],
    job_type: str,
    make_solver: Callable[[str], Solver],
    temporal: DevServer,
    tmp_path: Path,
) -> None:
    acme, bravo = tenants
    # Its token is its tenant: no WORKER_TENANT, no X-Tenant.
    agent = start_agent(
        hub,
        temporal,
        tmp_path,
        f"agent-{acme}",
        FORGE_INGEST_SECRET=token_of("worker", acme),
        WORKER_TYPES=json.dumps([job_type]),
    )
    # One naming another tenant than its token's is refused at registration.
    spoofing = start_agent(
        hub,
        temporal,
        tmp_path,
        f"agent-spoof-{bravo}",
        FORGE_INGEST_SECRET=token_of("worker", acme),
        WORKER_TENANT=bravo,
        WORKER_TYPES=json.dumps([job_type]),
    )
    try:
        agent.wait_for("ready", timeout=30)
        assert spoofing.process.wait(timeout=30) != 0
        assert "registration refused: 403" in spoofing.output(), spoofing.output()
        assert "X-Tenant" in spoofing.output()

        solver = make_solver('print(json.dumps({"ok": True}))\n')
        admin = as_(hub)
        mine = submit(as_(hub, "producer", acme), **solver.spec(job_type))
        theirs = submit(as_(hub, "producer", bravo), **solver.spec(job_type))

        def ended(job_id: str) -> dict[str, Any] | None:
            job: dict[str, Any] = ok(admin.get(f"/api/jobs/{job_id}"))
            return job if job["status"] == "completed" else None

        done = wait_until(partial(ended, mine), timeout=30, what="acme's job")
        assert done["worker_id"] == f"agent-{acme}"
        deadline = time.monotonic() + UNTOUCHED_S
        while time.monotonic() < deadline:
            job = ok(admin.get(f"/api/jobs/{theirs}"))
            assert (job["status"], job["attempts"]) == ("pending", 0), job
            time.sleep(0.1)
        admin.delete(f"/api/jobs/{theirs}")
    finally:
        agent.stop(timeout=10)
        spoofing.stop(timeout=10)


# -- audit -----------------------------------------------------------------------------


def test_a_jobs_transitions_name_the_token_that_changed_it(
    hub: str, api: Api, make_solver: Callable[[str], Solver], job_type: str
) -> None:
    producer, admin = create_token(api, "producer"), create_token(api, "admin")
    mine, ops = f"{producer['name']} ({producer['id']})", f"ops: {admin['name']} ({admin['id']})"
    solver = make_solver("import time\ntime.sleep(60)\n")
    with (
        httpx.Client(base_url=hub, headers=bearer(producer["token"]), timeout=30) as http,
        httpx.Client(base_url=hub, headers=bearer(admin["token"]), timeout=30) as operator,
    ):
        job_id = submit(http, **solver.spec(job_type))
        api.wait_status(job_id, "running")
        ok(http.post(f"/api/jobs/{job_id}/stop"), 202)
        job = api.wait_status(job_id, "stopped")
        steps = [(t["status"], t["by"]) for t in job["transitions"]]
        assert steps[0] == ("pending", mine)  # the submit
        assert ("stop_requested", mine) in steps and steps[-1] == ("stopped", mine), steps
        # Its own course names nobody.
        assert all(by is None for status, by in steps if status in ("assigned", "running"))

        # An operator's re-queue names the operator's token, and its stop the producer's.
        requeued = ok(operator.post(f"/api/ops/jobs/{job_id}/requeue"))
        assert (requeued["transitions"][-1]["status"], requeued["transitions"][-1]["by"]) == (
            "pending",
            ops,
        )
        ok(http.post(f"/api/jobs/{job_id}/stop"), 202)
        job = api.wait_status(job_id, "stopped", "failed")
        assert job["transitions"][-1]["by"] == mine, job["transitions"]
        # The bootstrap secret is named too.
        plain = submit(api.http, type=job_type)  # no solver: nobody takes it
        ok(api.http.delete(f"/api/jobs/{plain}"), 204)
        last = api.job(plain)["transitions"]
        assert (last[0]["by"], last[-1]["by"]) == ("bootstrap", "bootstrap")


def test_whoami_names_the_token_without_its_secret(api: Api, hub: str) -> None:
    created = create_token(api, "reader", f"acme-{uuid.uuid4().hex[:6]}")
    with httpx.Client(base_url=hub, headers=bearer(created["token"]), timeout=30) as http:
        me = ok(http.get("/api/whoami"))
    assert {k: me[k] for k in ("id", "name", "role", "tenant")} == {
        k: created[k] for k in ("id", "name", "role", "tenant")
    }
    assert me["may"] == {
        "cancel": False,
        "stop": False,
        "retry": False,
        "pause_group": False,
        "resume_target": False,
        "change_schedule": False,
    }
    assert created["token"] not in json.dumps(me)
    admin = ok(api.http.get("/api/whoami"))
    assert (admin["id"], admin["role"], admin["tenant"]) == ("bootstrap", "admin", None)
    assert all(admin["may"].values())
