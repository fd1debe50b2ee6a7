"""The dashboard's charts: the last hour, minute by minute, from memory."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import Authorized, FeedDep, StatsDep
from api.stats_series import Series

router = APIRouter(prefix="/api/stats", tags=["dashboard"], dependencies=[Authorized])


@router.get("/series", response_model=Series)
async def series(stats: StatsDep, feed: FeedDep) -> Series:
    """Jobs completed and failed per minute, p50/p95 wait (submit → running) and run
    time, queue depth by type, over the last hour. No call to Temporal: the API keeps
    them from its event feed (started here, as `GET /metrics` starts it), and rebuilds
    the minutes before it started once, in the background."""
    feed.start()
    stats.rebuild_once(feed.began_ms)
    return stats.series()
