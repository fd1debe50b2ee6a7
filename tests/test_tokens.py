"""API tokens through real API processes: two replicas and a workflow worker (which runs
the token registry) on task queues of their own, so the registry is this module's.

Create, list and revoke; a revoked token refused by the other replica within 5 s;
forged and truncated tokens; each role refused (403, naming it) outside its routes;
no secret in any listing, log or history; tokens across an API restart; the bootstrap
secret; bad input; last uses in batches; the event stream; the CLI.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from api.token_table import TOKEN_PREFIX, token_hash
from tests.conftest import SECRET, Api, _registry_on_default_queue, wait_until
from tests.procs import Proc
from tests.test_cli import jobforge
from worker.devserver import DevServer
from workflows.names import token_registry_workflow_id

# Uses reach the registry every half second here (30 s as shipped).
FLUSH = {"TOKENS_USE_FLUSH_S": "0.5", "EVENTS_REQUIRE_TOKEN": "true"}
REVOKED_WITHIN_S = 5.0
ROLES = ("admin", "producer", "worker", "reader")

# One representative call of each kind, and the roles that may make it (the spec's
# roles, written out here rather than read from api/access.py). A call a role may
# make is answered anything but 401/403: the bodies are empty, so mostly a 422.
CALLS: list[tuple[str, str, set[str]]] = [
    ("GET", "/api/groups", {"admin", "producer", "reader"}),
    ("GET", "/api/jobs", {"admin", "producer", "reader", "worker"}),
    ("POST", "/api/jobs", {"admin", "producer", "worker"}),
    ("POST", "/api/jobs/no-such-job/stop", {"admin", "producer"}),
    ("POST", "/api/jobs/claim", {"admin", "worker"}),
    ("POST", "/api/jobs/no-such-job/logs", {"admin", "worker"}),
    ("POST", "/api/workers/register", {"admin", "worker"}),
    ("POST", "/api/pools/p1/lock", {"admin", "worker"}),
    ("PATCH", "/api/groups/g1", {"admin"}),
    ("POST", "/api/ops/cleanup", {"admin"}),
    ("GET", "/api/tokens", {"admin"}),
    ("POST", "/api/tokens", {"admin"}),
    ("POST", "/api/system/scheduler/queue/jobs/submit", {"admin", "producer"}),
    ("POST", "/api/system/scheduler/queue/jobs/claim", {"admin", "worker"}),
    ("POST", "/api/agent/heartbeat", {"admin", "worker"}),
    ("POST", "/run-simulation", {"admin", "producer"}),
    ("POST", "/targets/t1/jobs", {"admin", "producer"}),
    ("POST", "/api/events/token", {"admin", "producer", "reader", "worker"}),
]


@dataclass
class Deployment:
    """Two API replicas and the workflow worker, on queues of their own."""

    queues: dict[str, str]
    first: Api
    second: Api
    worker: Proc
    start_api: Callable[..., Api]

    def create(self, role: str, tenant: str | None = None, api: Api | None = None) -> Any:
        """POST /api/tokens with the bootstrap secret; the answer."""
        body = {"name": f"{role}-{uuid.uuid4().hex[:6]}", "role": role, "tenant": tenant}
        response = (api or self.first).http.post("/api/tokens", json=body)
        assert response.status_code == 201, response.text
        return response.json()


def as_token(api: Api, token: str) -> httpx.Client:
    """A client of `api` that sends `token`."""
    return httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


@pytest.fixture(scope="module")
def deployment(
    temporal: DevServer,
    start_api: Callable[..., Api],
    start_worker: Callable[..., Proc],
) -> Iterator[Deployment]:
    asyncio.run(_registry_on_default_queue(temporal))
    name = f"tok-{uuid.uuid4().hex[:10]}"
    queues = {"TEMPORAL_TASK_QUEUE": name, "TEMPORAL_ACTIVITY_QUEUE_PREFIX": f"{name}-"}
    worker = start_worker(
        ready="ready: workflows=True",
        WORKER_TYPES="no-such-type",
        NODE_ID=f"{name}-workflows",
        **queues,
    )
    first = start_api(**queues, **FLUSH)
    second = start_api(**queues, **FLUSH)
    yield Deployment(queues, first, second, worker, start_api)
    for proc in (second.proc, first.proc, worker):
        proc.stop(timeout=15)


def test_an_admin_creates_lists_and_revokes_a_token_shown_only_once(
    deployment: Deployment,
) -> None:
    created = deployment.create("producer", "acme")
    assert set(created) == {"id", "token", "name", "role", "tenant", "created_at"}
    assert created["token"].startswith(TOKEN_PREFIX)
    assert (created["role"], created["tenant"]) == ("producer", "acme")
    for api in (deployment.first, deployment.second):  # every replica answers the same
        listed = api.http.get("/api/tokens")
        assert listed.status_code == 200, listed.text
        [mine] = [t for t in listed.json() if t["id"] == created["id"]]
        assert set(mine) == {"id", "name", "role", "tenant", "created_at", "last_used_at"}
        assert created["token"] not in listed.text
        assert token_hash(created["token"]) not in listed.text
    assert deployment.first.http.delete(f"/api/tokens/{created['id']}").status_code == 204
    listed = deployment.first.http.get("/api/tokens").json()
    assert created["id"] not in [t["id"] for t in listed]
    again = deployment.first.http.delete(f"/api/tokens/{created['id']}")
    assert again.status_code == 404, again.text
    assert created["id"] in again.json()["error"]
    assert deployment.first.http.delete("/api/tokens/never-was").status_code == 404


def test_a_revoked_token_is_refused_by_every_replica_within_5_s(
    deployment: Deployment,
) -> None:
    created = deployment.create("reader")
    with (
        as_token(deployment.first, created["token"]) as first,
        as_token(deployment.second, created["token"]) as second,
    ):
        # The other replica knows a new token at once (a miss reads the table again).
        assert second.get("/api/groups").status_code == 200
        assert deployment.first.http.delete(f"/api/tokens/{created['id']}").status_code == 204
        assert first.get("/api/groups").status_code == 401
        wait_until(
            lambda: second.get("/api/groups").status_code == 401,
            timeout=REVOKED_WITHIN_S,
            interval=0.05,
            what="the other replica to refuse the revoked token",
        )


def test_forged_truncated_and_missing_tokens_are_401(deployment: Deployment) -> None:
    created = deployment.create("admin")
    token = created["token"]
    forged = [
        token[:-1],
        token[: len(TOKEN_PREFIX) + 8],
        token + "x",
        TOKEN_PREFIX + "A" * 43,
        SECRET[:-1],
        SECRET + "x",
        token_hash(token),
    ]
    for bad in forged:
        with as_token(deployment.second, bad) as http:
            response = http.get("/api/jobs")
        assert response.status_code == 401, (bad, response.text)
        assert response.headers["WWW-Authenticate"] == "Bearer"
    bare = httpx.get(f"{deployment.second.url}/api/jobs", timeout=30)
    assert bare.status_code == 401
    assert "missing bearer token" in bare.json()["error"]


@pytest.mark.parametrize("role", ROLES)
def test_each_role_is_refused_outside_its_routes_with_a_403_naming_it(
    deployment: Deployment, role: str
) -> None:
    created = deployment.create(role)
    with as_token(deployment.second, created["token"]) as http:
        for method, path, allowed in CALLS:
            body: dict[str, Any] | None = {} if method in ("POST", "PATCH", "PUT") else None
            response = http.request(method, path, json=body)
            if role in allowed:
                assert response.status_code not in (401, 403), (method, path, response.text)
            else:
                assert response.status_code == 403, (method, path, response.text)
                assert response.json()["error"] == f"role {role} may not {method} {path}"


def test_the_bootstrap_secret_is_an_admin_for_every_route(deployment: Deployment) -> None:
    for method, path, _ in CALLS:
        body: dict[str, Any] | None = {} if method in ("POST", "PATCH", "PUT") else None
        response = deployment.second.http.request(method, path, json=body)
        assert response.status_code not in (401, 403), (method, path, response.text)
    # And it does everything it did: submit, read, cancel.
    job_id = deployment.second.submit(type=f"t-{uuid.uuid4().hex[:8]}")
    assert deployment.second.job(job_id)["status"] == "pending"
    assert deployment.second.http.delete(f"/api/jobs/{job_id}").status_code in (200, 202, 204)


def test_a_producer_token_submits_reads_and_cancels_a_job(deployment: Deployment) -> None:
    created = deployment.create("producer")
    with as_token(deployment.second, created["token"]) as http:
        submitted = http.post("/api/jobs", json={"type": f"t-{uuid.uuid4().hex[:8]}"})
        assert submitted.status_code == 201, submitted.text
        job_id = submitted.json()["id"]
        assert http.get(f"/api/jobs/{job_id}").status_code == 200
        assert http.delete(f"/api/jobs/{job_id}").status_code in (200, 202, 204)


def test_bad_token_requests_are_422_naming_the_field(deployment: Deployment) -> None:
    cases = [
        ({"name": "x", "role": "root"}, "role"),
        ({"name": "x", "role": "reader", "tenant": "acme corp"}, "tenant"),
        ({"name": "x", "role": "reader", "tenant": ""}, "tenant"),
        ({"name": "x", "role": "reader", "tenant": "a/b"}, "tenant"),
        ({"name": "x", "role": "admin", "tenant": "acme"}, "tenant"),
        ({"role": "reader"}, "name"),
        ({"name": "", "role": "reader"}, "name"),
        ({"name": "x"}, "role"),
        ({"name": "x", "role": "reader", "scope": "all"}, "scope"),
    ]
    for body, field in cases:
        response = deployment.first.http.post("/api/tokens", json=body)
        assert response.status_code == 422, (body, response.text)
        assert response.json()["error"].startswith(f"{field}:"), (body, response.text)


def test_last_use_reaches_every_replica_in_batches(deployment: Deployment) -> None:
    created = deployment.create("reader")

    def last_used() -> int | None:
        listed = deployment.first.http.get("/api/tokens").json()
        found: int | None = next(t for t in listed if t["id"] == created["id"])["last_used_at"]
        return found

    assert last_used() is None
    with as_token(deployment.second, created["token"]) as http:
        assert http.get("/api/groups").status_code == 200
    # Used on replica 2, listed by replica 1 once replica 2 has flushed its batch.
    seen = wait_until(last_used, timeout=15, what="the use to reach the registry")
    assert seen >= created["created_at"]


def test_the_event_stream_takes_any_role_and_refuses_a_revoked_stream_token(
    deployment: Deployment,
) -> None:
    api = deployment.second

    def opens(headers: dict[str, str], params: dict[str, str] | None = None) -> int:
        with httpx.stream(
            "GET", f"{api.url}/api/jobs/events", headers=headers, params=params, timeout=30
        ) as response:
            return response.status_code

    assert opens({}) == 401  # EVENTS_REQUIRE_TOKEN here
    for role in ROLES:
        token = deployment.create(role)["token"]
        assert opens({"Authorization": f"Bearer {token}"}) == 200, role
    reader = deployment.create("reader")
    with as_token(deployment.first, reader["token"]) as http:
        issued = http.post("/api/events/token")
    assert issued.status_code == 200, issued.text
    stream_token = issued.json()["token"]
    assert reader["token"] not in stream_token and reader["id"] in stream_token
    assert opens({}, {"token": stream_token}) == 200
    assert deployment.first.http.delete(f"/api/tokens/{reader['id']}").status_code == 204
    wait_until(
        lambda: opens({}, {"token": stream_token}) == 401,
        timeout=REVOKED_WITHIN_S,
        interval=0.05,
        what="the revoked token's stream token to be refused",
    )


def test_tokens_survive_an_api_restart(deployment: Deployment) -> None:
    api = deployment.start_api(**deployment.queues, **FLUSH)
    created = deployment.create("producer", "acme", api=api)
    api.proc.stop(timeout=15)
    restarted = deployment.start_api(**deployment.queues, **FLUSH)
    try:
        with as_token(restarted, created["token"]) as http:
            assert http.get("/api/groups").status_code == 200
        listed = restarted.http.get("/api/tokens").json()
        assert created["id"] in [t["id"] for t in listed]
    finally:
        restarted.proc.stop(timeout=15)


def test_the_cli_creates_lists_and_revokes_tokens(deployment: Deployment) -> None:
    url = deployment.first.url
    made = jobforge(url, "token", "create", "--role", "reader", "--tenant", "acme")
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert token.startswith(TOKEN_PREFIX) and "\n" not in token
    token_id = made.stderr.split()[1]
    listed = jobforge(url, "token", "list")
    assert listed.returncode == 0, listed.stderr
    [line] = [line for line in listed.stdout.splitlines() if line.startswith(token_id)]
    assert "reader" in line and "acme" in line and token not in listed.stdout
    # The token is the CLI's FORGE_INGEST_SECRET: it reads, and is refused a submit.
    assert jobforge(url, "group", "list", secret=token).returncode == 0
    refused = jobforge(url, "submit", "echo", secret=token)
    assert refused.returncode == 1
    assert refused.stderr.strip() == "error: HTTP 403: role reader may not POST /api/jobs"
    revoked = jobforge(url, "token", "revoke", token_id)
    assert (revoked.returncode, revoked.stdout.strip()) == (0, f"revoked {token_id}")
    again = jobforge(url, "token", "revoke", token_id)
    assert again.returncode == 1
    assert again.stderr.strip() == f"error: HTTP 404: token {token_id} not found"
    bad = jobforge(url, "token", "create", "--role", "root")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


async def test_no_secret_is_logged_or_kept_in_temporal(
    deployment: Deployment, temporal: DevServer
) -> None:
    created = deployment.create("producer")
    token = created["token"]
    with as_token(deployment.second, token) as http:
        assert http.get("/api/groups").status_code == 200
        assert http.get("/api/tokens").status_code == 403
    with as_token(deployment.second, token[:-2]) as http:
        assert http.get("/api/groups").status_code == 401
    secret_part = token[len(TOKEN_PREFIX) : len(TOKEN_PREFIX) + 16]
    for proc in (deployment.first.proc, deployment.second.proc, deployment.worker):
        assert secret_part not in proc.output(), proc.name
    client = await Client.connect(temporal.address)
    workflow_id = token_registry_workflow_id(deployment.queues["TEMPORAL_TASK_QUEUE"])
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    recorded = history.to_json()
    payloads = "".join(payload_texts(json.loads(recorded)))
    assert token_hash(token) in payloads  # the hash is what is kept
    assert secret_part not in recorded and secret_part not in payloads


def payload_texts(node: Any) -> Iterator[str]:
    """Every payload's data in a history's JSON, decoded (it is base64 there)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "data" and isinstance(value, str):
                yield base64.b64decode(value).decode(errors="replace")
            else:
                yield from payload_texts(value)
    elif isinstance(node, list):
        for item in node:
            yield from payload_texts(item)
