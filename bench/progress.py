"""What a job's progress costs: history events (none), and the API's CPU to show it.

Run it from the repository root with the project's interpreter:

    .venv/bin/python -m bench.progress --duration 30 --rate 10

One run starts one headless Temporal dev server (free port, fresh temp data dir), the
real API (`python -m worker.cli api`) and one native worker (`python -m worker.cli
worker`, WORKER_TYPES=progressbench, a registered solver that writes `JOBFORGE_PROGRESS`
lines to stderr at --rate lines/s for --duration s, or writes none), both with
PROGRESS_PUBLISH_MS at its default unless --publish-ms says otherwise. Then, one after
the other, with one job at a time:

1. idle: no job, no client, for --idle s (the API's own CPU floor);
2. progress + GET: a job that writes progress, no SSE client, `GET /api/jobs/{id}`
   every --poll-s s (a dashboard's open detail, or `jobforge show` in a loop);
3. SSE, no job: one SSE client on `GET /api/jobs/events`, for --idle s (the stream's
   fixed cost: the transition poller, and a progress round's listing each second);
4. silent + SSE: a job that writes no progress, one SSE client;
5. progress + SSE: a job that writes progress, one SSE client.

The GET phase comes before any SSE client: once one has connected, the API's transition
poller runs on (it also counts `/metrics` events), and would be measured with the GETs.

Each job's whole history is fetched and counted by event type (events, workflow tasks,
signals, updates, search-attribute upserts, memo changes): the rule is that progress
adds no workflow task in proportion to the lines written, so the progress jobs'
histories must equal the silent one's. The CPU seconds of the API (and, for context,
the worker and the dev server) are read from /proc over each phase; the SSE client's
`job:progress` events are counted and their gaps measured.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import sys
import time
from collections import Counter
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

import httpx
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from api.settings import ApiSettings
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
from tests.procs import PYTHON
from worker.hub_client import SseParser

JOB_TYPE = "progressbench"
# Writes `rate` progress lines a second for `duration` s (none at rate 0), then answers.
SOLVER = """
import json, sys, time
params = json.loads(sys.argv[2])
rate, duration = float(params["rate"]), float(params["duration"])
start = time.monotonic()
lines = 0
if rate > 0:
    total = int(rate * duration)
    while lines < total:
        delay = start + lines / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        lines += 1
        print(f"JOBFORGE_PROGRESS {lines / total:.4f} line {lines}", file=sys.stderr, flush=True)
else:
    time.sleep(duration)
print(json.dumps({"lines": lines}))
"""
# History columns: a label and the event type it counts.
COLUMNS = (
    ("workflow tasks", "WORKFLOW_TASK_COMPLETED"),
    ("signals", "WORKFLOW_EXECUTION_SIGNALED"),
    ("updates", "WORKFLOW_EXECUTION_UPDATE_ACCEPTED"),
    ("upserts", "UPSERT_WORKFLOW_SEARCH_ATTRIBUTES"),
    ("memo", "WORKFLOW_PROPERTIES_MODIFIED"),
    ("activity tasks", "ACTIVITY_TASK_STARTED"),
)


# -- the SSE client ----------------------------------------------------------------------


@dataclass
class Stream:
    """One client of `GET /api/jobs/events?type=progressbench`: each event's name, id,
    data and arrival (monotonic s)."""

    http: httpx.AsyncClient
    events: list[tuple[str, str, dict[str, Any], float]] = field(default_factory=list)
    connected: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        """Read events until cancelled."""
        async with self.http.stream(
            "GET", "/api/jobs/events", params={"type": JOB_TYPE}, timeout=None
        ) as response:
            if response.status_code != 200:
                raise RuntimeError(f"GET /api/jobs/events: {response.status_code}")
            self.connected.set()
            parser = SseParser()
            async for line in response.aiter_lines():
                if (event := parser.feed(line)) is not None:
                    self.events.append((*event, now()))

    def of(self, job_id: str, name: str) -> list[tuple[str, dict[str, Any], float]]:
        """One job's events of one name: (id, data, arrival)."""
        return [(i, d, at) for n, i, d, at in self.events if n == name and d["id"] == job_id]


def now() -> float:
    return time.monotonic()


# -- a phase -----------------------------------------------------------------------------


@dataclass
class Phase:
    """One measured phase."""

    name: str
    seconds: float
    cpu: dict[str, float]
    job_id: str | None = None
    lines: int = 0
    history: Counter[str] = field(default_factory=Counter)
    progress_events: int | None = None
    gaps_s: list[float] = field(default_factory=list)
    event_ids: int = 0
    gets: int = 0


