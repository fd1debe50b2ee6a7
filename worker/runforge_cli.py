"""`runforge-cli`: the 002 design's own CLI over jobforge (docs/contracts.md, "002").

Its commands, flags, exit codes (0, 1, 5, 6) and `[RF:…]` tokens are the design's; it
reaches jobforge through HUB_URL and FORGE_INGEST_SECRET, as `jobforge` does. A failure
is one line on stderr, starting `error: `.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from pydantic import TypeAdapter, ValidationError
from typer.core import TyperCommand

from worker.cli_common import (
    USAGE_ERROR,
    CliCommand,
    CliGroup,
    api_client,
    exit_with,
    settings_or_exit,
)
from worker.hub_client import HubClient, HubError, HubSettings
from worker.runforge import (
    DAEMON_TAG,
    HEALTHY_WITHIN_S,
    PID_TAG,
    POOL_TAG,
    STATE_ORDER,
    STATE_TAG,
    Exit,
    GroupId,
    InvalidPlanError,
    RunforgeSettings,
    RunId,
    SweepPlan,
    error_of,
    finished_at,
    iso,
    load_plan,
    pool_name,
    run_id_of,
    run_job,
    started_at,
    state_of,
    tag_value,
    token,
    workspace_path,
)

EXIT_CODES = (
    "Exit codes: 0 done; 1 failed (a bad option or value, the API refused or could not "
    "be reached); 5 canceled (cancel-group, or interrupted); 6 an invalid sweep plan."
)


class _RunforgeCommand(CliCommand):
    """jobforge's help style; a usage mistake is the design's general failure (exit 1),
    reported by `main`."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        parsed: list[str] = TyperCommand.parse_args(self, ctx, args)
        return parsed


app = typer.Typer(
    cls=CliGroup,
    add_completion=False,
    no_args_is_help=True,
    help="runforge-cli: the run queue (design 002) over jobforge.",
    epilog=EXIT_CODES,
)

Workspace = Annotated[str, typer.Option("--workspace", metavar="PATH", help="The workspace.")]
GroupIdOpt = Annotated[str, typer.Option("--group-id", metavar="GID", help="The group.")]
GROUP_ID: TypeAdapter[str] = TypeAdapter(GroupId)
RUN_ID: TypeAdapter[str] = TypeAdapter(RunId)
PlanOpt = Annotated[Path, typer.Option("--plan", metavar="FILE", help="The sweep plan (JSON).")]


def fail(message: str, code: Exit = Exit.FAILED) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    exit_with(code)


def _say(line: str) -> None:
    typer.echo(line)


def _valid(adapter: TypeAdapter[str], value: str, option: str) -> str:
    try:
        return adapter.validate_python(value)
    except ValidationError as err:
        fail(f"{option}: {err.errors()[0]['msg']}")


def _group_id(value: str) -> str:
    return _valid(GROUP_ID, value, "--group-id")


def _run_id(value: str) -> str:
    return _valid(RUN_ID, value, "--run-id")


# -- the daemon ---------------------------------------------------------------------


