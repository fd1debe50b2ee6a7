"""`jobforge`: the one console script. Thin Typer commands over the processes (dev stack,
worker, agent, API, cluster setup) and over the REST client (`hub_client`) for jobs; the
scheduling sub-commands (groups, pools, serial targets) live in worker/cli_scheduling.py,
what both share in worker/cli_common.py (docs/cli.md)."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
import time
from datetime import UTC, datetime
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from dotenv import load_dotenv
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from rich.console import Console
from rich.table import Table
from rich.text import Text

from worker.cli_batch import BATCH_MAX, submit_lines
from worker.cli_bulk import bulk_app
from worker.cli_common import (
    EXIT_CODES,
    CliCommand,
    CliGroup,
    JsonOpt,
    api_client,
    exit_process,
    exit_with,
    fail,
    interruptible,
    print_fields,
    print_json,
    settings_or_exit,
)
from worker.cli_fleet import workers
from worker.cli_ops import ops_app
from worker.cli_schedules import schedule_app, schedule_list
from worker.cli_scheduling import (
    group_app,
    group_list,
    pool_app,
    pool_list,
    target_app,
    target_list,
)
from worker.cli_tokens import token_app
from worker.hub_client import (
    HubClient,
    HubError,
    HubSettings,
    HubUnreachableError,
    status_label,
)
from workflows.errors import ErrorType
from workflows.job_states import CANCELLED, COUNT_KINDS
from workflows.models import Job, ListOrder, Progress

app = typer.Typer(
    cls=CliGroup,
    # `jobforge --install-completion` (bash, zsh, fish, PowerShell); docs/cli.md.
    add_completion=True,
    no_args_is_help=True,
    help="jobforge: durable job dispatch on Temporal.",
    epilog=EXIT_CODES,
)
command = app.command


def _version(asked: bool) -> None:
    if asked:
        typer.echo(f"jobforge {package_version('jobforge')}")
        exit_with(0)


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_version, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    pass


# How long the API keeps an idle connection open (API_KEEPALIVE_S), as common proxies
# do: well above the expiry of its clients' pools (ours: hub_client.KEEPALIVE_EXPIRY_S),
# so a client always drops an idle connection before the API closes it under a request.
API_KEEPALIVE_S = 75


class LoggingSettings(BaseSettings):
    """Logging of the long-running commands (env LOG_LEVEL)."""

    model_config = SettingsConfigDict(extra="ignore")

    level: str = Field(default="INFO", validation_alias="LOG_LEVEL")


def _logging() -> None:
    with settings_or_exit("logging"):
        level = LoggingSettings().level.upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


# -- processes ---------------------------------------------------------------------


@command(cls=CliCommand)
def worker() -> None:
    """Run a native Temporal worker (WORKER_*, SOLVER_*, CONTAINER_*, NODE_ID, TEMPORAL_*
    env)."""
    from engine.connection import TemporalSettings
    from worker.native import serve
    from worker.settings import ContainerSettings, SolverSettings, WorkerSettings

    _logging()
    with settings_or_exit("worker"):
        settings = (TemporalSettings(), WorkerSettings(), SolverSettings(), ContainerSettings())
    asyncio.run(serve(*settings))
    exit_process(0)


@command(cls=CliCommand)
def agent(
    env_file: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            exists=True,
            dir_okay=False,
            help="Read settings from this file too (docs/agent.env.example); the environment wins.",
        ),
    ] = None,
) -> None:
    """Run an HTTP-only worker (HUB_URL, NODE_ID, FORGE_INGEST_SECRET, WORKER_*,
    CONTAINER_* env)."""
    from worker.agent import AgentSettings, serve
    from worker.settings import ContainerSettings, SolverSettings

    _logging()
    if env_file is not None:
        load_dotenv(env_file, override=False)
    with settings_or_exit("agent"):
        settings = (AgentSettings(), SolverSettings(), ContainerSettings())
    asyncio.run(serve(*settings))
    exit_process(0)


@command(cls=CliCommand)
def api(
    host: Annotated[
        str, typer.Option(metavar="HOST", envvar="API_HOST", help="Interface to bind.")
    ] = "127.0.0.1",
    port: Annotated[
        int,
        typer.Option(
            metavar="PORT",
            envvar="PORT",
            min=1,
            max=65535,
            help="Port to listen on (a PaaS sets PORT).",
        ),
    ] = 8000,
    keepalive: Annotated[
        int,
        typer.Option(
            "--keepalive-s",
            metavar="SECONDS",
            envvar="API_KEEPALIVE_S",
            min=1,
            help="How long an idle connection is kept open (above every client's expiry).",
        ),
    ] = API_KEEPALIVE_S,
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
        timeout_keep_alive=keepalive,
    )
    exit_process(0)


@command(cls=CliCommand)
def setup() -> None:
    """Register jobforge's search attributes on a Temporal cluster (idempotent)."""
    from engine.connection import TemporalSettings
    from worker.cluster_setup import register_search_attributes

    with settings_or_exit("Temporal"):
        temporal = TemporalSettings()
    try:
        added = asyncio.run(register_search_attributes(temporal))
    except Exception as err:  # one clear line for the operator
        fail(f"cannot register search attributes: {err}", process=True)
    typer.echo(f"search attributes ready ({', '.join(added) or 'all present already'})")
    exit_process(0)


