"""Reads for the dashboard (summaries, counts, config) and `/metrics`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel
from temporalio.client import Client

from api.dashboard import JobPage, job_counts, job_page
from api.deps import Authorized
from api.metrics import Metrics
from workflows.models import TYPE_PATTERN, JobStatus

router = APIRouter(prefix="/api", tags=["dashboard"], dependencies=[Authorized])
open_router = APIRouter(tags=["health"])

TypeFilter = Annotated[str | None, Query(pattern=TYPE_PATTERN)]


class UiConfig(BaseModel):
    """What the dashboard needs to link into the Temporal UI."""

    temporal_ui_url: str
    namespace: str
    events_require_token: bool


def _client(request: Request) -> Client:
    client: Client = request.app.state.client
    return client


@router.get("/jobs/page", response_model=JobPage)
async def jobs_page(
    request: Request,
    status: JobStatus | None = None,
    type: TypeFilter = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    page_token: Annotated[str | None, Query(max_length=4096)] = None,
) -> JobPage:
    """Job summaries one page at a time (cheap at any job count): open jobs first,
    newest first, then closed ones, most recently closed first."""
    secret: str = request.app.state.secret
    return await job_page(_client(request), secret, status, type, limit, page_token)


@router.get("/jobs/counts", response_model=dict[str, int])
async def jobs_counts(request: Request, type: TypeFilter = None) -> dict[str, int]:
    """How many jobs are in each status."""
    return await job_counts(_client(request), type)


@router.get("/config", response_model=UiConfig)
async def ui_config(request: Request) -> UiConfig:
    """Temporal UI address and namespace, for links to a job's workflow."""
    temporal = request.app.state.temporal
    return UiConfig(
        temporal_ui_url=temporal.ui_url.rstrip("/"),
        namespace=temporal.namespace,
        events_require_token=request.app.state.events_require_token,
    )


@open_router.get("/metrics", response_class=Response)
async def metrics(request: Request) -> Response:
    """Prometheus text format: jobs by status, oldest pending age, counters."""
    request.app.state.feed.start()  # the event counters come from the feed
    registry: Metrics = request.app.state.metrics
    body = await registry.render(_client(request))
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")
