"""A stand-in for the token check in tests of tenant isolation: the app of api/main.py
with a middleware that puts the principal named by `X-Test-Principal: <role>:<tenant>`
(empty tenant: none) on the request, where the token check puts it (api/tenancy.py
reads `request.state.principal`). What is under test is everything after that."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import FastAPI
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from api.main import create_app as create_api

HEADER = "X-Test-Principal"


@dataclass(frozen=True)
class Principal:
    """The token check's principal, as api/tenancy.py reads it."""

    id: str
    name: str
    role: str
    tenant: str | None


class PrincipalFromHeader:
    """Sets `request.state.principal` from `X-Test-Principal`, if the request has one."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            named = Headers(scope=scope).get(HEADER)
            if named is not None:
                role, _, tenant = named.partition(":")
                principal = Principal(named, named, role, tenant or None)
                scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)


def create_app() -> FastAPI:
    """The API with principals from the test header (`uvicorn --factory`)."""
    app = create_api()
    app.add_middleware(PrincipalFromHeader)
    return app
