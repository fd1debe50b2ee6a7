"""`GET /metrics`: Prometheus text format, open like a health check (unless
METRICS_REQUIRE_TOKEN); a caller that sends a token gets its tenant's slice."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response

from api.auth import bearer_of
from api.deps import ConfigDep, FeedDep, MetricsDep, ScopeDep, TokensDep, ViewsDep
from workflows.errors import Unauthorized

router = APIRouter(tags=["metrics"])


async def metrics_access(request: Request, config: ConfigDep, tokens: TokensDep) -> None:
    """Open by default; with METRICS_REQUIRE_TOKEN, a bearer token of any role. A token
    sent is checked (401 if refused) and is the request's principal, so its scope is
    the token's: a tenant's token reads its tenant's slice."""
    given = bearer_of(request)
    if given is None:
        if config.api.metrics_require_token:
            raise Unauthorized("metrics need a bearer token (METRICS_REQUIRE_TOKEN)")
        return
    principal = await tokens.resolve(given)
    if principal is None:
        raise Unauthorized("invalid or revoked bearer token")
    request.state.principal = principal


@router.get("/metrics", response_class=Response, dependencies=[Depends(metrics_access)])
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
