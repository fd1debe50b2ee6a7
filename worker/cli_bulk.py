"""`jobforge bulk cancel|stop|requeue`: act on every job a filter matches
(`POST /api/jobs/bulk`, docs/cli.md "Bulk actions"). It asks first, with the count the
filter matches now, unless `--yes`; then it follows the operation to its end unless
`--no-wait`."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from worker.cli_common import (
    CliCommand,
    api_client,
    exit_with,
    fail,
    print_json,
    sub_app,
)

bulk_app = sub_app("Cancel, stop or re-queue every job a filter matches.")

# The API's fields and the options that set them, for an error's line.
OPTIONS = {
    "filter": "--status/--type/--group/--pool/--target/--tenant/--worker",
    **{name: f"--{name}" for name in ("status", "type", "group", "pool", "target", "tenant")},
    "worker": "--worker",
}
POLL_S = 0.5

Status = Annotated[str | None, typer.Option("--status", help="A status, or cancelled.")]
Type = Annotated[str | None, typer.Option("--type", help="A job type.")]
Group = Annotated[str | None, typer.Option("--group", help="A group.")]
Pool = Annotated[str | None, typer.Option("--pool", help="A pool.")]
Target = Annotated[str | None, typer.Option("--target", help="A serial target.")]
Tenant = Annotated[str | None, typer.Option("--tenant", help="A tenant (an admin's).")]
Worker = Annotated[str | None, typer.Option("--worker", help="The worker of its attempt.")]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]
NoWait = Annotated[bool, typer.Option("--no-wait", help="Print the operation id and return.")]
Json = Annotated[bool, typer.Option("--json", help="Print the final progress as JSON.")]


def _run(action: str, filter: dict[str, Any], yes: bool, no_wait: bool, json: bool) -> None:
    chosen = {key: value for key, value in filter.items() if value is not None}
    if not chosen:
        fail("name at least one filter (--status, --type, …): none would reach every job", 2)
    with api_client(OPTIONS) as api:
        if not yes:
            count = api.call("POST", "/api/jobs/bulk/count", json={"filter": chosen}).json()
            named = ", ".join(f"{key}={value}" for key, value in chosen.items())
            if not typer.confirm(f"{action} {count['matched']} jobs ({named})?"):
                typer.echo("nothing done", err=True)
                exit_with(1)
        body = {"filter": chosen, "action": action}
        op_id = api.call("POST", "/api/jobs/bulk", json=body).json()["id"]
        if no_wait:
            typer.echo(op_id)
            return
        while True:
            progress: dict[str, Any] = api.call("GET", f"/api/jobs/bulk/{op_id}").json()
            if progress["state"] == "done":
                break
            time.sleep(POLL_S)  # a poll interval: the operation runs in the API
    if json:
        print_json(progress)
        return
    typer.echo(
        f"{op_id}: {action} matched {progress['matched']}, done {progress['done']}, "
        f"failed {progress['failed']}"
    )
    for error in progress["errors"]:
        typer.echo(f"  {error['id']}: {error['error']}", err=True)


def _command(action: str, summary: str) -> None:
    @bulk_app.command(action, cls=CliCommand, help=summary)
    def command(
        status: Status = None,
        type: Type = None,
        group: Group = None,
        pool: Pool = None,
        target: Target = None,
        tenant: Tenant = None,
        worker: Worker = None,
        yes: Yes = False,
        no_wait: NoWait = False,
        json: Json = False,
    ) -> None:
        filter = {
            "status": status,
            "type": type,
            "group": group,
            "pool": pool,
            "target": target,
            "tenant": tenant,
            "worker": worker,
        }
        _run(action, filter, yes, no_wait, json)


_command("cancel", "Cancel every matching job (each as `jobforge cancel`).")
_command("stop", "Stop every matching job (each as `jobforge stop`).")
_command("requeue", "Re-queue every matching job (each as `jobforge ops requeue`; admin).")
