"""Event latency: from a job transition to its arrival on SSE clients of the event stream.

Run it from the repository root with the project's interpreter:

    .venv/bin/python -m bench.event_latency --clients 1,50

One run starts one headless Temporal dev server (free port, fresh temp data dir), the
real API (`python -m worker.cli api`, EVENTS_SETTLE_MS / EVENTS_POLL_MS left at their
defaults unless --settle-ms / --poll-ms say otherwise) and one native worker
(`python -m worker.cli worker`, WORKER_TYPES=<type>, a solver that prints `{}`; it runs
the workflows too). Then, for each client count in --clients, one after the other:

1. that many SSE clients connect to `GET /api/jobs/events` (raw asyncio HTTP/1.1,
   all in this process: each is a socket and a small chunked-transfer/SSE parser);
2. jobs are submitted with `POST /api/jobs` at --rate jobs/s for --duration s;
3. every event of those jobs each client receives is stamped with the wall clock
   when its chunk was read; latency = receive time - the event's `ts` (the time the
   workflow recorded for the transition, ms; for `job:created`, the API's clock at
   submit);
4. the phase ends when every client has seen `job:completed` for every job (or at
   --drain-timeout), and the clients hang up.

The CPU seconds of every process during each phase are read from /proc, so a
saturated client process (which would inflate the figures) shows up. The API's
`/metrics` before and after each phase give the visibility listings the event feed
made (`jobforge_event_feed_polls_total`: one per look, shared by every client) and its
settle window at the end; the API's CPU is also given per client and minute.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import dataclass, field

import httpx

from api.settings import ApiSettings
from bench.harness import (
    SECRET,
    Bench,
    CpuMeter,
    api_client,
    connect_when_healthy,
    describe,
    exit_now,
    load_average,
    p50_p99,
    parse,
    percentile,
    run_bench,
    submit_job,
)

JOB_TYPE = "eventbench"
EVENTS_PER_JOB = 4  # created, assigned, running, completed
EVENT_NAMES = ("job:created", "job:assigned", "job:running", "job:completed")


# -- the SSE client ----------------------------------------------------------------------


@dataclass
class Received:
    """One event as one client got it."""

    job_id: str
    name: str
    ts: int
    at: float  # epoch s when its chunk was read


@dataclass
class SseClient:
    """A raw HTTP/1.1 SSE client: a socket, chunked decoding, `\\n\\n`-separated events."""

    port: int
    events: list[Received] = field(default_factory=list)
    completed: set[str] = field(default_factory=set)
    connected: asyncio.Event = field(default_factory=asyncio.Event)
    error: BaseException | None = None

    async def run(self) -> None:
        """Read events until cancelled."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            writer.write(
                (
                    "GET /api/jobs/events HTTP/1.1\r\n"
                    f"Host: 127.0.0.1:{self.port}\r\n"
                    "Accept: text/event-stream\r\n"
                    f"Authorization: Bearer {SECRET}\r\n"
                    "\r\n"
                ).encode()
            )
            await writer.drain()
            status = await reader.readline()
            if b" 200 " not in status:
                raise RuntimeError(f"GET /api/jobs/events: {status!r}")
            chunked = False
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b"\n", b""):
                    break
                if line.lower().startswith(b"transfer-encoding:") and b"chunked" in line.lower():
                    chunked = True
            self.connected.set()
            buffer = b""
            while True:
                if chunked:
                    size_line = await reader.readline()
                    if not size_line:
                        return
                    size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                    if size == 0:
                        return
                    data = await reader.readexactly(size + 2)
                    data = data[:-2]
                else:
                    data = await reader.read(65536)
                    if not data:
                        return
                at = time.time()
                buffer += data
                *blocks, buffer = buffer.split(b"\n\n")
                for block in blocks:
                    self._parse(block, at)
        except asyncio.CancelledError:
            raise
        except BaseException as err:
            self.error = err
            self.connected.set()
            raise
        finally:
            writer.close()

    def _parse(self, block: bytes, at: float) -> None:
        name = ""
        data = []
        for raw in block.decode().replace("\r\n", "\n").split("\n"):
            if raw.startswith(":") or not raw:
                continue
            key, _, value = raw.partition(":")
            value = value.removeprefix(" ")
            if key == "event":
                name = value
            elif key == "data":
                data.append(value)
        if not data:
            return
        body = json.loads("\n".join(data))
        name = name or body.get("event", "")
        self.events.append(Received(body["id"], name, int(body["ts"]), at))
        if name == "job:completed":
            self.completed.add(body["id"])


