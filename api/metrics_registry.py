"""Prometheus metrics of the API process (`GET /metrics`)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from api.event_feed import JobEvent
from api.job_views import JobViews

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class Metrics:
    """Counters the API sees itself, plus gauges read from visibility at scrape time.

    Event counters come from this process's event feed, which sees every job's
    transitions (so each API replica reports the same totals; aggregate with max).
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.jobs = Gauge(
            "jobforge_jobs", "Jobs by status (visibility counts)", ["status"], registry=r
        )
        self.oldest_pending = Gauge(
            "jobforge_oldest_pending_age_seconds", "Age of the oldest pending job", registry=r
        )
        self.submissions = Counter(
            "jobforge_submissions", "Jobs submitted through this API process", registry=r
        )
        self.claims = Counter(
            "jobforge_http_claims", "Jobs claimed by HTTP agents through this process", registry=r
        )
        self.events = Counter(
            "jobforge_job_events", "Job transitions seen on the event feed", ["event"], registry=r
        )
        self.claim_latency = Histogram(
            "jobforge_claim_latency_seconds",
            "Time from a job's submission to its first claim",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )

    def observe(self, event: JobEvent) -> None:
        """Count one transition from the feed."""
        self.events.labels(event.event).inc()
        if event.event == "job:assigned" and event.attempts == 1:
            self.claim_latency.observe(max(event.ts - event.created_at, 0) / 1000)

    async def render(self, views: JobViews) -> bytes:
        """Refresh the visibility gauges and render the text format."""
        for status, count in (await views.counts(None)).items():
            self.jobs.labels(status).set(count)
        self.oldest_pending.set(await views.oldest_pending_age_s())
        return generate_latest(self.registry)
