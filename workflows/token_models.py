"""API tokens as the token registry keeps them (workflows/token_registry.py): a role, an
optional tenant, and the SHA-256 of the secret, never the secret itself.

Stdlib and pydantic only, like the other models: the API and the workflow sandbox both
import it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

# What a token may do (api/access.py has the route table).
Role = Literal["admin", "producer", "worker", "reader"]
ROLES: tuple[Role, ...] = ("admin", "producer", "worker", "reader")

# The registry continues as new past this many history events (or when Temporal
# suggests it), whichever comes first.
TOKEN_HISTORY_LIMIT = 2000
# The most tokens one registry holds: its memo (every replica's copy) stays well under
# Temporal's 512 KB payload warning.
TOKENS_MAX = 1000


class TokenEntry(BaseModel):
    """What every API replica needs to check a token: its hash, role and tenant.
    The registry's memo holds these (read by a describe, with no workflow task)."""

    id: str
    name: str
    role: Role
    tenant: str | None = None
    hash: str = Field(description="SHA-256 of the token, hex")
    created_at: int = Field(description="Epoch ms")


class TokenRecord(TokenEntry):
    """A token as the registry keeps it: its entry and when it was last used."""

    last_used_at: int | None = None

    def entry(self) -> TokenEntry:
        """The memo form (without last use: a use changes no memo)."""
        return TokenEntry.model_validate(self.model_dump(exclude={"last_used_at"}))


class TokenRegistryInput(BaseModel):
    """The registry's tokens, carried over when it continues as new, and the history
    length past which it does."""

    tokens: list[TokenRecord] = Field(default_factory=list)
    history_limit: int = TOKEN_HISTORY_LIMIT


class TokenUses(BaseModel):
    """Last use (epoch ms) by token id, as one API replica saw them since its last flush."""

    used: dict[str, int] = Field(default_factory=dict)


class TokenTableMemo(BaseModel):
    """The registry's memo value."""

    tokens: list[TokenEntry] = Field(default_factory=list)
