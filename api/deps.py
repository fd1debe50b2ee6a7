"""FastAPI dependencies: the job service and bearer auth."""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param

from api.errors import unauthorized
from api.jobs import JobService

_bearer = HTTPBearer(auto_error=False, description="FORGE_INGEST_SECRET")


def get_jobs(request: Request) -> JobService:
    """The process's JobService (built at startup)."""
    service: JobService = request.app.state.jobs
    return service


def bearer_ok(request: Request) -> bool:
    """Whether the request carries `Authorization: Bearer <FORGE_INGEST_SECRET>`."""
    secret: str = request.app.state.secret
    scheme, given = get_authorization_scheme_param(request.headers.get("authorization"))
    return (
        scheme.lower() == "bearer"
        and bool(given)
        and secrets.compare_digest(given.encode(), secret.encode())
    )


def require_token(
    request: Request,
    _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """401 unless `bearer_ok` (the `_bearer` dependency documents the scheme in OpenAPI)."""
    if not bearer_ok(request):
        raise unauthorized()


JobsDep = Annotated[JobService, Depends(get_jobs)]
Authorized = Depends(require_token)
