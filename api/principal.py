"""The caller a token stands for, and the bootstrap admin (FORGE_INGEST_SECRET): what
api/auth.py resolves a bearer to, and what api/token_table.py builds from its table."""

from __future__ import annotations

from dataclasses import dataclass

from workflows.token_models import Role


@dataclass(frozen=True)
class Principal:
    """The caller a token stands for."""

    id: str  # token id; "bootstrap" for FORGE_INGEST_SECRET
    name: str  # token name; "bootstrap" for the secret
    role: Role
    tenant: str | None  # None: no tenant (an admin sees every tenant)

    @property
    def by(self) -> str:
        """Who it is in a job's transitions (`by`): its token's name and id, or
        "bootstrap" for FORGE_INGEST_SECRET."""
        return self.name if self.id == BOOTSTRAP_ID else f"{self.name} ({self.id})"


BOOTSTRAP_ID = "bootstrap"
BOOTSTRAP = Principal(id=BOOTSTRAP_ID, name="bootstrap", role="admin", tenant=None)
