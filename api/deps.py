"""FastAPI dependencies: the job service and bearer auth."""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.errors import unauthorized
from api.jobs import JobService

_bearer = HTTPBearer(auto_error=False, description="FORGE_INGEST_SECRET")


def get_jobs(request: Request) -> JobService:
    """The process's JobService (built at startup)."""
    service: JobService = request.app.state.jobs
    return service


def require_token(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """401 unless the request carries `Authorization: Bearer <FORGE_INGEST_SECRET>`."""
    secret: str = request.app.state.secret
    given = credentials.credentials if credentials is not None else ""
    if not given or not secrets.compare_digest(given.encode(), secret.encode()):
        raise unauthorized()


JobsDep = Annotated[JobService, Depends(get_jobs)]
Authorized = Depends(require_token)
