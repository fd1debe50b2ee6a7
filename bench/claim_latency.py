"""Claim latency: from `POST /api/jobs` returning to a waiting claimer holding the job.

Run it from the repository root with the project's interpreter:

    .venv/bin/python -m bench.claim_latency --jobs 200

One run starts one headless Temporal dev server (free port, fresh temp data dir) and
measures, one phase after the other, with jobs submitted one at a time (submit one,
wait until it is held and has completed, then the next) and one claimer that is
already waiting when each job is submitted:

1. agent: the real API (`python -m worker.cli api`) and a workflow worker
   (`python -m worker.cli worker`, WORKER_TYPES set to a type nobody submits, so it
   runs JobWorkflow but never competes for the agent's type). The claimer long-polls
   `POST /api/jobs/claim {"worker_id", "types": [t], "wait": 20}`; "held" = its claim
   response arrived (bench clock). It reports `POST /result` at once so the job
   completes.
2. native: the same API and a native worker (`python -m worker.cli worker`,
   WORKER_TYPES=<type>, WORKER_SOLVERS mapping it to `printf {}`), which also runs the
   workflows. "Held" = the activity started: the job's `claimed_at` (the worker's wall
   clock when the attempt began, integer ms) read with GET /api/jobs/{id} after the
   job completed. Same machine, same clock as the bench.
3. bare: a minimal workflow (`bench.bare.BareClaimJob`) whose one activity returns
   time.time() at its start, served by one worker subprocess (this module with
   `--bare-worker`) on its own task queue with the activity-worker knobs jobforge's
   worker uses; started with the Temporal client. Latency = activity start -
   start_workflow() returned.

Every latency is measured from the moment the submit call returned in the bench
process. After the three phases, `--histories` sampled workflow histories per phase
give a timeline (server event times, relative to WorkflowExecutionStarted) showing
where the time goes. The agent's timeline also places the bridge's own points, counted
back from the claim response by its `Server-Timing` (so they include the response's
trip to the bench, under a millisecond idle), and the split's medians are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from bench import bare
from bench.harness import (
    Bench,
    api_client,
    connect_when_healthy,
    describe,
    exit_now,
    load_average,
    p50_p99,
    parse,
    percentile,
    run_bench,
)
from tests.procs import PYTHON

AGENT_TYPE = "claimbench-agent"
NATIVE_TYPE = "claimbench-native"
UNUSED_TYPE = "claimbench-unused"  # the agent phase's workflow worker serves only this
CLAIM_WAIT_S = 20
BARE_QUEUE = "bench-claim-bare"
BARE_READY = "bare worker ready"
PHASES = ("agent", "native", "bare")


@dataclass
class Phase:
    """One measured phase: per job, its id, the latency and the submit call's time."""

    name: str
    ids: list[str] = field(default_factory=list)
    latency_ms: list[float] = field(default_factory=list)
    submit_ms: list[float] = field(default_factory=list)
    # Per job: client-side points in epoch seconds, to place on the history timeline.
    points: list[dict[str, float]] = field(default_factory=list)
    # Per job (agent): the claim answer's Server-Timing, ms per part.
    splits: list[dict[str, float]] = field(default_factory=list)


Outcome = tuple[str, float, float, dict[str, float]]
# The bridge's points, counted back from the claim response by its Server-Timing parts.
BRIDGE_POINTS = (
    ("answer", "bridge: claim update answered"),
    ("claim", "bridge: claim update sent"),
    ("prepare", "bridge: task in hand"),
)


async def run_sequence(
    phase: Phase, count: int, warmup: int, one: Callable[[int], Awaitable[Outcome]]
) -> None:
    """`warmup` untimed jobs, then `count` timed ones, one at a time (each `one` waits
    `--gap` before it submits, so the claimer or poller is waiting again by then)."""
    for index in range(warmup + count):
        job_id, latency_ms, submit_ms, points = await one(index)
        if index < warmup:
            continue
        phase.ids.append(job_id)
        phase.latency_ms.append(latency_ms)
        phase.submit_ms.append(submit_ms)
        phase.points.append(points)


