"""Reads for dashboards and metrics, from visibility only: counts, pages of summaries,
the oldest pending job. Nothing here lists every job."""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import time
from datetime import UTC, datetime

from pydantic import BaseModel
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from workflows.errors import InvalidField
from workflows.models import EventsMemo, JobStatus, JobSummary
from workflows.names import EVENTS_MEMO
from workflows.search_attributes import job_filter


class JobPage(BaseModel):
    """One page of summaries, in visibility's order, and the token of the next one."""

    jobs: list[JobSummary]
    next_page_token: str | None


def seal_page_token(secret: str, query: str, token: bytes) -> str:
    """Temporal's page token, signed for one query: the API takes back only its own."""
    return base64.urlsafe_b64encode(_page_mac(secret, query, token) + token).decode()


def open_page_token(secret: str, query: str, page_token: str) -> bytes:
    """The Temporal page token inside `page_token`, if this API issued it for `query`.

    Checked here, not by Temporal: Temporal answers a token it cannot parse with
    `UNKNOWN`, which the client retries for its whole retry budget before the 422.
    """
    try:
        sealed = base64.urlsafe_b64decode(page_token.encode())
    except (binascii.Error, ValueError):
        sealed = b""
    mac, token = sealed[:_MAC_BYTES], sealed[_MAC_BYTES:]
    if not token or not hmac.compare_digest(mac, _page_mac(secret, query, token)):
        raise InvalidField("page_token", "not a token from this API for this query")
    return token


_MAC_BYTES = 16


def _page_mac(secret: str, query: str, token: bytes) -> bytes:
    message = b"page:" + query.encode() + b"\0" + token
    return hmac.new(secret.encode(), message, hashlib.sha256).digest()[:_MAC_BYTES]


async def job_page(
    client: Client,
    secret: str,
    status: JobStatus | None,
    job_type: str | None,
    limit: int,
    page_token: str | None,
) -> JobPage:
    """A page of job summaries in visibility's own order: open jobs first, newest
    started first, then closed ones, most recently closed first."""
    query = job_filter(status, job_type)
    token = open_page_token(secret, query, page_token) if page_token else None
    iterator = client.list_workflows(query, page_size=limit, next_page_token=token)
    try:
        await iterator.fetch_next_page()
    except RPCError as err:
        # A token this API issued that Temporal no longer takes: the caller starts
        # again. Any other failure is Temporal's, answered as such.
        if page_token and err.status in (RPCStatusCode.INVALID_ARGUMENT, RPCStatusCode.UNKNOWN):
            raise InvalidField("page_token", "expired, start again without it") from err
        raise
    jobs: list[JobSummary] = []
    for execution in iterator.current_page or []:
        memo = await execution.memo()
        raw = memo.get(EVENTS_MEMO)
        if raw is not None:
            jobs.append(JobSummary.of(execution.id, EventsMemo.model_validate(raw)))
    next_token = iterator.next_page_token
    return JobPage(
        jobs=jobs,
        next_page_token=seal_page_token(secret, query, next_token) if next_token else None,
    )


# A cancelled job is `failed` with fail_reason `cancelled` (the spec), and its
# execution ends Canceled: counted on its own, and not under `failed`.
CANCELLED = "cancelled"
_CANCELED = "ExecutionStatus = 'Canceled'"


async def job_counts(client: Client, job_type: str | None) -> dict[str, int]:
    """How many jobs are in each status, cancelled ones apart from failed ones (one
    visibility count per status)."""
    queries = {s.value: job_filter(s, job_type) for s in JobStatus}
    queries[JobStatus.FAILED.value] += " AND ExecutionStatus != 'Canceled'"
    queries[CANCELLED] = f"{job_filter(None, job_type)} AND {_CANCELED}"
    counts = await asyncio.gather(*(client.count_workflows(q) for q in queries.values()))
    return {name: c.count for name, c in zip(queries, counts, strict=True)}


async def oldest_pending_age_s(client: Client, horizon_s: float = 30 * 24 * 3600) -> float:
    """Age of the oldest pending job, by bisecting its start time with counts
    (visibility has no ORDER BY; about 20 counts, never a listing)."""
    now = time.time()
    pending = job_filter(JobStatus.PENDING, None)

    async def any_before(ts: float) -> bool:
        stamp = datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        count = await client.count_workflows(f"{pending} AND StartTime < '{stamp}'")
        return count.count > 0

    if not await any_before(now + 1):
        return 0.0
    low, high = now - horizon_s, now + 1
    if await any_before(low):
        return horizon_s
    while high - low > 1.0:
        middle = (low + high) / 2
        if await any_before(middle):
            high = middle
        else:
            low = middle
    return max(now - low, 0.0)


class JobViews:
    """The dashboard's and the metrics' reads, bound to one client and page secret."""

    def __init__(self, client: Client, secret: str) -> None:
        self._client = client
        self._secret = secret

    async def page(
        self, status: JobStatus | None, job_type: str | None, limit: int, token: str | None
    ) -> JobPage:
        """A page of summaries (see `job_page`)."""
        return await job_page(self._client, self._secret, status, job_type, limit, token)

    async def counts(self, job_type: str | None) -> dict[str, int]:
        """Jobs per status (see `job_counts`)."""
        return await job_counts(self._client, job_type)

    async def oldest_pending_age_s(self) -> float:
        """Age of the oldest pending job (see `oldest_pending_age_s`)."""
        return await oldest_pending_age_s(self._client)
