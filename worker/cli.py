"""`jobforge`: the one console script. Thin Typer commands over the processes (dev stack,
worker, agent, API, cluster setup) and over the REST client (`hub_client`) for jobs and
their scheduling: groups, pools and serial targets (docs/cli.md)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict
from rich.console import Console
from rich.table import Table
from rich.text import Text
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from worker.hub_client import (
    CANCELLED,
    HubClient,
    HubError,
    HubSettings,
    HubUnreachableError,
    status_label,
)
from workflows.models import ListOrder


class _Argument(TyperArgument):
    def display_type_rich(self, ctx: Any) -> str | None:  # noqa: ARG002 - Typer's signature
        return None

    def _usage_display_name(self) -> str:
        return self.display_name_raw if self.required else f"[{self.display_name_raw}]"


class _Option(TyperOption):
    def display_type_rich(self, ctx: Any) -> str | None:  # noqa: ARG002 - Typer's signature
        if self.is_flag or self.count:
            return None
        return self.metavar or (self.name or "value").upper()


def _plain(params: list[Any]) -> list[Any]:
    # Typer labels every value with its Python type (`<str>`, `<bool>` even for --help)
    # and wraps required arguments in braces; show metavars instead.
    for param in params:
        if isinstance(param, TyperArgument) and not isinstance(param, _Argument):
            param.__class__ = _Argument
        elif isinstance(param, TyperOption) and not isinstance(param, _Option):
            param.__class__ = _Option
    return params


class _Command(TyperCommand):
    """A command whose help names values by metavar (`--params JSON`)."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _plain(super().get_params(ctx))


class _Group(TyperGroup):
    """The command group, with the same help style."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _plain(super().get_params(ctx))


# One scheme for every command (docs/cli.md); an error is one line on stderr.
EXIT_CODES = (
    "Exit codes: 0 done; 1 the API refused the request (HTTP 4xx or 5xx: 404 unknown, "
    "409 conflict, 422 a bad value, named) or could not be reached; 2 a bad option, "
    "argument or setting, refused before any call."
)

app = typer.Typer(
    cls=_Group,
    add_completion=False,
    no_args_is_help=True,
    help="jobforge: durable job dispatch on Temporal.",
    epilog=EXIT_CODES,
)
command = app.command


class LogSettings(BaseSettings):
    """Logging of the long-running commands (env LOG_LEVEL)."""

    model_config = SettingsConfigDict(extra="ignore")

    level: str = Field(default="INFO", validation_alias="LOG_LEVEL")


def _exit(code: int) -> NoReturn:
    # Short-lived Temporal clients can crash at interpreter exit (sdk-python#300).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    _exit(code)


@contextlib.contextmanager
def _settings(what: str) -> Iterator[None]:
    """Settings read inside the block; a bad one is one line naming it, exit 2."""
    try:
        yield
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        _fail(f"bad {what} setting: {where}: {first['msg']}", 2)


def _logging() -> None:
    with _settings("logging"):
        level = LogSettings().level.upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


# -- processes ---------------------------------------------------------------------


@command(cls=_Command)
def worker() -> None:
    """Run a native Temporal worker (WORKER_*, SOLVER_*, NODE_ID, TEMPORAL_* env)."""
    from engine.connection import TemporalSettings
    from worker.native import serve
    from worker.settings import SolverSettings, WorkerSettings

    _logging()
    with _settings("worker"):
        settings = (TemporalSettings(), WorkerSettings(), SolverSettings())
    asyncio.run(serve(*settings))
    _exit(0)


@command(cls=_Command)
def agent() -> None:
    """Run an HTTP-only worker (HUB_URL, NODE_ID, FORGE_INGEST_SECRET, WORKER_* env)."""
    from worker.agent import AgentSettings, serve
    from worker.settings import SolverSettings

    _logging()
    with _settings("agent"):
        settings = (AgentSettings(), SolverSettings())
    asyncio.run(serve(*settings))
    _exit(0)


@command(cls=_Command)
def api(
    host: Annotated[str, typer.Option(metavar="HOST", help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(metavar="PORT", help="Port to listen on.")] = 8000,
) -> None:
    """Run the REST API and dashboard (FORGE_INGEST_SECRET, TEMPORAL_* env)."""
    import uvicorn

    _logging()
    # Event streams never end by themselves: without a bound, SIGTERM would wait for
    # every SSE client to leave. After 5 s the remaining requests are cancelled (an
    # agent's claim is handed back; SSE clients resume with Last-Event-ID). The app is
    # named, not imported: worker code never imports the API's modules.
    uvicorn.run(
        "api.main:create_app",
        factory=True,
        host=host,
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=5,
    )
    _exit(0)


@command(cls=_Command)
def setup() -> None:
    """Register jobforge's search attributes on a Temporal cluster (idempotent)."""
    from engine.connection import TemporalSettings
    from worker.cluster_setup import register_search_attributes

    with _settings("Temporal"):
        temporal = TemporalSettings()
    try:
        added = asyncio.run(register_search_attributes(temporal))
    except Exception as err:  # one clear line for the operator
        _fail(f"cannot register search attributes: {err}")
    typer.echo(f"search attributes ready ({', '.join(added) or 'all present already'})")
    _exit(0)


