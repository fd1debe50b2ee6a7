"""Visibility listings in an order (recent, priority), counts, memos and page tokens.

The primitives under every job read (`job_service`, `job_visibility_reads`, and bulk,
gate and stats reads): each costs O(page), never O(jobs), and knows executions and
their search attributes, not the `Job` model.

SQL visibility (the dev server's SQLite, PostgreSQL, MySQL) has no ORDER BY: a listing
comes in its own order, open executions first (newest started first), then closed ones
(most recently closed first), and a count is cheap. So:

- the *recent* order is visibility's own: one listing of `offset + limit` rows, in
  pages of at most `MAX_PAGE`; the cost grows with the offset, not with the jobs;
- the *priority* order (priority descending, then oldest first: the claim order) is
  found with counts: split the priority range into buckets, count each, descend only
  into the buckets that hold the page, and inside one priority find the oldest rows by
  splitting start times the same way. Each round is a handful of counts made at once.

Page tokens are Temporal's own, signed for their query (`PageTokens`), so the API takes
back only tokens it issued for the same query, without asking Temporal.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import itertools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

from pydantic import ValidationError
from temporalio.api.workflow.v1 import WorkflowExecutionInfo
from temporalio.api.workflowservice.v1 import ListWorkflowExecutionsRequest
from temporalio.client import Client, WorkflowExecution
from temporalio.service import RPCError, RPCStatusCode

from workflows import search_attributes
from workflows.errors import InvalidField
from workflows.models import PRIORITY_LIMIT, EventsMemo
from workflows.names import EVENTS_MEMO

T = TypeVar("T")

log = logging.getLogger("jobforge.visibility")

# Temporal's largest visibility page (frontend.visibilityMaxPageSize, default 1000).
MAX_PAGE = 1000
# A priority (or start-time) range is split into this many parts per round of counts.
FANOUT = 8
# Rows of one priority listed whole, and sorted here, rather than narrowed by counts
# (a listing costs about 0.56 ms a row, bench.list_at_scale); a larger group is narrowed
# to the rows a page needs and at most SLACK more.
SMALL_GROUP = 150
SLACK = 60
# A range wider than this with an end within NEAR_ZERO of zero is cut by decades.
DECADES_FROM = 1000
NEAR_ZERO = 100
# The first round of start-time marks: jobs are mostly recent, so these find the
# right window at once (seconds before now).
RECENT_MARKS_S = (7 * 86400, 86400, 6 * 3600, 3600, 600, 60, 10)
# How far back the oldest job is looked for when narrowing by start time.
HORIZON_S = 30 * 24 * 3600


class PageTokens:
    """Temporal's page tokens, signed for one query: this API takes back only its own.

    Checked here, not by Temporal: Temporal answers a token it cannot parse with
    `UNKNOWN`, which the client retries for its whole retry budget before the 422.
    """

    MAC_BYTES = 16

    def __init__(self, secret: str) -> None:
        self._secret = secret.encode()

    def seal(self, query: str, token: bytes) -> str:
        """`token` as an opaque string, good for `query` only."""
        return base64.urlsafe_b64encode(self._mac(query, token) + token).decode()

    def open(self, query: str, page_token: str) -> bytes:
        """The token inside `page_token`, if this API issued it for `query`."""
        try:
            # Strict: the lenient decoder ignores data after the padding, so a token
            # with anything appended would pass for the token itself.
            sealed = base64.b64decode(page_token.encode(), altchars=b"-_", validate=True)
        except (binascii.Error, ValueError):
            sealed = b""
        mac, token = sealed[: self.MAC_BYTES], sealed[self.MAC_BYTES :]
        if not token or not hmac.compare_digest(mac, self._mac(query, token)):
            raise InvalidField("page_token", "not a token from this API for this query")
        return token

    def _mac(self, query: str, token: bytes) -> bytes:
        message = b"page:" + query.encode() + b"\0" + token
        return hmac.new(self._secret, message, hashlib.sha256).digest()[: self.MAC_BYTES]


@dataclass
class Rows:
    """Executions in the order asked for, and where the next page starts (a Temporal
    page token for the recent order, an offset for the priority order)."""

    executions: list[WorkflowExecution]
    next_token: bytes | None = None
    next_offset: int | None = None


async def recent(
    client: Client, query: str, *, offset: int, limit: int, token: bytes | None = None
) -> Rows:
    """Rows `offset` to `offset + limit` in visibility's own order, after `token`."""
    rows: list[WorkflowExecution] = []
    need = offset + limit
    while len(rows) < need:
        # The last page is cut to size, so its token points just past the rows returned.
        iterator = client.list_workflows(
            query, page_size=min(MAX_PAGE, need - len(rows)), next_page_token=token
        )
        try:
            await iterator.fetch_next_page()
        except RPCError as err:
            # A token this API issued that Temporal no longer takes: start again.
            if token and err.status in (RPCStatusCode.INVALID_ARGUMENT, RPCStatusCode.UNKNOWN):
                raise InvalidField("page_token", "expired, start again without it") from err
            raise
        rows += iterator.current_page or []
        token = iterator.next_page_token
        if not token:
            break
    return Rows(rows[offset:need], next_token=token if len(rows) >= need else None)


