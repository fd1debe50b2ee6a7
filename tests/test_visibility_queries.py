"""Ordered reads from visibility (api/visibility_queries.py) against the real dev server.

The executions are workflows of a fresh type that no worker runs: visibility records
them with the search attributes they start with, which is all these reads look at.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from temporalio.client import Client
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from api import visibility_queries
from tests.conftest import wait_until_async
from worker.devserver import DevServer
from workflows import search_attributes

THRESHOLDS = (10, 1, 0, -9)


@dataclass
class Probe:
    """Started executions of one fresh workflow type, oldest first."""

    client: Client
    query: str
    ids: list[str]
    priorities: list[int]

    def by_priority(self) -> list[str]:
        """The ids in the claim order: priority descending, then oldest first."""
        order = sorted(range(len(self.ids)), key=lambda i: (-self.priorities[i], i))
        return [self.ids[i] for i in order]


@pytest.fixture
async def client(temporal: DevServer) -> Client:
    """A client of the session's dev server."""
    return await Client.connect(temporal.address)


async def start_probe(client: Client, priorities: list[int]) -> Probe:
    """Start one execution per priority, one after the other, and wait until
    visibility shows them all."""
    kind = f"probe-{uuid.uuid4().hex[:8]}"
    ids = []
    for priority in priorities:
        workflow_id = f"{kind}-{len(ids)}"
        await client.start_workflow(
            kind,
            id=workflow_id,
            task_queue=f"{kind}-nobody",
            search_attributes=TypedSearchAttributes(
                [SearchAttributePair(search_attributes.PRIORITY, priority)]
            ),
        )
        ids.append(workflow_id)
    query = f"WorkflowType = '{kind}'"

    async def all_visible() -> bool:
        return await visibility_queries.count(client, query) == len(ids)

    await wait_until_async(all_visible, what="every probe visible")
    return Probe(client, query, ids, priorities)


@pytest.fixture
async def probes(client: Client) -> AsyncIterator[list[Probe]]:
    """Probes made by a test, terminated after it."""
    made: list[Probe] = []
    yield made
    await asyncio.gather(
        *(
            client.get_workflow_handle(workflow_id).terminate()
            for probe in made
            for workflow_id in probe.ids
        ),
        return_exceptions=True,
    )


async def ids_by_priority(
    probe: Probe,
    offset: int,
    limit: int,
    *,
    backlog: bool = False,
    cutoffs: visibility_queries.Cutoffs | None = None,
    query: str | None = None,
) -> list[str]:
    rows = await visibility_queries.by_priority(
        probe.client,
        query or probe.query,
        offset=offset,
        limit=limit,
        thresholds=THRESHOLDS,
        backlog=backlog,
        cutoffs=cutoffs,
    )
    return [execution.id for execution in rows.executions]


@pytest.mark.parametrize("backlog", [False, True])
async def test_priority_order_spans_buckets_values_and_pages(
    client: Client, probes: list[Probe], backlog: bool
) -> None:
    priorities = [0, 5, -3, 5, 10, 0, -3, 250_000, -40, 1, 9, -1_000_000, 1_000_000, 0]
    probe = await start_probe(client, priorities)
    probes.append(probe)
    expected = probe.by_priority()

    assert await ids_by_priority(probe, 0, len(expected) + 5, backlog=backlog) == expected
    for offset in range(0, len(expected), 3):
        page = await ids_by_priority(probe, offset, 3, backlog=backlog)
        assert page == expected[offset : offset + 3]
    rows = await visibility_queries.by_priority(
        client, probe.query, offset=len(expected) - 2, limit=2, thresholds=THRESHOLDS
    )
    assert rows.next_offset is None
    rows = await visibility_queries.by_priority(
        client, probe.query, offset=0, limit=2, thresholds=THRESHOLDS
    )
    assert rows.next_offset == 2