@app.command(cls=_RunforgeCommand)
def daemon(
    workspace: Workspace,
    max_parallel: Annotated[
        int, typer.Option("--max-parallel", metavar="N", help="Runs at once in the workspace.")
    ] = 2,
) -> None:
    """Run the daemon: a jobforge worker for this workspace's runs, until SIGINT/SIGTERM.

    It sets the workspace's pool capacity to --max-parallel and starts each run with
    RUNFORGE_RUN_COMMAND, plus `--params '{"run_id": …, "workspace": …}'`.
    """
    import logging

    from worker.runforge_daemon import LockHeldError, serve

    if max_parallel < 1:
        fail("--max-parallel: must be at least 1")
    path = workspace_path(workspace)
    if not path.is_dir():
        fail(f"--workspace: {path} is not a directory")
    with settings_or_exit("runforge"):
        runforge = RunforgeSettings()
    command = runforge.run_command
    if not command.strip():
        fail("RUNFORGE_RUN_COMMAND is not set: the command each run starts")
    with settings_or_exit("API"):
        hub = HubSettings()
    logging.basicConfig(level="WARNING", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(serve(path, max_parallel, command, hub, runforge.lock_ttl_s))
    except LockHeldError as held:
        # The design's single-instance lock: the workspace's, taken at its pool.
        fail(f"a daemon already serves {path} ({held})")
    except HubError as err:
        fail(str(err))
    except (OSError, RuntimeError) as err:
        fail(f"daemon: {err}")
    exit_with(Exit.SUCCESS)


# -- enqueue ------------------------------------------------------------------------


def _enqueue(client: HubClient, body: dict[str, Any]) -> str:
    job_id = client.submit(body)
    _say(token("QUEUE", "JOB_ENQUEUED", job_id, f"run_id={body['params']['run_id']}"))
    return job_id


@app.command("enqueue-run", cls=_RunforgeCommand)
def enqueue_run(
    run_id: Annotated[str, typer.Option("--run-id", metavar="ID", help="The run.")],
    workspace: Workspace,
    group_id: Annotated[
        str | None, typer.Option("--group-id", metavar="GID", help="Its group.")
    ] = None,
    priority: Annotated[
        int, typer.Option("--priority", metavar="N", help="Higher runs first in its group.")
    ] = 0,
) -> None:
    """Enqueue one run."""
    _run_id(run_id)
    if group_id is not None:
        _group_id(group_id)
    with api_client() as client:
        _enqueue(client, run_job(run_id, workspace_path(workspace), group_id, priority))
    exit_with(Exit.SUCCESS)


def _plan(plan: Path) -> SweepPlan:
    try:
        return load_plan(plan)
    except InvalidPlanError as err:
        fail(f"invalid plan {plan}: {err}", Exit.INVALID_PLAN)


def _enqueue_plan(plan: SweepPlan, where: Path, workspace: str | None) -> None:
    chosen = workspace or plan.workspace
    if chosen is None:
        fail(
            f"invalid plan {where}: workspace: not in the plan and no --workspace given",
            Exit.INVALID_PLAN,
        )
    path = workspace_path(chosen)
    with api_client() as client:
        for run in plan.runs:
            _enqueue(client, run_job(run.run_id, path, plan.group_id, run.priority))
    _say(token("GROUP", "ENQUEUED", plan.group_id, f"runs={len(plan.runs)}"))
    exit_with(Exit.SUCCESS)


@app.command("enqueue-sweep", cls=_RunforgeCommand)
def enqueue_sweep(
    plan: PlanOpt,
    workspace: Annotated[
        str | None,
        typer.Option("--workspace", metavar="PATH", help="The workspace (else the plan's)."),
    ] = None,
) -> None:
    """Enqueue every run of a sweep plan as one group."""
    _enqueue_plan(_plan(plan), plan, workspace)


@app.command(cls=_RunforgeCommand)
def sweep(
    plan: PlanOpt,
    enqueue: Annotated[
        bool, typer.Option("--enqueue", help="Enqueue the runs for the daemon.")
    ] = False,
) -> None:
    """A sweep plan's runs, enqueued (--enqueue) for the daemon."""
    parsed = _plan(plan)
    if not enqueue:
        fail("direct mode is not served: add --enqueue (the daemon runs the runs)")
    _enqueue_plan(parsed, plan, None)


# -- group controls -----------------------------------------------------------------


@app.command("pause-group", cls=_RunforgeCommand)
def pause_group(group_id: GroupIdOpt, workspace: Workspace) -> None:  # noqa: ARG001
    """Pause a group: none of its queued runs starts; running runs finish."""
    with api_client() as client:
        client.pause_group(_group_id(group_id))
    _say(token("GROUP", "PAUSED", group_id))
    exit_with(Exit.SUCCESS)


@app.command("resume-group", cls=_RunforgeCommand)
def resume_group(group_id: GroupIdOpt, workspace: Workspace) -> None:  # noqa: ARG001
    """Resume a paused group."""
    with api_client() as client:
        client.pause_group(_group_id(group_id), paused=False)
    _say(token("GROUP", "RESUMED", group_id))
    exit_with(Exit.SUCCESS)


@app.command("retry-failed", cls=_RunforgeCommand)
def retry_failed(group_id: GroupIdOpt, workspace: Workspace) -> None:  # noqa: ARG001
    """Enqueue a group's failed runs again (each keeps its job id; its attempt grows)."""
    with api_client() as client:
        requeued = client.retry_failed(_group_id(group_id))
    for job_id in requeued:
        _say(token("QUEUE", "JOB_ENQUEUED", job_id, "retry=true"))
    _say(token("GROUP", "ENQUEUED", group_id, f"runs={len(requeued)}"))
    exit_with(Exit.SUCCESS)


@app.command("cancel-group", cls=_RunforgeCommand)
def cancel_group(group_id: GroupIdOpt, workspace: Workspace) -> None:  # noqa: ARG001
    """Cancel a group's queued runs; exits 5 (canceled) once they are."""
    with api_client() as client:
        cancelled = client.cancel_group(_group_id(group_id))
    _say(token("GROUP", "CANCELED", group_id, f"runs={len(cancelled)}"))
    exit_with(Exit.CANCELED)


# -- status -------------------------------------------------------------------------


def _runs(client: HubClient, pool: str) -> Iterator[dict[str, Any]]:
    """The workspace's runs (its pool's jobs: the runs of its type, and any still of
    the legacy type), open ones first, newest first, page after page."""
    return client.job_pages({"pool": pool})


def _daemons(client: HubClient, pool: str) -> list[dict[str, Any]]:
    """The workspace's daemons as the hub lists its workers, most recently heard first."""
    found = [
        worker
        for worker in client.call("GET", "/api/workers").json()
        if DAEMON_TAG in worker.get("tags", []) and tag_value(worker["tags"], POOL_TAG) == pool
    ]
    found.sort(key=lambda worker: -(worker.get("last_heartbeat") or 0))
    return found


def _healthy(worker: dict[str, Any]) -> bool:
    """The design's health rule: state running, heartbeat within 30 s."""
    last = worker.get("last_heartbeat")
    age = time.time() - last / 1000 if last else None
    state = tag_value(worker["tags"], STATE_TAG)
    return state == "running" and age is not None and age < HEALTHY_WITHIN_S


def _daemon_line(worker: dict[str, Any] | None) -> str:
    if worker is None:
        return "daemon: none (unhealthy)"
    tags = worker["tags"]
    last = worker.get("last_heartbeat")
    age = f"{max(0.0, time.time() - last / 1000):.0f}s ago" if last else "never"
    health = "healthy" if _healthy(worker) else "unhealthy"
    return (
        f"daemon: {tag_value(tags, STATE_TAG)} pid={tag_value(tags, PID_TAG)} "
        f"max_parallel={worker.get('cores')} worker={worker['worker_id']} "
        f"heartbeat={age} ({health})"
    )


def _counts(runs: list[dict[str, Any]]) -> str:
    counted = Counter(run["state"] for run in runs)
    return " ".join(f"{state}={counted[state]}" for state in STATE_ORDER if counted[state])


def _run_line(run: dict[str, Any]) -> str:
    """One run: the design's job fields, its error last (it may hold spaces)."""
    line = (
        f"  {run['id']} run_id={run['run_id']} state={run['state']} "
        f"priority={run.get('priority', 0)} attempt={max(1, run.get('attempts', 0))} "
        f"started_at={iso(started_at(run))} finished_at={iso(finished_at(run))}"
    )
    error = error_of(run)
    return f"{line} error={error}" if error else line


def _pool_or_none(client: HubClient, pool: str) -> dict[str, Any]:
    """The workspace's pool; one that no run or daemon ever named (the API's 404) has no
    max_parallel yet and nothing in use."""
    try:
        return client.pool(pool)
    except HubError as err:
        if err.status != 404:
            raise
        return {"capacity": "none", "in_use": 0}


@app.command("queue-status", cls=_RunforgeCommand)
def queue_status(workspace: Workspace) -> None:
    """Print the workspace's queue by group, and whether its daemon is healthy.

    States are the design's; healthy is running with a heartbeat within 30 s. Each run
    shows when it started and finished (UTC) and, failed or canceled, its error.
    """
    path = workspace_path(workspace)
    pool = pool_name(path)
    with api_client() as client:
        capacity = _pool_or_none(client, pool)
        daemons = _daemons(client, pool)
        runs = [
            {"id": job["id"], "run_id": run_id_of(job), "state": state_of(job), **job}
            for job in _runs(client, pool)
        ]
        groups: dict[str | None, list[dict[str, Any]]] = {}
        for run in runs:
            groups.setdefault(run.get("group"), []).append(run)
        paused = {
            name: bool(client.group(name).get("paused")) for name in groups if name is not None
        }
    _say(
        f"workspace: {path} pool={pool} max_parallel={capacity['capacity']} "
        f"in_use={capacity['in_use']}"
    )
    _say(_daemon_line(daemons[0] if daemons else None))
    _say(f"queue: {len(runs)} runs {_counts(runs)}".rstrip())
    for name in sorted(groups, key=lambda g: (g is None, g or "")):
        members = groups[name]
        label = "ungrouped" if name is None else f"group {name}"
        if name is not None and paused[name]:
            label += " paused"
        _say(f"{label}: {_counts(members)}")
        for run in sorted(members, key=lambda r: (-int(r.get("priority", 0)), r["created_at"])):
            _say(_run_line(run))
    exit_with(Exit.SUCCESS)


def main() -> None:
    """Console script entry point: the design's exit codes for every outcome."""
    command = typer.main.get_command(app)
    try:
        # Not standalone: a command's typer.Exit comes back as its code.
        code = command.main(standalone_mode=False)
    except USAGE_ERROR as err:
        typer.echo(f"error: {err.format_message()}", err=True)
        code = Exit.FAILED
    except KeyboardInterrupt:
        typer.echo("error: interrupted", err=True)
        code = Exit.CANCELED
    except Exception as err:  # typer's Abort (Ctrl-C at a prompt) and the like
        if type(err).__name__ != "Abort":
            raise
        code = Exit.CANCELED
    sys.exit(int(code) if isinstance(code, int) else Exit.SUCCESS)


if __name__ == "__main__":
    main()