@command(cls=CliCommand)
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
    with settings_or_exit("dev"):
        stack = DevStack(options)
    try:
        code = stack.run(typer.echo, lambda line: typer.echo(line, err=True))
    except DevError as err:
        fail(str(err), err.code, process=True)
    exit_process(code)


# -- jobs, over the REST API -------------------------------------------------------


JobIdArg = Annotated[str, typer.Argument(metavar="ID", help="The job's id.")]
# What the counts name: a status, or `cancelled` (a failed job's own kind).
STATUS_HELP = f"{', '.join(COUNT_KINDS[:-1])} or {COUNT_KINDS[-1]}"
# The submit options named otherwise than the API's fields they set.
SUBMIT_OPTIONS = {
    "cost_units": "--cost",
    "earliest_start_at": "--start-at",
    "deadline_at": "--deadline",
    "require_host_wait_ms": "--host-wait-ms",
    "preferred_host_wait_ms": "--host-wait-ms",
}
TIME_HELP = "epoch milliseconds or ISO 8601 with a zone (2030-01-02T03:04:05Z)"
EPOCH_MS = re.compile(r"-?\d+")


def _when(value: str | None) -> int | str | None:
    """A time option as the API takes it: digits are epoch ms, the rest goes as sent."""
    if value is None:
        return None
    return int(value) if EPOCH_MS.fullmatch(value.strip()) else value


@command(cls=CliCommand)
def submit(
    ctx: typer.Context,
    job_type: Annotated[
        str | None, typer.Argument(metavar="TYPE", help="Job type (not with --from-file).")
    ] = None,
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
    require_host: Annotated[
        str | None, typer.Option(metavar="HOST", help="Only this host (worker id or node).")
    ] = None,
    preferred_host: Annotated[
        str | None, typer.Option(metavar="HOST", help="This host first, then any.")
    ] = None,
    host_wait_ms: Annotated[
        int | None,
        typer.Option(
            metavar="MS",
            help="How long the host has to take it (API default: 3600000 required, "
            "30000 preferred).",
        ),
    ] = None,
    from_file: Annotated[
        str | None,
        typer.Option(
            metavar="PATH",
            help="Submit the job specs of a JSON Lines file instead, one per line (- for "
            "stdin), in batches; prints each job's id.",
        ),
    ] = None,
    batch_size: Annotated[
        int,
        typer.Option(metavar="N", min=1, max=BATCH_MAX, help="Lines sent per request."),
    ] = BATCH_MAX,
) -> None:
    """Submit a job (HUB_URL, FORGE_INGEST_SECRET env); prints its id. With --from-file,
    many: exit 1 if any line failed (each named by its line number and field)."""
    if from_file is not None:
        _submit_file(ctx, from_file, batch_size)
    if job_type is None:
        fail("give a job TYPE, or --from-file PATH", 2)
    try:
        parsed = json.loads(params)
    except ValueError as err:
        fail(f"--params is not JSON: {err}", 2)
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
        "require_host": require_host,
        "preferred_host": preferred_host,
    }
    if host_wait_ms is not None:
        optional["preferred_host_wait_ms" if preferred_host else "require_host_wait_ms"] = (
            host_wait_ms
        )
    body.update({key: value for key, value in optional.items() if value is not None})
    with api_client(SUBMIT_OPTIONS) as api:
        typer.echo(api.submit(body, idempotency_key))


def _submit_file(ctx: typer.Context, path: str, batch_size: int) -> NoReturn:
    """`submit --from-file`: every line of the file (or stdin) in batches."""
    # Options left at their defaults say nothing; any other would be silently unused.
    given = [
        "TYPE" if param.name == "job_type" else param.opts[0]
        for param in ctx.command.params
        if param.name not in ("from_file", "batch_size")
        and ctx.params.get(param.name or "") != param.default
    ]
    if given:
        fail(f"--from-file takes every field from the file: drop {', '.join(given)}", 2)
    try:
        source = sys.stdin if path == "-" else Path(path).open(encoding="utf-8")  # noqa: SIM115
    except OSError as err:
        fail(f"--from-file: {err}", 2)
    total = None
    if source is not sys.stdin:
        with Path(path).open(encoding="utf-8") as counted:
            total = sum(1 for line in counted if line.strip())
    with api_client() as api, source:
        tally = submit_lines(api, source, batch_size, total)
    typer.echo(tally.summary(), err=True)
    exit_with(1 if tally.failed else 0)


