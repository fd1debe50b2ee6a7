"""001's Prometheus series (§9): queue length by state, the oldest queued intent's age,
per-addon queued and running, and admission decisions, on the app's registry. Made
once per app at mount (`count_queue`); 001's submit route counts its decisions."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, FastAPI, Request

from api import visibility_queries
from api.deps import Services
from api.metrics_registry import Metrics
from api.ttl_cache import TtlCache
from workflows.contract_states import names, statuses_counted
from workflows.job_states import CLAIMED, JobStatus, kinds_of
from workflows.search_attributes import job_filter

DESIGN = "001"

# The pool's jobs by core status, as the design's states (QUEUED counts the admitted
# intents not yet claimed too: visibility cannot tell them apart).
METRIC_STATES = {name: statuses_counted(DESIGN, name) for name in names(DESIGN)}


class QueueMetrics:
    """§9's series: queue length by state, the oldest queued intent's age, per-addon
    queued and running, and admission decisions. A scrape costs one count per state,
    the oldest-start search and the groups' (cached) views, cached METRICS_CACHE_MS."""

    def __init__(self, metrics: Metrics, pool: str, services: Callable[[], Services]) -> None:
        self._pool = pool
        self._services = services
        self.queue = metrics.gauge(
            "jobforge_001_queue_jobs", "Job intents by state (001)", ["state"]
        )
        self.oldest = metrics.gauge(
            "jobforge_001_oldest_queued_age_seconds", "Age of the oldest queued job intent (001)"
        )
        self.addon = metrics.gauge(
            "jobforge_001_addon_jobs",
            "Queued and running job intents per addon (001)",
            ["addon_id", "state"],
        )
        self.decisions = metrics.counter(
            "jobforge_001_admission_decisions",
            "Submits by decision: queued, approved or denied (admission-only), with reason",
            ["decision", "reason"],
        )
        self._cache: TtlCache | None = None
        metrics.add_refresher(self.refresh)

    async def refresh(self) -> None:
        services = self._services()
        if self._cache is None:
            self._cache = TtlCache(services.views.cache_ms)
        counts, oldest, groups = await asyncio.gather(
            self._cache.get("counts", lambda: self._counts(services)),
            self._cache.get("oldest", lambda: self._oldest(services)),
            services.gates.groups(),
        )
        for state, count in counts.items():
            self.queue.labels(state).set(count)
        self.oldest.set(oldest)
        self.addon.clear()
        for group in groups:
            queued = group.counts.get(JobStatus.PENDING.value, 0)
            running = sum(group.counts.get(s.value, 0) for s in CLAIMED)
            if queued or running:
                self.addon.labels(group.group, "QUEUED").set(queued)
                self.addon.labels(group.group, "RUNNING").set(running)

    async def _counts(self, services: Services) -> dict[str, int]:
        client = services.client
        found = await asyncio.gather(
            *(
                visibility_queries.count(
                    client, job_filter(statuses=kinds_of(kept), pool=self._pool)
                )
                for kept in METRIC_STATES.values()
            )
        )
        return dict(zip(METRIC_STATES, found, strict=True))

    async def _oldest(self, services: Services) -> float:
        query = job_filter(JobStatus.PENDING.value, pool=self._pool)
        started = await visibility_queries.oldest_start(services.client, query)
        return 0.0 if started is None else max(time.time() - started, 0.0)


def count_queue(
    app: FastAPI, metrics: Metrics, pool: str, services: Callable[[], Services]
) -> None:
    """Report 001's series for `pool` on the app's registry from now on."""
    app.state.queue_metrics_001 = QueueMetrics(metrics, pool, services)


def queue_metrics(request: Request) -> QueueMetrics:
    """The app's 001 series (made at mount, with its routes)."""
    counted: QueueMetrics = request.app.state.queue_metrics_001
    return counted


QueueMetricsDep = Annotated[QueueMetrics, Depends(queue_metrics)]
