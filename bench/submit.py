"""Ingest: accepted jobs/s through single `POST /api/jobs` against `POST /api/jobs/batch`
in batches of 100 and of 1,000, on one API and one dev server, in one run.

Run it from the repository root with the project's interpreter:

    .venv/bin/python -m bench.submit --jobs 3000

One run starts one headless Temporal dev server (free port, fresh temp data dir) and the
real API (`python -m worker.cli api`), and no worker: a job is accepted once its
workflow has started, and nothing runs it (its type is served by nobody). Each mode
submits `--jobs` jobs per round, `--rounds` rounds, the modes in turn (reversed every
other round, so drift of the box weighs on each alike):

- single: `POST /api/jobs`, `--concurrency` requests in flight (by default as many as
  the API starts at once for a batch, API_BATCH_CONCURRENCY);
- batch 100 and batch 1000: `POST /api/jobs/batch`, one batch in flight;
- bare start: the engine's floor, workflows with no input, search attributes or memo
  started straight from a Temporal client in this process, as many at once as the API
  starts for a batch. No batch can be faster than this.

Items carry no `id` (a key costs nothing more on a new job: see docs/api.md). Printed
per mode: accepted jobs/s and CPU ms per job of the dev server, the API and this
process. The last line is `batch ratio: X.XX`, batches of 1,000 over single POSTs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable

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

JOB_TYPE = "bench-unserved"
MODES = ("single", "batch 100", "batch 1000", "bare start")
BARE_QUEUE = "bench-bare-unserved"


async def singles(http: httpx.AsyncClient, count: int, concurrency: int) -> None:
    """`count` jobs, one POST each, `concurrency` in flight."""
    left = count

    async def sender() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await submit_job(http, JOB_TYPE, {"n": left})

    await asyncio.gather(*(sender() for _ in range(concurrency)))


async def batches(http: httpx.AsyncClient, count: int, size: int) -> None:
    """`count` jobs in batches of `size`, one batch in flight."""
    for start in range(0, count, size):
        jobs = [
            {"type": JOB_TYPE, "params": {"n": n}} for n in range(start, min(count, start + size))
        ]
        response = await http.post("/api/jobs/batch", json={"jobs": jobs})
        if response.status_code != 200:
            raise RuntimeError(f"POST /api/jobs/batch: {response.status_code} {response.text}")
        answer = response.json()
        if answer["created"] != len(jobs):
            raise RuntimeError(f"batch of {len(jobs)} made {answer['created']}: {answer}")


async def bare_starts(client: Client, count: int, concurrency: int) -> None:
    """The engine's floor: `count` starts of a workflow with no input, search attributes
    or memo, straight from the Temporal client, `concurrency` at once (no API, no HTTP)."""
    starts = asyncio.Semaphore(concurrency)

    async def start() -> None:
        async with starts:
            await client.start_workflow("BareNothing", id=uuid.uuid4().hex, task_queue=BARE_QUEUE)

    await asyncio.gather(*(start() for _ in range(count)))


async def run(bench: Bench) -> None:
    """Every mode, `--rounds` times; the figures."""
    args = bench.args
    api, port = bench.start_api(API_BATCH_CONCURRENCY=str(args.batch_concurrency))
    meter = CpuMeter({"temporal": bench.server_pid(), "api": api.process.pid, "bench": os.getpid()})
    client = await connect_when_healthy(bench.server.address)
    submitters: dict[str, Callable[[httpx.AsyncClient, int], Awaitable[None]]] = {
        "single": lambda http, n: singles(http, n, args.concurrency),
        "batch 100": lambda http, n: batches(http, n, 100),
        "batch 1000": lambda http, n: batches(http, n, 1000),
        "bare start": lambda _, n: bare_starts(client, n, args.batch_concurrency),
    }
    seconds = dict.fromkeys(MODES, 0.0)
    cpu = {mode: dict.fromkeys(meter.pids, 0.0) for mode in MODES}
    async with api_client(port, timeout=600, connections=args.concurrency) as http:
        # Warm-up (not timed): connections, the type's registration, the server's caches.
        await singles(http, 50, min(args.concurrency, 10))
        await batches(http, 200, 100)
        await bare_starts(client, 50, args.batch_concurrency)
        for round_ in range(args.rounds):
            order = MODES if round_ % 2 == 0 else tuple(reversed(MODES))
            for mode in order:
                meter.start()
                began = time.monotonic()
                await submitters[mode](http, args.jobs)
                seconds[mode] += time.monotonic() - began
                for name, used in meter.stop().items():
                    cpu[mode][name] += used
            print(f"round {round_ + 1} done, load average {load_average()}")
    jobs = args.jobs * args.rounds
    rates = {mode: jobs / seconds[mode] for mode in MODES}
    for mode in MODES:
        per_job = ", ".join(f"{name} {1000 * used / jobs:.2f}" for name, used in cpu[mode].items())
        print(f"{mode:>10}: {rates[mode]:7.1f} jobs/s accepted; CPU ms per job: {per_job}")
    floor = rates["batch 1000"] / rates["bare start"]
    print(f"batch 1000 / bare start (the engine's floor): {floor:.2f}")
    print(f"batch 100 / single: {rates['batch 100'] / rates['single']:.2f}")
    print(f"batch ratio: {rates['batch 1000'] / rates['single']:.2f}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.submit",
        description="Accepted jobs/s: single POST /api/jobs against batches of 100 and 1,000.",
    )
    parser.add_argument("--jobs", type=int, default=3000, help="jobs per mode and round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every mode")
    parser.add_argument(
        "--concurrency", type=int, default=32, help="single POSTs in flight at once"
    )
    parser.add_argument(
        "--batch-concurrency",
        type=int,
        default=32,
        help="the API's API_BATCH_CONCURRENCY (starts at once for batches)",
    )
    args = parse(parser, argv)
    if min(args.jobs, args.rounds, args.concurrency, args.batch_concurrency) < 1:
        parser.error("--jobs, --rounds and the concurrencies must be at least 1")

    def settings(bench: Bench) -> str:
        a = bench.args
        return (
            f"jobs={a.jobs} per mode and round, rounds={a.rounds}, single concurrency="
            f"{a.concurrency}, API_BATCH_CONCURRENCY={a.batch_concurrency}, no worker"
        )

    return run_bench(args, run, settings=settings, data_prefix="jobforge-submit-bench-")


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
