"""Which tenant a caller reaches (docs/architecture.md, "Tenants").

The token check (api/deps.py) leaves the caller on `request.state.principal`: an object
with a `role` (admin, producer, worker or reader) and a `tenant` (or None). No principal
is the bootstrap admin (`FORGE_INGEST_SECRET`). From it, `current_scope` makes a
`Scope`:

- an admin reaches every tenant's jobs, or one tenant's when it names it (`X-Tenant`),
  and then acts as that tenant;
- any other caller reaches only its token's tenant's jobs (a token without a tenant:
  only jobs without one), and naming another tenant is a 403.

Isolation is a visibility filter on `JobforgeTenant` (one clause, O(page)) and a check
of the job's tenant on every read or change of one job: another tenant's job is a 404.
A tenant's gates are named `<tenant>/<name>`, so groups, pools and targets are scoped
by their name.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Header, Request

from workflows.errors import GateNotFound, GroupNotFound, InvalidField, TenantForbidden
from workflows.models import TENANT_PATTERN, JobSpec, gate_name_problem, gate_tenant
from workflows.search_attributes import EVERY_TENANT

ADMIN = "admin"
_TENANT_RE = re.compile(TENANT_PATTERN)


@dataclass(frozen=True)
class Scope:
    """The jobs a caller reaches: every tenant's (`every`), or those of `tenant` only
    (None: jobs without a tenant). `admin`: it may name any tenant."""

    every: bool
    tenant: str | None = None
    admin: bool = False

    @property
    def query_tenant(self) -> str | None:
        """`job_filter`'s tenant argument for this scope."""
        return EVERY_TENANT if self.every else self.tenant

    @property
    def key(self) -> str:
        """A cache key part: the same for callers that see the same jobs."""
        if self.every:
            return EVERY_TENANT
        return "" if self.tenant is None else f"={self.tenant}"

    def reaches(self, tenant: str | None) -> bool:
        """Whether a job of `tenant` is within this scope."""
        return self.every or tenant == self.tenant

    def owns_gate(self, name: str) -> bool:
        """Whether a group, pool or target of this name is within this scope (a
        tenant's are named `<tenant>/<name>`)."""
        return self.every or gate_tenant(name) == self.tenant

    def check_gate(self, kind: str, name: str) -> None:
        """404 for a gate outside this scope, as for a job."""
        if not self.owns_gate(name):
            raise GroupNotFound(name) if kind == "group" else GateNotFound(kind, name)

    def stamp(self, spec: JobSpec) -> JobSpec:
        """The job as this caller submits it: its tenant stamped (a differing one in the
        body is a 403), and its gates checked against that tenant (422 naming the
        field)."""
        if self.every:
            return spec  # an admin naming no tenant: the body's, validated with it
        if spec.tenant is not None and spec.tenant != self.tenant:
            raise TenantForbidden("tenant", spec.tenant, self.tenant)
        stamped = spec.model_copy(update={"tenant": self.tenant})
        for field in ("group", "pool", "target"):
            name: str | None = getattr(stamped, field)
            if name is None:
                continue
            problem = gate_name_problem(self.tenant, name, field)
            if problem is None and self.tenant is None and gate_tenant(name) is not None:
                problem = f"a {field} named <tenant>/<name> is that tenant's"
            if problem is not None:
                raise InvalidField(field, problem)
        return stamped


EVERY = Scope(every=True, admin=True)
# The jobs without a tenant, and nothing else (the open event stream, the designs
# without tenants).
NO_TENANT = Scope(every=False, tenant=None)


def scope_of(principal: object | None, named: str | None, field: str = "X-Tenant") -> Scope:
    """The scope of a principal (None: the bootstrap admin) that names `named` (or no
    tenant) in its request's `field`."""
    if principal is None or getattr(principal, "role", None) == ADMIN:
        return EVERY if named is None else Scope(every=False, tenant=named, admin=True)
    own: str | None = getattr(principal, "tenant", None)
    if named is not None and named != own:
        raise TenantForbidden(field, named, own)
    return Scope(every=False, tenant=own)


def named_tenant(value: str | None, field: str = "X-Tenant") -> str | None:
    """A tenant named in a request, checked (422 naming `field`)."""
    if value is None:
        return None
    if not _TENANT_RE.match(value):
        raise InvalidField(field, f"{value!r} is not a tenant name")
    return value


def tenantless_design(design: str) -> Callable[..., None]:
    """A dependency for the routes of a design whose jobs have no tenant (001, 003): a
    tenant's caller is refused (403), as those routes reach no tenant's jobs."""

    def check(scope: Annotated[Scope, Depends(current_scope)]) -> None:
        if not scope.reaches(None):
            raise TenantForbidden.design(design, scope.tenant)

    return check


def current_scope(
    request: Request,
    x_tenant: Annotated[
        str | None,
        Header(
            alias="X-Tenant",
            description="Act as this tenant (an admin); any other caller may name only its own",
        ),
    ] = None,
) -> Scope:
    """The caller's scope: its principal's, narrowed to the tenant it names."""
    return scope_of(getattr(request.state, "principal", None), named_tenant(x_tenant))
