"""`jobforge group|pool|target`: the scheduling sub-commands, thin Typer commands over the
REST client (`hub_client`) for groups, pools and serial targets (docs/cli.md). worker/cli.py
registers them on the `jobforge` app."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

from worker.cli_common import (
    CliCommand,
    JsonOpt,
    api_client,
    fail,
    print_fields,
    print_json,
    sub_app,
)
from worker.hub_client import HubClient, HubError
from workflows.job_states import COUNT_KINDS

# worker/cli.py adds them to `jobforge` as `group`, `pool` and `target`.
group_app = sub_app("Groups: pause, resume, limit and weigh jobs together.")
pool_app = sub_app("Pools: the capacity their jobs' cost units share.")
target_app = sub_app("Serial targets: one job at a time; a failure halts them.")

GroupArg = Annotated[str, typer.Argument(metavar="NAME", help="The group.")]
PoolArg = Annotated[str, typer.Argument(metavar="NAME", help="The pool.")]
TargetArg = Annotated[str, typer.Argument(metavar="NAME", help="The target (tenant/name too).")]


def _counts(counts: Mapping[str, int]) -> str:
    """Counts in the order a job meets the statuses (`cancelled` after `failed`), then
    any other key an older or newer API sends."""
    known = [s for s in COUNT_KINDS if counts.get(s)]
    rest = sorted(s for s in counts if s not in COUNT_KINDS and counts[s])
    return ", ".join(f"{s} {counts[s]}" for s in (*known, *rest)) or "no jobs"


def _limit(group: Mapping[str, Any]) -> str:
    limit = group.get("max_parallel")
    return "none" if limit is None else str(limit)


Item = Mapping[str, Any]
Rows = list[tuple[str, str | Text]]


def _show(read: Callable[[HubClient], Item], as_json: bool, fields: Callable[[Item], Rows]) -> None:
    """A show command's output: the API's object as JSON, or a field per line."""
    with api_client() as api:
        item = read(api)
    if as_json:
        print_json(item)
    else:
        print_fields(Console(highlight=False), fields(item))


def _group_line(group: Mapping[str, Any]) -> str:
    state = "paused" if group.get("paused") else "active"
    return (
        f"{group['group']}  {state:<6} max_parallel={_limit(group)} "
        f"weight={group.get('weight', 1):g}  {_counts(group.get('counts') or {})}"
    )


def _list(
    read: Callable[[HubClient], list[Any]], as_json: bool, line: Callable[[Any], str]
) -> None:
    """A list command's output: the API's array as JSON, or a line per item."""
    with api_client() as api:
        listed = read(api)
    if as_json:
        print_json(listed)
    else:
        for item in listed:
            typer.echo(line(item))


@group_app.command("list", cls=CliCommand)
def group_list(as_json: JsonOpt = False) -> None:
    """List groups: name, paused or active, limit, weight, job counts."""
    _list(HubClient.groups, as_json, _group_line)


def _group_fields(group: Item) -> Rows:
    paused = bool(group.get("paused"))
    return [
        ("Group", str(group["group"])),
        ("Paused", Text("yes", style="yellow") if paused else "no"),
        ("Max parallel", _limit(group)),
        ("Weight", f"{group.get('weight', 1):g}"),
        ("Jobs", _counts(group.get("counts") or {})),
    ]


@group_app.command("show", cls=CliCommand)
def group_show(name: GroupArg, as_json: JsonOpt = False) -> None:
    """Print a group: paused, its limit of running jobs, its weight, its job counts."""
    _show(lambda api: api.group(name), as_json, _group_fields)


@group_app.command("pause", cls=CliCommand)
def group_pause(name: GroupArg) -> None:
    """Pause a group: none of its jobs is assigned until it resumes.

    Running jobs finish; assigned ones not yet claimed go back to waiting.
    """
    with api_client() as api:
        api.pause_group(name)
    typer.echo(f"paused group {name}")


@group_app.command("resume", cls=CliCommand)
def group_resume(name: GroupArg) -> None:
    """Resume a paused group."""
    with api_client() as api:
        api.pause_group(name, paused=False)
    typer.echo(f"resumed group {name}")


@group_app.command("set", cls=CliCommand)
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
        fail("give --max-parallel N or --no-max-parallel, not both", 2)
    patch: dict[str, Any] = {} if max_parallel is None else {"max_parallel": max_parallel}
    if no_max_parallel:
        patch["max_parallel"] = None
    if weight is not None:
        patch["weight"] = weight
    if not patch:
        fail("nothing to set: give --max-parallel N, --no-max-parallel or --weight W", 2)
    with api_client() as api:
        typer.echo(_group_line(api.configure_group(name, patch)))


@group_app.command("retry-failed", cls=CliCommand)
def group_retry_failed(name: GroupArg) -> None:
    """Queue a group's quarantined jobs again; prints `requeued ID` for each."""
    with api_client() as api:
        requeued = api.retry_failed(name)
    for job_id in requeued:
        typer.echo(f"requeued {job_id}")
    if not requeued:
        typer.echo(f"group {name}: no failed jobs to requeue")


