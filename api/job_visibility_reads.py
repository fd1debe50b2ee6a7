"""Job summaries, counts, the oldest pending age and the audit, from visibility alone.

Reads only, for the dashboard and the metrics: search attributes and memos, never a full
job (that is `job_service` and `job_history_reads`), on the listings and counts of
`visibility_queries`. Nothing here lists every job.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

from pydantic import BaseModel, Field, TypeAdapter
from temporalio.client import Client

from api import visibility_queries
from api.ttl_cache import TtlCache
from workflows.gate_models import GateChange, GateView
from workflows.job_states import COUNT_KINDS, CountKind, JobStatus
from workflows.models import EventsMemo, JobSummary, gate_tenant
from workflows.names import EVENTS_MEMO, GATE_CHANGES_MEMO, GATE_MEMO, GATE_WORKFLOW
from workflows.search_attributes import EVERY_TENANT, job_filter

log = logging.getLogger("jobforge.views")


@dataclass(frozen=True)
class PageFilter:
    """A page's filters besides status, type and tenant: each a search attribute (or
    the workflow id) that visibility serves from its index."""

    group: str | None = None
    pool: str | None = None
    target: str | None = None
    worker: str | None = None
    id_prefix: str | None = None


class JobPage(BaseModel):
    """One page of summaries, in visibility's order, and the token of the next one."""

    jobs: list[JobSummary]
    next_page_token: str | None


async def count_kinds(
    client: Client,
    kinds: Iterable[str] = COUNT_KINDS,
    *,
    job_type: str | None = None,
    group: str | None = None,
    pool: str | None = None,
    target: str | None = None,
    tenant: str | None = EVERY_TENANT,
) -> dict[str, int]:
    """How many jobs (of this type, group, pool, target and tenant, each optional; see
    `job_filter`) are counted
    under each of `kinds` (COUNT_KINDS: the statuses, and `cancelled` apart from
    `failed`, so that they add up to the jobs): one visibility count each, made at once.
    The list filtered by a kind (`?status=`) holds that many jobs."""
    kinds = tuple(kinds)
    counts = await asyncio.gather(
        *(
            visibility_queries.count(
                client,
                job_filter(kind, job_type, group=group, pool=pool, target=target, tenant=tenant),
            )
            for kind in kinds
        )
    )
    return dict(zip(kinds, counts, strict=True))


class JobViews:
    """The dashboard's and the metrics' reads, from visibility only, bound to one client
    and page secret; counts and the oldest pending age are cached `METRICS_CACHE_MS`."""

    def __init__(self, client: Client, secret: str, cache_ms: int) -> None:
        self._client = client
        self._tokens = visibility_queries.PageTokens(secret)
        self._cache = TtlCache(cache_ms)
        self.cache_ms = cache_ms

    async def page(
        self,
        status: CountKind | None,
        job_type: str | None,
        limit: int,
        page_token: str | None,
        tenant: str | None = EVERY_TENANT,
        narrow: PageFilter | None = None,
    ) -> JobPage:
        """A page of job summaries in visibility's own order (open jobs first, newest
        started first, then closed ones, most recently closed first), from memos: one
        visibility call at any job count. Of one tenant's jobs unless EVERY_TENANT (the
        token is signed for the query, tenant clause included); `narrow` adds the
        search-attribute filters (each a clause of the same one query)."""
        narrow = narrow or PageFilter()
        query = job_filter(
            status,
            job_type,
            group=narrow.group,
            pool=narrow.pool,
            target=narrow.target,
            worker=narrow.worker,
            id_prefix=narrow.id_prefix,
            tenant=tenant,
        )
        token = self._tokens.open(query, page_token) if page_token else None
        rows, after = await visibility_queries.recent_infos(
            self._client, query, limit=limit, token=token
        )
        # Only the id and the memo of each row are read.
        found = await visibility_queries.memos(self._client, rows, EVENTS_MEMO, EventsMemo)
        jobs = [JobSummary.of(job_id, memo) for job_id, memo in found]
        return JobPage(
            jobs=jobs, next_page_token=self._tokens.seal(query, after) if after else None
        )

    async def counts(
        self, job_type: str | None, tenant: str | None = EVERY_TENANT
    ) -> dict[str, int]:
        """How many jobs are counted under each kind (`count_kinds`)."""
        counted, _ = await self.counts_timed(job_type, tenant)
        return counted

    async def counts_timed(
        self, job_type: str | None, tenant: str | None = EVERY_TENANT
    ) -> tuple[dict[str, int], int]:
        """The counts (of one tenant's jobs, unless EVERY_TENANT), and when they were
        made (epoch ms)."""
        return await self._cache.get_timed(
            f"counts:{job_type}:{_tenant_key(tenant)}",
            lambda: count_kinds(self._client, job_type=job_type, tenant=tenant),
        )

    async def oldest_pending_age_s(self, tenant: str | None = EVERY_TENANT) -> float:
        """Age of the oldest pending job (of one tenant's, unless EVERY_TENANT), found
        with rounds of counts over start times (visibility has no ORDER BY; never a
        listing)."""
        return await self._cache.get(
            f"oldest-pending:{_tenant_key(tenant)}", lambda: self._oldest_pending_age_s(tenant)
        )

    async def _oldest_pending_age_s(self, tenant: str | None) -> float:
        query = job_filter(JobStatus.PENDING, tenant=tenant)
        started = await visibility_queries.oldest_start(self._client, query)
        return 0.0 if started is None else max(time.time() - started, 0.0)