async def test_a_priority_larger_than_a_small_group_is_narrowed_by_start_time(
    client: Client, probes: list[Probe], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(visibility_queries, "SMALL_GROUP", 4)
    monkeypatch.setattr(visibility_queries, "SLACK", 2)
    probe = await start_probe(client, [0] * 30 + [3, 3])
    probes.append(probe)
    expected = probe.by_priority()

    assert await ids_by_priority(probe, 0, 5) == expected[:5]
    assert await ids_by_priority(probe, 12, 6) == expected[12:18]
    assert await ids_by_priority(probe, 29, 10) == expected[29:]

    # A start time that narrowed a page is kept and used again while still right; once
    # the oldest rows have left the query (jobs taken), it is found anew.
    cutoffs = visibility_queries.Cutoffs()
    running = f"{probe.query} AND ExecutionStatus = 'Running'"
    for _ in range(2):
        page = await ids_by_priority(probe, 2, 5, cutoffs=cutoffs, query=running)
        assert page == expected[2:7]
    taken = expected[2:6]
    for workflow_id in taken:
        await client.get_workflow_handle(workflow_id).terminate()

    async def gone() -> bool:
        return await visibility_queries.count(client, running) == len(expected) - len(taken)

    await wait_until_async(gone, what="the taken rows closed")
    left = [workflow_id for workflow_id in expected if workflow_id not in taken]
    assert await ids_by_priority(probe, 2, 5, cutoffs=cutoffs, query=running) == left[2:7]


async def test_recent_order_pages_with_offsets_and_tokens(
    client: Client, probes: list[Probe], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(visibility_queries, "MAX_PAGE", 3)  # several pages per read
    probe = await start_probe(client, [0] * 8)
    probes.append(probe)
    newest_first = probe.ids[::-1]

    first = await visibility_queries.recent(client, probe.query, offset=2, limit=4)
    assert [e.id for e in first.executions] == newest_first[2:6]
    assert first.next_token is not None
    rest = await visibility_queries.recent(
        client, probe.query, offset=0, limit=10, token=first.next_token
    )
    assert [e.id for e in rest.executions] == newest_first[6:]
    assert rest.next_token is None


async def test_the_oldest_start_is_found_to_a_second(client: Client, probes: list[Probe]) -> None:
    before = time.time()
    probe = await start_probe(client, [0, 0, 0])
    probes.append(probe)

    oldest = await visibility_queries.oldest_start(client, probe.query)

    assert oldest is not None
    assert before - 1.5 <= oldest <= time.time() + 1.5
    assert await visibility_queries.oldest_start(client, "WorkflowType = 'no-such-type'") is None


def test_a_page_token_is_taken_back_only_for_its_own_query() -> None:
    tokens = visibility_queries.PageTokens("secret")
    sealed = tokens.seal("query a", b"temporal-token")

    assert tokens.open("query a", sealed) == b"temporal-token"
    for query, token in (("query b", sealed), ("query a", sealed + "x"), ("query a", "%%")):
        with pytest.raises(Exception, match="page_token"):
            tokens.open(query, token)


@pytest.mark.parametrize(
    ("low", "high"),
    [(10, 1_000_000), (-1_000_000, -10), (1, 9), (100_010, 1_000_000), (-5, 5), (-100, 5000)],
)
def test_a_priority_range_splits_into_disjoint_parts_that_cover_it_highest_first(
    low: int, high: int
) -> None:
    parts = visibility_queries._split(low, high, visibility_queries.FANOUT)

    assert parts == sorted(parts, reverse=True)
    assert parts[0][1] == high
    assert parts[-1][0] == low
    for (lower_low, lower_high), (upper_low, _) in zip(parts[1:], parts, strict=False):
        assert lower_low <= lower_high == upper_low - 1


def test_a_bucket_open_towards_the_limits_isolates_its_threshold_in_one_round() -> None:
    assert (10, 10) in visibility_queries._split(10, 1_000_000, visibility_queries.FANOUT)
    assert (-10, -10) in visibility_queries._split(-1_000_000, -10, visibility_queries.FANOUT)
