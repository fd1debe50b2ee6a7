"""`jobforge setup` registers the search attributes on a cluster, idempotently."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client

from tests.conftest import ROOT
from tests.ports import free_port
from worker.devserver import DevServer
from workflows import search_attributes

KEYWORDS = [name for name, kind in search_attributes.REGISTRATION.items() if kind == "Keyword"]

# Starts processes (tests/tiers.py): not in `make check`.
pytestmark = pytest.mark.process


@pytest.fixture
def bare_server(tmp_path: Path) -> Iterator[DevServer]:
    """A dev server without jobforge's search attributes, like a fresh cluster."""
    server = DevServer(tmp_path, port=free_port(), ui_port=None, register_attributes=False)
    server.start()
    yield server
    server.stop()


def setup_command(address: str) -> subprocess.CompletedProcess[str]:
    """Run `jobforge setup` against the cluster at `address`."""
    env = {**os.environ, "TEMPORAL_ADDRESS": address}
    return subprocess.run(
        [sys.executable, "-m", "worker.cli", "setup"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def registered(server: DevServer) -> set[str]:
    """The custom search attributes the server knows."""
    client = await Client.connect(server.address)
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace="default")
    )
    return set(listed.custom_attributes)


async def test_setup_registers_the_search_attributes_once_and_is_idempotent(
    bare_server: DevServer,
) -> None:
    wanted = set(search_attributes.REGISTRATION)
    assert not wanted & await registered(bare_server)

    first = setup_command(bare_server.address)
    # Usable once setup returns: a query naming them all is accepted at once.
    client = await Client.connect(bare_server.address)
    await client.count_workflows(" AND ".join(f"{name} = ''" for name in KEYWORDS))
    second = setup_command(bare_server.address)

    assert first.returncode == 0, first.stderr
    assert all(name in first.stdout for name in wanted)
    assert second.returncode == 0, second.stderr
    assert "all present already" in second.stdout
    assert wanted <= await registered(bare_server)


def test_setup_against_an_unreachable_server_fails_with_one_clear_line() -> None:
    result = setup_command(f"127.0.0.1:{free_port()}")
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: cannot register search attributes")


async def test_a_dev_server_on_a_kept_data_dir_gets_the_attributes_added_since(
    bare_server: DevServer, tmp_path: Path
) -> None:
    # The flags only count when the namespace is made: a data dir from a jobforge that
    # had fewer attributes keeps its old set unless the start adds the rest.
    bare_server.stop()
    again = DevServer(tmp_path, port=free_port(), ui_port=None)
    again.start()
    try:
        assert set(search_attributes.REGISTRATION) <= await registered(again)
    finally:
        again.stop()
