"""Throughput of jobforge no-op jobs against bare Temporal workflows, on one dev server.

Run it from the repository root with the project's interpreter:

    .venv/bin/python -m bench.throughput --jobs 1000

One run starts one headless Temporal dev server (free port, fresh temp data dir) and
measures, one after the other:

1. jobforge: the real API (`python -m worker.cli api`) and one native worker
   (`python -m worker.cli worker`, WORKER_TYPES=noop, a solver that prints `{}`) as
   subprocesses; N jobs submitted with POST /api/jobs at bounded concurrency, with
   the bootstrap secret or (`--token producer`) an API token.
2. bare: a minimal workflow (`bench.bare.BareJob`) running one no-op activity on its
   own task queue, served by one Python worker subprocess (this module with
   `--bare-worker`, with the same activity concurrency and poller settings jobforge's
   worker uses); N workflows started with the Temporal client at the same concurrency.

Each figure runs from the first submit to the last workflow's close time. Completion
is detected by polling visibility counts; the end time is the newest CloseTime among
the batch's workflows. A short warm-up (not timed) precedes each phase. The events
per job are counted from real histories of the batch, and the CPU seconds used by
every process are read from /proc.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from bench import bare
from bench.event_latency import POLLS_METRIC, feed_metrics
from bench.harness import (
    NOOP_SOLVER,
    Bench,
    CpuMeter,
    api_client,
    connect_when_healthy,
    cpu_seconds,
    exit_now,
    parse,
    run_bench,
    submit_job,
)
from tests.procs import PYTHON

JOB_TYPE = "noop"
JOB_WORKFLOW = "JobWorkflow"
BARE_QUEUE = "bench-bare"
BARE_READY = "bare worker ready"
POLL_S = 0.2


@dataclass
class Phase:
    """One measured batch."""

    name: str
    ids: list[str]
    seconds: float
    submit_seconds: float
    cpu: dict[str, float]
    # Visibility listings the API's event feed made in the window (jobforge only).
    listings: float | None = None
    # The dev server's database operations and frontend requests in the window.
    server: Counter[str] = field(default_factory=Counter)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def run_batch(
    count: int, concurrency: int, submit: Callable[[int], Awaitable[str]]
) -> tuple[list[str], float]:
    """Submit `count` items with `concurrency` submitters; their ids and the time taken."""
    ids: list[str] = [""] * count
    next_index = 0

    async def submitter() -> None:
        nonlocal next_index
        while next_index < count:
            index = next_index
            next_index += 1
            ids[index] = await submit(index)

    began = time.monotonic()
    await asyncio.gather(*(submitter() for _ in range(min(concurrency, count))))
    return ids, time.monotonic() - began


async def wait_completed(client: Client, workflow_type: str, target: int, limit_s: float) -> None:
    """Poll visibility until `target` executions of the type are Completed."""
    done = f"WorkflowType='{workflow_type}' AND ExecutionStatus='Completed'"
    bad = (
        f"WorkflowType='{workflow_type}' AND ExecutionStatus!='Completed' "
        "AND ExecutionStatus!='Running'"
    )
    end = time.monotonic() + limit_s
    polls = 0
    while True:
        completed = (await client.count_workflows(done)).count
        if completed >= target:
            return
        polls += 1
        if polls % 10 == 0:
            failed = (await client.count_workflows(bad)).count
            if failed:
                raise RuntimeError(f"{failed} {workflow_type} execution(s) did not complete")
        if time.monotonic() > end:
            raise TimeoutError(
                f"only {completed}/{target} {workflow_type} completed after {limit_s:g} s"
            )
        await asyncio.sleep(POLL_S)


async def last_close(client: Client, workflow_type: str, ids: list[str], since: float) -> float:
    """The newest close time (epoch s) among `ids`, read from visibility."""
    wanted = set(ids)
    query = (
        f"WorkflowType='{workflow_type}' AND ExecutionStatus='Completed' "
        f"AND StartTime >= '{_iso(since - 1)}'"
    )
    newest = 0.0
    seen = 0
    async for execution in client.list_workflows(query, page_size=1000):
        if execution.id in wanted and execution.close_time is not None:
            seen += 1
            newest = max(newest, execution.close_time.timestamp())
    if seen != len(wanted):
        raise RuntimeError(f"visibility lists {seen} of {len(wanted)} {workflow_type} executions")
    return newest


async def measure(
    name: str,
    client: Client,
    workflow_type: str,
    args: argparse.Namespace,
    submit: Callable[[int], Awaitable[str]],
    meter: CpuMeter,
    listings: Callable[[], Awaitable[float | None]] | None = None,
    server: Callable[[], Counter[str]] | None = None,
) -> Phase:
    """Warm up, then time one batch from its first submit to its last close;
    `listings` and `server` (counters read at both ends of the window) as their deltas."""
    completed = f"WorkflowType='{workflow_type}' AND ExecutionStatus='Completed'"
    baseline = (await client.count_workflows(completed)).count
    if args.warmup:
        await run_batch(args.warmup, args.concurrency, submit)
        await wait_completed(client, workflow_type, baseline + args.warmup, args.timeout)
    await asyncio.sleep(0.5)  # let the warm-up's trailing work settle
    baseline = (await client.count_workflows(completed)).count
    listed_before = await listings() if listings is not None else None
    server_before = server() if server is not None else Counter[str]()
    meter.start()
    first_submit = time.time()
    ids, submit_seconds = await run_batch(args.jobs, args.concurrency, submit)
    await wait_completed(client, workflow_type, baseline + args.jobs, args.timeout)
    cpu = meter.stop()
    server_ops = server() - server_before if server is not None else Counter[str]()
    listed_after = await listings() if listings is not None else None
    end = await last_close(client, workflow_type, ids, first_submit)
    listed = None if listed_before is None or listed_after is None else listed_after - listed_before
    return Phase(name, ids, end - first_submit, submit_seconds, cpu, listed, server_ops)


async def event_counts(client: Client, ids: list[str], sample: int) -> tuple[Counter[str], int]:
    """Events by type summed over `sample` histories spread over the batch."""
    step = max(1, len(ids) // sample)
    picked = ids[::step][:sample]
    totals: Counter[str] = Counter()
    for workflow_id in picked:
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        for event in history.events:
            totals[EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")] += 1
    return totals, len(picked)


def print_events(label: str, totals: Counter[str], histories: int) -> dict[str, float]:
    """Print the mean events per execution by type; return them."""
    mean = {kind: n / histories for kind, n in totals.items()}
    total = sum(mean.values())
    print(f"events per {label} (mean of {histories} histories): {total:.2f}")
    for kind, n in sorted(mean.items(), key=lambda item: (-item[1], item[0])):
        print(f"  {kind:<40} {n:5.2f}")
    return mean


def round_trips(mean: dict[str, float]) -> str:
    """The per-execution server round trips visible in history."""
    return (
        f"workflow tasks {mean.get('WORKFLOW_TASK_COMPLETED', 0):.2f}, "
        f"activity tasks {mean.get('ACTIVITY_TASK_STARTED', 0):.2f}, "
        f"signals {mean.get('WORKFLOW_EXECUTION_SIGNALED', 0):.2f}, "
        f"search-attribute upserts {mean.get('UPSERT_WORKFLOW_SEARCH_ATTRIBUTES', 0):.2f}"
    )


async def spawn_rate(count: int, cores: int) -> tuple[float, float]:
    """Run the no-op solver `count` times through jobforge's runner, `cores` at once."""
    from activities.runner import run_solver

    gate = asyncio.Semaphore(cores)

    async def one(index: int) -> None:
        async with gate:
            run = await run_solver(
                [*NOOP_SOLVER, "--params", json.dumps({"i": index}, separators=(",", ":"))],
                max_runtime_s=60,
                max_output_bytes=1024 * 1024,
                log_tail_bytes=16 * 1024,
            )
            assert run.exit_code == 0 and run.stdout == b"{}", run

    began = time.monotonic()
    cpu_before = cpu_seconds(os.getpid())
    await asyncio.gather(*(one(i) for i in range(count)))
    return time.monotonic() - began, cpu_seconds(os.getpid()) - cpu_before


