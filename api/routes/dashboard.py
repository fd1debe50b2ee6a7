"""Reads for the dashboard: pages of job summaries, counts, its config, and who the
caller is."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, Field

from api import access
from api.auth import PrincipalDep
from api.deps import Authorized, ClientDep, ConfigDep, ScopeDep, ViewsDep
from api.job_visibility_reads import AuditPage, JobPage, PageFilter, audit
from api.routes.jobs import (
    GroupFilter,
    IdPrefixFilter,
    PoolFilter,
    StatusFilter,
    TargetFilter,
    WorkerFilter,
)
from engine.clock import now_ms
from workflows.models import TYPE_PATTERN
from workflows.token_models import Role

router = APIRouter(prefix="/api", tags=["dashboard"], dependencies=[Authorized])

TypeFilter = Annotated[str | None, Query(pattern=TYPE_PATTERN)]


class UiConfig(BaseModel):
    """What the dashboard needs to link into the Temporal UI."""

    temporal_ui_url: str
    namespace: str
    events_require_token: bool
    counts_cache_ms: int = Field(description="How long the API reuses counts (re-read after)")


# The dashboard's actions and the calls they make: whoami says which the caller's role
# may use, from the one route table (api/access.py), and the others are not shown.
ACTIONS = {
    "cancel": ("DELETE", "/api/jobs/{job_id}"),
    "stop": ("POST", "/api/jobs/{job_id}/stop"),
    "retry": ("POST", "/api/ops/jobs/{job_id}/requeue"),
    "pause_group": ("POST", "/api/groups/{group}/pause"),
    "resume_target": ("POST", "/api/targets/{target}/resume"),
    # Pause, resume and trigger a schedule (one role set: api/access.py).
    "change_schedule": ("POST", "/api/schedules/{schedule_id}/pause"),
}


class WhoAmI(BaseModel):
    """The caller's token, without its secret."""

    id: str = Field(description='Its id ("bootstrap" for FORGE_INGEST_SECRET)')
    name: str
    role: Role
    tenant: str | None = Field(description="Its tenant; none: every tenant (an admin)")
    may: dict[str, bool] = Field(description="The dashboard's actions its role may use")


@router.get("/whoami", response_model=WhoAmI)
async def whoami(principal: PrincipalDep) -> WhoAmI:
    """Who the token is: its id, name, role and tenant, and which of the dashboard's
    actions (cancel, stop, retry, pause_group, resume_target, change_schedule) its role
    may use."""
    may = {
        action: access.allowed(principal.role, method, path)
        for action, (method, path) in ACTIONS.items()
    }
    return WhoAmI(
        id=principal.id,
        name=principal.name,
        role=principal.role,
        tenant=principal.tenant,
        may=may,
    )


@router.get("/jobs/page", response_model=JobPage)
async def jobs_page(
    views: ViewsDep,
    response: Response,
    scope: ScopeDep,
    status: StatusFilter = None,
    type: TypeFilter = None,
    group: GroupFilter = None,
    pool: PoolFilter = None,
    target: TargetFilter = None,
    worker: WorkerFilter = None,
    id_prefix: IdPrefixFilter = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    page_token: Annotated[str | None, Query(max_length=4096)] = None,
) -> JobPage:
    """Job summaries one page at a time (cheap at any job count): open jobs first,
    newest first, then closed ones, most recently closed first. Filtered as
    `GET /api/jobs` is (each filter a clause of the one visibility query); an admin
    reads one tenant's with `X-Tenant`. `X-Read-At`: when the page was asked of
    visibility (epoch ms); a transition before it is in the page, or on another one."""
    narrow = PageFilter(group=group, pool=pool, target=target, worker=worker, id_prefix=id_prefix)
    response.headers["X-Read-At"] = str(now_ms())
    return await views.page(status, type, limit, page_token, scope.query_tenant, narrow)


@router.get("/audit", response_model=AuditPage)
async def read_audit(
    client: ClientDep,
    scope: ScopeDep,
    limit: Annotated[
        int, Query(ge=1, le=200, description="Jobs read of each kind, gates read, entries")
    ] = 50,
) -> AuditPage:
    """Who changed which job or gate and when, newest first, at most `limit`: jobs'
    stops, cancels, ops overrides, re-queues (the transitions with `by` set among the
    `limit` most recently closed jobs and the `limit` newest open ones), and gates'
    pauses, resumes, settings, locks (the latest changes kept by `limit` running gates).
    Three visibility listings, O(limit). A tenant's caller reads only its tenant's jobs
    and gates."""
    return await audit(client, limit, scope.query_tenant)


@router.get("/jobs/counts", response_model=dict[str, int])
async def jobs_counts(
    views: ViewsDep, response: Response, scope: ScopeDep, type: TypeFilter = None
) -> dict[str, int]:
    """How many jobs are in each status, `cancelled` ones (failed by a cancel) apart from
    `failed`: they add up to the jobs, and the list filtered by each (`?status=`) holds
    that many. `X-Counts-As-Of` says when they were made (epoch ms): they are
    reused METRICS_CACHE_MS, and a kept answer is given while a fresh one is made. A
    tenant's caller counts only its tenant's jobs."""
    counted, as_of = await views.counts_timed(type, scope.query_tenant)
    response.headers["X-Counts-As-Of"] = str(as_of)
    return counted


@router.get("/config", response_model=UiConfig)
async def ui_config(config: ConfigDep) -> UiConfig:
    """Temporal UI address and namespace, for links to a job's workflow."""
    return UiConfig(
        temporal_ui_url=config.temporal.ui_url.rstrip("/"),
        namespace=config.temporal.namespace,
        events_require_token=config.api.events_require_token,
        counts_cache_ms=config.api.metrics_cache_ms,
    )
