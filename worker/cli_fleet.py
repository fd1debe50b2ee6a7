"""`jobforge workers`: the fleet over the REST client (GET /api/workers, docs/cli.md).
worker/cli.py registers it on the `jobforge` app (`jobforge worker` runs a worker)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import typer

from worker.cli_common import JsonOpt, api_client, print_json

NOT_REPORTED = "not reported"


def _capacity(worker: Mapping[str, Any]) -> str:
    """`4 cores · 7.5 GB`; a value the worker did not report says so (a 003 agent
    registers neither)."""
    cores = worker.get("cores")
    ram_gb = worker.get("ram_gb")
    cores_text = f"cores {NOT_REPORTED}" if cores is None else f"{cores} core" + "s" * (cores != 1)
    ram_text = f"memory {NOT_REPORTED}" if ram_gb is None else f"{ram_gb:g} GB"
    return f"{cores_text} · {ram_text}"


def _heard(ms: int | None) -> str:
    if ms is None:
        return "never"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def worker_line(worker: Mapping[str, Any]) -> str:
    """One worker: id, alive or dead, kind, host, capacity, jobs held, last heard."""
    state = "alive" if worker.get("alive") else "dead"
    return (
        f"{worker['worker_id']}  {state:<5} {worker.get('kind', '—'):<6} "
        f"host={worker.get('host') or '—'}  {_capacity(worker)}  "
        f"jobs={worker.get('active_jobs', 0)}  last heard {_heard(worker.get('last_heartbeat'))}"
    )


def workers(as_json: JsonOpt = False) -> None:
    """List the fleet: id, alive or dead, kind, host, cores, memory, jobs, last heard.

    A worker not heard from for the API's WORKER_EXPIRE_S is gone from the list.
    """
    with api_client() as api:
        fleet = api.workers()
    if as_json:
        print_json(fleet)
    else:
        for worker in fleet:
            typer.echo(worker_line(worker))