@command(cls=_Command)
def dev(
    api_port: Annotated[int, typer.Option(metavar="PORT", help="REST API port.")] = 8000,
    temporal_port: Annotated[
        int, typer.Option(metavar="PORT", help="Temporal frontend port.")
    ] = 7233,
    ui_port: Annotated[int, typer.Option(metavar="PORT", help="Temporal UI port.")] = 8233,
    data_dir: Annotated[
        Path,
        typer.Option(
            metavar="DIR", help="Where the SQLite file, the solver cache and the secret live."
        ),
    ] = Path(".jobforge"),
) -> None:
    """Start the embedded stack: Temporal dev server, API and one worker.

    Prints the URLs and a dashboard link that signs in by itself.

    The secret is kept in DIR/ingest-secret unless FORGE_INGEST_SECRET is set.
    """
    from worker.dev_stack import DevError, DevOptions, DevStack

    options = DevOptions(api_port, temporal_port, ui_port, data_dir)
    with _settings("dev"):
        stack = DevStack(options)
    try:
        code = stack.run(typer.echo, lambda line: typer.echo(line, err=True))
    except DevError as err:
        _fail(str(err), err.code)
    _exit(code)


# -- jobs, over the REST API -------------------------------------------------------


@contextlib.contextmanager
def _hub(options: Mapping[str, str] | None = None) -> Iterator[HubClient]:
    """A client from HUB_URL and FORGE_INGEST_SECRET; a failed call is one line, exit 1.
    `options` maps the API's field names to the options that set them, for the line."""
    try:
        with _settings("hub"):
            settings = HubSettings()
        with HubClient(settings) as hub:
            yield hub
    except HubError as err:
        option = (options or {}).get(err.field or "")
        _fail(f"{err} (set by {option})" if option else str(err))


JobIdArg = Annotated[str, typer.Argument(metavar="ID", help="The job's id.")]
STATUS_HELP = "pending, assigned, running, completed, failed, cancelled or quarantined"
# The submit options named otherwise than the API's fields they set.
SUBMIT_OPTIONS = {
    "cost_units": "--cost",
    "earliest_start_at": "--start-at",
    "deadline_at": "--deadline",
}
TIME_HELP = "epoch milliseconds or ISO 8601 with a zone (2030-01-02T03:04:05Z)"
EPOCH_MS = re.compile(r"-?\d+")


def _when(value: str | None) -> int | str | None:
    """A time option as the API takes it: digits are epoch ms, the rest goes as sent."""
    if value is None:
        return None
    return int(value) if EPOCH_MS.fullmatch(value.strip()) else value