async def wait_completed(http: httpx.AsyncClient, job_id: str, limit_s: float) -> dict[str, Any]:
    """Poll `GET /api/jobs/{id}` (once a second) until the job completed."""
    end = now() + limit_s
    while True:
        response = await http.get(f"/api/jobs/{job_id}")
        response.raise_for_status()
        job: dict[str, Any] = response.json()
        if job["status"] == "completed":
            return job
        if job["status"] in ("failed", "quarantined", "stopped"):
            raise RuntimeError(f"job {job_id} ended {job['status']}: {job.get('fail_reason')}")
        if now() > end:
            raise TimeoutError(f"job {job_id} still {job['status']} after {limit_s:g} s")
        await asyncio.sleep(1.0)


async def history_of(client: Client, job_id: str) -> Counter[str]:
    """The job's history, counted by event type."""
    history = await client.get_workflow_handle(job_id).fetch_history()
    return Counter(
        EventType.Name(event.event_type).removeprefix("EVENT_TYPE_") for event in history.events
    )


async def job_phase(
    name: str,
    bench: Bench,
    client: Client,
    http: httpx.AsyncClient,
    meter: CpuMeter,
    *,
    rate: float,
    sse: bool,
) -> Phase:
    """One job (progress at `rate` lines/s, or none) with an SSE client or GET polling."""
    args = bench.args
    stream = Stream(http)
    reader = asyncio.create_task(stream.run()) if sse else None
    gets = 0
    try:
        if reader is not None:
            await asyncio.wait_for(stream.connected.wait(), 30)
            await asyncio.sleep(1.0)  # the feed's first rounds, before the meter starts
        meter.start()
        began = now()
        job_id = await submit_job(http, JOB_TYPE, {"rate": rate, "duration": args.duration})
        limit = args.duration + 120
        if reader is not None:
            while not stream.of(job_id, "job:completed"):
                if reader.done():
                    reader.result()  # raises what ended it
                    raise RuntimeError("the event stream ended")
                if now() - began > limit:
                    raise TimeoutError(f"{name}: no job:completed after {limit:g} s")
                await asyncio.sleep(0.1)
        else:
            # A dashboard's open detail: one read every --poll-s until the job is done.
            while True:
                response = await http.get(f"/api/jobs/{job_id}")
                response.raise_for_status()
                gets += 1
                if response.json()["status"] == "completed":
                    break
                if now() - began > limit:
                    raise TimeoutError(f"{name}: not completed after {limit:g} s")
                await asyncio.sleep(max(args.poll_s - (now() - began) % args.poll_s, 0.0))
        seconds = now() - began
        cpu = meter.stop()
    finally:
        if reader is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
    job = await wait_completed(http, job_id, 30)
    phase = Phase(name, seconds, cpu, job_id, job["result"]["lines"], gets=gets)
    phase.history = await history_of(client, job_id)
    if sse:
        progress = stream.of(job_id, "job:progress")
        phase.progress_events = len(progress)
        phase.event_ids = sum(1 for event_id, _, _ in progress if event_id)
        arrivals = [at for _, _, at in progress]
        phase.gaps_s = [b - a for a, b in itertools.pairwise(arrivals)]
    return phase


async def idle_phase(bench: Bench, http: httpx.AsyncClient, meter: CpuMeter, *, sse: bool) -> Phase:
    """No job, for --idle s: the API's CPU floor, with or without an SSE client."""
    stream = Stream(http)
    reader = asyncio.create_task(stream.run()) if sse else None
    try:
        if reader is not None:
            await asyncio.wait_for(stream.connected.wait(), 30)
        meter.start()
        began = now()
        await asyncio.sleep(bench.args.idle)  # a fixed window, measured
        seconds = now() - began
        cpu = meter.stop()
    finally:
        if reader is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
    name = "SSE client, no job" if sse else "idle (no job, no client)"
    return Phase(name, seconds, cpu)


# -- the run -----------------------------------------------------------------------------


def cpu_text(phase: Phase) -> str:
    return ", ".join(
        f"{who} {seconds:.2f} s ({seconds / phase.seconds * 100:.1f}% of a core)"
        for who, seconds in phase.cpu.items()
    )


