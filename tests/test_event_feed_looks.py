"""When the event feed looks at visibility, in process: while a client is subscribed,
every EVENTS_POLL_MS and also when a held transition comes out of the settle window or
one made through this process does, never twice within EVENTS_POLL_GAP_MS; while none
is, every EVENTS_IDLE_POLL_MS, and a client that comes wakes it. The visibility lag it
learns from: only what a look actually missed. And what a client gets: the events that
came at once, in one batch."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from typing import cast

from temporalio.client import Client

from api.event_feed import EventFeed, FeedSettings, JobEvent, Position
from api.job_service import JobService
from api.metrics_registry import Metrics
from tests.helpers import Listed, Visibility
from workflows.job_states import JobStatus
from workflows.models import Transition


def now_ms() -> int:
    return int(time.time() * 1000)


def pending(job_id: str, ts: int) -> Listed:
    return Listed(job_id, [Transition(seq=1, status=JobStatus.PENDING, ts=ts, attempt=0)])


def feed_of(visibility: Visibility, **settings: int) -> EventFeed:
    return EventFeed(cast(Client, visibility), cast(JobService, None), FeedSettings(**settings))


async def a_client(feed: EventFeed) -> AsyncGenerator[list[JobEvent], None]:
    """A client subscribed to `feed`, which it leaves with `aclose()`."""
    batches = feed.subscribe(lambda _: True, None, idle_s=0.01)
    assert await anext(batches) == []  # subscribed: the keep-alive's turn came
    return batches


async def test_a_held_transition_is_looked_for_when_it_settles_not_at_the_next_poll() -> None:
    visibility = Visibility()
    feed = feed_of(visibility, poll_ms=10_000, min_gap_ms=5, settle_ms=500)
    client = await a_client(feed)
    await feed.stop()  # the test's looks are the only ones
    await feed.tick()
    ts = now_ms()
    visibility.rows.append(pending("a", ts))
    last = now_ms()
    await feed.tick()
    assert feed.next_look(last) == ts + 500 + 1  # out of the window: sent by that look
    # Nothing held: the regular look.
    visibility.rows.clear()
    await feed.tick()
    assert feed.next_look(last) == last + 10_000
    await client.aclose()


async def test_looks_are_never_closer_than_the_gap() -> None:
    visibility = Visibility()
    feed = feed_of(visibility, poll_ms=10_000, min_gap_ms=300, settle_ms=0)
    client = await a_client(feed)
    await feed.stop()
    await feed.tick()
    last = now_ms()
    visibility.rows.append(pending("a", last + 50))  # held until 50 ms from now
    await feed.tick()
    feed.expect(last + 20)
    assert feed.next_look(last) == last + 300
    await client.aclose()


async def test_without_a_client_only_the_idle_looks_are_made() -> None:
    """What the feed serves with no client (counters, the dashboard's minutes) needs
    every transition, which the idle looks give; a look per submit, or every
    EVENTS_POLL_MS, would buy nothing and cost a listing each."""
    visibility = Visibility()
    feed = feed_of(visibility, poll_ms=5_000, idle_poll_ms=20_000, min_gap_ms=5, settle_ms=500)
    await feed.tick()
    ts = now_ms()
    visibility.rows.append(pending("held", ts))
    last = now_ms()
    await feed.tick()
    feed.expect(ts)  # made through this process
    assert feed.next_look(last) == last + 20_000
    # A client comes: the held transition is looked for when it settles.
    client = await a_client(feed)
    await feed.stop()
    assert feed.next_look(last) == ts + 500 + 1
    visibility.rows.clear()
    await feed.tick()
    assert feed.next_look(last) == last + 5_000  # nothing held: the regular look
    # It leaves: the idle looks again.
    await client.aclose()
    assert feed.next_look(last) == last + 20_000


async def test_a_client_that_comes_wakes_an_idle_poller() -> None:
    visibility = Visibility()
    feed = feed_of(visibility, poll_ms=50, idle_poll_ms=60_000, min_gap_ms=5, settle_ms=0)
    feed.start()
    client = None
    try:
        deadline = time.monotonic() + 10
        while visibility.listings < 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert visibility.listings == 1  # the next idle look is a minute away
        client = await a_client(feed)  # (a look of its own first)
        while visibility.listings < 4 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert visibility.listings >= 4  # looking every poll_ms now
    finally:
        if client is not None:
            await client.aclose()
        await feed.stop()


async def test_a_transition_made_through_this_process_wakes_the_poller() -> None:
    visibility = Visibility()
    feed = feed_of(visibility, poll_ms=60_000, min_gap_ms=5, settle_ms=50)
    client = await a_client(feed)  # starts the poller
    try:
        deadline = time.monotonic() + 10
        while visibility.listings < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert visibility.listings == 2  # the poller's first, and the client's
        # The regular look is a minute away; a submit through this process is looked for
        # once it is out of the settle window, a client being there to get it.
        ts = now_ms()
        visibility.rows.append(pending("submitted", ts))
        feed.expect(ts)
        sent: list[str] = []
        feed.on_event = lambda event: sent.append(event.id)
        while not sent and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert sent == ["submitted"]
    finally:
        await client.aclose()
        await feed.stop()


async def test_the_lag_is_learnt_only_from_what_a_look_missed() -> None:
    visibility = Visibility()
    feed = feed_of(visibility, poll_ms=100, min_gap_ms=5, settle_ms=2000, lag_margin_ms=50)
    await feed.tick()
    first_look = now_ms()
    # Made after that look: its age when first seen says nothing of visibility's lag
    # (the old estimate took it whole, and grew the settle window by the poll's spacing).
    await asyncio.sleep(0.05)
    visibility.rows.append(pending("fresh", now_ms()))
    await feed.tick()
    assert feed.lag_ms == 0
    assert feed.settle_ms == 2000
    # Stamped 700 ms before the look that did not show it: visibility showed it late.
    second_look = now_ms()
    await feed.tick()
    visibility.rows.append(pending("late", second_look - 700))
    await feed.tick()
    assert 700 <= feed.lag_ms < 700 + (now_ms() - first_look)
    assert feed.settle_ms == 2000  # still within the configured window
    # A lag beyond the window grows it, to the lag plus the margin.
    third_look = now_ms()
    await feed.tick()
    visibility.rows.append(pending("later", third_look - 1990))
    await feed.tick()
    assert feed.settle_ms >= 1990 + 50


async def test_a_client_coming_to_an_idle_feed_gets_only_what_settles_after_it_came() -> None:
    """The idle looks are a second apart: the feed looks once before the first client
    joins, so what was settled before it came is not sent to it as live."""
    visibility = Visibility()
    feed = feed_of(
        visibility, poll_ms=60_000, idle_poll_ms=60_000, min_gap_ms=5, settle_ms=0, lag_margin_ms=0
    )
    await feed.tick()
    ts = feed.began_ms + 1  # after the feed began, settled once the clock is past it
    visibility.rows.append(pending("before", ts))
    while now_ms() <= ts:
        await asyncio.sleep(0.001)
    sent: list[str] = []
    feed.on_event = lambda event: sent.append(event.id)
    batches = feed.subscribe(lambda _: True, None, idle_s=0.01)
    try:
        assert await anext(batches) == []  # not "before": it was sent before the client came
        assert sent == ["before"]
    finally:
        await batches.aclose()
        await feed.stop()


async def test_a_client_gets_what_came_at_once_in_one_batch_and_an_empty_one_when_idle() -> None:
    visibility = Visibility()
    feed = feed_of(visibility, poll_ms=60_000, min_gap_ms=5, settle_ms=0)
    batches = feed.subscribe(lambda _: True, None, idle_s=0.05)
    try:
        assert await anext(batches) == []  # nothing for idle_s: the keep-alive's turn
        ts = now_ms()
        visibility.rows.extend(pending(job_id, ts) for job_id in ("a", "b", "c"))
        feed.expect(ts)
        deadline = time.monotonic() + 10
        batch: list[JobEvent] = []
        while not batch and time.monotonic() < deadline:
            batch = await anext(batches)
        assert [event.id for event in batch] == ["a", "b", "c"]
    finally:
        await batches.aclose()
        await feed.stop()


async def replayed(feed: EventFeed, last_event_id: str) -> list[JobEvent]:
    """What a client resuming after `last_event_id` gets before the stream goes quiet."""
    batches = feed.subscribe(lambda _: True, last_event_id, idle_s=0.01)
    got: list[JobEvent] = []
    try:
        while batch := await anext(batches):
            got += batch
    finally:
        await batches.aclose()
    return got


async def test_a_transition_seen_late_takes_a_place_after_the_last_one_sent() -> None:
    """Visibility shows "late" only after the stream sent "b", whose key is greater.
    Its id must not go back to its own key: a client resuming after it would get "b"
    again. A client that left after "b" gets it on resuming, and one that stayed saw
    each once, with ids that only grow."""
    visibility = Visibility()
    feed = feed_of(visibility, poll_ms=60_000, min_gap_ms=5, settle_ms=0, lag_margin_ms=0)
    client = await a_client(feed)
    await feed.stop()  # the test's looks are the only ones
    start = feed.began_ms
    visibility.rows += [pending("a", start + 1), pending("b", start + 3)]
    while now_ms() <= start + 3:
        await asyncio.sleep(0.001)
    await feed.tick()
    visibility.rows.append(pending("late", start + 2))
    await feed.tick()
    live = await anext(client)
    while len(live) < 3:
        live += await anext(client)
    await client.aclose()

    assert [event.id for event in live] == ["a", "b", "late"]
    metrics = Metrics()
    for event in live:
        metrics.observe(event)
    assert metrics.registry.get_sample_value("jobforge_event_feed_late_total") == 1
    ids = [event.position.encode() for event in live]
    assert ids == sorted(ids, key=lambda raw: cast(Position, Position.parse(raw)))
    assert len(set(ids)) == 3
    assert await replayed(feed, ids[2]) == []
    assert [event.id for event in await replayed(feed, ids[1])] == ["late"]
    # From before both, the replay is by key, as visibility shows them now.
    assert [event.id for event in await replayed(feed, ids[0])] == ["late", "b"]
