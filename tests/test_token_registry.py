"""The token registry in process: the workflow (workflows/token_registry.py) on a fresh
task queue of the session's dev server, driven by two API-side token tables
(api/token_table.py) standing for two API replicas. No API process runs here;
tests/test_tokens.py proves the wiring."""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from api.auth import BOOTSTRAP
from api.token_table import STALE_S, TOKEN_PREFIX, TokenTable, token_hash
from tests.conftest import wait_until_async
from worker.native import workflow_runner
from workflows.errors import TemporalUnavailable, TokenNotFound
from workflows.names import (
    TOKEN_REGISTRY_WORKFLOW,
    TOKENS_MEMO,
    TOKENS_USED_SIGNAL,
    token_registry_workflow_id,
)
from workflows.token_models import TokenRegistryInput, TokenTableMemo, TokenUses
from workflows.token_registry import TokenRegistry

SECRET = "registry-test-secret"


@dataclass
class Replicas:
    """Two tables over one registry, and the queue it runs on."""

    client: Client
    task_queue: str
    a: TokenTable
    b: TokenTable


@pytest.fixture
async def replicas(client: Client) -> AsyncIterator[Replicas]:
    task_queue = f"tokens-{uuid.uuid4().hex[:10]}"
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[TokenRegistry],
        workflow_runner=workflow_runner(),
    ):
        yield Replicas(
            client,
            task_queue,
            TokenTable(client, task_queue, SECRET),
            TokenTable(client, task_queue, SECRET),
        )


async def test_a_token_created_on_one_replica_is_known_to_another_after_a_read(
    replicas: Replicas,
) -> None:
    record, token = await replicas.a.create("ci", "producer", "acme")
    assert token.startswith(TOKEN_PREFIX) and len(token) == len(TOKEN_PREFIX) + 43
    assert record.hash == token_hash(token) and token not in record.model_dump_json()
    # The creating replica knows it at once; the other after its next read.
    principal = await replicas.a.resolve(token)
    assert principal is not None
    assert (principal.id, principal.name, principal.role, principal.tenant) == (
        record.id,
        "ci",
        "producer",
        "acme",
    )
    await replicas.b.refresh()
    assert await replicas.b.resolve(token) == principal


async def test_forged_truncated_and_revoked_tokens_resolve_to_nobody(replicas: Replicas) -> None:
    record, token = await replicas.a.create("ci", "reader", None)
    assert await replicas.a.resolve(token[:-1]) is None
    assert await replicas.a.resolve(TOKEN_PREFIX + "x" * 43) is None
    assert await replicas.a.resolve(SECRET) == BOOTSTRAP
    await replicas.b.refresh()
    assert await replicas.b.resolve(token) is not None
    await replicas.a.revoke(record.id)
    assert await replicas.a.resolve(token) is None
    await replicas.b.refresh()
    assert await replicas.b.resolve(token) is None
    assert await replicas.b.by_id(record.id) is None


async def test_revoking_an_unknown_id_is_token_not_found(replicas: Replicas) -> None:
    with pytest.raises(TokenNotFound):
        await replicas.a.revoke("no-registry-yet")
    await replicas.a.create("ci", "worker", None)
    with pytest.raises(TokenNotFound):
        await replicas.a.revoke("0123456789ab")


async def test_uses_reach_the_registry_in_one_batch_and_the_latest_wins(
    replicas: Replicas,
) -> None:
    record, token = await replicas.a.create("ci", "producer", None)
    marker, _ = await replicas.a.create("marker", "reader", None)
    assert (await replicas.a.records())[0].last_used_at is None
    await replicas.b.refresh()
    await replicas.b.resolve(token)
    await replicas.b.flush_uses()
    listed = (await replicas.a.records())[0]
    assert listed.id == record.id and listed.last_used_at is not None
    assert listed.last_used_at >= record.created_at
    # Another replica's older batch that arrives later does not move it back.
    handle = replicas.client.get_workflow_handle(token_registry_workflow_id(replicas.task_queue))
    older = listed.last_used_at - 1000
    await handle.signal(TOKENS_USED_SIGNAL, TokenUses(used={record.id: older, marker.id: older}))

    async def marked() -> bool:
        return (await replicas.a.records())[1].last_used_at == older

    await wait_until_async(marked, timeout=10, what="the second batch to arrive")
    assert (await replicas.a.records())[0].last_used_at == listed.last_used_at


async def test_the_table_and_its_memo_survive_continue_as_new(replicas: Replicas) -> None:
    workflow_id = token_registry_workflow_id(replicas.task_queue)
    handle = await replicas.client.start_workflow(
        TOKEN_REGISTRY_WORKFLOW,
        TokenRegistryInput(history_limit=20),
        id=workflow_id,
        task_queue=replicas.task_queue,
    )
    made = [await replicas.a.create(f"t{i}", "reader", None) for i in range(3)]
    await replicas.a.revoke(made[0][0].id)
    for _ in range(6):
        await replicas.a.resolve(made[1][1])
        await replicas.a.flush_uses()

    async def continued() -> bool:
        return (await handle.describe()).run_id != handle.first_execution_run_id

    await wait_until_async(continued, timeout=20, what="the registry to continue as new")
    described = await replicas.client.get_workflow_handle(workflow_id).describe()
    memo = TokenTableMemo.model_validate(await described.memo_value(TOKENS_MEMO))
    assert [entry.name for entry in memo.tokens] == ["t1", "t2"]
    await replicas.b.refresh()
    assert await replicas.b.resolve(made[0][1]) is None
    assert await replicas.b.resolve(made[2][1]) is not None
    records = await replicas.b.records()
    assert [r.name for r in records] == ["t1", "t2"]
    assert records[0].last_used_at is not None