# -- the phases ------------------------------------------------------------------------


def claim_client(port: int) -> httpx.AsyncClient:
    """The bench's HTTP client (keep-alive, several connections: claim and submit)."""
    return api_client(port, timeout=CLAIM_WAIT_S + 30, connections=8)


async def submit(http: httpx.AsyncClient, job_type: str, index: int) -> tuple[str, float, float]:
    """POST /api/jobs; the job id, when the call returned (epoch s), its duration (ms)."""
    sent = time.perf_counter()
    response = await http.post("/api/jobs", json={"type": job_type, "params": {"i": index}})
    returned = time.time()
    took_ms = (time.perf_counter() - sent) * 1000
    if response.status_code != 201:
        raise RuntimeError(f"POST /api/jobs: {response.status_code} {response.text}")
    return response.json()["id"], returned, took_ms


async def agent_phase(bench: Bench, client: Client, api_port: int) -> Phase:
    """An HTTP claimer long-polling the real API; a workflow-only worker."""
    args = bench.args
    worker = bench.start_worker(
        "workflow-worker", WORKER_TYPES=UNUSED_TYPE, NODE_ID="bench-workflow-worker"
    )
    phase = Phase("agent")
    http = claim_client(api_port)
    claim_body = {"worker_id": "bench-agent", "types": [AGENT_TYPE], "wait": CLAIM_WAIT_S}

    async def claim_once() -> tuple[dict[str, Any], float, dict[str, float]]:
        while True:
            response = await http.post("/api/jobs/claim", json=claim_body)
            held = time.time()
            if response.status_code == 200:
                return response.json(), held, server_timing(response)
            if response.status_code != 204:
                raise RuntimeError(f"claim: {response.status_code} {response.text}")

    async def one(index: int) -> Outcome:
        claimer = asyncio.create_task(claim_once())
        await asyncio.sleep(args.gap)  # the claim is in, and the API's poll is at Temporal
        job_id, returned, took_ms = await submit(http, AGENT_TYPE, index)
        claimed, held, split = await asyncio.wait_for(claimer, CLAIM_WAIT_S + 10)
        if claimed["id"] != job_id:
            raise RuntimeError(f"claimed {claimed['id']}, submitted {job_id}")
        response = await http.post(
            f"/api/jobs/{job_id}/result", json={"worker_id": "bench-agent", "result": {}}
        )
        if response.status_code != 200:
            raise RuntimeError(f"result: {response.status_code} {response.text}")
        await client.get_workflow_handle(job_id).result()
        points = {"POST returned": returned, "claim response received": held}
        back = held
        for part, label in BRIDGE_POINTS:
            back -= split.get(part, 0.0) / 1000
            points[label] = back
        if index >= args.warmup:
            phase.splits.append(split)
        return job_id, (held - returned) * 1000, took_ms, points

    with worker:
        async with http:
            await run_sequence(phase, args.jobs, args.warmup, one)
    return phase


async def native_phase(bench: Bench, client: Client, api_port: int) -> Phase:
    """A native worker (workflows and the type's activity queue); held = claimed_at."""
    args = bench.args
    worker = bench.start_noop_worker(NATIVE_TYPE, "bench-native-worker", "native-worker")
    phase = Phase("native")
    http = claim_client(api_port)

    async def one(index: int) -> Outcome:
        await asyncio.sleep(args.gap)  # the worker's activity poll is back at Temporal
        job_id, returned, took_ms = await submit(http, NATIVE_TYPE, index)
        await client.get_workflow_handle(job_id).result()
        response = await http.get(f"/api/jobs/{job_id}")
        job = response.json()
        if response.status_code != 200 or job.get("status") != "completed":
            raise RuntimeError(f"GET /api/jobs/{job_id}: {response.status_code} {response.text}")
        claimed_at = job["claimed_at"] / 1000
        points = {"POST returned": returned, "claimed_at (worker, ms)": claimed_at}
        return job_id, (claimed_at - returned) * 1000, took_ms, points

    with worker:
        async with http:
            await run_sequence(phase, args.jobs, args.warmup, one)
    return phase


