"""A worker's default id (NODE_ID unset): the same across restarts on one host and data
dir, distinct for workers running at once (worker/node_identity.py)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import Api, Proc, wait_until
from worker.node_identity import base_node_id, held_node_id
from workflows.models import WORKER_ID_PATTERN


def test_one_host_and_data_dir_give_the_same_id_on_every_start(tmp_path: Path) -> None:
    with held_node_id("box", tmp_path / "cache") as first:
        pass
    with held_node_id("box", tmp_path / "cache") as again:
        pass

    assert first == again == base_node_id("box", tmp_path / "cache")
    assert re.fullmatch(WORKER_ID_PATTERN, first)
    assert first.startswith("box-")


def test_another_data_dir_or_host_gives_another_id(tmp_path: Path) -> None:
    ids = set()
    for host, data_dir in (("box", "a"), ("box", "b"), ("other", "a")):
        with held_node_id(host, tmp_path / data_dir) as node_id:
            ids.add(node_id)

    assert len(ids) == 3


def test_workers_running_at_once_get_numbered_ids_and_a_freed_one_is_taken_again(
    tmp_path: Path,
) -> None:
    base = base_node_id("box", tmp_path)
    with held_node_id("box", tmp_path) as first:
        with held_node_id("box", tmp_path) as second, held_node_id("box", tmp_path) as third:
            assert (first, second, third) == (base, f"{base}-2", f"{base}-3")
        with held_node_id("box", tmp_path) as after:
            assert after == f"{base}-2"  # the lowest free one
    with held_node_id("box", tmp_path) as restarted:
        assert restarted == base


def ready_id(proc: Proc) -> str:
    found = re.search(r"worker (\S+) ready: ", proc.output())
    assert found, proc.output()
    return found.group(1)


def fleet_of(api: Api, host: str) -> set[str]:
    response = api.http.get("/api/workers")
    assert response.status_code == 200, response.text
    return {w["worker_id"] for w in response.json() if w["host"] == host}


@pytest.mark.usefixtures("session_worker")
def test_a_restarted_worker_keeps_its_fleet_entry_and_a_second_one_gets_its_own(
    api: Api, start_worker: Callable[..., Proc], tmp_path: Path
) -> None:
    host = f"h-{uuid.uuid4().hex[:8]}"
    env = {
        "WORKER_HOST": host,
        "SOLVER_CACHE_DIR": str(tmp_path / "cache"),
        "WORKER_RUN_WORKFLOWS": "false",
        "WORKER_TYPES": f"none-{host}",
        "NODE_ID": "",
    }
    first = start_worker(ready="ready: ", **env)
    base = ready_id(first)
    second = start_worker(ready="ready: ", **env)
    assert ready_id(second) == f"{base}-2"
    first.stop(timeout=15)
    restarted = start_worker(ready="ready: ", **env)
    try:
        assert ready_id(restarted) == base
        assert base == base_node_id(host, tmp_path / "cache")
        wait_until(
            lambda: fleet_of(api, host) == {base, f"{base}-2"},
            timeout=30,
            what=f"the fleet of {host} to be its two ids",
        )
    finally:
        second.stop(timeout=15)
        restarted.stop(timeout=15)