class Outage:
    """A client whose reads of the token table and signals to it fail while `down`
    (Temporal unreachable from this replica), and that notes when each read was asked;
    every other call goes through."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.down = False
        self.reads: list[float] = []  # monotonic times

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def get_workflow_handle(self, workflow_id: str) -> Any:
        handle = self.client.get_workflow_handle(workflow_id)
        outage = self

        class Handle:
            def __getattr__(self, name: str) -> Any:
                return getattr(handle, name)

            async def describe(self, **kwargs: Any) -> Any:
                outage.reads.append(time.monotonic())
                if outage.down:
                    raise RPCError("unreachable", RPCStatusCode.UNAVAILABLE, b"")
                return await handle.describe(**kwargs)

            async def signal(self, *args: Any, **kwargs: Any) -> Any:
                if outage.down:
                    raise RPCError("unreachable", RPCStatusCode.UNAVAILABLE, b"")
                return await handle.signal(*args, **kwargs)

        return Handle()


@contextlib.asynccontextmanager
async def started(outage: Outage, replicas: Replicas, **timing: float) -> AsyncIterator[TokenTable]:
    """A table reading through `outage` every 0.1 s, its background tasks running."""
    table = TokenTable(outage, replicas.task_queue, SECRET, refresh_s=0.1, **timing)  # type: ignore[arg-type]
    table.start()
    try:
        yield table
    finally:
        await table.stop()


async def test_a_replica_that_cannot_read_the_table_stops_trusting_its_copy(
    replicas: Replicas,
) -> None:
    outage = Outage(replicas.client)
    cut_off = TokenTable(outage, replicas.task_queue, SECRET)  # type: ignore[arg-type]
    _, token = await replicas.a.create("ci", "producer", None)
    assert await cut_off.resolve(token) is not None
    outage.down = True
    # Its copy serves a while (no call per request), then refuses: a token revoked
    # meanwhile elsewhere cannot outlive the copy by more than STALE_S.
    assert await cut_off.resolve(token) is not None

    async def refused() -> bool:
        try:
            await cut_off.resolve(token)
        except TemporalUnavailable:
            return True
        return False

    await wait_until_async(refused, timeout=STALE_S + 5, what="the stale copy to be refused")
    assert await cut_off.resolve(SECRET) == BOOTSTRAP  # the bootstrap secret needs no table
    outage.down = False
    assert await cut_off.resolve(token) is not None


async def test_a_replica_reads_the_table_while_tokens_are_checked_and_not_when_idle(
    replicas: Replicas,
) -> None:
    watched = Outage(replicas.client)
    _, token = await replicas.a.create("idle", "producer", None)
    async with started(watched, replicas, idle_s=0.5) as table:
        assert await table.resolve(SECRET) == BOOTSTRAP  # the secret needs no table
        assert await table.resolve(token) is not None  # the first check reads

        async def read(times: int) -> bool:
            return len(watched.reads) >= times

        async def paused() -> bool:
            return time.monotonic() - watched.reads[-1] > 1.0

        await wait_until_async(lambda: read(3), timeout=10, what="reads in the background")
        # Without a check for idle_s, the background reads stop...
        await wait_until_async(paused, timeout=10, what="the reads to pause")
        paused_at = len(watched.reads)
        # ...and the next check starts them again.
        assert await table.resolve(token) is not None
        await wait_until_async(lambda: read(paused_at + 2), timeout=10, what="reads again")


async def test_the_background_reads_outlive_an_outage_and_say_when_they_read_again(
    replicas: Replicas, caplog: pytest.LogCaptureFixture
) -> None:
    outage = Outage(replicas.client)
    _, token = await replicas.a.create("outage", "producer", None)
    caplog.set_level(logging.INFO, logger="jobforge.api")
    async with started(outage, replicas) as table:
        assert await table.resolve(token) is not None  # the reads run from now on
        outage.down = True

        async def logged(text: str) -> bool:
            return any(text in record.getMessage() for record in caplog.records)

        await wait_until_async(lambda: logged("trying again"), timeout=10, what="the warning")
        outage.down = False
        await wait_until_async(
            lambda: logged("the token table is read again"), timeout=10, what="the recovery"
        )
        assert await table.resolve(token) is not None


async def test_uses_a_flush_could_not_send_go_with_the_next_one(replicas: Replicas) -> None:
    outage = Outage(replicas.client)
    table = TokenTable(outage, replicas.task_queue, SECRET)  # type: ignore[arg-type]
    record, token = await replicas.a.create("flushed", "producer", None)
    assert await table.resolve(token) is not None  # one use, counted in memory
    outage.down = True
    with pytest.raises(RPCError):
        await table.flush_uses()
    outage.down = False
    await table.flush_uses()  # the use kept from the failed flush

    async def recorded() -> bool:
        found = [r for r in await replicas.b.records() if r.id == record.id]
        return bool(found) and found[0].last_used_at is not None

    await wait_until_async(recorded, timeout=10, what="the use in the registry")
    # With no registry on its task queue, a replica lists no token.
    assert await TokenTable(replicas.client, f"none-{uuid.uuid4().hex[:8]}", SECRET).records() == []
