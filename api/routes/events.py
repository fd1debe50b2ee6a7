"""`GET /api/jobs/events`: Server-Sent Events of every job transition."""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import AsyncIterator, Callable
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import StreamingResponse
from fastapi.sse import KEEPALIVE_COMMENT, format_sse_event
from pydantic import BaseModel

from api.auth import BOOTSTRAP, Principal, PrincipalDep, bearer_of, check_access
from api.deps import Authorized, ConfigDep, FeedDep, TokensDep
from api.event_feed import JobEvent, JobProgress, ProgressSettings
from api.tenancy import NO_TENANT, Scope, named_tenant, scope_of
from workflows.errors import InvalidField, TenantForbidden, Unauthorized
from workflows.job_states import JobStatus
from workflows.models import TYPE_PATTERN

router = APIRouter(prefix="/api", tags=["events"])

STREAM_TOKEN_TTL_S = 300


class EventStream(StreamingResponse):
    """`text/event-stream`, written here: FastAPI's own SSE routes send each event
    through two task-switching streams per client, which at 50 clients was most of
    the API's CPU (bench.event_latency)."""

    media_type = "text/event-stream"


# A comment line after this long without an event, as FastAPI's own SSE sends.
KEEPALIVE_S = 15.0
# The shape of one event, as FastAPI documents its own SSE routes.
SSE_EVENT_SCHEMA = {
    "type": "object",
    "properties": {
        "data": {"type": "string"},
        "event": {"type": "string"},
        "id": {"type": "string"},
        "retry": {"type": "integer", "minimum": 0},
    },
}
_TYPE_RE = re.compile(TYPE_PATTERN)


def sign_stream_token(secret: str, expires: int, principal_id: str) -> str:
    """`<expires>.<token id>.<hmac>`: lets a browser's EventSource in without its token
    in a URL, as the principal whose token asked for it."""
    mac = _mac(secret, f"events:{expires}:{principal_id}")
    return f"{expires}.{principal_id}.{mac}"


def _mac(secret: str, text: str) -> str:
    return hmac.new(secret.encode(), text.encode(), hashlib.sha256).hexdigest()


def stream_token_principal(secret: str, token: str, now: float) -> str | None:
    """The token id a stream token was issued to, if it is ours and not expired. The
    older `<expires>.<hmac>` form was only ever issued to the bootstrap secret."""
    parts = token.split(".")
    if len(parts) == 2:
        expires_raw, principal_id = parts[0], BOOTSTRAP.id
        expected = f"{expires_raw}.{_mac(secret, f'events:{expires_raw}')}"
    elif len(parts) == 3:
        expires_raw, principal_id = parts[0], parts[1]
        expected = (
            f"{expires_raw}.{principal_id}.{_mac(secret, f'events:{expires_raw}:{principal_id}')}"
        )
    else:
        return None
    if not expires_raw.isdigit() or int(expires_raw) < now:
        return None
    return principal_id if hmac.compare_digest(expected, token) else None


class StreamToken(BaseModel):
    """A short-lived token for `GET /api/jobs/events?token=`."""

    token: str
    expires_at: int


@router.post("/events/token", response_model=StreamToken, dependencies=[Authorized])
async def stream_token(config: ConfigDep, principal: PrincipalDep) -> StreamToken:
    """Issue a stream token (valid five minutes) for clients that cannot send headers;
    the stream it opens is the asking token's (its role and tenant)."""
    expires = int(time.time()) + STREAM_TOKEN_TTL_S
    return StreamToken(
        token=sign_stream_token(config.api.forge_ingest_secret, expires, principal.id),
        expires_at=expires * 1000,
    )


async def stream_access(
    request: Request,
    config: ConfigDep,
    tokens: TokensDep,
    token: Annotated[str | None, Query(max_length=200)] = None,
) -> None:
    """Open by default; with EVENTS_REQUIRE_TOKEN, a bearer or a stream token. A valid
    one is the request's principal either way (`request.state.principal`); on the open
    stream a refused one counts as none."""
    principal: Principal | None = None
    given = bearer_of(request)
    if given is not None:
        principal = await tokens.resolve(given)
    elif token:
        issued_to = stream_token_principal(config.api.forge_ingest_secret, token, time.time())
        if issued_to is not None:
            principal = await tokens.by_id(issued_to)
    if principal is not None:
        check_access(principal, request)
        request.state.principal = principal
    elif config.api.events_require_token:
        raise Unauthorized("events need a bearer token or a stream token (?token=)")


def stream_scope(
    request: Request,
    x_tenant: Annotated[str | None, Header(alias="X-Tenant")] = None,
) -> Scope:
    """Whose events a client gets: its token's scope (a stream token's is the scope of
    the token that asked for it; an admin's is every tenant's unless it names one with
    X-Tenant), as `stream_access` found it; without a token, the events of jobs with no
    tenant."""
    named = named_tenant(x_tenant)
    principal = getattr(request.state, "principal", None)
    if principal is not None:
        return scope_of(principal, named)
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
    "/jobs/events",
    response_class=EventStream,
    dependencies=[Depends(stream_access)],
    responses={200: {"content": {"text/event-stream": {"itemSchema": SSE_EVENT_SCHEMA}}}},
)
async def job_events(
    feed: FeedDep,
    config: ConfigDep,
    accepts: Annotated[Callable[[JobEvent], bool], Depends(event_filter)],
    scope: Annotated[Scope, Depends(stream_scope)],
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", max_length=200)] = None,
    since: Annotated[int | None, Query(ge=0, le=10**14)] = None,
) -> EventStream:
    """Every job transition, per job in order; resumable with `Last-Event-ID`.

    `?since=` (epoch ms) replays the transitions after that time first, as a
    `Last-Event-ID` of that time would: a client that read a page of jobs asks for what
    changed from that read on, and misses nothing made while its stream was opening.
    The header wins when both are given (a browser's reconnect sends it).

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

    async def frames() -> AsyncIterator[bytes]:
        # The events that reached this client at once go out in one write.
        batches = feed.subscribe(
            in_scope, last_event_id, progress, idle_s=KEEPALIVE_S, since_ms=since
        )
        async for batch in batches:
            yield b"".join(map(frame, batch)) if batch else KEEPALIVE_COMMENT

    # No caching, and no buffering by an nginx in front.
    return EventStream(frames(), headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def frame(event: JobEvent) -> bytes:
    """One event in the SSE wire format; a progress event has no id (the client's
    Last-Event-ID stays on the last transition it got)."""
    ident = None if isinstance(event, JobProgress) else event.position.encode()
    return format_sse_event(data_str=event.wire(), event=event.event, id=ident)