@dataclass
class Result:
    """One phase's latencies."""

    clients: int
    latency_ms: list[float]
    by_event: dict[str, list[float]]
    by_third: list[list[float]]
    expected: int
    received: int
    cpu: dict[str, float]
    seconds: float
    feed_polls: float | None = None
    settle_ms: float | None = None


# -- a phase -----------------------------------------------------------------------------


async def phase(
    bench: Bench, client_count: int, api_port: int, http: httpx.AsyncClient, meter: CpuMeter
) -> Result:
    """`client_count` SSE clients; jobs at --rate for --duration; their latencies."""
    args = bench.args
    clients = [SseClient(api_port) for _ in range(client_count)]
    tasks = [asyncio.create_task(c.run()) for c in clients]
    try:
        await asyncio.wait_for(asyncio.gather(*(c.connected.wait() for c in clients)), 30)
        for c in clients:
            if c.error is not None:
                raise RuntimeError(f"an SSE client failed: {c.error!r}")
        await asyncio.sleep(1.0)  # the feed's poller is running, its cursor is now
        before = await feed_metrics(http)
        meter.start()
        began = time.monotonic()
        ids: list[str] = []
        count = int(args.rate * args.duration)

        async def submit(index: int) -> None:
            ids.append(await submit_job(http, JOB_TYPE, {"i": index}))

        submits = []
        for index in range(count):
            delay = began + index / args.rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            submits.append(asyncio.create_task(submit(index)))
        await asyncio.gather(*submits)
        wanted = set(ids)
        deadline = time.monotonic() + args.drain_timeout
        while time.monotonic() < deadline:
            if all(wanted <= c.completed for c in clients):
                break
            for c in clients:
                if c.error is not None:
                    raise RuntimeError(f"an SSE client failed: {c.error!r}")
            await asyncio.sleep(0.1)
        seconds = time.monotonic() - began
        cpu = meter.stop()
        after = await feed_metrics(http)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    latency: list[float] = []
    by_event: dict[str, list[float]] = {}
    # By when the transition happened: the first, middle and last third of the phase.
    by_third: list[list[float]] = [[], [], []]
    start_ms = (time.time() - (time.monotonic() - began)) * 1000
    span_ms = max(args.duration * 1000, 1.0)
    received = 0
    for c in clients:
        for event in c.events:
            if event.job_id not in wanted:
                continue
            received += 1
            value = event.at * 1000 - event.ts
            latency.append(value)
            by_event.setdefault(event.name, []).append(value)
            third = min(2, max(0, int((event.ts - start_ms) * 3 // span_ms)))
            by_third[third].append(value)
    return Result(
        client_count,
        latency,
        by_event,
        by_third,
        expected=len(wanted) * EVENTS_PER_JOB * client_count,
        received=received,
        cpu=cpu,
        seconds=seconds,
        feed_polls=_delta(before, after, POLLS_METRIC),
        settle_ms=None if SETTLE_METRIC not in after else after[SETTLE_METRIC] * 1000,
    )


POLLS_METRIC = "jobforge_event_feed_polls_total"
SETTLE_METRIC = "jobforge_event_feed_settle_seconds"


async def feed_metrics(http: httpx.AsyncClient) -> dict[str, float]:
    """The event feed's samples in the API's `/metrics` (none from an API without them)."""
    response = await http.get("/metrics")
    found: dict[str, float] = {}
    for line in response.text.splitlines():
        name, _, value = line.partition(" ")
        if name in (POLLS_METRIC, SETTLE_METRIC):
            found[name] = float(value)
    return found


def _delta(before: dict[str, float], after: dict[str, float], name: str) -> float | None:
    if name not in before or name not in after:
        return None
    return after[name] - before[name]


async def run(bench: Bench) -> None:
    """The stack, then one phase per client count."""
    args = bench.args
    await connect_when_healthy(bench.server.address)
    events_env: dict[str, str] = {}
    if args.settle_ms is not None:
        events_env["EVENTS_SETTLE_MS"] = str(args.settle_ms)
    if args.poll_ms is not None:
        events_env["EVENTS_POLL_MS"] = str(args.poll_ms)
    if args.poll_gap_ms is not None:
        events_env["EVENTS_POLL_GAP_MS"] = str(args.poll_gap_ms)
    api, api_port = bench.start_api(**events_env)
    worker = bench.start_noop_worker(JOB_TYPE, "bench-event-worker")
    meter = bench.meter(api, worker, "bench (clients + submitter)")
    async with api_client(api_port, timeout=60) as http:
        # Warm-up: the type registry, the worker's caches, the feed's first ticks.
        for index in range(args.warmup):
            await submit_job(http, JOB_TYPE, {"w": index})
            await asyncio.sleep(1 / args.rate)
        await asyncio.sleep(3.0)
        results = []
        for count in args.client_counts:
            result = await phase(bench, count, api_port, http, meter)
            results.append(result)
            load = os.getloadavg()
            print(
                f"clients={count}: {result.received}/{result.expected} events received "
                f"in {result.seconds:.1f} s, load average now {load[0]:.2f}",
                flush=True,
            )
            await asyncio.sleep(2.0)

    print()
    for result in results:
        print(f"clients={result.clients} latency: {describe(result.latency_ms, 0)}")
        for name in EVENT_NAMES:
            if name in result.by_event:
                print(f"  {name:<14} {describe(result.by_event[name], 0)}")
        for name in sorted(set(result.by_event) - set(EVENT_NAMES)):
            print(f"  {name:<14} {describe(result.by_event[name], 0)}")
        thirds = " / ".join(
            f"{percentile(values, 50):.0f}" if values else "-" for values in result.by_third
        )
        print(f"  p50 by when the transition happened (first / middle / last third): {thirds} ms")
        cpu = ", ".join(
            f"{name} {seconds:.1f} s ({seconds / result.seconds * 100:.0f}% of a core)"
            for name, seconds in result.cpu.items()
        )
        print(f"  cpu over {result.seconds:.1f} s: {cpu}")
        api_cpu = result.cpu.get("api", 0.0)
        per_client = api_cpu / result.clients / (result.seconds / 60)
        polls = (
            "n/a (the API has no jobforge_event_feed_polls_total)"
            if result.feed_polls is None
            else f"{result.feed_polls:.0f} ({result.feed_polls / result.seconds:.1f}/s)"
        )
        settle = "n/a" if result.settle_ms is None else f"{result.settle_ms:.0f} ms"
        print(
            f"  feed: visibility listings {polls}, settle window at the end {settle}; "
            f"api cpu per client per minute {per_client:.2f} s"
        )
    print(f"load average at end: {load_average()}")
    for result in results:
        print(p50_p99(f"clients={result.clients}", result.latency_ms))


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.event_latency",
        description="Transition-to-SSE-client latency of GET /api/jobs/events.",
    )
    parser.add_argument("--clients", default="1,50", help="client counts, one phase each")
    parser.add_argument("--rate", type=float, default=5.0, help="jobs submitted per second")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of submitting")
    parser.add_argument("--warmup", type=int, default=10, help="untimed jobs first")
    parser.add_argument(
        "--drain-timeout", type=float, default=60.0, help="max s to wait for the last events"
    )
    parser.add_argument(
        "--settle-ms", type=int, help="EVENTS_SETTLE_MS for the API (default: unset = 100)"
    )
    parser.add_argument(
        "--poll-ms", type=int, help="EVENTS_POLL_MS for the API (default: unset = 100)"
    )
    parser.add_argument(
        "--poll-gap-ms", type=int, help="EVENTS_POLL_GAP_MS for the API (default: unset = 25)"
    )
    args = parse(parser, argv)
    try:
        args.client_counts = [int(part) for part in args.clients.split(",") if part.strip()]
    except ValueError:
        parser.error("--clients is a comma list of integers")
    if not args.client_counts or min(args.client_counts) < 1:
        parser.error("--clients needs counts of at least 1")
    if args.rate <= 0 or args.duration <= 0:
        parser.error("--rate and --duration must be positive")
    return args


def settings(bench: Bench) -> str:
    """The run's settings line, with the EVENTS_* values the API runs with."""
    args = bench.args
    defaults = ApiSettings.model_fields
    settle = args.settle_ms if args.settle_ms is not None else defaults["events_settle_ms"].default
    poll = args.poll_ms if args.poll_ms is not None else defaults["events_poll_ms"].default
    gap_field = defaults.get("events_poll_gap_ms")
    gap = args.poll_gap_ms if args.poll_gap_ms is not None else getattr(gap_field, "default", "-")
    chosen = (
        "set"
        if any(v is not None for v in (args.settle_ms, args.poll_ms, args.poll_gap_ms))
        else "defaults"
    )
    return (
        f"clients={args.clients} rate={args.rate:g} jobs/s duration={args.duration:g} s "
        f"warmup={args.warmup}; EVENTS_SETTLE_MS={settle} EVENTS_POLL_MS={poll} "
        f"EVENTS_POLL_GAP_MS={gap} ({chosen}); "
        "SSE clients: raw asyncio, all in this process"
    )


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    # The API's EVENTS_* come from the options alone, never from the caller's environment.
    return run_bench(
        args,
        run,
        settings=settings,
        data_prefix="jobforge-bench-events-",
        drop_env=("EVENTS_",),
    )


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
