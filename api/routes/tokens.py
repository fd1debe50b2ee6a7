"""`/api/tokens`: create, list and revoke API tokens (the admin's; docs/security.md)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response, status
from pydantic import BaseModel, ConfigDict, Field

from api.deps import Authorized, TokensDep
from workflows.errors import InvalidField
from workflows.models import TENANT_PATTERN
from workflows.token_models import Role, TokenRecord

router = APIRouter(prefix="/api/tokens", tags=["tokens"], dependencies=[Authorized])


class TokenRequest(BaseModel):
    """A token to create."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100, pattern=r"^[^\x00-\x1f\x7f]+$")
    role: Role
    tenant: str | None = Field(
        default=None, pattern=TENANT_PATTERN, description="Its tenant; none for every tenant"
    )


class TokenView(BaseModel):
    """A token as listed: never its secret."""

    id: str
    name: str
    role: Role
    tenant: str | None
    created_at: int = Field(description="Epoch ms")
    last_used_at: int | None = Field(
        description="Epoch ms; each API replica reports its uses every TOKENS_USE_FLUSH_S"
    )

    @classmethod
    def of(cls, record: TokenRecord) -> TokenView:
        """The listed form of a registry record."""
        return cls.model_validate(record.model_dump(exclude={"hash"}))


class TokenCreated(BaseModel):
    """A new token, its secret shown this once."""

    id: str
    token: str = Field(description="The bearer token; it is not kept, so not shown again")
    name: str
    role: Role
    tenant: str | None
    created_at: int = Field(description="Epoch ms")


@router.post("", status_code=status.HTTP_201_CREATED, response_model=TokenCreated)
async def create_token(body: TokenRequest, tokens: TokensDep) -> TokenCreated:
    """Create a token with a role and, but for an admin, an optional tenant."""
    if body.role == "admin" and body.tenant is not None:
        raise InvalidField("tenant", "an admin token has no tenant (it sees every tenant)")
    record, secret = await tokens.create(body.name, body.role, body.tenant)
    return TokenCreated(
        id=record.id,
        token=secret,
        name=record.name,
        role=record.role,
        tenant=record.tenant,
        created_at=record.created_at,
    )


@router.get("", response_model=list[TokenView])
async def list_tokens(tokens: TokensDep) -> list[TokenView]:
    """Every live token, oldest first, without secrets."""
    return [TokenView.of(record) for record in await tokens.records()]


@router.delete(
    "/{token_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses={404: {"description": "No such token"}},
)
async def revoke_token(
    token_id: Annotated[str, Path(max_length=64)], tokens: TokensDep
) -> Response:
    """Revoke a token: every API replica refuses it within 5 s."""
    await tokens.revoke(token_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
