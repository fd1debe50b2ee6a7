"""`GET /metrics`: Prometheus text format, open like a health check."""

from __future__ import annotations

from fastapi import APIRouter, Response

from api.deps import FeedDep, MetricsDep, ScopeDep, ViewsDep

router = APIRouter(tags=["metrics"])


@router.get("/metrics", response_class=Response)
async def metrics(
    registry: MetricsDep, views: ViewsDep, feed: FeedDep, scope: ScopeDep
) -> Response:
    """Prometheus text format: jobs by status, oldest pending age, each task queue's
    backlog and its oldest task's wait, counters. The gauges read from Temporal cost a
    bounded number of calls whatever the job count, cached `METRICS_CACHE_MS`. A
    tenant's caller gets its tenant's jobs by status and oldest pending age only."""
    if not scope.every:
        body = await registry.render_tenant(views, scope.tenant)
        return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")
    feed.start()  # the event counters come from the feed
    body = await registry.render(views)
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")