@command(cls=_Command)
def submit(
    job_type: Annotated[str, typer.Argument(metavar="TYPE", help="Job type.")],
    params: Annotated[str, typer.Option(metavar="JSON", help="Params, a JSON object.")] = "{}",
    priority: Annotated[int, typer.Option(metavar="N", help="Higher runs first.")] = 0,
    max_attempts: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            help="Attempts before it is quarantined (the API's default: 3, or 1 with --target).",
        ),
    ] = None,
    max_runtime_ms: Annotated[
        int, typer.Option(metavar="MS", help="Longest run of one attempt.")
    ] = 300_000,
    solver_url: Annotated[
        str | None, typer.Option(metavar="URL", help="Where workers download the solver.")
    ] = None,
    solver_checksum: Annotated[
        str | None, typer.Option(metavar="SHA256", help="The solver file's sha256 (hex).")
    ] = None,
    idempotency_key: Annotated[
        str | None, typer.Option(metavar="KEY", help="Same key and body: the same job, once.")
    ] = None,
    group: Annotated[
        str | None, typer.Option(metavar="NAME", help="Group: pause, limit, weight together.")
    ] = None,
    pool: Annotated[
        str | None, typer.Option(metavar="NAME", help="Pool whose capacity the job uses.")
    ] = None,
    cost: Annotated[
        int | None,
        typer.Option(metavar="UNITS", help="Pool capacity it uses (the API's default: 1)."),
    ] = None,
    target: Annotated[
        str | None,
        typer.Option(metavar="NAME", help="Serial target, name or tenant/name: one at a time."),
    ] = None,
    start_at: Annotated[
        str | None, typer.Option(metavar="TIME", help=f"Not before: {TIME_HELP}.")
    ] = None,
    deadline: Annotated[
        str | None,
        typer.Option(metavar="TIME", help=f"Fails unless assigned by then: {TIME_HELP}."),
    ] = None,
) -> None:
    """Submit a job (HUB_URL, FORGE_INGEST_SECRET env); prints its id."""
    try:
        parsed = json.loads(params)
    except ValueError as err:
        _fail(f"--params is not JSON: {err}", 2)
    body: dict[str, Any] = {
        "type": job_type,
        "params": parsed,
        "priority": priority,
        "max_runtime_ms": max_runtime_ms,
    }
    if solver_url:
        body["solver_url"] = solver_url
        body["solver_checksum"] = solver_checksum
    # Sent only when given: the API's defaults differ by job (a target's job gets one
    # attempt), and it validates every value, naming the field.
    optional = {
        "max_attempts": max_attempts,
        "group": group,
        "pool": pool,
        "cost_units": cost,
        "target": target,
        "earliest_start_at": _when(start_at),
        "deadline_at": _when(deadline),
    }
    body.update({key: value for key, value in optional.items() if value is not None})
    with _hub(SUBMIT_OPTIONS) as hub:
        typer.echo(hub.submit(body, idempotency_key))
    _exit(0)


@command(cls=_Command)
def get(job_id: JobIdArg) -> None:
    """Print one job as JSON."""
    with _hub() as hub:
        typer.echo(json.dumps(hub.job_json(job_id), indent=2))
    _exit(0)


@command(name="list", cls=_Command)
def list_jobs(
    status: Annotated[str | None, typer.Option(metavar="STATUS", help=STATUS_HELP)] = None,
    job_type: Annotated[
        str | None, typer.Option("--type", metavar="TYPE", help="Job type.")
    ] = None,
    limit: Annotated[int, typer.Option(metavar="N", help="At most this many.")] = 50,
    order: Annotated[
        ListOrder,
        typer.Option(
            metavar="ORDER",
            help="recent: open jobs newest first, then the latest closed; "
            "priority: highest first, then oldest (the claim order).",
        ),
    ] = ListOrder.RECENT,
) -> None:
    """List jobs: id, status, type, priority, attempts."""
    with _hub() as hub:
        for job in hub.jobs(status, job_type, limit, order.value):
            typer.echo(
                f"{job['id']}  {status_label(job):<11} {job['type']:<16} "
                f"p={job['priority']} attempts={job['attempts']}"
            )
    _exit(0)


@command(cls=_Command)
def cancel(job_id: JobIdArg) -> None:
    """Cancel a pending or assigned job."""
    with _hub() as hub:
        hub.cancel(job_id)
    typer.echo(f"cancelled {job_id}")
    _exit(0)


def _time(ms: int | None) -> str:
    if not ms:
        return "—"
    stamp = datetime.fromtimestamp(ms / 1000, tz=UTC).astimezone()
    return stamp.strftime("%Y-%m-%d %H:%M:%S.") + f"{stamp.microsecond // 1000:03d}"


STATUS_STYLES = {
    "pending": "yellow",
    "assigned": "cyan",
    "running": "blue",
    "completed": "green",
    "failed": "red",
    CANCELLED: "magenta",
    "quarantined": "bold red",
}


def _print_fields(console: Console, rows: Iterable[tuple[str, str | Text]]) -> None:
    """`Name         value` lines, the name in bold."""
    for name, value in rows:
        console.print(Text.assemble((f"{name:<13}", "bold"), value), soft_wrap=True)


