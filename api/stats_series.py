"""The last hour, minute by minute, for the dashboard's charts (`GET /api/stats/series`):
jobs completed and failed, wait (submit → running) and run times, queue depth by type.

Kept in memory from the event feed's transitions (`observe`), so a paint is never a call
to Temporal. Memory is bounded: 60 minute buckets, each with at most SAMPLE_MAX wait and
run samples (a reservoir: every job of the minute equally likely to be kept). After a
restart the buckets are rebuilt once from visibility (`rebuild`): the completed and
failed counts of each minute before the feed started (two counts a minute, by
CloseTime), and the times of the last REBUILD_SAMPLE closed jobs. Queue depth is a
visibility count of each type's pending jobs, taken once a minute in the background
(`sample_depth`), at most DEPTH_TYPES_MAX types.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pydantic import BaseModel, Field
from temporalio.client import Client

from api import visibility_queries
from api.event_feed import JobEvent
from workflows.job_states import JobStatus
from workflows.search_attributes import JOBS, job_filter

log = logging.getLogger("jobforge.stats")

MINUTE_MS = 60_000
MINUTES = 60
SAMPLE_MAX = 200
# Running jobs whose start is remembered, for their run time (the oldest go first).
RUNNING_MAX = 100_000
REBUILD_SAMPLE = 500
REBUILD_COUNTS_AT_ONCE = 8
DEPTH_TYPES_MAX = 20
DEPTH_EVERY_S = 60.0


def _minute(ms: int) -> int:
    return ms - ms % MINUTE_MS


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat()


def percentile(values: list[int], q: float) -> int | None:
    """The nearest-rank percentile (None for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = min(max(math.ceil(q * len(ordered)), 1), len(ordered))
    return ordered[rank - 1]


@dataclass
class Reservoir:
    """A bounded, uniform sample of one minute's values."""

    values: list[int] = field(default_factory=list)
    seen: int = 0

    def add(self, value: int, rng: random.Random) -> None:
        self.seen += 1
        if len(self.values) < SAMPLE_MAX:
            self.values.append(value)
            return
        slot = rng.randrange(self.seen)
        if slot < SAMPLE_MAX:
            self.values[slot] = value


@dataclass
class Bucket:
    """One minute."""

    completed: int = 0
    failed: int = 0
    waits: Reservoir = field(default_factory=Reservoir)
    runs: Reservoir = field(default_factory=Reservoir)
    depth: dict[str, int] | None = None


class Series(BaseModel):
    """`GET /api/stats/series`: one value a minute, oldest first, the last at `now`."""

    minutes: list[int] = Field(description="Each minute's start (epoch ms)")
    completed: list[int]
    failed: list[int] = Field(description="Failed (not cancelled) and quarantined jobs")
    wait_p50_ms: list[int | None] = Field(description="Submit → running, first attempts")
    wait_p95_ms: list[int | None]
    run_p50_ms: list[int | None] = Field(description="Running → its end, each attempt")
    run_p95_ms: list[int | None]
    queue_depth: dict[str, list[int | None]] = Field(description="Pending jobs by type")
    hour: dict[str, int | None] = Field(description="p50/p95 wait and run over the hour")
    rebuilt: bool = Field(description="Whether the minutes before this API started are in")


class StatsSeries:
    """The buckets, fed by the event feed and read by the route."""

    def __init__(self, client: Client, known_types: Callable[[], Awaitable[list[str]]]) -> None:
        self._client = client
        self._known_types = known_types
        self._buckets: dict[int, Bucket] = {}
        self._running: dict[str, int] = {}
        self._rng = random.Random(0)
        self._rebuilt = False
        self._rebuilding: asyncio.Task[None] | None = None
        self._depth_task: asyncio.Task[None] | None = None

    def _bucket(self, ms: int) -> Bucket | None:
        minute = _minute(ms)
        if minute <= _minute(int(time.time() * 1000)) - MINUTES * MINUTE_MS:
            return None  # older than the hour
        bucket = self._buckets.get(minute)
        if bucket is None:
            bucket = self._buckets[minute] = Bucket()
            self._trim()
        return bucket

    def _trim(self) -> None:
        oldest = _minute(int(time.time() * 1000)) - (MINUTES - 1) * MINUTE_MS
        for minute in [m for m in self._buckets if m < oldest]:
            del self._buckets[minute]

    def observe(self, event: JobEvent) -> None:
        """One transition from the feed."""
        status = event.status
        if status == JobStatus.RUNNING:
            if event.attempt <= 1 and (bucket := self._bucket(event.ts)) is not None:
                bucket.waits.add(max(event.ts - event.created_at, 0), self._rng)
            self._running.pop(event.id, None)
            self._running[event.id] = event.ts
            if len(self._running) > RUNNING_MAX:
                del self._running[next(iter(self._running))]
            return
        if status in (JobStatus.ASSIGNED, JobStatus.PENDING, JobStatus.STOP_REQUESTED):
            return
        started = self._running.pop(event.id, None)
        bucket = self._bucket(event.ts)
        if bucket is None:
            return
        if status == JobStatus.COMPLETED:
            bucket.completed += 1
        elif status == JobStatus.QUARANTINED or (
            status == JobStatus.FAILED and event.fail_reason != "cancelled"
        ):
            bucket.failed += 1
        if started is not None:
            bucket.runs.add(max(event.ts - started, 0), self._rng)

    # -- after a restart ---------------------------------------------------------------

    def rebuild_once(self, until_ms: int) -> None:
        """Rebuild, in the background, the minutes before `until_ms` (the feed's start)."""
        if self._rebuilding is None:
            self._rebuilding = asyncio.create_task(self._rebuild(until_ms), name="stats rebuild")
        if self._depth_task is None:
            self._depth_task = asyncio.create_task(self._depth_rounds(), name="queue depth")

    async def stop(self) -> None:
        for task in (self._rebuilding, self._depth_task):
            if task is not None and not task.done():
                task.cancel()

    async def _rebuild(self, until_ms: int) -> None:
        try:
            await self.rebuild(until_ms)
        except Exception as err:  # Temporal unavailable: the hour fills from the feed
            log.warning("stats rebuild failed: %s", err)

    async def rebuild(self, until_ms: int) -> None:
        """Counts of each minute before `until_ms` (its own minute up to it), and the
        wait and run times of the latest closed jobs."""
        first = _minute(until_ms) - (MINUTES - 1) * MINUTE_MS
        gate = asyncio.Semaphore(REBUILD_COUNTS_AT_ONCE)
        completed = job_filter(JobStatus.COMPLETED.value)
        failed = job_filter(statuses=(JobStatus.FAILED.value, JobStatus.QUARANTINED.value))

        async def count(query: str, start: int) -> int:
            end = min(start + MINUTE_MS, until_ms)
            ranged = f"{query} AND CloseTime >= '{_iso(start)}' AND CloseTime < '{_iso(end)}'"
            async with gate:
                return await visibility_queries.count(self._client, ranged)

        starts = list(range(first, until_ms, MINUTE_MS))
        done = await asyncio.gather(*(count(completed, s) for s in starts))
        bad = await asyncio.gather(*(count(failed, s) for s in starts))
        for start, ok, ko in zip(starts, done, bad, strict=True):
            bucket = self._bucket(start)
            if bucket is not None:
                bucket.completed += ok
                bucket.failed += ko
        await self._rebuild_times(first, until_ms)
        self._rebuilt = True

    async def _rebuild_times(self, first: int, until_ms: int) -> None:
        query = (
            f"{JOBS} AND ExecutionStatus != 'Running' "
            f"AND CloseTime >= '{_iso(first)}' AND CloseTime < '{_iso(until_ms)}'"
        )
        rows = await visibility_queries.recent(self._client, query, offset=0, limit=REBUILD_SAMPLE)
        for execution in rows.executions:
            memo = await visibility_queries.events_memo(execution)
            if memo is None:
                continue
            started: int | None = None
            for transition in memo.transitions:
                if transition.status == JobStatus.RUNNING:
                    if transition.attempt <= 1 and (b := self._bucket(transition.ts)):
                        b.waits.add(max(transition.ts - memo.created_at, 0), self._rng)
                    started = transition.ts
                elif started is not None and transition.status != JobStatus.STOP_REQUESTED:
                    if (bucket := self._bucket(transition.ts)) is not None:
                        bucket.runs.add(max(transition.ts - started, 0), self._rng)
                    started = None

    # -- queue depth -------------------------------------------------------------------

    async def _depth_rounds(self) -> None:
        while True:
            try:
                await self.sample_depth()
            except asyncio.CancelledError:
                raise
            except Exception as err:
                log.warning("queue depth sample failed: %s", err)
            await asyncio.sleep(DEPTH_EVERY_S)

    async def sample_depth(self) -> None:
        """Pending jobs of each known type now, into the current minute."""
        types = (await self._known_types())[:DEPTH_TYPES_MAX]
        pending = JobStatus.PENDING.value
        counts = await asyncio.gather(
            *(visibility_queries.count(self._client, job_filter(pending, t)) for t in types)
        )
        bucket = self._bucket(int(time.time() * 1000))
        if bucket is not None:
            bucket.depth = dict(zip(types, counts, strict=True))

    # -- the answer ----------------------------------------------------------------------

    def series(self) -> Series:
        """The hour as the route answers it, from memory."""
        now = _minute(int(time.time() * 1000))
        minutes = [now - (MINUTES - 1 - i) * MINUTE_MS for i in range(MINUTES)]
        buckets = [self._buckets.get(m, Bucket()) for m in minutes]
        types = sorted({t for b in buckets if b.depth for t in b.depth})
        waits = [v for b in buckets for v in b.waits.values]
        runs = [v for b in buckets for v in b.runs.values]
        return Series(
            minutes=minutes,
            completed=[b.completed for b in buckets],
            failed=[b.failed for b in buckets],
            wait_p50_ms=[percentile(b.waits.values, 0.5) for b in buckets],
            wait_p95_ms=[percentile(b.waits.values, 0.95) for b in buckets],
            run_p50_ms=[percentile(b.runs.values, 0.5) for b in buckets],
            run_p95_ms=[percentile(b.runs.values, 0.95) for b in buckets],
            queue_depth={
                t: [b.depth.get(t, 0) if b.depth is not None else None for b in buckets]
                for t in types
            },
            hour={
                "wait_p50_ms": percentile(waits, 0.5),
                "wait_p95_ms": percentile(waits, 0.95),
                "run_p50_ms": percentile(runs, 0.5),
                "run_p95_ms": percentile(runs, 0.95),
            },
            rebuilt=self._rebuilt,
        )