@group_app.command("cancel", cls=CliCommand)
def group_cancel(name: GroupArg) -> None:
    """Cancel a group's pending and assigned jobs; prints `cancelled ID` for each."""
    with api_client() as api:
        cancelled = api.cancel_group(name)
    for job_id in cancelled:
        typer.echo(f"cancelled {job_id}")
    if not cancelled:
        typer.echo(f"group {name}: no jobs to cancel")


def _pool_line(pool: Mapping[str, Any]) -> str:
    aging = pool.get("aging_step_s")
    return (
        f"{pool['pool']}  capacity={pool['capacity']} in_use={pool['in_use']} "
        f"pending={pool['pending']} running={pool['running']}"
        + ("" if aging is None else f" aging_step_s={aging:g}")
    )


@pool_app.command("list", cls=CliCommand)
def pool_list(as_json: JsonOpt = False) -> None:
    """List pools: name, capacity, cost units in use, pending and running jobs."""
    _list(HubClient.pools, as_json, _pool_line)


def _pool_fields(pool: Item) -> Rows:
    return [
        ("Pool", str(pool["pool"])),
        ("Capacity", str(pool["capacity"])),
        ("Aging", _aging(pool.get("aging_step_s"))),
        ("In use", str(pool["in_use"])),
        ("Pending", str(pool["pending"])),
        ("Running", str(pool["running"])),
        ("Jobs", _counts(pool.get("counts") or {})),
    ]


@pool_app.command("show", cls=CliCommand)
def pool_show(name: PoolArg, as_json: JsonOpt = False) -> None:
    """Print a pool: its capacity, the cost units in use, its pending and running jobs."""
    _show(lambda api: api.pool(name), as_json, _pool_fields)


@pool_app.command("set", cls=CliCommand)
def pool_set(
    name: PoolArg,
    capacity: Annotated[
        int, typer.Option(metavar="N", help="Cost units its running jobs may use at once.")
    ],
    aging_step: Annotated[
        float | None,
        typer.Option(
            "--aging-step", metavar="S", help="A waiting job gains a priority point per S seconds."
        ),
    ] = None,
    no_aging: Annotated[
        bool, typer.Option("--no-aging", help="Priority is exact again (the default).")
    ] = False,
) -> None:
    """Set a pool's capacity, and its aging if asked; prints the pool."""
    if aging_step is not None and no_aging:
        fail("give --aging-step S or --no-aging, not both", 2)
    settings: dict[str, Any] = {} if aging_step is None else {"aging_step_s": aging_step}
    if no_aging:
        settings["aging_step_s"] = None
    with api_client() as api:
        typer.echo(_pool_line(api.set_pool_capacity(name, capacity, settings)))


def _aging(step_s: float | None) -> str:
    return "none (priority is exact)" if step_s is None else f"a priority point per {step_s:g} s"


def _target_line(target: Mapping[str, Any]) -> str:
    halted = f"halted by {target.get('halted_by') or '—'}" if target.get("halted") else "open"
    return (
        f"{target['target']}  {halted}  running={target['running']} "
        f"pending={target['pending']}  {_counts(target.get('counts') or {})}"
    )


@target_app.command("list", cls=CliCommand)
def target_list(as_json: JsonOpt = False) -> None:
    """List targets: name, open or halted (by which job), running, pending, counts."""
    _list(HubClient.targets, as_json, _target_line)


def _target_fields(target: Item) -> Rows:
    halted: str | Text = "no"
    if target.get("halted"):
        halted = Text(f"yes, by {target.get('halted_by') or '—'}", style="bold red")
    return [
        ("Target", str(target["target"])),
        ("Halted", halted),
        ("Running", str(target["running"])),
        ("Pending", str(target["pending"])),
        ("Jobs", _counts(target.get("counts") or {})),
    ]


@target_app.command("show", cls=CliCommand)
def target_show(name: TargetArg, as_json: JsonOpt = False) -> None:
    """Print a target: halted or not (and by which job), its running and pending jobs."""
    _show(lambda api: api.target(name), as_json, _target_fields)


@target_app.command("resume", cls=CliCommand)
def target_resume(
    name: TargetArg,
    skip: Annotated[
        bool, typer.Option("--skip", help="Skip the job that halted it instead of retrying it.")
    ] = False,
) -> None:
    """Resume a halted target: its halting job runs again first (or is skipped)."""
    with api_client() as api:
        # Read first: the answer to a retry still names the halting job (the halt lifts
        # once that job asks again), so only this says whether there was one.
        halted_by = api.target(name).get("halted_by")
        try:
            api.resume_target(name, "skip" if skip else "retry")
        except HubError as err:
            if err.status == 409 and not skip:  # the halting job can no longer run again
                fail(f"{err} (jobforge target resume {name} --skip)")
            raise
    if halted_by is None:
        typer.echo(f"target {name} was not halted")
    else:
        typer.echo(f"resumed target {name}, {'skipping' if skip else 'retrying'} {halted_by}")
