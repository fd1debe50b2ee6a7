"""Reads for dashboards and metrics, from visibility only: counts, pages of summaries,
the oldest pending job. Nothing here lists every job."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio.client import Client

from api import visibility
from workflows.models import EventsMemo, JobStatus, JobSummary
from workflows.names import EVENTS_MEMO
from workflows.search_attributes import job_filter

T = TypeVar("T")


class JobPage(BaseModel):
    """One page of summaries, in visibility's order, and the token of the next one."""

    jobs: list[JobSummary]
    next_page_token: str | None


# A cancelled job is `failed` with fail_reason `cancelled` (the spec), and its
# execution ends Canceled: counted on its own, and not under `failed`.
CANCELLED = "cancelled"
_CANCELED = "ExecutionStatus = 'Canceled'"


class TtlCache:
    """Answers kept for a short time, one computation in flight per key: N callers
    within the time cost one set of visibility calls."""

    def __init__(self, ttl_ms: int) -> None:
        self._ttl_s = ttl_ms / 1000
        self._values: dict[str, tuple[float, Any]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def get(self, key: str, compute: Callable[[], Awaitable[T]]) -> T:
        """The cached value of `key`, or `compute()`'s (then cached)."""
        if self._ttl_s <= 0:
            return await compute()
        async with self._locks.setdefault(key, asyncio.Lock()):
            hit = self._values.get(key)
            if hit is not None and time.monotonic() < hit[0]:
                value: T = hit[1]
                return value
            value = await compute()
            self._values[key] = (time.monotonic() + self._ttl_s, value)
            return value


class JobViews:
    """The dashboard's and the metrics' reads, from visibility only, bound to one client
    and page secret; counts and the oldest pending age are cached `METRICS_CACHE_MS`."""

    def __init__(self, client: Client, secret: str, cache_ms: int) -> None:
        self._client = client
        self._tokens = visibility.PageTokens(secret)
        self._cache = TtlCache(cache_ms)
        self.cache_ms = cache_ms

    async def page(
        self, status: JobStatus | None, job_type: str | None, limit: int, page_token: str | None
    ) -> JobPage:
        """A page of job summaries in visibility's own order (open jobs first, newest
        started first, then closed ones, most recently closed first), from memos: one
        visibility call at any job count."""
        query = job_filter(status, job_type)
        token = self._tokens.open(query, page_token) if page_token else None
        rows = await visibility.recent(self._client, query, offset=0, limit=limit, token=token)
        jobs: list[JobSummary] = []
        for execution in rows.executions:
            raw = (await execution.memo()).get(EVENTS_MEMO)
            if raw is not None:
                jobs.append(JobSummary.of(execution.id, EventsMemo.model_validate(raw)))
        after = rows.next_token
        return JobPage(
            jobs=jobs, next_page_token=self._tokens.seal(query, after) if after else None
        )

    async def counts(self, job_type: str | None) -> dict[str, int]:
        """How many jobs are in each status, cancelled ones apart from failed ones: one
        visibility count per status, made at once."""
        return await self._cache.get(f"counts:{job_type}", lambda: self._counts(job_type))

    async def _counts(self, job_type: str | None) -> dict[str, int]:
        queries = {s.value: job_filter(s, job_type) for s in JobStatus}
        queries[JobStatus.FAILED.value] += " AND ExecutionStatus != 'Canceled'"
        queries[CANCELLED] = f"{job_filter(None, job_type)} AND {_CANCELED}"
        counts = await asyncio.gather(
            *(visibility.count(self._client, q) for q in queries.values())
        )
        return dict(zip(queries, counts, strict=True))

    async def oldest_pending_age_s(self) -> float:
        """Age of the oldest pending job, found with rounds of counts over start times
        (visibility has no ORDER BY; never a listing)."""
        return await self._cache.get("oldest-pending", self._oldest_pending_age_s)

    async def _oldest_pending_age_s(self) -> float:
        started = await visibility.oldest_start(self._client, job_filter(JobStatus.PENDING))
        return 0.0 if started is None else max(time.time() - started, 0.0)