@command(cls=_Command)
def show(job_id: JobIdArg) -> None:
    """Print a job's detail, its transitions and its fail history."""
    with _hub() as hub:
        job = hub.job(job_id)
    label = status_label(job.model_dump(mode="json"))
    console = Console(highlight=False)
    solver = (
        f"{job.solver_url} (sha256 {job.solver_checksum})"
        if job.solver_url
        else "registered for the type"
    )
    scheduling = (
        ("Group", job.group),
        ("Pool", job.pool and f"{job.pool} (cost {job.cost_units})"),
        ("Target", job.target),
        ("Start at", job.earliest_start_at and _time(job.earliest_start_at)),
        ("Deadline", job.deadline_at and _time(job.deadline_at)),
        ("Waiting for", job.waiting_for and job.waiting_for.value),
    )
    _print_fields(
        console,
        [
            ("Job", job.id),
            ("Type", job.type),
            ("Status", Text(label, style=STATUS_STYLES.get(label, ""))),
            ("Priority", str(job.priority)),
            ("Attempts", f"{job.attempts} / {job.max_attempts}"),
            ("Worker", job.worker_id or "—"),
            ("Fail reason", job.fail_reason or "—"),
            ("Solver", solver),
            ("Created", _time(job.created_at)),
            ("Completed", _time(job.completed_at)),
            ("Params", json.dumps(job.params)),
            ("Result", "—" if job.result is None else json.dumps(job.result)),
            # Scheduling lines only for a job that has them.
            *((name, value) for name, value in scheduling if value),
        ],
    )
    transitions = Table("#", "When", "Status", "Attempt", "Worker", "Reason", title="Transitions")
    for t in job.transitions:
        transitions.add_row(
            str(t.seq),
            _time(t.ts),
            t.status.value,
            str(t.attempt),
            t.worker_id or "—",
            t.reason or "",
        )
    console.print(transitions)
    if job.fail_history:
        failures = Table("When", "Worker", "Reason", title="Fail history")
        for f in job.fail_history:
            failures.add_row(_time(f.ts), f.worker_id or "—", str(f.reason))
        console.print(failures)
    else:
        console.print("Fail history: none")
    if job.log_tail:
        console.print("Log tail:", Text(job.log_tail), sep="\n")
    _exit(0)


def _event_line(name: str, event: dict[str, Any]) -> Text:
    label = status_label({"status": event.get("status"), "fail_reason": event.get("reason")})
    line = Text(f"{_time(event.get('ts'))}  {name:<16} {event.get('id')}  {event.get('type')}  ")
    line.append(f"{label:<11}", style=STATUS_STYLES.get(label, ""))
    line.append(f" attempts={event.get('attempts')} worker={event.get('worker_id') or '—'}")
    if event.get("reason"):
        line.append(f"  {event['reason']}")
    return line


@command(cls=_Command)
def watch(
    status: Annotated[
        list[str] | None,
        typer.Option(metavar="STATUS", help=f"Only this status (repeatable): {STATUS_HELP}."),
    ] = None,
    job_type: Annotated[
        list[str] | None,
        typer.Option("--type", metavar="TYPE", help="Only this job type (repeatable)."),
    ] = None,
) -> None:
    """Follow job events live (GET /api/jobs/events) until Ctrl-C."""
    wanted = set(status or [])
    # The stream filters by the API's statuses; `cancelled` is a failed job's reason.
    asked = sorted({"failed" if s == CANCELLED else s for s in wanted})
    out = Console(highlight=False, soft_wrap=True)
    note = Console(stderr=True, highlight=False, soft_wrap=True)
    last_id: str | None = None
    opened = False

    def on_open() -> None:
        nonlocal opened
        if not opened:
            note.print(f"watching {settings.base_url}/api/jobs/events (Ctrl-C stops)")
        opened = True

    try:
        with _settings("hub"):
            settings = HubSettings()
        with HubClient(settings, require_secret=False) as hub:
            while True:
                try:
                    for name, event_id, event in hub.events(
                        asked, job_type or [], last_id, on_open
                    ):
                        last_id = event_id or last_id
                        if (
                            not wanted
                            or status_label(
                                {"status": event.get("status"), "fail_reason": event.get("reason")}
                            )
                            in wanted
                        ):
                            out.print(_event_line(name, event))
                    problem = "the stream ended"
                except HubUnreachableError as err:
                    if not opened:
                        raise
                    problem = str(err)
                note.print(f"{problem}; reconnecting…")
                time.sleep(1)  # back off before reconnecting, then resume from last_id
    except HubError as err:
        _fail(str(err))
    except KeyboardInterrupt:
        _exit(0)