def print_cpu(phase: Phase, jobs: int) -> None:
    """CPU seconds per process over the timed window, and per job."""
    parts = [
        f"{name} {seconds:.1f} s ({seconds / jobs * 1000:.1f} ms/job)"
        for name, seconds in phase.cpu.items()
    ]
    total = sum(phase.cpu.values())
    print(f"  cpu during {phase.name} window: " + ", ".join(parts))
    for kind, label in (("db", "database operations"), ("rpc", "frontend requests")):
        counts = Counter(
            {k[len(kind) + 1 :]: n for k, n in phase.server.items() if k.startswith(kind)}
        )
        if counts:
            top = ", ".join(f"{op} {n / jobs:.2f}" for op, n in counts.most_common(5))
            print(f"  server {label} per job: {counts.total() / jobs:.1f} (most: {top})")
    if phase.listings is not None:
        print(
            f"  event feed visibility listings in the window: {phase.listings:.0f} "
            f"({phase.listings / phase.seconds:.1f}/s)"
        )
    print(
        f"  cpu total {total:.1f} s = {total / jobs * 1000:.1f} ms/job "
        f"(wall {phase.seconds:.1f} s x {os.cpu_count()} cores = "
        f"{phase.seconds * (os.cpu_count() or 1):.1f} core-s)"
    )