async def bare_phase(bench: Bench, client: Client) -> Phase:
    """BareClaimJob on one worker subprocess; workflows started with the Temporal client."""
    args = bench.args
    proc = bench.spawn(
        "bare-worker",
        [PYTHON, "-m", "bench.claim_latency", "--bare-worker", "--address", bench.server.address],
        bench.env(),
    )
    proc.wait_for(BARE_READY)
    phase = Phase("bare")
    run_id = os.urandom(4).hex()

    async def one(index: int) -> Outcome:
        await asyncio.sleep(args.gap)  # the worker's activity poll is back at Temporal
        sent = time.perf_counter()
        handle = await client.start_workflow(
            bare.BareClaimJob.run,
            {"i": index},
            id=f"bare-{run_id}-{index}",
            task_queue=BARE_QUEUE,
        )
        returned = time.time()
        took_ms = (time.perf_counter() - sent) * 1000
        started = float(await handle.result())
        points = {"start_workflow returned": returned, "activity began (worker)": started}
        return handle.id, (started - returned) * 1000, took_ms, points

    with proc:
        await run_sequence(phase, args.jobs, args.warmup, one)
    return phase


# -- where the time goes ---------------------------------------------------------------


def server_timing(response: httpx.Response) -> dict[str, float]:
    """A response's `Server-Timing` parts (`name;dur=<ms>`), ms by name."""
    parts: dict[str, float] = {}
    for part in response.headers.get("server-timing", "").split(","):
        name, _, duration = part.strip().partition(";dur=")
        if name and duration:
            parts[name] = float(duration)
    return parts


def print_splits(phase: Phase) -> None:
    """Medians of the claim's Server-Timing parts."""
    if not phase.splits:
        return
    names = list(phase.splits[0])
    medians = ", ".join(
        f"{name} {statistics.median(split.get(name, 0.0) for split in phase.splits):.1f}"
        for name in names
    )
    count = len(phase.splits)
    print(f"agent claim, the bridge's Server-Timing (median ms, {count} claims): {medians}")


def history_points(events: list[Any]) -> dict[str, float]:
    """Named points of one history (epoch s): the dispatch path up to the claim."""
    points: dict[str, float] = {}
    workflow_tasks = 0
    for event in events:
        kind = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")
        at = event.event_time.ToMicroseconds() / 1e6
        if kind == "WORKFLOW_TASK_SCHEDULED":
            workflow_tasks += 1
        label = {
            "WORKFLOW_EXECUTION_STARTED": "WorkflowExecutionStarted",
            "WORKFLOW_TASK_SCHEDULED": f"workflow task {workflow_tasks} scheduled",
            "WORKFLOW_TASK_STARTED": f"workflow task {workflow_tasks} started",
            "WORKFLOW_TASK_COMPLETED": f"workflow task {workflow_tasks} completed",
            "ACTIVITY_TASK_SCHEDULED": "ActivityTaskScheduled",
            "ACTIVITY_TASK_STARTED": "ActivityTaskStarted (poll got the task)",
            "WORKFLOW_EXECUTION_UPDATE_ACCEPTED": "claim update accepted",
            "WORKFLOW_EXECUTION_UPDATE_COMPLETED": "claim update completed",
        }.get(kind)
        if label is not None and label not in points:
            points[label] = at
        if kind in ("ACTIVITY_TASK_COMPLETED", "WORKFLOW_EXECUTION_COMPLETED"):
            break  # the rest is after the job was held
    return points


