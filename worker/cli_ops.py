"""`jobforge ops`: operator overrides over the REST client (docs/api.md, Operator
overrides). worker/cli.py registers them on the `jobforge` app."""

from __future__ import annotations

import re
from typing import Annotated

import typer

from worker.cli_common import CliCommand, api_client, fail, sub_app
from worker.hub_client import status_label

ops_app = sub_app("Operator overrides: re-queue, quarantine or cancel any job; delete old ones.")

JobIdArg = Annotated[str, typer.Argument(metavar="ID", help="The job's id.")]
DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_s(text: str) -> float:
    """`90s`, `15m`, `12h`, `7d` (or plain seconds) as seconds."""
    found = DURATION.fullmatch(text.strip())
    if found:
        return float(found.group(1)) * UNITS_S[found.group(2)]
    try:
        return float(text)
    except ValueError:
        fail(f"--older-than: {text!r} is not a duration (like 90s, 15m, 12h, 7d)", code=2)


@ops_app.command("requeue", cls=CliCommand)
def ops_requeue(job_id: JobIdArg) -> None:
    """Re-queue any job under its id: an ended one comes back to pending with its history
    and max_attempts more attempts; a running attempt is ended first."""
    with api_client() as api:
        job = api.ops(job_id, "requeue")
    typer.echo(f"{job_id} {status_label(job)} (attempt {job['attempt']})")


@ops_app.command("fail", cls=CliCommand)
def ops_fail(
    job_id: JobIdArg,
    reason: Annotated[str, typer.Option("--reason", help="Recorded as its fail_reason.")] = (
        "failed by an operator"
    ),
) -> None:
    """Quarantine a job that has not ended, at once."""
    with api_client() as api:
        job = api.ops(job_id, "fail", {"reason": reason})
    typer.echo(f"{job_id} {status_label(job)}")


@ops_app.command("cancel", cls=CliCommand)
def ops_cancel(job_id: JobIdArg) -> None:
    """End a job that has not ended (stopped if it runs, else cancelled)."""
    with api_client() as api:
        job = api.ops(job_id, "cancel")
    typer.echo(f"{job_id} {status_label(job)}")


@ops_app.command("cleanup", cls=CliCommand)
def ops_cleanup(
    older_than: Annotated[
        str, typer.Option("--older-than", metavar="DURATION", help="Like 7d, 12h, 30m.")
    ],
    status: Annotated[
        list[str] | None,
        typer.Option("--status", help="Only these ended statuses (repeatable)."),
    ] = None,
    job_type: Annotated[str | None, typer.Option("--type", help="Only this job type.")] = None,
) -> None:
    """Delete closed jobs older than a duration (at most 1,000 per call)."""
    body = {
        "older_than_s": duration_s(older_than),
        "statuses": status or [],
        "type": job_type,
    }
    with api_client() as api:
        deleted = api.cleanup(body)
    typer.echo(f"deleted {deleted}")
