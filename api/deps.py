"""FastAPI dependencies: every service a route uses, as an `Annotated` alias, and the
token check (`Authorized`: the caller's principal and its role, api/auth.py). The app
keeps one `Services` (built at startup); routes never read `app.state` themselves."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request
from temporalio.client import Client

from api.agent_bridge import Bridge
from api.auth import require_token
from api.bulk_service import BulkService
from api.contract_settings import ContractSettings
from api.event_feed import EventFeed
from api.gate_service import GateService
from api.job_batch import JobBatches
from api.job_service import JobService
from api.job_visibility_reads import JobViews
from api.metrics_registry import Metrics
from api.schedule_service import ScheduleService
from api.settings import ApiSettings
from api.stats_series import StatsSeries
from api.tenancy import Scope, current_scope
from api.token_table import TokenTable
from api.worker_directory import WorkerDirectory
from engine.connection import TemporalSettings
from engine.log_settings import LogSettings
from engine.log_store import LogStore

__all__ = ["Authorized", "require_token"]


@dataclass
class Services:
    """What the API process runs on, built once at startup."""

    client: Client
    jobs: JobService
    views: JobViews
    bridge: Bridge
    workers: WorkerDirectory
    feed: EventFeed
    gates: GateService
    tokens: TokenTable
    schedules: ScheduleService
    batches: JobBatches
    bulk: BulkService
    stats: StatsSeries


@dataclass(frozen=True)
class Config:
    """The settings routes read, fixed when the app is built."""

    api: ApiSettings
    temporal: TemporalSettings
    logs: LogSettings = field(default_factory=LogSettings)
    contracts: ContractSettings = field(default_factory=ContractSettings)
    # The store `logs` names (LOG_STORE_URL), one per app: it caches what it listed.
    log_store: LogStore = field(default_factory=lambda: LogSettings().open())


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def get_client(request: Request) -> Client:
    """The Temporal client, for a reader a design's routes build per request."""
    return _services(request).client


def get_jobs(request: Request) -> JobService:
    """The job service."""
    return _services(request).jobs


def get_batches(request: Request) -> JobBatches:
    """Bulk submit."""
    return _services(request).batches


def get_bulk(request: Request) -> BulkService:
    """Bulk actions."""
    return _services(request).bulk


def get_stats(request: Request) -> StatsSeries:
    """The last hour's series, in memory."""
    return _services(request).stats


def get_gates(request: Request) -> GateService:
    """Groups, pools and targets."""
    return _services(request).gates


def get_schedules(request: Request) -> ScheduleService:
    """Recurring jobs."""
    return _services(request).schedules


def get_views(request: Request) -> JobViews:
    """Pages and counts of jobs, from visibility."""
    return _services(request).views


def get_bridge(request: Request) -> Bridge:
    """The HTTP-agent bridge."""
    return _services(request).bridge


def get_workers(request: Request) -> WorkerDirectory:
    """The worker directory."""
    return _services(request).workers


def get_feed(request: Request) -> EventFeed:
    """The event feed."""
    return _services(request).feed


def get_tokens(request: Request) -> TokenTable:
    """The replica's token table and the token registry."""
    return _services(request).tokens


def get_metrics(request: Request) -> Metrics:
    """The Prometheus registry (exists before startup: counters are cheap)."""
    metrics: Metrics = request.app.state.metrics
    return metrics


def get_config(request: Request) -> Config:
    """The app's settings."""
    config: Config = request.app.state.config
    return config


ClientDep = Annotated[Client, Depends(get_client)]
JobsDep = Annotated[JobService, Depends(get_jobs)]
BatchesDep = Annotated[JobBatches, Depends(get_batches)]
BulkDep = Annotated[BulkService, Depends(get_bulk)]
StatsDep = Annotated[StatsSeries, Depends(get_stats)]
GatesDep = Annotated[GateService, Depends(get_gates)]
SchedulesDep = Annotated[ScheduleService, Depends(get_schedules)]
ViewsDep = Annotated[JobViews, Depends(get_views)]
BridgeDep = Annotated[Bridge, Depends(get_bridge)]
WorkersDep = Annotated[WorkerDirectory, Depends(get_workers)]
FeedDep = Annotated[EventFeed, Depends(get_feed)]
TokensDep = Annotated[TokenTable, Depends(get_tokens)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
ConfigDep = Annotated[Config, Depends(get_config)]
# The tenants a caller reaches (api/tenancy.py).
ScopeDep = Annotated[Scope, Depends(current_scope)]


# 401 without a valid token, 403 when its role may not make the call (api/access.py).
Authorized = Depends(require_token)
