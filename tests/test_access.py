"""The route table (api/access.py) is whole: every route the app serves is in it, once,
and it names no route the app does not serve. No server runs here."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from fastapi.routing import APIRoute

from api import access
from api.main import create_app
from api.routes.dashboard import ACTIONS
from api.settings import ApiSettings


def api_routes(routes: Iterable[Any]) -> Iterator[APIRoute]:
    """Every APIRoute, those of included routers too."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from api_routes(inner.routes)
        elif isinstance(route, APIRoute):
            yield route


def served() -> set[str]:
    app = create_app(ApiSettings(FORGE_INGEST_SECRET="x"))
    return {
        access.route_key(method, route.path_format)
        for route in api_routes(app.router.routes)
        for method in route.methods
    }


def test_every_route_the_api_serves_is_in_the_table_and_no_other() -> None:
    routes = served()
    listed = set(access.ROUTES) | access.OPEN
    assert routes - listed == set(), "routes without an entry: only the admin may call them"
    assert listed - routes == set(), "entries for routes the API does not serve"
    assert not set(access.ROUTES) & access.OPEN


def test_a_route_missing_from_the_table_is_the_admins_only() -> None:
    assert access.allowed("admin", "POST", "/api/no-such-route")
    for role in ("producer", "worker", "reader"):
        assert not access.allowed(role, "POST", "/api/no-such-route")


def test_head_reads_as_get_and_a_trailing_slash_is_the_same_route() -> None:
    assert access.allowed("reader", "HEAD", "/api/jobs")
    assert access.allowed("producer", "POST", "/targets/{target_id}/jobs/{job_id}/cancel/")
    assert not access.allowed("reader", "POST", "/targets/{target_id}/jobs/{job_id}/cancel/")


def test_a_reader_may_make_no_call_but_reads() -> None:
    for key, roles in access.ROUTES.items():
        method = key.split(" ", 1)[0]
        # The stream token: a POST that only opens the event stream, a read.
        if "reader" in roles:
            assert method == "GET" or key == "POST /api/events/token", key


def test_the_dashboards_actions_are_routes_of_the_table() -> None:
    # whoami tells the dashboard which buttons to show from these: a path that is not a
    # route of the table would read as the admin's only.
    for action, (method, path) in ACTIONS.items():
        assert access.route_key(method, path) in access.ROUTES, action
    assert access.allowed("reader", "GET", "/api/whoami")
    assert access.allowed("worker", "GET", "/api/whoami")
