"""The FastAPI application: the API over Temporal, wired in one place."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import Headers
from starlette.middleware.body_limit import RequestBodyLimitMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from api import errors, openapi
from api.agent_bridge import Bridge
from api.bulk_service import BulkService
from api.contract_settings import ContractSettings
from api.contracts import mounting
from api.deps import Config, Services
from api.event_feed import EventFeed, FeedSettings, JobEvent
from api.gate_service import GateService
from api.job_batch import JobBatches
from api.job_service import JobService
from api.job_visibility_reads import JobViews
from api.metrics_registry import Metrics
from api.routes import (
    agents,
    bulk,
    dashboard,
    events,
    health,
    jobs,
    logs,
    metrics,
    ops,
    schedules,
    scheduling,
    stats,
    tokens,
    workers,
)
from api.schedule_service import ScheduleService
from api.settings import ApiSettings
from api.stats_series import StatsSeries
from api.token_table import TokenTable
from api.worker_directory import WorkerDirectory
from engine.connection import TemporalSettings, connect
from engine.gates import Gates
from engine.log_settings import LogSettings
from engine.solver_urls import SolverUrlSettings
from engine.tracing import start_tracing

log = logging.getLogger("jobforge.api")
STATIC_DIR = Path(__file__).resolve().parent / "static"


class DeclaredBodyLimit:
    """413 in the API's JSON shape for a body whose Content-Length is over the limit,
    before the app reads it. A streamed body over the limit is Starlette's
    `RequestBodyLimitMiddleware`'s, answered through api/errors.py; a declared one
    would get that middleware's plain-text answer."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            declared = Headers(scope=scope).get("content-length", "")
            if declared.isdigit() and int(declared) > self.max_bytes:
                message = f"request body is larger than {self.max_bytes} bytes"
                await JSONResponse({"error": message}, status_code=413)(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def _dashboard_page() -> FileResponse:
    return FileResponse(STATIC_DIR / "index.html")


async def _favicon() -> FileResponse:
    return FileResponse(STATIC_DIR / "favicon.ico", media_type="image/x-icon")


def create_app(
    settings: ApiSettings | None = None,
    temporal: TemporalSettings | None = None,
    solver_urls: SolverUrlSettings | None = None,
    contract_settings: ContractSettings | None = None,
) -> FastAPI:
    """Build the app; it connects to Temporal lazily, so it starts while Temporal is down."""
    settings = (settings or ApiSettings()).with_secret()
    temporal = temporal or TemporalSettings()
    solver_urls = solver_urls or SolverUrlSettings()
    log_settings = LogSettings()
    contract_settings = contract_settings or ContractSettings()
    log_store = log_settings.open()
    registry = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        client = await connect(temporal, lazy=True, retry_ms=settings.temporal_retry_ms)
        gates = Gates(client, temporal.task_queue, settings.gate_defaults())
        job_service = JobService(client, temporal, settings, solver_urls, gates, log_store)
        series = StatsSeries(client, job_service.known_types)

        def observe(event: JobEvent) -> None:
            registry.observe(event)
            series.observe(event)

        feed = EventFeed(
            client,
            job_service,
            FeedSettings(
                poll_ms=settings.events_poll_ms,
                idle_poll_ms=settings.events_idle_poll_ms,
                min_gap_ms=settings.events_poll_gap_ms,
                settle_ms=settings.events_settle_ms,
            ),
            on_event=observe,
            on_poll=registry.feed_polls.inc,
        )
        job_service.on_transition = feed.expect
        registry.feed_settle.set_function(lambda: feed.settle_ms / 1000)
        token_table = TokenTable(
            client,
            temporal.task_queue,
            settings.forge_ingest_secret,
            refresh_s=settings.tokens_refresh_ms / 1000,
            flush_s=settings.tokens_use_flush_s,
        )
        bulk_service = BulkService(client, temporal, job_service)
        app.state.services = Services(
            client=client,
            jobs=job_service,
            views=JobViews(client, settings.forge_ingest_secret, settings.metrics_cache_ms),
            bridge=Bridge(client, temporal, job_service, settings.hosts),
            workers=WorkerDirectory(
                client, temporal, settings.heartbeat_timeout_s, settings.worker_expire_s
            ),
            feed=feed,
            gates=GateService(
                client, temporal, gates, job_service.cancel, settings.metrics_cache_ms
            ),
            tokens=token_table,
            schedules=ScheduleService(client, temporal, job_service),
            batches=JobBatches(job_service, settings.batch_concurrency),
            bulk=bulk_service,
            stats=series,
        )
        bulk_service.run_worker()
        token_table.start()
        registry.watch_task_queues(client, temporal, settings.metrics_cache_ms)
        yield
        await token_table.stop()
        await bulk_service.stop()
        await series.stop()
        await feed.stop()

    app = FastAPI(
        title="jobforge",
        summary="Durable job dispatch on Temporal",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.config = Config(
        api=settings,
        temporal=temporal,
        logs=log_settings,
        contracts=contract_settings,
        log_store=log_store,
    )
    app.state.metrics = registry
    app.state.max_body_bytes = settings.max_body_bytes
    errors.install(app)
    modules = (
        health,
        metrics,
        dashboard,
        events,
        workers,
        agents,
        bulk,
        jobs,
        logs,
        scheduling,
        schedules,
        stats,
        ops,
        tokens,
    )
    for module in modules:
        app.include_router(module.router)
    mounting.mount(app, contract_settings, registry)
    # The dashboard: its page at / and its assets under /static/. No catch-all mount, so
    # a wrong method on an API path is a 405 rather than the mount's 404.
    app.add_api_route("/", _dashboard_page, methods=["GET", "HEAD"], include_in_schema=False)
    # Where browsers and tools ask for the icon; the page links it too.
    app.add_api_route("/favicon.ico", _favicon, methods=["GET", "HEAD"], include_in_schema=False)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    # Starlette's body limit counts a streamed body and raises a 413 that api/errors.py
    # answers as JSON; a declared length over the limit is refused before it.
    app.add_middleware(RequestBodyLimitMiddleware, max_body_size=settings.max_body_bytes)
    app.add_middleware(DeclaredBodyLimit, max_bytes=settings.max_body_bytes)
    openapi.document(app)
    if start_tracing("jobforge-api"):
        # Imported only when tracing is on, like the SDK (engine/tracing.py).
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

        # One server span per request: none per body chunk or SSE message.
        FastAPIInstrumentor.instrument_app(app, exclude_spans=["receive", "send"])
    return app
