"""`jobforge token`: create, list and revoke API tokens over the REST client
(docs/security.md). worker/cli.py registers them on the `jobforge` app."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import typer

from worker.cli_common import (
    CliCommand,
    JsonOpt,
    api_client,
    exit_with,
    print_json,
    sub_app,
)
from workflows.token_models import ROLES, Role

token_app = sub_app(
    "API tokens: each has a role (admin, producer, worker, reader) and maybe a tenant."
)


def _when(ms: int | None) -> str:
    if ms is None:
        return "never"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@token_app.command("create", cls=CliCommand)
def token_create(
    role: Annotated[Role, typer.Option(metavar="ROLE", help=f"One of {', '.join(ROLES)}.")],
    tenant: Annotated[
        str | None, typer.Option(metavar="NAME", help="Its tenant (none: every tenant).")
    ] = None,
    name: Annotated[
        str | None, typer.Option(metavar="NAME", help="What it is for (default: ROLE@TENANT).")
    ] = None,
) -> None:
    """Create a token and print it on stdout, this once: it is not kept, only its hash.
    Use it as FORGE_INGEST_SECRET (or `Authorization: Bearer`)."""
    label = name or (f"{role}@{tenant}" if tenant else role)
    with api_client({"name": "--name", "role": "--role", "tenant": "--tenant"}) as api:
        created = api.create_token(label, role, tenant)
    typer.echo(
        f"token {created['id']} ({created['role']}, tenant {created['tenant'] or 'none'}): "
        "shown this once, keep it now",
        err=True,
    )
    typer.echo(created["token"])


@token_app.command("list", cls=CliCommand)
def token_list(as_json: JsonOpt = False) -> None:
    """List tokens: id, role, tenant, name, created, last used (never a secret)."""
    with api_client() as api:
        tokens = api.tokens()
    if as_json:
        print_json(tokens)
        exit_with(0)
    for token in tokens:
        typer.echo(
            f"{token['id']}  {token['role']:<8} {token['tenant'] or '-':<16} "
            f"{token['name']}  created {_when(token['created_at'])}  "
            f"last used {_when(token['last_used_at'])}"
        )


@token_app.command("revoke", cls=CliCommand)
def token_revoke(
    token_id: Annotated[str, typer.Argument(metavar="ID", help="The token's id.")],
) -> None:
    """Revoke a token: every API replica refuses it within 5 s."""
    with api_client() as api:
        api.revoke_token(token_id)
    typer.echo(f"revoked {token_id}")