@command(cls=CliCommand)
def get(job_id: JobIdArg) -> None:
    """Print one job as JSON."""
    with api_client() as api:
        typer.echo(json.dumps(api.job_json(job_id), indent=2))


# The `list` options named otherwise than the API's fields they set.
LIST_OPTIONS = {"X-Tenant": "--tenant"}


@command(name="list", cls=CliCommand)
def list_jobs(
    status: Annotated[str | None, typer.Option(metavar="STATUS", help=STATUS_HELP)] = None,
    job_type: Annotated[
        str | None, typer.Option("--type", metavar="TYPE", help="Job type.")
    ] = None,
    group: Annotated[str | None, typer.Option(metavar="NAME", help="Its group.")] = None,
    pool: Annotated[str | None, typer.Option(metavar="NAME", help="Its pool.")] = None,
    target: Annotated[
        str | None, typer.Option(metavar="NAME", help="Its serial target (tenant/name too).")
    ] = None,
    tenant: Annotated[
        str | None,
        typer.Option(metavar="NAME", help="Its tenant (an admin's token; sent as X-Tenant)."),
    ] = None,
    worker_id: Annotated[
        str | None,
        typer.Option("--worker", metavar="ID", help="The worker of its current or last attempt."),
    ] = None,
    limit: Annotated[int, typer.Option(metavar="N", min=1, help="At most this many.")] = 50,
    order: Annotated[
        ListOrder,
        typer.Option(
            metavar="ORDER",
            help="recent: open jobs newest first, then the latest closed; "
            "priority: highest first, then oldest (the claim order).",
        ),
    ] = ListOrder.RECENT,
    as_json: JsonOpt = False,
) -> None:
    """List jobs: id, status, type, priority, attempts.

    With --json: one JSON array of the jobs as the API answers them.
    """
    filters = {"group": group, "pool": pool, "target": target, "worker": worker_id}
    with api_client(LIST_OPTIONS) as api:
        listed = api.jobs(status, job_type, limit, order.value, filters=filters, tenant=tenant)
    if as_json:
        print_json(listed)
        exit_with(0)
    for job in listed:
        typer.echo(
            f"{job['id']}  {status_label(job):<11} {job['type']:<16} "
            f"p={job['priority']} attempts={job['attempts']}"
        )


@command(cls=CliCommand)
def stop(job_id: JobIdArg) -> None:
    """Stop a job: a running one is stopped (its solver killed), a pending or assigned
    one cancelled. Prints the job's status after the request."""
    with api_client() as api:
        job = api.stop(job_id)
    typer.echo(f"{job_id} {status_label(job)}")


@command(cls=CliCommand)
def cancel(job_id: JobIdArg) -> None:
    """Cancel a pending or assigned job."""
    with api_client() as api:
        api.cancel(job_id)
    typer.echo(f"cancelled {job_id}")


def _time(ms: int | None) -> str:
    if not ms:
        return "—"
    stamp = datetime.fromtimestamp(ms / 1000, tz=UTC).astimezone()
    return stamp.strftime("%Y-%m-%d %H:%M:%S.") + f"{stamp.microsecond // 1000:03d}"


def _progress(progress: Progress) -> str:
    text = f"{progress.fraction:.0%}"
    if progress.message:
        text += f"  {progress.message}"
    return f"{text}  (at {_time(progress.at)})" if progress.at else text


STATUS_STYLES = {
    "pending": "yellow",
    "assigned": "cyan",
    "running": "blue",
    "completed": "green",
    "failed": "red",
    CANCELLED: "magenta",
    "quarantined": "bold red",
}


