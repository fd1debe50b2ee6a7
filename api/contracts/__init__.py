"""Each design jobforge grew from, served in its own words over the one core.

One router module per design (its routes, and the mapping of its request and response
shapes onto the core services), one table of state names (`states.py`), and one place
that mounts them (`mount`). Nothing here schedules, stores or runs a job: every route
calls the services the hub's own routes call. docs/contracts.md has the route-by-route
tables.
"""

from __future__ import annotations

from fastapi import Depends, FastAPI

from api.contracts import admission_001, containers_003, targets_004
from api.contracts.mounting import ContractSettings
from api.deps import Services, require_token
from api.metrics_registry import Metrics
from api.tenancy import tenantless_design

# Each design's router factory; 000 is the hub's own routes (api/routes/), always on.
# Only 004 has tenants: a tenant's caller reaches none of the others' routes.
ROUTERS = {
    "001": admission_001.router,
    "003": containers_003.router,
    "004": targets_004.router,
}


def mount(app: FastAPI, settings: ContractSettings, metrics: Metrics) -> None:
    """Mount each design's routes that `JOBFORGE_CONTRACTS` turns on, at its prefix,
    behind the bearer token unless `CONTRACT_AUTH_<NNN>=none`."""

    def services() -> Services:
        # Built at startup (api/main.py's lifespan), after the routes are mounted.
        built: Services = app.state.services
        return built

    for design, make in ROUTERS.items():
        if design not in settings.enabled:
            continue
        guard = [] if settings.open(design) else [Depends(require_token)]
        if design != "004":
            guard.append(Depends(tenantless_design(design)))
        app.include_router(
            make(settings, metrics, services), prefix=settings.prefix(design), dependencies=guard
        )