def _tenant_key(tenant: str | None) -> str:
    """A cache key part per tenant (EVERY_TENANT, "" for no tenant, "=<name>")."""
    if tenant == EVERY_TENANT:
        return tenant
    return "" if tenant is None else f"={tenant}"


class AuditEntry(BaseModel):
    """One change a caller made: to a job (a transition with `by` set), or to a gate
    (`gate` set: a pause, resume, setting, lock taken or given back)."""

    job_id: str | None = Field(description="The job changed (None: a gate's change)")
    type: str | None
    tenant: str | None
    ts: int = Field(description="When (epoch ms)")
    by: str | None = Field(
        description="Who: a token's `<name> (<id>)`, `bootstrap`, `ops: <caller>` "
        "(None: a gate change sent without a caller, e.g. from before gates kept one)"
    )
    status: JobStatus | None = Field(description="What the job went to (None: a gate's change)")
    attempt: int | None
    reason: str | None
    gate: str | None = Field(default=None, description="The gate changed: `<kind> <name>`")
    action: str | None = Field(
        default=None, description="A gate's change: pause, resume, configure, lock, unlock"
    )
    detail: str | None = Field(default=None, description="What it set, e.g. `capacity=5`")


class AuditPage(BaseModel):
    """Changes made by callers, newest first, found among the jobs and gates read."""

    entries: list[AuditEntry]
    jobs_read: int = Field(description="How many jobs' memos were read (at most twice the limit)")
    gates_read: int = Field(default=0, description="How many gates' memos were read (≤ limit)")


# Open jobs, newest started first; closed ones, most recently closed first (each a
# visibility listing in its own order).
_OPEN = "ExecutionStatus = 'Running'"
_CLOSED = "ExecutionStatus != 'Running'"


async def audit(client: Client, limit: int, tenant: str | None = EVERY_TENANT) -> AuditPage:
    """Who stopped, cancelled, re-queued or failed which job, and when: the transitions
    after the submission with `by` set in the memos (each job's last EVENTS_MEMO_KEEP
    transitions) of the `limit` most recently closed jobs and the `limit` newest open
    ones; and who paused, resumed, set or locked which gate: the changes in the memos
    (each gate's last GATE_CHANGES_KEEP) of `limit` running gates. Three listings of
    `limit` rows: O(limit) at any job or gate count. Newest first, cut to `limit`."""
    query = job_filter(tenant=tenant)
    listed = await asyncio.gather(
        *(
            visibility_queries.recent(client, f"{query} AND {part}", offset=0, limit=limit)
            for part in (_CLOSED, _OPEN)
        )
    )
    gate_entries, gates_read = await _gate_audit(client, limit, tenant)
    entries: list[AuditEntry] = []
    read = 0
    for rows in listed:
        for execution in rows.executions:
            memo = await visibility_queries.events_memo(execution)
            if memo is None:
                continue
            read += 1
            entries += [
                AuditEntry(
                    job_id=execution.id,
                    type=memo.type,
                    tenant=memo.tenant,
                    ts=t.ts,
                    by=t.by,
                    status=t.status,
                    attempt=t.attempt,
                    reason=t.reason,
                )
                for t in memo.transitions
                # The first transition names its submitter: every job has one.
                if t.by and t.seq > 1
            ]
    entries += gate_entries
    entries.sort(key=lambda e: (e.ts, e.job_id or "", e.gate or ""), reverse=True)
    return AuditPage(entries=entries[:limit], jobs_read=read, gates_read=gates_read)


# Gate workflows with a memo of changes (only those written after an operator change).
_GATES = f"WorkflowType = '{GATE_WORKFLOW}' AND ExecutionStatus = 'Running'"


async def _gate_audit(
    client: Client, limit: int, tenant: str | None
) -> tuple[list[AuditEntry], int]:
    """The operator changes kept in the memos of `limit` running gates (one listing), and
    how many gates were read; a tenant's caller reads only its tenant's gates
    (`<tenant>/<name>`)."""
    rows = await visibility_queries.recent(client, _GATES, offset=0, limit=limit)
    entries: list[AuditEntry] = []
    read = 0
    for execution in rows.executions:
        memo = await execution.memo()
        raw_view, raw_changes = memo.get(GATE_MEMO), memo.get(GATE_CHANGES_MEMO)
        if raw_view is None:
            continue
        view = GateView.model_validate(raw_view)
        owner = gate_tenant(view.key)
        if tenant != EVERY_TENANT and owner != tenant:
            continue
        read += 1
        gate = f"{view.kind.value} {view.key}"
        entries.extend(
            AuditEntry(
                job_id=None,
                type=None,
                tenant=owner,
                ts=change.ts,
                by=change.by,
                status=None,
                attempt=None,
                reason=None,
                gate=gate,
                action=change.action,
                detail=change.detail,
            )
            for change in _GATE_CHANGES.validate_python(raw_changes or [])
        )
    return entries, read


_GATE_CHANGES = TypeAdapter(list[GateChange])
