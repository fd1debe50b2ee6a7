"""`GET /api/jobs/events`: Server-Sent Events of every job transition."""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import AsyncIterable, Callable
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.sse import EventSourceResponse, ServerSentEvent
from pydantic import BaseModel

from api.deps import Authorized, ConfigDep, FeedDep, bearer_ok
from api.event_feed import JobEvent, JobProgress, ProgressSettings, key_of
from api.tenancy import NO_TENANT, Scope, named_tenant, scope_of
from workflows.errors import InvalidField, TenantForbidden, Unauthorized
from workflows.job_states import JobStatus
from workflows.models import TYPE_PATTERN

router = APIRouter(prefix="/api", tags=["events"])

STREAM_TOKEN_TTL_S = 300
_TYPE_RE = re.compile(TYPE_PATTERN)


def sign_stream_token(secret: str, expires: int) -> str:
    """`<expires>.<hmac>`: lets a browser's EventSource in without the secret in a URL."""
    mac = hmac.new(secret.encode(), f"events:{expires}".encode(), hashlib.sha256).hexdigest()
    return f"{expires}.{mac}"


def stream_token_valid(secret: str, token: str, now: float) -> bool:
    """Whether a stream token is ours and not expired."""
    expires_raw, _, _ = token.partition(".")
    if not expires_raw.isdigit() or int(expires_raw) < now:
        return False
    return hmac.compare_digest(sign_stream_token(secret, int(expires_raw)), token)


class StreamToken(BaseModel):
    """A short-lived token for `GET /api/jobs/events?token=`."""

    token: str
    expires_at: int


@router.post("/events/token", response_model=StreamToken, dependencies=[Authorized])
async def stream_token(config: ConfigDep) -> StreamToken:
    """Issue a stream token (valid five minutes) for clients that cannot send headers."""
    expires = int(time.time()) + STREAM_TOKEN_TTL_S
    return StreamToken(
        token=sign_stream_token(config.api.forge_ingest_secret, expires),
        expires_at=expires * 1000,
    )


def stream_access(
    request: Request,
    config: ConfigDep,
    token: Annotated[str | None, Query(max_length=200)] = None,
) -> None:
    """Open by default; with EVENTS_REQUIRE_TOKEN, a bearer or a stream token."""
    if not config.api.events_require_token:
        return
    if bearer_ok(request):
        return
    if token and stream_token_valid(config.api.forge_ingest_secret, token, time.time()):
        return
    raise Unauthorized("events need a bearer token or a stream token (?token=)")


def stream_scope(
    request: Request,
    config: ConfigDep,
    token: Annotated[str | None, Query(max_length=200)] = None,
    x_tenant: Annotated[str | None, Header(alias="X-Tenant")] = None,
) -> Scope:
    """Whose events a client gets: a token's scope (the bootstrap admin's, or a stream
    token's: every tenant's unless it names one with X-Tenant); without a token, the
    events of jobs with no tenant."""
    named = named_tenant(x_tenant)
    principal = getattr(request.state, "principal", None)
    if principal is not None:
        return scope_of(principal, named)
    secret = config.api.forge_ingest_secret
    if bearer_ok(request) or (token and stream_token_valid(secret, token, time.time())):
        return scope_of(None, named)
    if named is not None:
        raise TenantForbidden("X-Tenant", named, None)
    return NO_TENANT  # the open stream


def event_filter(
    status: Annotated[list[JobStatus] | None, Query()] = None,
    type: Annotated[list[str] | None, Query(max_length=64)] = None,
) -> Callable[[JobEvent], bool]:
    """The `?status=` and `?type=` filters (each may repeat)."""
    for job_type in type or []:
        if not _TYPE_RE.match(job_type):
            raise InvalidField("type", f"{job_type!r} is not a job type")
    statuses = set(status or [])
    types = set(type or [])

    def accepts(event: JobEvent) -> bool:
        return (not statuses or event.status in statuses) and (not types or event.type in types)

    return accepts


@router.get(
    "/jobs/events", response_class=EventSourceResponse, dependencies=[Depends(stream_access)]
)
async def job_events(
    feed: FeedDep,
    config: ConfigDep,
    accepts: Annotated[Callable[[JobEvent], bool], Depends(event_filter)],
    scope: Annotated[Scope, Depends(stream_scope)],
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", max_length=200)] = None,
) -> AsyncIterable[ServerSentEvent]:
    """Every job transition, per job in order; resumable with `Last-Event-ID`.

    Events: job:created, job:assigned, job:running, job:completed, job:failed (a cancel too,
    with fail_reason cancelled), job:pending (re-queued), job:quarantined, job:stop_requested,
    job:stopped; and job:progress, a running job's progress when it changed (at most
    once per PROGRESS_PUBLISH_MS per job, live only: no id, not replayed on resume).
    Open unless the API runs with EVENTS_REQUIRE_TOKEN=true (then a bearer token or
    `?token=` stream token). Without a token it carries the jobs without a tenant only;
    a tenant's token, its tenant's jobs only, replay after `Last-Event-ID` included.
    """
    progress = ProgressSettings(
        every_ms=config.api.progress_publish_ms, max_jobs=config.api.events_progress_max_jobs
    )

    def in_scope(event: JobEvent) -> bool:
        return scope.reaches(event.tenant) and accepts(event)

    async for event in feed.subscribe(in_scope, last_event_id, progress):
        if isinstance(event, JobProgress):
            # No id: the client's Last-Event-ID stays on the last transition it got.
            yield ServerSentEvent(event=event.event, data=event)
        else:
            yield ServerSentEvent(event=event.event, id=key_of(event).encode(), data=event)