async def jobforge_phase(bench: Bench, client: Client) -> Phase:
    """The real API and one native worker; jobs submitted over REST."""
    args = bench.args
    api, api_port = bench.start_api()
    worker = bench.start_noop_worker(JOB_TYPE, "bench-worker", WORKER_CORES=str(args.cores))
    meter = bench.meter(api, worker)
    # Idle jobforge processes would only add noise to the other phase: both stop after.
    with api, worker:
        async with api_client(api_port, timeout=120, connections=args.concurrency) as http:
            if args.token != "admin":
                # Submitted with an API token of this role, checked on every POST.
                made = await http.post("/api/tokens", json={"name": "bench", "role": args.token})
                made.raise_for_status()
                http.headers["Authorization"] = f"Bearer {made.json()['token']}"

            async def submit(index: int) -> str:
                return await submit_job(http, JOB_TYPE, {"i": index})

            async def listings() -> float | None:
                return (await feed_metrics(http)).get(POLLS_METRIC)

            return await measure(
                "jobforge",
                client,
                JOB_WORKFLOW,
                args,
                submit,
                meter,
                listings=listings,
                server=bench.server_counts,
            )


async def bare_phase(bench: Bench, client: Client) -> Phase:
    """BareJob on one worker subprocess; workflows started with the Temporal client."""
    args = bench.args
    bare_proc = bench.spawn(
        "bare-worker",
        [
            *(PYTHON, "-m", "bench.throughput", "--bare-worker"),
            *("--address", bench.server.address, "--cores", str(args.cores)),
        ],
        bench.env(),
    )
    bare_proc.wait_for(BARE_READY)
    run_id = os.urandom(4).hex()
    sequence = iter(range(1 << 62))

    async def submit(index: int) -> str:
        handle = await client.start_workflow(
            bare.BareJob.run,
            {"i": index},
            id=f"bare-{run_id}-{next(sequence)}",
            task_queue=BARE_QUEUE,
        )
        return handle.id

    meter = CpuMeter(
        {
            "temporal": bench.server_pid(),
            "bare-worker": bare_proc.process.pid,
            "bench": os.getpid(),
        }
    )
    with bare_proc:
        return await measure(
            "bare", client, "BareJob", args, submit, meter, server=bench.server_counts
        )


