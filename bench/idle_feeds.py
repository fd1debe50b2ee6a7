"""What idle API replicas cost the dev server while jobs run elsewhere.

Run it from the repository root with the project's interpreter:

    .venv/bin/python -m bench.idle_feeds --replicas 6 --idle-poll-ms 1000,5000

One run starts one headless Temporal dev server, one native worker (the workflows and a
no-op job type) and the API that jobs are submitted through. Then, for "no replicas"
and for each EVENTS_IDLE_POLL_MS given, it starts --replicas more APIs on the same
namespace that nothing is sent to, but whose event feeds run (a `GET /metrics` starts
a feed, as a scraper does), and submits jobs at --rate a second for --seconds. It prints
the CPU seconds a second of the dev server, of the idle replicas together, and of the
busy API and the worker, read from /proc over the submission window, and the feed's
listings (`jobforge_event_feed_polls_total`) the replicas made in it.

Every idle replica's feed lists the jobs updated in its look-back at each look: its
cost follows the namespace's job rate, not its own requests.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time

import httpx

from bench.harness import (
    Bench,
    CpuMeter,
    api_client,
    exit_now,
    load_average,
    parse,
    run_bench,
    submit_job,
)
from tests.procs import Proc

JOB_TYPE = "bench-idle-feeds"
POLLS = re.compile(r"^jobforge_event_feed_polls_total\s+(\S+)$", re.M)


def polls(port: int) -> float:
    """The feed's listings so far, from the replica's /metrics (which starts the feed)."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
    found = POLLS.search(text)
    return float(found.group(1)) if found else 0.0


async def submit_for(http: httpx.AsyncClient, rate: float, seconds: float) -> int:
    """Submit no-op jobs at `rate` a second for `seconds`; how many were submitted."""
    start = time.monotonic()
    sent = 0
    pending: set[asyncio.Task[str]] = set()
    while (elapsed := time.monotonic() - start) < seconds:
        due = int(elapsed * rate) + 1
        while sent < due:
            pending.add(asyncio.create_task(submit_job(http, JOB_TYPE, {"i": sent})))
            sent += 1
        done = {task for task in pending if task.done()}
        for task in done:
            task.result()
        pending -= done
        await asyncio.sleep(1 / rate)  # the pace of the load, not a wait for a condition
    await asyncio.gather(*pending)
    return sent


async def phase(
    bench: Bench, label: str, replicas: int, idle_poll_ms: int | None, api: Proc, worker: Proc
) -> None:
    args = bench.args
    started: list[tuple[Proc, int]] = []
    for index in range(replicas if idle_poll_ms is not None else 0):
        env = {"EVENTS_IDLE_POLL_MS": str(idle_poll_ms)}
        started.append(bench.start_api(f"idle-{label}-{index}", **env))
    before = [polls(port) for _, port in started]
    pids = {"temporal": bench.server_pid(), "api": api.process.pid, "worker": worker.process.pid}
    pids.update({f"idle-{i}": proc.process.pid for i, (proc, _) in enumerate(started)})
    meter = CpuMeter(pids)
    async with api_client(args.api_port, timeout=60) as http:
        meter.start()
        began = time.monotonic()
        sent = await submit_for(http, args.rate, args.seconds)
        took = time.monotonic() - began
        used = meter.stop()
    listed = sum(polls(port) - was for (_, port), was in zip(started, before, strict=True))
    idle = sum(cpu for name, cpu in used.items() if name.startswith("idle-"))
    print(
        f"{label:<22} {sent} jobs in {took:.1f} s; cpu s/s: temporal {used['temporal'] / took:.3f}"
        f", idle replicas {idle / took:.3f}, api {used['api'] / took:.3f}"
        f", worker {used['worker'] / took:.3f}; replica listings {listed / took:.1f}/s"
        f"; load {load_average()}"
    )
    sys.stdout.flush()
    for proc, _ in started:
        proc.stop(timeout=20)
        bench.children.remove(proc)


async def body(bench: Bench) -> None:
    args = bench.args
    worker = bench.start_noop_worker(JOB_TYPE, "idle-feeds-worker")
    api, args.api_port = bench.start_api("api")
    async with api_client(args.api_port, timeout=60) as http:
        for i in range(20):  # warm-up: the type's first jobs, the worker's caches
            await submit_job(http, JOB_TYPE, {"warm": i})
    await phase(bench, "no replicas", 0, None, api, worker)
    for idle_poll_ms in args.idle_poll_ms:
        label = f"{args.replicas} at {idle_poll_ms} ms"
        await phase(bench, label, args.replicas, idle_poll_ms, api, worker)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=6, help="idle API replicas per phase")
    parser.add_argument(
        "--idle-poll-ms",
        type=lambda text: [int(v) for v in text.split(",")],
        default=[1000, 5000],
        help="EVENTS_IDLE_POLL_MS of the replicas, one phase each (comma list)",
    )
    parser.add_argument("--rate", type=float, default=10.0, help="jobs submitted a second")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of each phase")
    args = parse(parser, argv)
    return run_bench(
        args,
        body,
        settings=lambda b: (
            f"replicas {b.args.replicas}, EVENTS_IDLE_POLL_MS {b.args.idle_poll_ms}, "
            f"{b.args.rate:g} jobs/s for {b.args.seconds:g} s a phase"
        ),
        data_prefix="jobforge-idle-feeds-",
    )


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
