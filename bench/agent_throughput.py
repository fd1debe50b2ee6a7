"""Throughput of HTTP agents through the bridge, against native workers, on one server.

Run it from the repository root with the project's interpreter:

    .venv/bin/python -m bench.agent_throughput --jobs 400 --agents 1,4,16

One run starts one headless Temporal dev server (free port, fresh temp data dir) and the
real API (`python -m worker.cli api`), then measures, one phase after the other, the
same batch of no-op jobs submitted with POST /api/jobs at bounded concurrency:

1. native: one native worker (`python -m worker.cli worker`, WORKER_TYPES=<type>, a
   solver that prints `{}`, WORKER_CORES = the largest agent count), which also runs
   the workflows.
2. agents, for each count N of `--agents` (largest first, so it runs next to the native
   phase): N HTTP agents in this process, each a loop of `POST /api/jobs/claim`
   (long-poll), `POST /heartbeat` (the start heartbeat `jobforge agent` sends as its
   solver starts; `--no-heartbeat` leaves it out) and `POST /result`, as a no-op
   solver's agent does; and one workflow worker (WORKER_TYPES set to a type nobody
   submits, so it runs JobWorkflow and never takes the agents' jobs).

Each rate runs from the first submit to the last workflow's close time (as
bench.throughput measures it), after a short untimed warm-up. The CPU seconds of every
process over the timed window are read from /proc, and the events per job are counted
from sampled histories. The last line compares the largest agent fleet with the native
worker: `agent ratio: X.XX` (completed jobs/s).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from temporalio.client import Client

from bench.harness import (
    Bench,
    CpuMeter,
    api_client,
    connect_when_healthy,
    exit_now,
    load_average,
    parse,
    run_bench,
    submit_job,
)
from bench.throughput import Phase, event_counts, measure, print_cpu, print_events, round_trips

NATIVE_TYPE = "agentbench-native"
AGENT_TYPE = "agentbench-agent"
UNUSED_TYPE = "agentbench-unused"  # the agent phases' workflow worker serves only this
JOB_WORKFLOW = "JobWorkflow"
CLAIM_WAIT_S = 5
CLAIM_PATH = "/api/jobs/claim"
RETRY_PAUSE_S = 0.5


async def call(
    http: httpx.AsyncClient,
    path: str,
    body: dict[str, Any],
    ok: tuple[int, ...],
    retried: list[int],
) -> httpx.Response:
    """POST `body`; a 503 (Temporal did not answer in time: a loaded box) is retried
    after a pause, as `jobforge agent` does, and counted in `retried[0]`."""
    while True:
        response = await http.post(path, json=body)
        if response.status_code != 503:
            break
        retried[0] += 1
        await asyncio.sleep(RETRY_PAUSE_S)
    if response.status_code not in ok:
        raise RuntimeError(f"{path}: {response.status_code} {response.text}")
    return response


async def agent(
    http: httpx.AsyncClient, worker_id: str, heartbeat: bool, retried: list[int]
) -> None:
    """One agent: claim, (heartbeat,) result, for ever."""
    claim = {"worker_id": worker_id, "types": [AGENT_TYPE], "wait": CLAIM_WAIT_S}
    report = {"worker_id": worker_id}
    while True:
        response = await call(http, CLAIM_PATH, claim, (200, 204), retried)
        if response.status_code == 204:
            continue
        job = f"/api/jobs/{response.json()['id']}"
        if heartbeat:
            await call(http, f"{job}/heartbeat", report, (204,), retried)
        await call(http, f"{job}/result", {**report, "result": {}}, (200,), retried)


async def with_agents(
    http: httpx.AsyncClient, count: int, heartbeat: bool, body: Callable[[], Awaitable[Phase]]
) -> Phase:
    """Run `body` while `count` agents claim; the agents stop after it (a claim cut
    short is handed back by the bridge, and no job is left by then)."""
    retried = [0]
    agents = [
        asyncio.create_task(agent(http, f"bench-agent-{n}", heartbeat, retried))
        for n in range(count)
    ]
    try:
        waited = asyncio.ensure_future(body())
        await asyncio.wait([waited, *agents], return_when=asyncio.FIRST_COMPLETED)
        for task in agents:
            if task.done():
                task.result()  # an agent's error ends the run with it
        phase = await waited
        if retried[0]:
            print(f"{count} agent(s): {retried[0]} call(s) answered 503 and retried", flush=True)
        return phase
    finally:
        for task in agents:
            task.cancel()
        for task in agents:
            with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
                await task


def meter_of(bench: Bench, api_pid: int, worker_pid: int) -> CpuMeter:
    """CPU of the dev server, the API, the worker and this process (the agents and the
    producers)."""
    return CpuMeter(
        {"temporal": bench.server_pid(), "api": api_pid, "worker": worker_pid, "bench": os.getpid()}
    )


async def native_phase(bench: Bench, client: Client, api_port: int, api_pid: int) -> Phase:
    """One native worker (workflows and the type's activities); jobs over REST."""
    args = bench.args
    cores = max(args.agent_counts)
    worker = bench.start_noop_worker(
        NATIVE_TYPE, "bench-native-worker", "native-worker", WORKER_CORES=str(cores)
    )
    meter = meter_of(bench, api_pid, worker.process.pid)
    with worker:
        async with api_client(api_port, timeout=120, connections=args.concurrency) as http:

            async def submit(index: int) -> str:
                return await submit_job(http, NATIVE_TYPE, {"i": index})

            return await measure(
                f"native (cores={cores})", client, JOB_WORKFLOW, args, submit, meter
            )


async def agent_phase(
    bench: Bench, client: Client, api_port: int, count: int, meter: CpuMeter
) -> Phase:
    """`count` agents drain one batch."""
    args = bench.args
    connections = args.concurrency + count
    async with api_client(api_port, timeout=120, connections=connections) as http:

        async def submit(index: int) -> str:
            return await submit_job(http, AGENT_TYPE, {"i": index})

        async def body() -> Phase:
            name = f"{count} agent(s)"
            return await measure(name, client, JOB_WORKFLOW, args, submit, meter)

        return await with_agents(http, count, args.heartbeat, body)


async def agent_phases(
    bench: Bench, client: Client, api_port: int, api_pid: int
) -> dict[int, Phase]:
    """For each agent count, largest first: that many agents and a workflow worker."""
    args = bench.args
    worker = bench.start_worker(
        "workflow-worker",
        WORKER_TYPES=UNUSED_TYPE,
        NODE_ID="bench-workflow-worker",
        WORKER_CORES=str(max(args.agent_counts)),
    )
    meter = meter_of(bench, api_pid, worker.process.pid)
    phases: dict[int, Phase] = {}
    with worker:
        for count in sorted(args.agent_counts, reverse=True):
            phases[count] = await agent_phase(bench, client, api_port, count, meter)
            rate = args.jobs / phases[count].seconds
            print(f"{count} agent(s) done: {rate:.1f} jobs/s", flush=True)
    return phases


async def run(bench: Bench) -> None:
    """The native phase, the agent phases, the events per job, the rates, the ratio."""
    args = bench.args
    client = await connect_when_healthy(bench.server.address)
    api, api_port = bench.start_api()
    api_pid = api.process.pid
    native = await native_phase(bench, client, api_port, api_pid)
    print(f"native done: {args.jobs / native.seconds:.1f} jobs/s", flush=True)
    agents = await agent_phases(bench, client, api_port, api_pid)
    api.stop(timeout=20)

    print()
    largest = max(args.agent_counts)
    native_mean = print_events(
        "native job", *await event_counts(client, native.ids, args.histories)
    )
    agent_mean = print_events(
        f"job of {largest} agents", *await event_counts(client, agents[largest].ids, args.histories)
    )
    print(f"round trips per job, native:    {round_trips(native_mean)}")
    print(f"round trips per job, {largest} agents: {round_trips(agent_mean)}")
    print(
        "  not in history: per agent job, 1 claim, "
        f"{'1 heartbeat, ' if args.heartbeat else ''}1 result call to the API (on Temporal: "
        "the bridge's poll and claim update; "
        # The running signal only for a job still running 0.5 s after its heartbeat.
        f"{'a describe and a heartbeat; ' if args.heartbeat else ''}"
        "a describe and the completion); per native job, 1 solver process"
    )
    print()
    for phase in (native, *(agents[count] for count in sorted(agents))):
        print_cpu(phase, args.jobs)
        api_ms = phase.cpu["api"] / args.jobs * 1000
        print(f"  api cpu per job: {api_ms:.1f} ms")
    print(f"load average at end: {load_average()}")
    native_rate = args.jobs / native.seconds
    print(f"native workers: {args.jobs} jobs in {native.seconds:.2f} s = {native_rate:.1f} jobs/s")
    for count in sorted(agents):
        rate = args.jobs / agents[count].seconds
        print(
            f"{count} agent(s): {args.jobs} jobs in {agents[count].seconds:.2f} s = "
            f"{rate:.1f} jobs/s ({rate / native_rate:.2f}x native)"
        )
    print(f"agent ratio: {args.jobs / agents[largest].seconds / native_rate:.2f}")


def settings(bench: Bench) -> str:
    """The run's settings line."""
    args = bench.args
    return (
        f"jobs={args.jobs} per phase, agents={args.agents} concurrency={args.concurrency} "
        f"warmup={args.warmup} heartbeat={args.heartbeat}"
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.agent_throughput",
        description="Completed no-op jobs/s of HTTP agents through the bridge vs native workers.",
    )
    parser.add_argument("--jobs", type=int, default=400, help="jobs per phase")
    parser.add_argument("--agents", default="1,4,16", help="agent counts, one phase each")
    parser.add_argument("--concurrency", type=int, default=50, help="submissions in flight")
    parser.add_argument("--warmup", type=int, default=20, help="untimed jobs before each phase")
    parser.add_argument("--histories", type=int, default=20, help="histories to count events in")
    parser.add_argument("--timeout", type=float, default=900, help="max seconds per phase")
    parser.add_argument(
        "--no-heartbeat",
        dest="heartbeat",
        action="store_false",
        help="agents report the result right after the claim, with no start heartbeat",
    )
    args = parse(parser, argv)
    try:
        args.agent_counts = sorted({int(n) for n in args.agents.split(",")})
    except ValueError:
        parser.error("--agents must be a comma list of counts, e.g. 1,4,16")
    if min(args.agent_counts) < 1 or args.jobs < 1 or args.concurrency < 1 or args.warmup < 0:
        parser.error("--agents, --jobs and --concurrency must be at least 1, --warmup not negative")
    return args


def main(argv: list[str]) -> int:
    return run_bench(parse_args(argv), run, settings=settings, data_prefix="jobforge-bench-agents-")


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