async def recent_infos(
    client: Client, query: str, *, limit: int, token: bytes | None = None
) -> tuple[list[WorkflowExecutionInfo], bytes | None]:
    """The first `limit` rows after `token` in visibility's own order, as Temporal sends
    them, and the token after them. Nothing is decoded: the SDK's listing decodes every
    row's search attributes, most of a memo reader's CPU (a page of 50 jobs: 28 of
    43 ms, cProfile at 10,000 jobs)."""
    rows: list[WorkflowExecutionInfo] = []
    while len(rows) < limit:
        request = ListWorkflowExecutionsRequest(
            namespace=client.namespace,
            page_size=min(MAX_PAGE, limit - len(rows)),
            next_page_token=token or b"",
            query=query,
        )
        try:
            answer = await client.workflow_service.list_workflow_executions(request, retry=True)
        except RPCError as err:
            if token and err.status in (RPCStatusCode.INVALID_ARGUMENT, RPCStatusCode.UNKNOWN):
                raise InvalidField("page_token", "expired, start again without it") from err
            raise
        rows += answer.executions
        token = answer.next_page_token or None
        if not token:
            break
    return rows, token if len(rows) >= limit else None


async def memos(
    client: Client, rows: Sequence[WorkflowExecutionInfo], key: str, hint: type[T]
) -> list[tuple[str, T]]:
    """The workflow id and the memo `key` (as `hint`) of each raw row that has one, in
    one decode. A memo that is not a `hint` (a run of the workflow type that jobforge did
    not start) leaves its row out, logged, rather than failing the read of the others."""
    kept = [row for row in rows if key in row.memo.fields]
    payloads = [row.memo.fields[key] for row in kept]
    try:
        values = await client.data_converter.decode(payloads, [hint] * len(kept))
    except Exception:  # some memo is not one: each again, and the others kept
        found: list[tuple[str, T]] = []
        for row, payload in zip(kept, payloads, strict=True):
            try:
                [value] = await client.data_converter.decode([payload], [hint])
            except Exception as err:
                unreadable(row.execution.workflow_id, key, err)
                continue
            found.append((row.execution.workflow_id, value))
        return found
    return [(row.execution.workflow_id, value) for row, value in zip(kept, values, strict=True)]


def unreadable(workflow_id: str, key: str, err: Exception) -> None:
    """Log a memo left out of a read."""
    log.warning("%s: its memo %s is not jobforge's, left out: %s", workflow_id, key, err)


async def events_memo(execution: WorkflowExecution) -> EventsMemo | None:
    """A run's events memo; None if it has none, or (logged) one that is not a job's,
    so that such a run never fails a read of many."""
    raw = (await execution.memo()).get(EVENTS_MEMO)
    if raw is None:
        return None
    try:
        return EventsMemo.model_validate(raw)
    except ValidationError as err:
        unreadable(execution.id, EVENTS_MEMO, err)
        return None


async def every_memo(client: Client, query: str, key: str, hint: type[T]) -> list[tuple[str, T]]:
    """`memos` of every row matching `query`, page after page: for a query that matches
    a bounded set (the event feed's jobs updated lately)."""
    found: list[tuple[str, T]] = []
    token = b""
    while True:
        request = ListWorkflowExecutionsRequest(
            namespace=client.namespace, page_size=MAX_PAGE, next_page_token=token, query=query
        )
        answer = await client.workflow_service.list_workflow_executions(request, retry=True)
        found += await memos(client, answer.executions, key, hint)
        token = answer.next_page_token
        if not token:
            return found


