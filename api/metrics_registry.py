"""Prometheus metrics of the API process (`GET /metrics`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from temporalio.client import Client

from api.event_feed import JobEvent
from api.job_visibility_reads import JobViews
from api.task_queue_stats import Backlogs, TaskQueueMetricsSettings, TaskQueueStats
from engine.connection import TemporalSettings

log = logging.getLogger("jobforge.metrics")
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
QUEUE_LABELS = ["task_queue", "kind", "job_type"]


def _job_gauges(registry: CollectorRegistry) -> tuple[Gauge, Gauge]:
    """Jobs by status and the oldest pending job's age: the process's and a tenant's."""
    jobs = Gauge(
        "jobforge_jobs", "Jobs by status (visibility counts)", ["status"], registry=registry
    )
    oldest = Gauge(
        "jobforge_oldest_pending_age_seconds", "Age of the oldest pending job", registry=registry
    )
    return jobs, oldest


class Metrics:
    """Counters the API sees itself, plus gauges read from Temporal at scrape time.

    Event counters come from this process's event feed, which sees every job's
    transitions (so each API replica reports the same totals; aggregate with max).
    The scrape-time gauges (visibility counts, the oldest pending job, task queue
    backlogs) cost a bounded number of calls, cached `METRICS_CACHE_MS`.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.jobs, self.oldest_pending = _job_gauges(self.registry)
        self.backlog = self.gauge(
            "jobforge_task_queue_backlog",
            "Tasks waiting in a task queue (Temporal's approximate backlog count)",
            QUEUE_LABELS,
        )
        self.backlog_age = self.gauge(
            "jobforge_task_queue_backlog_age_seconds",
            "How long the oldest task in a task queue's backlog has waited",
            QUEUE_LABELS,
        )
        self.unreported_types = self.gauge(
            "jobforge_task_queue_types_unreported",
            "Job types whose queues are not described (over METRICS_TASK_QUEUE_TYPES_MAX)",
        )
        self.submissions = self.counter(
            "jobforge_submissions", "Jobs submitted through this API process"
        )
        self.claims = self.counter(
            "jobforge_http_claims", "Jobs claimed by HTTP agents through this process"
        )
        self.events = self.counter(
            "jobforge_job_events", "Job transitions seen on the event feed", ["event"]
        )
        self.feed_polls = self.counter(
            "jobforge_event_feed_polls", "Visibility listings made by this process's event feed"
        )
        self.feed_late = self.counter(
            "jobforge_event_feed_late",
            "Transitions the event feed sent after the stream had passed their key "
            "(visibility showed them later than the settle window)",
        )
        self.feed_settle = self.gauge(
            "jobforge_event_feed_settle_seconds",
            "How old a transition must be before the event feed sends it (grows with the "
            "visibility lag seen)",
        )
        self.claim_latency = Histogram(
            "jobforge_claim_latency_seconds",
            "Time from a job's submission to its first claim",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._task_queues: TaskQueueStats | None = None
        self._refreshers: list[Callable[[], Awaitable[None]]] = []

    def gauge(self, name: str, doc: str, labels: Sequence[str] = ()) -> Gauge:
        """A gauge on this registry."""
        return Gauge(name, doc, labels, registry=self.registry)

    def counter(self, name: str, doc: str, labels: Sequence[str] = ()) -> Counter:
        """A counter on this registry."""
        return Counter(name, doc, labels, registry=self.registry)

    def add_refresher(self, refresh: Callable[[], Awaitable[None]]) -> None:
        """Run `refresh` at each scrape, with the other gauges' calls (it sets gauges of
        its own on this registry, at a bounded, cached cost)."""
        self._refreshers.append(refresh)

    def watch_task_queues(self, client: Client, temporal: TemporalSettings, cache_ms: int) -> None:
        """Report the task queues' backlogs from now on (settings `METRICS_TASK_QUEUE_*`)."""
        self._task_queues = TaskQueueStats(client, temporal, TaskQueueMetricsSettings(), cache_ms)

    def observe(self, event: JobEvent) -> None:
        """Count one transition from the feed."""
        self.events.labels(event.event).inc()
        if event.position.late:
            self.feed_late.inc()
        if event.event == "job:assigned" and event.attempts == 1:
            self.claim_latency.observe(max(event.ts - event.created_at, 0) / 1000)

    async def render(self, views: JobViews) -> bytes:
        """Refresh the scrape-time gauges (their calls made at once) and render the
        text format."""
        extra = asyncio.gather(*(self._refreshed(refresh) for refresh in self._refreshers))
        counts, oldest, backlogs = await asyncio.gather(
            views.counts(None), views.oldest_pending_age_s(), self._backlogs()
        )
        await extra
        for status, count in counts.items():
            self.jobs.labels(status).set(count)
        self.oldest_pending.set(oldest)
        if backlogs is not None:
            self._set_backlogs(backlogs)
        return generate_latest(self.registry)

    @staticmethod
    async def render_tenant(views: JobViews, tenant: str | None) -> bytes:
        """The slice a tenant's caller sees (None: the jobs without a tenant): its jobs
        by status and its oldest pending job, from the same cached counts, filtered by
        tenant. Nothing process-wide (event counters, task queue backlogs): those
        count every tenant's jobs."""
        registry = CollectorRegistry()
        jobs, oldest = _job_gauges(registry)
        counts, age = await asyncio.gather(
            views.counts(None, tenant), views.oldest_pending_age_s(tenant)
        )
        for status, count in counts.items():
            jobs.labels(status).set(count)
        oldest.set(age)
        return generate_latest(registry)

    @staticmethod
    async def _refreshed(refresh: Callable[[], Awaitable[None]]) -> None:
        """One extra set of gauges; a failure leaves them as they were and the rest of
        the scrape stands (the core's gauges do not depend on an adapter's)."""
        try:
            await refresh()
        except Exception as err:
            log.warning("a metrics refresh failed: %s", err)

    async def _backlogs(self) -> Backlogs | None:
        return None if self._task_queues is None else await self._task_queues.backlogs()

    def _set_backlogs(self, backlogs: Backlogs) -> None:
        # Only the queues of this refresh: a type over the cap, or a queue whose describe
        # failed, has no series rather than a stale one.
        self.backlog.clear()
        self.backlog_age.clear()
        for queue in backlogs.queues:
            labels = (queue.task_queue, queue.kind.value, queue.job_type)
            self.backlog.labels(*labels).set(queue.backlog)
            self.backlog_age.labels(*labels).set(queue.age_s)
        self.unreported_types.set(backlogs.unreported_types)
