"""The fleet by tenant: a worker registered with a tenant's token is that tenant's, and
`GET /api/workers` lists a caller only its tenant's workers (every one to an admin)."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from tests.conftest import Api, wait_until

# Its workflows host the token registry.
pytestmark = pytest.mark.usefixtures("session_worker")


def token(api: Api, role: str, tenant: str | None) -> str:
    made = api.http.post(
        "/api/tokens",
        json={"name": f"{role}-{uuid.uuid4().hex[:6]}", "role": role, "tenant": tenant},
    )
    assert made.status_code == 201, made.text
    secret: str = made.json()["token"]
    return secret


def as_token(api: Api, secret: str) -> httpx.Client:
    return httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {secret}"}, timeout=30)


def listed(client: httpx.Client) -> dict[str, Any]:
    answer = client.get("/api/workers")
    assert answer.status_code == 200, answer.text
    return {worker["worker_id"]: worker for worker in answer.json()}


def test_a_tenant_lists_only_its_own_workers_and_registers_none_for_another(api: Api) -> None:
    ours, theirs = f"t-{uuid.uuid4().hex[:6]}", f"t-{uuid.uuid4().hex[:6]}"
    ids = {tenant: f"w-{tenant}" for tenant in (ours, theirs)}
    for tenant, worker_id in ids.items():
        with as_token(api, token(api, "worker", tenant)) as worker:
            answer = worker.post("/api/workers/register", json={"worker_id": worker_id})
            assert answer.status_code == 204, answer.text

    # Records reach visibility, which the list reads, a moment after they are made.
    def both_listed() -> dict[str, Any] | None:
        every = listed(api.http)
        return every if set(ids.values()) <= set(every) else None

    every: dict[str, Any] = wait_until(both_listed, timeout=30, what="both workers listed")
    assert every[ids[theirs]]["tenant"] == theirs
    with as_token(api, token(api, "reader", ours)) as reader:
        seen = listed(reader)
    assert ids[ours] in seen and seen[ids[ours]]["tenant"] == ours
    assert ids[theirs] not in seen

    with as_token(api, token(api, "worker", ours)) as worker:
        spoof = worker.post(
            "/api/workers/register",
            json={"worker_id": f"w-{uuid.uuid4().hex[:6]}", "tenant": theirs},
        )
    assert spoof.status_code == 403 and "tenant" in spoof.text