def print_results(phases: list[Phase], publish_ms: int) -> None:
    jobs = [p for p in phases if p.job_id is not None]
    print()
    print("history per job (whole history, counted by event type):")
    header = f"  {'job':<26} {'lines':>6} {'events':>7}" + "".join(
        f" {label:>15}" for label, _ in COLUMNS
    )
    print(header)
    for p in jobs:
        counts = "".join(f" {p.history.get(kind, 0):>15}" for _, kind in COLUMNS)
        print(f"  {p.name:<26} {p.lines:>6} {sum(p.history.values()):>7}{counts}")
    silent = next(p for p in jobs if not p.lines)
    for p in jobs:
        if p is silent:
            continue
        extra = {
            label: p.history.get(kind, 0) - silent.history.get(kind, 0) for label, kind in COLUMNS
        }
        extra["events"] = sum(p.history.values()) - sum(silent.history.values())
        per_line = extra["workflow tasks"] / p.lines if p.lines else 0.0
        verdict = "holds" if extra["workflow tasks"] <= 0 else "BROKEN"
        print(
            f"  {p.name} vs {silent.name}: {extra['events']:+d} events, "
            f"{extra['workflow tasks']:+d} workflow tasks ({per_line:+.3f} per progress line), "
            f"{extra['signals']:+d} signals, {extra['updates']:+d} updates, "
            f"{extra['upserts']:+d} upserts; rule (no workflow task per line) {verdict}"
        )
    print()
    print("CPU per phase (/proc):")
    for p in phases:
        print(f"  {p.name} over {p.seconds:.1f} s: {cpu_text(p)}")
    idle = phases[0]
    idle_rate = idle.cpu["api"] / idle.seconds
    for p in jobs:
        above = (p.cpu["api"] / p.seconds - idle_rate) * 1000
        print(f"  API above idle, {p.name}: {above:.1f} ms of CPU per s")
    print()
    for p in jobs:
        if p.progress_events is None:
            print(f"  {p.name}: {p.gets} GET /api/jobs/{{id}} in {p.seconds:.1f} s")
            continue
        gaps = (
            f"gaps min {min(p.gaps_s):.2f} s, median {statistics.median(p.gaps_s):.2f} s"
            if p.gaps_s
            else "no gaps"
        )
        bound = p.seconds * 1000 / publish_ms
        print(
            f"  {p.name}: {p.progress_events} job:progress events for {p.lines} lines "
            f"({gaps}; bound {bound:.0f} at one per {publish_ms} ms), "
            f"{p.event_ids} with an id"
        )
    print(f"load average at end: {load_average()}")


async def run(bench: Bench) -> None:
    """The stack, then the phases."""
    args = bench.args
    client = await connect_when_healthy(bench.server.address)
    publish = {"PROGRESS_PUBLISH_MS": str(args.publish_ms)} if args.publish_ms else {}
    api, api_port = bench.start_api(**publish)
    worker = bench.start_worker(
        WORKER_TYPES=JOB_TYPE,
        WORKER_SOLVERS=json.dumps({JOB_TYPE: [PYTHON, "-c", SOLVER]}),
        NODE_ID="bench-progress-worker",
        **publish,
    )
    meter = CpuMeter(
        {"api": api.process.pid, "worker": worker.process.pid, "temporal": bench.server_pid()}
    )
    async with api_client(api_port, timeout=60) as http:
        # Warm-up: the type registry, the worker's queue, the solver's first start.
        warm = await submit_job(http, JOB_TYPE, {"rate": 0, "duration": 0})
        await wait_completed(http, warm, 60)
        phases: list[Phase] = []

        async def measured(phase: Awaitable[Phase]) -> None:
            phases.append(await phase)
            print(f"{phases[-1].name}: {phases[-1].seconds:.1f} s, load average {load_average()}")

        await measured(idle_phase(bench, http, meter, sse=False))
        await measured(
            job_phase(
                "progress + GET polling", bench, client, http, meter, rate=args.rate, sse=False
            )
        )
        await measured(idle_phase(bench, http, meter, sse=True))
        for name, rate in (("silent + SSE client", 0.0), ("progress + SSE client", args.rate)):
            await measured(job_phase(name, bench, client, http, meter, rate=rate, sse=True))
    default_ms: int = ApiSettings.model_fields["progress_publish_ms"].default
    print_results(phases, args.publish_ms or default_ms)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.progress",
        description="History events and API CPU of a job's progress, against a silent job.",
    )
    parser.add_argument("--duration", type=float, default=30.0, help="seconds each job runs")
    parser.add_argument("--rate", type=float, default=10.0, help="progress lines per second")
    parser.add_argument(
        "--poll-s", type=float, default=1.0, help="seconds between GET /api/jobs/{id}"
    )
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of the idle phase")
    parser.add_argument(
        "--publish-ms", type=int, help="PROGRESS_PUBLISH_MS of the API and worker (default 1000)"
    )
    args = parse(parser, argv)
    if args.duration <= 0 or args.rate <= 0 or args.poll_s <= 0 or args.idle <= 0:
        parser.error("--duration, --rate, --poll-s and --idle must be positive")
    return args


def settings(bench: Bench) -> str:
    """The run's settings line."""
    args = bench.args
    publish = args.publish_ms or "1000 (default)"
    return (
        f"duration={args.duration:g} s rate={args.rate:g} lines/s poll={args.poll_s:g} s "
        f"idle={args.idle:g} s PROGRESS_PUBLISH_MS={publish}"
    )


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    # PROGRESS_PUBLISH_MS comes from the options alone, never from the caller's environment.
    return run_bench(
        args,
        run,
        settings=settings,
        data_prefix="jobforge-bench-progress-",
        drop_env=("PROGRESS_",),
    )


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
