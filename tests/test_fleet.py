"""GET /api/workers: a worker that reported no cores or memory says so (null), and one
not heard from for WORKER_EXPIRE_S leaves the fleet (its record ended)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pydantic import ValidationError

from api.settings import ApiSettings
from tests.conftest import Api, wait_until
from worker.cli_fleet import worker_line

pytestmark = pytest.mark.usefixtures("session_worker")

EXPIRE_S = 3


@pytest.fixture(scope="module")
def expiring(start_api: Callable[..., Api]) -> Iterator[Api]:
    """An API whose fleet drops a worker after EXPIRE_S without a word from it."""
    api = start_api(JOB_HEARTBEAT_TIMEOUT_S="1", WORKER_EXPIRE_S=str(EXPIRE_S))
    yield api
    api.proc.stop(timeout=15)


def fleet(api: Api) -> dict[str, dict[str, Any]]:
    response = api.http.get("/api/workers")
    assert response.status_code == 200, response.text
    return {w["worker_id"]: w for w in response.json()}


def fleet_with(api: Api, *worker_ids: str, beat: bool = False) -> dict[str, dict[str, Any]]:
    """The fleet once it lists `worker_ids` (a record reaches visibility in a moment);
    `beat`: each sends a heartbeat first, so none expires meanwhile."""

    def listed() -> dict[str, dict[str, Any]] | None:
        for worker_id in worker_ids if beat else ():
            heartbeat(api, worker_id)
        workers = fleet(api)
        return workers if set(worker_ids) <= set(workers) else None

    found: dict[str, dict[str, Any]] = wait_until(listed, timeout=30, what=f"{worker_ids}")
    return found


def register(api: Api, worker_id: str, **body: Any) -> None:
    response = api.http.post("/api/workers/register", json={"worker_id": worker_id, **body})
    assert response.status_code == 204, response.text


def heartbeat(api: Api, worker_id: str) -> int:
    return api.http.post(f"/api/workers/{worker_id}/heartbeat", json={"info": {}}).status_code


def test_cores_and_memory_a_worker_did_not_report_read_null(api: Api) -> None:
    bare, full = f"bare-{uuid.uuid4().hex[:8]}", f"full-{uuid.uuid4().hex[:8]}"
    register(api, bare)
    register(api, full, cores=8, ram_gb=16)

    listed = fleet_with(api, bare, full)

    assert (listed[bare]["cores"], listed[bare]["ram_gb"]) == (None, None)
    assert (listed[full]["cores"], listed[full]["ram_gb"]) == (8, 16.0)
    assert "cores not reported · memory not reported" in worker_line(listed[bare])
    assert "8 cores · 16 GB" in worker_line(listed[full])


def test_a_silent_worker_leaves_the_fleet_and_comes_back_when_it_registers(
    expiring: Api,
) -> None:
    silent, beating = f"silent-{uuid.uuid4().hex[:8]}", f"beating-{uuid.uuid4().hex[:8]}"
    register(expiring, silent)
    register(expiring, beating)
    fleet_with(expiring, silent, beating, beat=True)

    def silent_gone() -> dict[str, dict[str, Any]] | None:
        assert heartbeat(expiring, beating) == 204
        listed = fleet(expiring)
        return listed if silent not in listed else None

    listed = wait_until(silent_gone, timeout=EXPIRE_S + 30, what=f"{silent} to expire")

    assert beating in listed  # heard from all along: it stays
    # Its record was ended: a heartbeat is told to register again, as an agent does.
    wait_until(lambda: heartbeat(expiring, silent) == 404, timeout=30, what="record ended")
    register(expiring, silent)
    fleet_with(expiring, silent)


def test_an_expiry_shorter_than_the_heartbeat_timeout_is_refused() -> None:
    with pytest.raises(ValidationError, match="WORKER_EXPIRE_S"):
        ApiSettings.model_validate({"JOB_HEARTBEAT_TIMEOUT_S": 60, "WORKER_EXPIRE_S": 30})
