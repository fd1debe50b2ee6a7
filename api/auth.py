"""Who is calling: the bearer token resolved to a `Principal` (a role and an optional
tenant), and whether that role may make this call (api/access.py holds the table).

`FORGE_INGEST_SECRET` is the bootstrap admin token; every other token is an API token
from the token registry, checked against the replica's copy of its table
(api/token_table.py) with one SHA-256 and one dict lookup, no call to Temporal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param

from api import access
from api.principal import BOOTSTRAP, Principal
from workflows.errors import Forbidden, Unauthorized
from workflows.token_models import Role

if TYPE_CHECKING:
    from api.token_table import TokenTable

__all__ = [
    "BOOTSTRAP",
    "ByDep",
    "OpsByDep",
    "Principal",
    "PrincipalDep",
    "Role",
    "bearer_of",
    "check_access",
    "current_principal",
    "require_token",
]

_bearer = HTTPBearer(
    auto_error=False, description="An API token (jf_…) or the bootstrap FORGE_INGEST_SECRET"
)


def bearer_of(request: Request) -> str | None:
    """The request's `Authorization: Bearer` token, if it sends one."""
    scheme, given = get_authorization_scheme_param(request.headers.get("authorization"))
    return given if scheme.lower() == "bearer" and given else None


def token_table(request: Request) -> TokenTable:
    """The replica's token table (built at startup with the other services)."""
    table: TokenTable = request.app.state.services.tokens
    return table


async def current_principal(
    request: Request,
    _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The caller; 401 for a missing, forged, truncated or revoked token. Also kept as
    `request.state.principal` for code that reads the request rather than a dependency.
    (`_bearer` only documents the scheme in OpenAPI.)"""
    given = bearer_of(request)
    if given is None:
        raise Unauthorized("missing bearer token (an API token or FORGE_INGEST_SECRET)")
    principal = await token_table(request).resolve(given)
    if principal is None:
        raise Unauthorized("invalid or revoked bearer token")
    request.state.principal = principal
    return principal


PrincipalDep = Annotated[Principal, Depends(current_principal)]


def check_access(principal: Principal, request: Request) -> None:
    """403 unless the principal's role may make this call (api/access.py)."""
    route = request.scope.get("route")
    path = getattr(route, "path_format", None) or request.url.path
    if not access.allowed(principal.role, request.method, path):
        raise Forbidden(
            f"role {principal.role} may not {request.method} {request.url.path}",
            role=principal.role,
        )


def require_token(request: Request, principal: PrincipalDep) -> None:
    """401 without a valid token, 403 when its role may not make this call."""
    check_access(principal, request)


def caller_by(request: Request) -> str | None:
    """The caller as a job's transitions name it (`Principal.by`); None on a route a
    design serves without a token (CONTRACT_AUTH_<NNN>=none)."""
    principal: Principal | None = getattr(request.state, "principal", None)
    return None if principal is None else principal.by


def ops_by(request: Request) -> str | None:
    """An operator override's `by`: "ops: <caller>"."""
    caller = caller_by(request)
    return None if caller is None else f"ops: {caller}"


# Who makes this call, for the transitions it leads to (the token check runs first).
ByDep = Annotated[str | None, Depends(caller_by)]
OpsByDep = Annotated[str | None, Depends(ops_by)]