async def count(client: Client, query: str) -> int:
    """How many executions match."""
    return (await client.count_workflows(query)).count


def _priority_between(low: int, high: int, backlog: bool = False) -> str:
    """Priority in [low, high]. For a `backlog` query (open jobs of one status: a set
    bounded by the live backlog) the range is written as what it excludes, which no
    index serves, so SQL visibility scans the backlog's own index instead of every job
    of that priority (bench.list_at_scale at 100,000 jobs: 25 ms against 363 ms)."""
    name = search_attributes.PRIORITY.name
    if not backlog:
        return f"{name} = {low}" if low == high else f"{name} BETWEEN {low} AND {high}"
    parts = []
    if low > -PRIORITY_LIMIT:
        parts.append(f"{name} NOT BETWEEN {-PRIORITY_LIMIT - 1} AND {low - 1}")
    if high < PRIORITY_LIMIT:
        parts.append(f"{name} NOT BETWEEN {high + 1} AND {PRIORITY_LIMIT + 1}")
    return " AND ".join(parts) or f"{name} IS NOT NULL"


def _split(low: int, high: int, parts: int) -> list[tuple[int, int]]:
    """[low, high] as a few ranges, highest first.

    A wide range whose one end is near zero (a threshold bucket's open end, such as
    [10, 1000000]) is cut by decades from that end first, so the usual priorities near
    the thresholds stand alone after one round of counts; any other range is cut into
    `parts` equal ranges.
    """
    if high - low + 1 <= parts:
        return [(p, p) for p in range(high, low - 1, -1)]
    if high - low > DECADES_FROM and min(abs(low), abs(high)) <= NEAR_ZERO:
        if low < 0 < high:
            return [(1, high), (0, 0), (low, -1)]
        anchor, sign = (low, 1) if abs(low) <= abs(high) else (high, -1)
        edges = [anchor]
        step = 1
        while (edge := anchor + sign * step) * sign <= (high if sign > 0 else low) * sign:
            edges.append(edge)
            step *= 10
        ranges = [
            (min(a, b - sign), max(a, b - sign))
            for a, b in itertools.pairwise([*edges, (high + 1) if sign > 0 else (low - 1)])
        ]
        return sorted(ranges, reverse=True)
    size = -(-(high - low + 1) // parts)
    return [(max(start - size + 1, low), start) for start in range(high, low - 1, -size)]


def _buckets(thresholds: Sequence[int]) -> list[tuple[int, int]]:
    """The ranges between `thresholds` (descending lower bounds), highest first: the
    first split of the priority range."""
    bounds = [PRIORITY_LIMIT + 1, *thresholds, -PRIORITY_LIMIT]
    ranges = [(low, high - 1) for high, low in itertools.pairwise(bounds)]
    return [r for r in ranges if r[0] <= r[1]]


async def by_priority(
    client: Client,
    query: str,
    *,
    offset: int,
    limit: int,
    thresholds: Sequence[int],
    backlog: bool = False,
    cutoffs: Cutoffs | None = None,
) -> Rows:
    """Rows `offset` to `offset + limit` by priority descending, then oldest first.

    Ranges are counted from the highest down, and only as far as the page reaches: the
    crowded priorities below a page are never counted. `backlog`: the query matches
    only open jobs of one status (see `_priority_between`). `cutoffs` keeps the start
    times that narrowed a priority before, checked by one count when used again."""
    start, end = offset, offset + limit
    position = 0  # rows of higher priority than the ranges still to look at
    pending = _buckets(thresholds)
    counted: list[int | None] = [None] * len(pending)
    picked: list[WorkflowExecution] = []

    def within(low: int, high: int) -> str:
        return f"{query} AND {_priority_between(low, high, backlog)}"

    while pending and position < end:
        low, high = pending.pop(0)
        n = counted.pop(0)
        if n is None:
            n = await count(client, within(low, high))
        if n == 0:
            continue
        if position + n <= start:
            position += n  # wholly before the page: skipped for the price of a count
            continue
        if low != high and n > SMALL_GROUP:
            parts = _split(low, high, FANOUT)
            pending[:0] = parts
            counted[:0] = await asyncio.gather(*(count(client, within(*r)) for r in parts))
            continue
        first, last = max(start - position, 0), min(end - position, n)
        picked += await _oldest(client, within(low, high), n, first, last, cutoffs)
        position += n
    more = position > end or any(counted)
    if not more and position == end and any(c is None for c in counted):
        rest = [r for r, c in zip(pending, counted, strict=True) if c is None]
        more = any(await asyncio.gather(*(count(client, within(*r)) for r in rest)))
    return Rows(picked, next_offset=end if more else None)


class Cutoffs:
    """Start times that narrowed a priority to its oldest rows, per query and depth.

    Reused only while still right: one count shows that the rows started by then
    number at least the page's end (jobs taken since have not left it short) and at
    most SLACK more (jobs re-queued since have not crowded it). New jobs start later,
    so they never fall before it."""

    def __init__(self, size: int = 256) -> None:
        self._size = size
        self._kept: dict[tuple[str, int], float] = {}

    def get(self, query: str, last: int) -> float | None:
        return self._kept.get((query, last))

    def put(self, query: str, last: int, cutoff: float) -> None:
        if len(self._kept) >= self._size:
            self._kept.pop(next(iter(self._kept)))
        self._kept[(query, last)] = cutoff


async def _oldest(
    client: Client, query: str, n: int, first: int, last: int, cutoffs: Cutoffs | None = None
) -> list[WorkflowExecution]:
    """Rows `first` to `last` of the `n` matching `query` in the claim order: a small
    range of priorities is listed whole; a larger one (one priority only) is first
    narrowed by counts to its `last` oldest rows and at most SLACK more, since a listing
    costs about 0.56 ms a row."""
    if n > SMALL_GROUP:
        cutoff = cutoffs.get(query, last) if cutoffs is not None else None
        narrowed = None
        if cutoff is not None:
            narrowed = f"{query} AND StartTime <= '{_iso(cutoff)}'"
            n = await count(client, narrowed)
            if not last <= n <= last + SLACK:
                narrowed = None
        if narrowed is None:
            cutoff = await _start_cutoff(client, query, last, slack=SLACK, resolution_s=0.001)
            narrowed = f"{query} AND StartTime <= '{_iso(cutoff)}'"
            n = await count(client, narrowed)
            if cutoffs is not None:
                cutoffs.put(query, last, cutoff)
        query = narrowed
    rows = (await recent(client, query, offset=0, limit=n)).executions
    rows.sort(key=_claim_order)
    return rows[first:last]


def _claim_order(execution: WorkflowExecution) -> tuple[int, datetime, str]:
    """Priority descending, then oldest started first (a small range of priorities is
    listed whole and sorted here)."""
    priority = execution.typed_search_attributes.get(search_attributes.PRIORITY) or 0
    return (-priority, execution.start_time, execution.id)


async def _start_cutoff(
    client: Client, query: str, wanted: int, *, slack: int, resolution_s: float
) -> float:
    """A start time (s) by which at least `wanted` matching rows started, and fewer than
    `wanted + slack` (or within `resolution_s` of the earliest such time)."""
    now = time.time()
    low, high = now - HORIZON_S, now + 1
    marks = [now - back for back in RECENT_MARKS_S] + [high]
    while high - low > resolution_s:
        found = await asyncio.gather(
            *(count(client, f"{query} AND StartTime <= '{_iso(m)}'") for m in marks)
        )
        enough = next((i for i, c in enumerate(found) if c >= wanted), len(marks) - 1)
        low, high = (marks[enough - 1] if enough else low), marks[enough]
        if found[enough] - wanted < slack:
            break
        marks = [low + (high - low) * (i + 1) / FANOUT for i in range(FANOUT)]
    return high


async def oldest_start(client: Client, query: str) -> float | None:
    """When the oldest matching execution started (s, to a second); None if none.
    One older than the horizon reads as the horizon."""
    if await count(client, query) == 0:
        return None
    return await _start_cutoff(client, query, 1, slack=0, resolution_s=1.0)


def _iso(seconds: float) -> str:
    return (
        datetime.fromtimestamp(seconds, UTC)
        .isoformat(timespec="microseconds")
        .replace("+00:00", "Z")
    )
