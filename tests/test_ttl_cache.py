"""The answer cache of counts, metrics and fleet views (api/ttl_cache.py): one
computation per key and time, stale answers given at once while one refresh runs."""

from __future__ import annotations

import asyncio

import pytest

from api.ttl_cache import TtlCache


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Source:
    """Answers 1, 2, 3, …; fails while `broken`; waits for `gate` when one is set."""

    def __init__(self) -> None:
        self.calls = 0
        self.broken = False
        self.gate: asyncio.Event | None = None

    async def __call__(self) -> int:
        if self.gate is not None:
            await self.gate.wait()
        if self.broken:
            raise RuntimeError("Temporal is down")
        self.calls += 1
        return self.calls


async def test_an_answer_is_kept_for_its_time_then_given_stale_while_one_refresh_runs() -> None:
    clock, source = Clock(), Source()
    cache = TtlCache(2000, clock=clock)
    assert [await cache.get("k", source) for _ in range(3)] == [1, 1, 1]
    assert source.calls == 1

    clock.now += 2.5  # stale: the old answer at once, one refresh behind it
    source.gate = asyncio.Event()
    assert [await cache.get("k", source) for _ in range(3)] == [1, 1, 1]
    source.gate.set()
    await cache.settled()
    assert source.calls == 2
    assert await cache.get("k", source) == 2


async def test_a_failed_refresh_keeps_the_answer_and_a_very_old_one_is_not_given() -> None:
    clock, source = Clock(), Source()
    cache = TtlCache(1000, clock=clock)
    assert await cache.get("k", source) == 1
    source.broken = True
    clock.now += 1.5
    assert await cache.get("k", source) == 1
    await cache.settled()
    assert await cache.get("k", source) == 1  # kept; the next caller tries again

    clock.now += 1000 * TtlCache.STALE_MAX  # far past: the caller waits, and sees why
    with pytest.raises(RuntimeError, match="Temporal is down"):
        await cache.get("k", source)
    source.broken = False
    assert await cache.get("k", source) == 2


async def test_without_a_time_every_call_computes() -> None:
    source = Source()
    cache = TtlCache(0)
    assert [await cache.get("k", source) for _ in range(3)] == [1, 2, 3]