async def run(bench: Bench) -> None:
    """Both phases, the event counts, the ratio."""
    args = bench.args
    client = await connect_when_healthy(bench.server.address)
    if args.bare_first:
        bare_result = await bare_phase(bench, client)
        forge = await jobforge_phase(bench, client)
    else:
        forge = await jobforge_phase(bench, client)
        bare_result = await bare_phase(bench, client)

    print()
    forge_totals, forge_n = await event_counts(client, forge.ids, args.histories)
    forge_mean = print_events("JobWorkflow", forge_totals, forge_n)
    bare_totals, bare_n = await event_counts(client, bare_result.ids, args.histories)
    bare_mean = print_events("BareJob", bare_totals, bare_n)
    print(f"round trips per job, jobforge: {round_trips(forge_mean)}")
    print(f"round trips per job, bare:     {round_trips(bare_mean)}")
    print(
        "  not in history (jobforge only): 1 HTTP POST to the API per job, "
        "1 solver process per job, heartbeats and any other RPC the activity makes, "
        "and 1 registry start-with-signal per new type per API process (in the warm-up)"
    )
    if args.spawn_check:
        seconds, cpu = await spawn_rate(args.spawn_check, args.cores)
        print(
            f"solver spawn alone (jobforge's run_solver, {args.cores} at once): "
            f"{args.spawn_check} in {seconds:.2f} s = {args.spawn_check / seconds:.1f}/s, "
            f"{cpu / args.spawn_check * 1000:.1f} ms cpu/spawn in the spawning process"
        )

    print()
    print(
        f"submit phase: jobforge {args.jobs} POSTs in {forge.submit_seconds:.2f} s, "
        f"bare {args.jobs} starts in {bare_result.submit_seconds:.2f} s"
    )
    print_cpu(forge, args.jobs)
    print_cpu(bare_result, args.jobs)
    forge_cpu = sum(v for k, v in forge.cpu.items() if k != "bench")
    bare_cpu = sum(v for k, v in bare_result.cpu.items() if k != "bench")
    print(
        "cpu per job without the load generator: "
        f"jobforge {forge_cpu / args.jobs * 1000:.1f} ms, "
        f"bare {bare_cpu / args.jobs * 1000:.1f} ms "
        f"(bare/jobforge = {bare_cpu / forge_cpu:.2f})"
    )
    forge_rate = args.jobs / forge.seconds
    bare_rate = args.jobs / bare_result.seconds
    print(f"jobforge: {args.jobs} jobs in {forge.seconds:.2f} s = {forge_rate:.1f} jobs/s")
    print(f"bare: {args.jobs} workflows in {bare_result.seconds:.2f} s = {bare_rate:.1f}/s")
    print(f"ratio: {forge_rate / bare_rate:.2f}")


def settings(bench: Bench) -> str:
    """The run's settings line."""
    args = bench.args
    order = "bare,jobforge" if args.bare_first else "jobforge,bare"
    return (
        f"jobs={args.jobs} concurrency={args.concurrency} cores={args.cores} "
        f"warmup={args.warmup} order={order} token={args.token}"
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.throughput",
        description="jobforge no-op job throughput vs bare Temporal, on one dev server.",
    )
    parser.add_argument("--jobs", type=int, default=1000, help="jobs (and workflows) per phase")
    parser.add_argument("--concurrency", type=int, default=50, help="submissions in flight at once")
    parser.add_argument(
        "--cores",
        type=int,
        default=8,
        help="WORKER_CORES of the jobforge worker = max concurrent activities of both",
    )
    parser.add_argument("--warmup", type=int, default=20, help="untimed jobs before each phase")
    parser.add_argument("--histories", type=int, default=20, help="histories to count events in")
    parser.add_argument(
        "--spawn-check", type=int, default=200, help="solver spawns to time alone (0: skip)"
    )
    parser.add_argument("--timeout", type=float, default=900, help="max seconds per phase")
    parser.add_argument(
        "--bare-first", action="store_true", help="run the bare phase first (order check)"
    )
    parser.add_argument(
        "--token",
        choices=("admin", "producer"),
        default="admin",
        help="submit with the bootstrap secret (admin) or an API token of the producer role",
    )
    args = parse(parser, argv, bare_worker=True)
    if args.jobs < 1 or args.concurrency < 1 or args.cores < 1:
        parser.error("--jobs, --concurrency and --cores must be at least 1")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.bare_worker:
        asyncio.run(
            bare.serve(
                args.address,
                bare.BareJob,
                activities=[bare.bare_noop],
                task_queue=BARE_QUEUE,
                max_concurrent_activities=args.cores,
                ready=f"{BARE_READY}: cores={args.cores}",
            )
        )
        return 0
    return run_bench(args, run, settings=settings, data_prefix="jobforge-bench-")


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