# -- scheduling: groups, pools, serial targets (docs/cli.md) ----------------------


def _sub_app(name: str, help_text: str) -> typer.Typer:
    sub = typer.Typer(cls=_Group, no_args_is_help=True, help=help_text, epilog=EXIT_CODES)
    app.add_typer(sub, name=name)
    return sub


group_app = _sub_app("group", "Groups: pause, resume, limit and weigh jobs together.")
pool_app = _sub_app("pool", "Pools: the capacity their jobs' cost units share.")
target_app = _sub_app("target", "Serial targets: one job at a time; a failure halts them.")

GroupArg = Annotated[str, typer.Argument(metavar="NAME", help="The group.")]
PoolArg = Annotated[str, typer.Argument(metavar="NAME", help="The pool.")]
TargetArg = Annotated[str, typer.Argument(metavar="NAME", help="The target (tenant/name too).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the API's object as JSON.")]
# Counts in the order a job passes through the statuses.
STATUS_ORDER = ("pending", "assigned", "running", "completed", "failed", "quarantined")


def _counts(counts: Mapping[str, int]) -> str:
    known = [s for s in STATUS_ORDER if counts.get(s)]
    rest = sorted(s for s in counts if s not in STATUS_ORDER and counts[s])
    return ", ".join(f"{s} {counts[s]}" for s in (*known, *rest)) or "no jobs"


def _limit(group: Mapping[str, Any]) -> str:
    limit = group.get("max_parallel")
    return "none" if limit is None else str(limit)


def _show(obj: Mapping[str, Any], as_json: bool, rows: Iterable[tuple[str, str | Text]]) -> None:
    if as_json:
        typer.echo(json.dumps(obj, indent=2))
    else:
        _print_fields(Console(highlight=False), rows)
    _exit(0)


def _group_line(group: Mapping[str, Any]) -> str:
    state = "paused" if group.get("paused") else "active"
    return (
        f"{group['group']}  {state:<6} max_parallel={_limit(group)} "
        f"weight={group.get('weight', 1):g}  {_counts(group.get('counts') or {})}"
    )


@group_app.command("list", cls=_Command)
def group_list() -> None:
    """List groups: name, paused or active, limit, weight, job counts."""
    with _hub() as hub:
        for group in hub.groups():
            typer.echo(_group_line(group))
    _exit(0)


@group_app.command("show", cls=_Command)
def group_show(name: GroupArg, as_json: JsonOpt = False) -> None:
    """Print a group: paused, its limit of running jobs, its weight, its job counts."""
    with _hub() as hub:
        group = hub.group(name)
    paused = bool(group.get("paused"))
    _show(
        group,
        as_json,
        [
            ("Group", str(group["group"])),
            ("Paused", Text("yes", style="yellow") if paused else "no"),
            ("Max parallel", _limit(group)),
            ("Weight", f"{group.get('weight', 1):g}"),
            ("Jobs", _counts(group.get("counts") or {})),
        ],
    )


@group_app.command("pause", cls=_Command)
def group_pause(name: GroupArg) -> None:
    """Pause a group: none of its jobs is assigned until it resumes.

    Running jobs finish; assigned ones not yet claimed go back to waiting.
    """
    with _hub() as hub:
        hub.pause_group(name)
    typer.echo(f"paused group {name}")
    _exit(0)


@group_app.command("resume", cls=_Command)
def group_resume(name: GroupArg) -> None:
    """Resume a paused group."""
    with _hub() as hub:
        hub.pause_group(name, paused=False)
    typer.echo(f"resumed group {name}")
    _exit(0)


@group_app.command("set", cls=_Command)
def group_set(
    name: GroupArg,
    max_parallel: Annotated[
        int | None, typer.Option(metavar="N", help="At most N of its jobs run at once.")
    ] = None,
    no_max_parallel: Annotated[
        bool, typer.Option("--no-max-parallel", help="Lift the limit of running jobs.")
    ] = False,
    weight: Annotated[
        float | None, typer.Option(metavar="W", help="Share of the workers against other groups.")
    ] = None,
) -> None:
    """Change a group's limit of running jobs and/or its weight; prints the group."""
    if max_parallel is not None and no_max_parallel:
        _fail("give --max-parallel N or --no-max-parallel, not both", 2)
    patch: dict[str, Any] = {} if max_parallel is None else {"max_parallel": max_parallel}
    if no_max_parallel:
        patch["max_parallel"] = None
    if weight is not None:
        patch["weight"] = weight
    if not patch:
        _fail("nothing to set: give --max-parallel N, --no-max-parallel or --weight W", 2)
    with _hub() as hub:
        typer.echo(_group_line(hub.configure_group(name, patch)))
    _exit(0)


