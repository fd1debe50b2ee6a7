"""`jobforge schedule`: recurring jobs (docs/cli.md, "Schedules"), thin Typer commands
over `/api/schedules`. worker/cli.py registers them on the `jobforge` app."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import quote

import typer
from rich.console import Console
from rich.text import Text

from worker.cli_common import (
    CliCommand,
    api_client,
    exit_with,
    fail,
    print_fields,
    sub_app,
)

schedule_app = sub_app("Schedules: a job fired by cron or interval, on Temporal Schedules.")

IdArg = Annotated[str, typer.Argument(metavar="ID", help="The schedule.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the API's object as JSON.")]
OVERLAPS = "skip, buffer_one, buffer_all, cancel_other, terminate_other, allow_all"
# The API's fields and the options that set them, for an error's line.
OPTIONS = {
    "id": "ID",
    "cron": "--cron",
    "interval": "--every",
    "overlap": "--overlap",
    "catchup_window_s": "--catchup-window",
    "note": "--note",
    "start": "--start",
    "end": "--end",
}
EPOCH_MS = re.compile(r"\d+")


def _path(schedule_id: str, *action: str) -> str:
    return "/".join(("/api/schedules", quote(schedule_id, safe=""), *action))


def _time(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _when(schedule: Mapping[str, Any]) -> str:
    if schedule.get("cron") is not None:
        return f"cron '{schedule['cron']}'"
    return f"every {schedule['interval']} s"


def _line(schedule: Mapping[str, Any]) -> str:
    state = "paused" if schedule["paused"] else "active"
    upcoming = schedule.get("next_firings") or []
    recent = schedule.get("recent") or []
    last = recent[-1] if recent else None
    return (
        f"{schedule['id']}  {state:<6} {_when(schedule)}  {schedule['job']['type']}  "
        f"next {_time(upcoming[0] if upcoming else None)}  "
        f"last {last['job_id'] + ' ' + (last['status'] or '?') if last else '-'}"
    )


def _job(text: str) -> dict[str, Any]:
    try:
        job = json.loads(text)
    except ValueError as err:
        fail(f"--job is not JSON: {err}", 2)
    if not isinstance(job, dict):
        fail("--job is not a JSON object (a job spec, as `POST /api/jobs` takes)", 2)
    return job


def _given(job: Mapping[str, Any]) -> dict[str, Any]:
    """A job spec without its empty fields (null, false, {}): what was given, mostly."""
    return {key: value for key, value in job.items() if value not in (None, False, {})}


def _at(value: str) -> int | str:
    return int(value) if EPOCH_MS.fullmatch(value.strip()) else value


@schedule_app.command("create", cls=CliCommand)
def schedule_create(
    schedule_id: IdArg,
    job: Annotated[
        str, typer.Option(metavar="JSON", help="The job spec, as `POST /api/jobs` takes it.")
    ],
    cron: Annotated[
        str | None, typer.Option(metavar="EXPR", help="Cron expression, UTC ('0 3 * * *').")
    ] = None,
    every: Annotated[int | None, typer.Option(metavar="S", help="Fire every S seconds.")] = None,
    overlap: Annotated[
        str, typer.Option(metavar="POLICY", help=f"While the last job is open: {OVERLAPS}.")
    ] = "skip",
    catchup_window: Annotated[
        int | None,
        typer.Option(
            metavar="S", help="Run a firing missed while Temporal was down up to S s late."
        ),
    ] = None,
    paused: Annotated[bool, typer.Option("--paused", help="Make it paused.")] = False,
    note: Annotated[str | None, typer.Option(metavar="TEXT", help="A note kept with it.")] = None,
) -> None:
    """Make a schedule: give --cron or --every; prints its line."""
    if (cron is None) == (every is None):
        fail("give --cron EXPR or --every S (one of them)", 2)
    body: dict[str, Any] = {
        "id": schedule_id,
        "job": _job(job),
        "overlap": overlap,
        "paused": paused,
        **({"cron": cron} if cron is not None else {"interval": every}),
    }
    if catchup_window is not None:
        body["catchup_window_s"] = catchup_window
    if note is not None:
        body["note"] = note
    with api_client(OPTIONS) as api:
        typer.echo(_line(api.call("POST", "/api/schedules", json=body).json()))


@schedule_app.command("list", cls=CliCommand)
def schedule_list(as_json: JsonOpt = False) -> None:
    """List schedules: id, paused or active, when, job type, next firing, last job."""
    with api_client() as api:
        schedules = api.call("GET", "/api/schedules").json()
    if as_json:
        typer.echo(json.dumps(schedules, indent=2))
    else:
        for schedule in schedules:
            typer.echo(_line(schedule))


@schedule_app.command("show", cls=CliCommand)
def schedule_show(schedule_id: IdArg, as_json: JsonOpt = False) -> None:
    """Print a schedule: when, overlap, paused, next firings, its latest jobs."""
    with api_client() as api:
        schedule = api.call("GET", _path(schedule_id)).json()
    if as_json:
        typer.echo(json.dumps(schedule, indent=2))
        exit_with(0)
    recent = [
        f"{firing['job_id']} {firing['status'] or '?'}" for firing in schedule.get("recent") or []
    ]
    window = schedule.get("catchup_window_s")
    print_fields(
        Console(highlight=False),
        [
            ("Schedule", str(schedule["id"])),
            ("When", _when(schedule)),
            ("Paused", Text("yes", style="yellow") if schedule["paused"] else "no"),
            ("Overlap", str(schedule["overlap"])),
            ("Catch-up", "default (1 year)" if window is None else f"{window} s"),
            ("Job", json.dumps(_given(schedule["job"]), separators=(",", ":"))),
            ("Next", ", ".join(_time(ms) for ms in schedule["next_firings"][:3]) or "-"),
            ("Fired", f"{schedule['fired']} (skipped {schedule['skipped_overlap']})"),
            ("Recent", "; ".join(recent[-5:]) or "-"),
            ("Note", str(schedule.get("note") or "-")),
        ],
    )


def _action(schedule_id: str, action: str, said: str, body: dict[str, Any] | None = None) -> None:
    with api_client(OPTIONS) as api:
        schedule = api.call("POST", _path(schedule_id, action), json=body).json()
    typer.echo(f"{said} schedule {schedule_id}: {_line(schedule)}")


@schedule_app.command("pause", cls=CliCommand)
def schedule_pause(schedule_id: IdArg) -> None:
    """Pause a schedule: nothing fires until it resumes."""
    _action(schedule_id, "pause", "paused")


@schedule_app.command("resume", cls=CliCommand)
def schedule_resume(schedule_id: IdArg) -> None:
    """Resume a paused schedule (times passed while paused do not fire)."""
    _action(schedule_id, "resume", "resumed")


@schedule_app.command("trigger", cls=CliCommand)
def schedule_trigger(schedule_id: IdArg) -> None:
    """Fire once now, under the schedule's overlap policy."""
    _action(schedule_id, "trigger", "triggered")


@schedule_app.command("backfill", cls=CliCommand)
def schedule_backfill(
    schedule_id: IdArg,
    start: Annotated[str, typer.Option(metavar="TIME", help="Epoch ms or ISO 8601 with a zone.")],
    end: Annotated[str, typer.Option(metavar="TIME", help="Epoch ms or ISO 8601 with a zone.")],
    overlap: Annotated[
        str | None, typer.Option(metavar="POLICY", help="Overrides the schedule's for these.")
    ] = None,
) -> None:
    """Fire every time of the schedule from --start to --end (both included), now."""
    body: dict[str, Any] = {"start": _at(start), "end": _at(end)}
    if overlap is not None:
        body["overlap"] = overlap
    _action(schedule_id, "backfill", "backfilled", body)


@schedule_app.command("delete", cls=CliCommand)
def schedule_delete(schedule_id: IdArg) -> None:
    """Delete a schedule; the jobs it fired stay."""
    with api_client() as api:
        api.call("DELETE", _path(schedule_id))
    typer.echo(f"deleted schedule {schedule_id}")
