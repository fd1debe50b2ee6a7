"""Which designs' routes an API serves, where, and behind what (docs/contracts.md): each
design's module-level routers, mounted at its `CONTRACT_PREFIX_<NNN>`, behind the bearer
token unless `CONTRACT_AUTH_<NNN>=none` (the settings: api/contract_settings.py)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, FastAPI

from api.contract_settings import ContractSettings
from api.contracts import (
    admission_001,
    admission_001_metrics,
    containers_003,
    containers_003_agent,
    targets_004,
)
from api.deps import Services, require_token
from api.metrics_registry import Metrics
from api.tenancy import tenantless_design

# Each design's routers; 000 is the API's own routes (api/routes/), always on, and 002 is
# a CLI (worker/runforge_cli.py). Only 004 has tenants: a tenant's caller reaches none of
# the others' routes.
ROUTERS: dict[str, tuple[APIRouter, ...]] = {
    "001": (admission_001.router,),
    "003": (containers_003.router, containers_003_agent.router),
    "004": (targets_004.router,),
}


def mount(app: FastAPI, settings: ContractSettings, metrics: Metrics) -> None:
    """Mount each design's routes that `JOBFORGE_CONTRACTS` turns on, at its prefix,
    behind the bearer token unless `CONTRACT_AUTH_<NNN>=none`."""
    for design, routers in ROUTERS.items():
        if design not in settings.enabled:
            continue
        guard = [] if settings.open(design) else [Depends(require_token)]
        if design != "004":
            guard.append(Depends(tenantless_design(design)))
        for router in routers:
            app.include_router(router, prefix=settings.prefix(design), dependencies=guard)
    if "001" in settings.enabled:

        def services() -> Services:
            # Built at startup (api/main.py's lifespan), after the routes are mounted.
            built: Services = app.state.services
            return built

        admission_001_metrics.count_queue(app, metrics, settings.scheduler_pool, services)