@group_app.command("retry-failed", cls=_Command)
def group_retry_failed(name: GroupArg) -> None:
    """Queue a group's quarantined jobs again; prints `requeued ID` for each."""
    with _hub() as hub:
        requeued = hub.retry_failed(name)
    for job_id in requeued:
        typer.echo(f"requeued {job_id}")
    if not requeued:
        typer.echo(f"group {name}: no failed jobs to requeue")
    _exit(0)


@group_app.command("cancel", cls=_Command)
def group_cancel(name: GroupArg) -> None:
    """Cancel a group's pending and assigned jobs; prints `cancelled ID` for each."""
    with _hub() as hub:
        cancelled = hub.cancel_group(name)
    for job_id in cancelled:
        typer.echo(f"cancelled {job_id}")
    if not cancelled:
        typer.echo(f"group {name}: no jobs to cancel")
    _exit(0)


def _pool_line(pool: Mapping[str, Any]) -> str:
    return (
        f"{pool['pool']}  capacity={pool['capacity']} in_use={pool['in_use']} "
        f"pending={pool['pending']} running={pool['running']}"
    )


@pool_app.command("list", cls=_Command)
def pool_list() -> None:
    """List pools: name, capacity, cost units in use, pending and running jobs."""
    with _hub() as hub:
        for pool in hub.pools():
            typer.echo(_pool_line(pool))
    _exit(0)


@pool_app.command("show", cls=_Command)
def pool_show(name: PoolArg, as_json: JsonOpt = False) -> None:
    """Print a pool: its capacity, the cost units in use, its pending and running jobs."""
    with _hub() as hub:
        pool = hub.pool(name)
    _show(
        pool,
        as_json,
        [
            ("Pool", str(pool["pool"])),
            ("Capacity", str(pool["capacity"])),
            ("In use", str(pool["in_use"])),
            ("Pending", str(pool["pending"])),
            ("Running", str(pool["running"])),
        ],
    )


@pool_app.command("set", cls=_Command)
def pool_set(
    name: PoolArg,
    capacity: Annotated[
        int, typer.Option(metavar="N", help="Cost units its running jobs may use at once.")
    ],
) -> None:
    """Set a pool's capacity; prints the pool."""
    with _hub() as hub:
        typer.echo(_pool_line(hub.set_pool_capacity(name, capacity)))
    _exit(0)


@target_app.command("show", cls=_Command)
def target_show(name: TargetArg, as_json: JsonOpt = False) -> None:
    """Print a target: halted or not (and by which job), its running and pending jobs."""
    with _hub() as hub:
        target = hub.target(name)
    halted: str | Text = "no"
    if target.get("halted"):
        halted = Text(f"yes, by {target.get('halted_by') or '—'}", style="bold red")
    _show(
        target,
        as_json,
        [
            ("Target", str(target["target"])),
            ("Halted", halted),
            ("Running", str(target["running"])),
            ("Pending", str(target["pending"])),
        ],
    )


@target_app.command("resume", cls=_Command)
def target_resume(
    name: TargetArg,
    skip: Annotated[
        bool, typer.Option("--skip", help="Skip the job that halted it instead of retrying it.")
    ] = False,
) -> None:
    """Resume a halted target: its halting job runs again first (or is skipped)."""
    with _hub() as hub:
        # Read first: the answer to a retry still names the halting job (the halt lifts
        # once that job asks again), so only this says whether there was one.
        halted_by = hub.target(name).get("halted_by")
        try:
            hub.resume_target(name, "skip" if skip else "retry")
        except HubError as err:
            if err.status == 409 and not skip:  # the halting job can no longer run again
                _fail(f"{err} (jobforge target resume {name} --skip)")
            raise
    if halted_by is None:
        typer.echo(f"target {name} was not halted")
    else:
        typer.echo(f"resumed target {name}, {'skipping' if skip else 'retrying'} {halted_by}")
    _exit(0)


def main() -> None:
    """Console script entry point."""
    app()


if __name__ == "__main__":
    main()