async def timeline(client: Client, phase: Phase, sample: int) -> None:
    """Median offset of each point from WorkflowExecutionStarted over sampled jobs."""
    step = max(1, len(phase.ids) // sample)
    picked = list(range(0, len(phase.ids), step))[:sample]
    offsets: dict[str, list[float]] = {}
    for index in picked:
        history = await client.get_workflow_handle(phase.ids[index]).fetch_history()
        points = history_points(list(history.events))
        points.update(phase.points[index])
        origin = points["WorkflowExecutionStarted"]
        for label, at in points.items():
            offsets.setdefault(label, []).append((at - origin) * 1000)
    order = {label: statistics.median(values) for label, values in offsets.items()}
    print(f"{phase.name} timeline, median ms after WorkflowExecutionStarted ({len(picked)} jobs):")
    for label in sorted(order, key=lambda name: order[name]):
        values = offsets[label]
        print(
            f"  {order[label]:7.1f}  {label}"
            + (f"  (p90 {percentile(values, 90):.1f})" if len(values) > 1 else "")
        )


# -- the run ---------------------------------------------------------------------------


async def run(bench: Bench) -> None:
    """Three phases on one server, then the timelines and the figures."""
    args = bench.args
    client = await connect_when_healthy(bench.server.address)
    api, api_port = bench.start_api()
    phases: dict[str, Phase] = {}
    order = args.order.split(",")
    for name in order:
        began = time.monotonic()
        if name == "agent":
            phases[name] = await agent_phase(bench, client, api_port)
        elif name == "native":
            phases[name] = await native_phase(bench, client, api_port)
        else:
            if order[-1] == "bare":
                # No jobforge phase follows: stop the (idle) API for a quieter machine.
                api.stop(timeout=20)
            phases[name] = await bare_phase(bench, client)
        print(f"{name} phase: {time.monotonic() - began:.1f} s", flush=True)
    api.stop(timeout=20)

    print()
    for name in PHASES:
        await timeline(client, phases[name], args.histories)
    print_splits(phases["agent"])
    print()
    for name in PHASES:
        phase = phases[name]
        call = "POST /api/jobs" if name != "bare" else "start_workflow"
        print(f"{name} submit call ({call}): {describe(phase.submit_ms)}")
        print(f"{name} latency: {describe(phase.latency_ms)}")
    print(f"load average at end: {load_average()}")
    for name in PHASES:
        values = phases[name].latency_ms
        print(p50_p99(name, values))


def settings(bench: Bench) -> str:
    """The run's settings line."""
    args = bench.args
    return (
        f"jobs={args.jobs} per phase, sequential, warmup={args.warmup} gap={args.gap:g} s "
        f"order={args.order}"
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.claim_latency",
        description="Submit-to-held latency: HTTP agent, native worker, bare Temporal.",
    )
    parser.add_argument("--jobs", type=int, default=200, help="timed jobs per phase")
    parser.add_argument("--warmup", type=int, default=10, help="untimed jobs before each phase")
    parser.add_argument(
        "--gap",
        type=float,
        default=0.1,
        help="seconds between a job being done and the next submit (the claimer waits)",
    )
    parser.add_argument(
        "--order", default=",".join(PHASES), help="phase order (comma list of the three)"
    )
    parser.add_argument("--histories", type=int, default=30, help="histories per timeline")
    args = parse(parser, argv, bare_worker=True)
    if args.jobs < 1 or args.warmup < 0 or args.gap < 0:
        parser.error("--jobs must be at least 1, --warmup and --gap not negative")
    if sorted(args.order.split(",")) != sorted(PHASES):
        parser.error("--order must name agent, native and bare once each")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.bare_worker:
        asyncio.run(
            bare.serve(
                args.address,
                bare.BareClaimJob,
                activities=[bare.bare_started_at],
                task_queue=BARE_QUEUE,
                # jobforge's default WORKER_CORES=1.
                max_concurrent_activities=1,
                ready=BARE_READY,
            )
        )
        return 0
    return run_bench(args, run, settings=settings, data_prefix="jobforge-bench-claim-")


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