@command(cls=CliCommand)
def show(job_id: JobIdArg, as_json: JsonOpt = False) -> None:
    """Print a job's detail, its transitions and its fail history.

    With --json: the job as the API answers it, as `get` prints it.
    """
    with api_client() as api:
        answer = api.job_json(job_id)
    if as_json:
        print_json(answer)
        exit_with(0)
    job = Job.model_validate(answer)
    label = status_label(job.model_dump(mode="json"))
    console = Console(highlight=False)
    if job.solver_url:
        solver = f"{job.solver_url} (sha256 {job.solver_checksum})"
    elif (job.fail_reason or "").partition(":")[0] == ErrorType.SOLVER_NOT_FOUND:
        solver = "none: no solver_url, and none registered for the type on its worker"
    else:
        solver = "registered for the type"
    scheduling = (
        ("Group", job.group),
        ("Pool", job.pool and f"{job.pool} (cost {job.cost_units})"),
        ("Target", job.target),
        ("Start at", job.earliest_start_at and _time(job.earliest_start_at)),
        ("Deadline", job.deadline_at and _time(job.deadline_at)),
        ("Require host", job.require_host),
        ("Prefer host", job.preferred_host),
        ("Waiting for", job.waiting_for and job.waiting_for.value),
    )
    print_fields(
        console,
        [
            ("Job", job.id),
            ("Type", job.type),
            ("Status", Text(label, style=STATUS_STYLES.get(label, ""))),
            ("Priority", str(job.priority)),
            ("Attempts", f"{job.attempts} / {job.max_attempts}"),
            ("Worker", job.worker_id or "—"),
            *((("Host", job.host),) if job.host else ()),
            # A running attempt's last progress report (live).
            *((("Progress", _progress(job.progress)),) if job.progress else ()),
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
    transitions = Table(
        "#", "When", "Status", "Attempt", "Worker", "Reason", "By", title="Transitions"
    )
    for t in job.transitions:
        transitions.add_row(
            str(t.seq),
            _time(t.ts),
            t.status.value,
            str(t.attempt),
            t.worker_id or "—",
            t.reason or "",
            t.by or "",
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


def _log_line(line: dict[str, Any]) -> str:
    return f"{line.get('stream')}| {line.get('text')}"


@command(cls=CliCommand)
def logs(
    job_id: JobIdArg,
    attempt: Annotated[
        int | None,
        typer.Option(metavar="N", min=1, help="This attempt (default: the current or last)."),
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Stream new lines until the attempt ends.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Print an attempt's output, a line each: `stdout| text` or `stderr| text`
    (`jobforge| text`: a note of jobforge's own, as where the log was cut). With
    --follow, then stream its new lines until the attempt ends, and say how it ended
    on stderr.

    With --json (not with --follow): the API's page of the log,
    `{job_id, attempt, lines: [{stream, text}], next_offset}`.
    """
    if as_json and follow:
        fail("--json prints the stored log once: give it without --follow", 2)
    with api_client() as api:
        if as_json:
            print_json(api.logs(job_id, attempt))
            exit_with(0)
        if not follow:
            for line in api.logs(job_id, attempt)["lines"]:
                typer.echo(_log_line(line))
            exit_with(0)
        try:
            for name, data in interruptible(api.follow_logs(job_id, attempt)):
                if name == "log":
                    typer.echo(_log_line(data))
                elif name == "end":
                    typer.echo(f"attempt ended: {data.get('status')}", err=True)
                    exit_with(0)
        except KeyboardInterrupt:
            exit_process(0)  # at once, as `watch` does
    fail("the log stream ended before the attempt did")


def _event_line(name: str, event: dict[str, Any]) -> Text:
    label = status_label({"status": event.get("status"), "fail_reason": event.get("reason")})
    line = Text(f"{_time(event.get('ts'))}  {name:<16} {event.get('id')}  {event.get('type')}  ")
    line.append(f"{label:<11}", style=STATUS_STYLES.get(label, ""))
    line.append(f" attempts={event.get('attempts')} worker={event.get('worker_id') or '—'}")
    if event.get("reason"):
        line.append(f"  {event['reason']}")
    progress = event.get("progress")
    if isinstance(progress, dict) and isinstance(progress.get("fraction"), int | float):
        line.append(f"  {progress['fraction']:.0%}")
        if progress.get("message"):
            line.append(f" {progress['message']}")
    return line


@command(cls=CliCommand)
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
        with settings_or_exit("API"):
            settings = HubSettings()
        with HubClient(settings, require_secret=False) as api:
            while True:
                try:
                    for name, event_id, event in interruptible(
                        api.events(asked, job_type or [], last_id, on_open)
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
        fail(str(err))
    except KeyboardInterrupt:
        exit_process(0)  # at once, what it printed flushed; the stream's thread ends too


app.add_typer(group_app, name="group")
app.add_typer(pool_app, name="pool")
app.add_typer(target_app, name="target")
app.add_typer(schedule_app, name="schedule")
app.add_typer(ops_app, name="ops")
app.add_typer(token_app, name="token")
app.add_typer(bulk_app, name="bulk")
# A plural noun lists: `jobforge groups` is `jobforge group list` (docs/cli.md, "Command
# pattern"). The fleet has only the plural: `jobforge worker` runs a worker.
command("groups", cls=CliCommand)(group_list)
command("pools", cls=CliCommand)(pool_list)
command("targets", cls=CliCommand)(target_list)
command("schedules", cls=CliCommand)(schedule_list)
command("workers", cls=CliCommand)(workers)


def main() -> None:
    """Console script entry point."""
    app()


if __name__ == "__main__":
    main()
