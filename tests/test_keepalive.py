"""Keep-alive: a pooled connection the API closes just as a request goes out on it.

The API closes a connection idle for API_KEEPALIVE_S; a client that keeps one idle as
long sends a request just as it closes and gets "Server disconnected without sending a
response". Our clients drop idle connections first (hub_client.KEEPALIVE_EXPIRY_S, below
the API's 75 s), and the CLI's client sends a request that does no harm twice again.
"""

from __future__ import annotations

import select
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import PYTHON, REGISTERED_TYPE, ROOT, SECRET, Api, wait_until
from worker import cli, hub_client
from worker.agent import AgentSettings, Hub
from worker.hub_client import HubClient, HubSettings, HubUnreachableError

API_KEEPALIVE_S = 1

pytestmark = pytest.mark.usefixtures("session_worker")


@pytest.fixture(scope="module")
def short_api(start_api: Callable[..., Api]) -> Api:
    """An API that closes a connection idle for API_KEEPALIVE_S."""
    return start_api(API_KEEPALIVE_S=str(API_KEEPALIVE_S))


class Connections:
    """httpcore's `trace` extension: counts the connections opened and the requests
    started; once `race` is set, the next request, on the one connection open, is held
    after the client chose that connection and before a byte goes out, until the API has
    closed it (its keep-alive ran out): the race at its worst."""

    def __init__(self) -> None:
        self.sockets: list[socket.socket] = []
        self.requests = 0
        self.race = False

    def __call__(self, event: str, info: dict[str, Any]) -> None:
        if event == "connection.connect_tcp.complete":
            self.sockets.append(info["return_value"].get_extra_info("socket"))
        elif event == "http11.send_request_headers.started":
            self.requests += 1
            if self.race:
                self.race = False
                pooled = self.sockets[-1:]  # the one connection open, idle
                wait_until(
                    lambda: select.select(pooled, [], [], 0)[0],
                    timeout=API_KEEPALIVE_S + 2,
                    interval=0.01,
                    what="the API to close the idle connection",
                )

    async def traced(self, event: str, info: dict[str, Any]) -> None:
        """The same, for an async client."""
        self(event, info)


def hub(api: Api) -> HubClient:
    """The CLI's client of `api`."""
    return HubClient(HubSettings(HUB_URL=api.url, FORGE_INGEST_SECRET=SECRET))


def test_a_request_that_does_no_harm_twice_is_sent_again_when_the_api_closed_its_connection(
    short_api: Api,
) -> None:
    trace = Connections()
    key = f"keepalive-{uuid.uuid4().hex}"
    body = {"type": REGISTERED_TYPE, "params": {"keepalive": key}}
    with hub(short_api) as client:
        client.call("GET", "/healthz", extensions={"trace": trace})
        trace.race = True
        submitted = client.call(
            "POST",
            "/api/jobs",
            json=body,
            headers={"Idempotency-Key": key},
            extensions={"trace": trace},
        )
        # Sent on the closed connection, then again on a new one.
        assert (trace.requests, len(trace.sockets)) == (3, 2)
        job_id = submitted.json()["id"]
        trace.race = True
        read = client.call("GET", f"/api/jobs/{job_id}", extensions={"trace": trace})
        assert (trace.requests, len(trace.sockets)) == (5, 3)
        assert read.json()["id"] == job_id
        # The key made one job: the same id again.
        assert client.submit(body, key) == job_id


def test_a_post_without_an_idempotency_key_is_not_sent_twice(short_api: Api) -> None:
    trace = Connections()
    with hub(short_api) as client:
        client.call("GET", "/healthz", extensions={"trace": trace})
        trace.race = True
        with pytest.raises(HubUnreachableError, match="Server disconnected"):
            client.call(
                "POST",
                "/api/jobs",
                json={"type": REGISTERED_TYPE, "params": {}},
                extensions={"trace": trace},
            )
    assert (trace.requests, len(trace.sockets)) == (2, 1)


def test_our_clients_expire_idle_connections_before_the_api_closes_them() -> None:
    assert hub_client.KEEPALIVE_EXPIRY_S < cli.API_KEEPALIVE_S
    # Below uvicorn's and httpx's own default (5 s) too: a server left at it still
    # outlasts our clients.
    assert hub_client.KEEPALIVE_EXPIRY_S < 5


async def test_the_cli_and_agent_clients_drop_a_connection_idle_past_their_expiry(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The expiry made short, so the idle period under test stays short; the API keeps
    # the connection far longer (75 s), so only the client can have dropped it.
    expiry_s = 0.3
    monkeypatch.setattr(hub_client, "KEEPALIVE_EXPIRY_S", expiry_s)
    cli_trace, agent_trace = Connections(), Connections()
    agent = Hub(AgentSettings(hub=HubSettings(HUB_URL=api.url, FORGE_INGEST_SECRET=SECRET)))
    with hub(api) as client:
        try:
            client.call("GET", "/healthz", extensions={"trace": cli_trace})
            await agent.call("GET", "/healthz", extensions={"trace": agent_trace.traced})
            time.sleep(expiry_s + 0.2)  # the idle period is what is tested
            client.call("GET", "/healthz", extensions={"trace": cli_trace})
            await agent.call("GET", "/healthz", extensions={"trace": agent_trace.traced})
        finally:
            await agent.close()
    assert len(cli_trace.sockets) == 2
    assert len(agent_trace.sockets) == 2


def test_jobforge_api_refuses_a_keepalive_that_is_not_a_number() -> None:
    result = subprocess.run(
        [PYTHON, "-m", "worker.cli", "api"],
        cwd=ROOT,
        env={"API_KEEPALIVE_S": "soon", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "API_KEEPALIVE_S" in result.stderr
