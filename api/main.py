"""The FastAPI application: the REST facade over Temporal."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api import errors
from api.bridge import Bridge
from api.events import EventFeed, FeedSettings
from api.jobs import JobService
from api.metrics import Metrics
from api.routes import agents, dashboard, events, health, jobs
from api.settings import ApiSettings
from api.temporal import TemporalSettings, connect
from api.workers import WorkerDirectory

log = logging.getLogger("jobforge.api")
STATIC_DIR = Path(__file__).resolve().parent / "static"


class BodyLimit:
    """413 for request bodies over the limit, declared or streamed."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._reject(send)
            return
        seen = 0
        too_big = False
        started = False

        async def counted() -> Message:
            nonlocal seen, too_big
            if too_big:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    too_big = True
                    return {"type": "http.disconnect"}
            return message

        async def guarded(message: Message) -> None:
            # The app answers the cut-off body itself (FastAPI: 400 "error parsing the
            # body"); that answer is dropped and replaced by the 413.
            nonlocal started
            if too_big and not started:
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted, guarded)
        except Exception:
            if not too_big or started:
                raise
        if too_big and not started:
            await self._reject(send)

    async def _reject(self, send: Send) -> None:
        body = b'{"error":"request body is larger than %d bytes"}' % self.max_bytes
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})


async def _dashboard_page() -> FileResponse:
    return FileResponse(STATIC_DIR / "index.html")


def create_app(
    settings: ApiSettings | None = None, temporal: TemporalSettings | None = None
) -> FastAPI:
    """Build the app; it connects to Temporal lazily, so it starts while Temporal is down."""
    settings = (settings or ApiSettings()).with_secret()
    temporal = temporal or TemporalSettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        client = await connect(temporal, lazy=True, retry_ms=settings.temporal_retry_ms)
        app.state.jobs = JobService(client, temporal, settings)
        app.state.bridge = Bridge(client, temporal, app.state.jobs)
        app.state.workers = WorkerDirectory(client, temporal, settings.heartbeat_timeout_s)
        app.state.client = client
        app.state.feed = EventFeed(
            client,
            app.state.jobs,
            FeedSettings(poll_ms=settings.events_poll_ms, settle_ms=settings.events_settle_ms),
            on_event=app.state.metrics.observe,
        )
        yield
        await app.state.feed.stop()

    app = FastAPI(
        title="jobforge",
        summary="Durable job dispatch on Temporal",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.secret = settings.forge_ingest_secret
    app.state.temporal = temporal
    errors.install(app)
    app.include_router(health.router)
    app.state.events_require_token = settings.events_require_token
    app.state.metrics = Metrics()
    app.include_router(dashboard.router)
    app.include_router(dashboard.open_router)
    app.include_router(events.router)
    app.include_router(agents.router)
    app.include_router(jobs.router)
    # The dashboard: its page at / and its assets under /static/. No catch-all mount, so
    # a wrong method on an API path is a 405 rather than the mount's 404.
    app.add_api_route("/", _dashboard_page, methods=["GET", "HEAD"], include_in_schema=False)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    errors.document(app)
    return app
