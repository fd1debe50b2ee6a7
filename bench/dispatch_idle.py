"""What a job that no worker takes costs while it waits: history events per dispatch
timeout, and per idle minute.

Run it from the repository root with the project's interpreter:

    .venv/bin/python -m bench.dispatch_idle --cycles 10

One headless dev server, the real API (`JOB_DISPATCH_TIMEOUT_MS=--timeout-ms`) and a
native worker that runs the workflows and serves no job type of this bench. Two jobs of
a type nobody serves are submitted: one with a group and a pool (as a 001 intent is), one
with neither. The gated job's attempt times out, it gives its leases back and asks its
gates again, `--cycles` times; the bench counts the events each job's history and each
gate's history gained over those cycles. Events per cycle do not depend on the timeout,
so the per-minute figures are per cycle times 60 s / `JOB_DISPATCH_TIMEOUT_MS` (30 s by
default). The ungated job schedules no timeout: its history does not grow while it waits.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from collections import Counter

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from bench.harness import Bench, api_client, connect_when_healthy, exit_now, parse, run_bench
from engine.connection import TemporalSettings
from workflows.names import gate_workflow_id

JOB_TYPE = "bench-dispatch-unserved"
DEFAULT_TIMEOUT_MS = 30_000


async def history(client: Client, workflow_id: str) -> Counter[str]:
    """Event kinds in the workflow's current run."""
    events = (await client.get_workflow_handle(workflow_id).fetch_history()).events
    return Counter(EventType.Name(event.event_type).removeprefix("EVENT_TYPE_") for event in events)


async def timeouts(client: Client, job_id: str) -> int:
    job = await client.get_workflow_handle(job_id).query("job")
    return sum(1 for t in job["transitions"] if t.get("reason") == "dispatch_timeout")


async def until_timeouts(client: Client, job_id: str, count: int, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while await timeouts(client, job_id) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{job_id}: fewer than {count} dispatch timeouts in {limit_s} s")
        await asyncio.sleep(0.05)


def line(label: str, gained: Counter[str], cycles: int, per_minute: float) -> str:
    total = sum(gained.values())
    tasks = gained["WORKFLOW_TASK_COMPLETED"]
    signals = gained["SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED"]
    received = gained["WORKFLOW_EXECUTION_SIGNALED"]
    return (
        f"{label}: {total / cycles:.1f} events per dispatch timeout ({tasks / cycles:.1f} "
        f"workflow tasks, {signals / cycles:.1f} signals sent, {received / cycles:.1f} "
        f"received); {total / cycles * per_minute:.0f} events per idle minute"
    )


async def run(bench: Bench) -> None:
    args = bench.args
    client = await connect_when_healthy(bench.server.address)
    bench.start_worker("worker", WORKER_TYPES="bench-dispatch-nothing", NODE_ID="bench-flows")
    _, port = bench.start_api(JOB_DISPATCH_TIMEOUT_MS=str(args.timeout_ms))
    key = uuid.uuid4().hex[:8]
    group, pool = f"addon-{key}", f"pool-{key}"
    queue = TemporalSettings().task_queue
    gate_ids = [gate_workflow_id(queue, "group", group), gate_workflow_id(queue, "pool", pool)]
    async with api_client(port, timeout=60) as http:
        gated = (
            await http.post("/api/jobs", json={"type": JOB_TYPE, "group": group, "pool": pool})
        ).json()["id"]
        ungated = (await http.post("/api/jobs", json={"type": JOB_TYPE})).json()["id"]
    limit_s = (args.cycles + 2) * args.timeout_ms / 1000 + 60
    # From the first timeout on: the steady state, each cycle alike.
    await until_timeouts(client, gated, 1, limit_s)
    before = {wid: await history(client, wid) for wid in (gated, ungated, *gate_ids)}
    began = time.monotonic()
    await until_timeouts(client, gated, 1 + args.cycles, limit_s)
    took_s = time.monotonic() - began
    after = {wid: await history(client, wid) for wid in (gated, ungated, *gate_ids)}
    gained = {wid: after[wid] - before[wid] for wid in after}
    per_minute = 60_000 / DEFAULT_TIMEOUT_MS
    print(f"{args.cycles} dispatch timeouts in {took_s:.1f} s at {args.timeout_ms} ms each")
    print(f"per idle minute: at the default JOB_DISPATCH_TIMEOUT_MS={DEFAULT_TIMEOUT_MS}")
    print(line("gated job (group + pool)", gained[gated], args.cycles, per_minute))
    print(line("its group gate", gained[gate_ids[0]], args.cycles, per_minute))
    print(line("its pool gate", gained[gate_ids[1]], args.cycles, per_minute))
    total = sum(sum(gained[wid].values()) for wid in (gated, *gate_ids))
    print(f"gated job and its gates: {total / args.cycles * per_minute:.0f} events per idle minute")
    print(
        f"ungated job: {sum(gained[ungated].values())} events gained in the same {took_s:.1f} s"
        f" ({sum(after[ungated].values())} in its history)"
    )


def settings(bench: Bench) -> str:
    return f"cycles={bench.args.cycles}, timeout_ms={bench.args.timeout_ms}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.dispatch_idle",
        description="History events a job no worker takes costs while it waits.",
    )
    parser.add_argument("--cycles", type=int, default=10, help="dispatch timeouts counted")
    parser.add_argument(
        "--timeout-ms", type=int, default=1000, help="JOB_DISPATCH_TIMEOUT_MS of the API"
    )
    args = parse(parser, argv)
    if args.cycles < 1 or args.timeout_ms < 100:
        parser.error("--cycles must be at least 1, --timeout-ms at least 100")
    return run_bench(args, run, settings=settings, data_prefix="jobforge-bench-dispatch-")


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
