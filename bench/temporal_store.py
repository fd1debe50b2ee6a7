"""What a bare job costs the Temporal dev server with its database in a SQLite file
(jobforge's default: `jobforge dev`, the benches) and in memory (the test session's).

Run it from the repository root with the project's interpreter:

    .venv/bin/python -m bench.temporal_store --jobs 600 --rounds 3

Each round starts one headless dev server per store in turn (file first), each with
jobforge's dynamic config, and runs `--jobs` bare workflows (one no-op activity,
`bench.bare.BareJob`) through an in-process worker, `--concurrency` at a time, after 20
untimed ones. Printed per server: jobs/s and the server's CPU ms per job (/proc, user +
system, over the timed jobs), then the median of each store's rounds and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from temporalio.client import Client

from bench.bare import BareJob, bare_noop, new_worker
from bench.harness import code_version, cpu_seconds, exit_now, load_average, machine, parse
from tests.ports import free_port
from worker.devserver import DevServer

TASK_QUEUE = "bench-store"
WARMUP = 20
STORES = ("file", "memory")


async def one_round(data: Path, store: str, jobs: int, concurrency: int) -> tuple[float, float]:
    """(jobs/s, server CPU ms per job) for `jobs` bare jobs on a fresh server."""
    server = DevServer(data / store, port=free_port(), ui_port=None, in_memory=store == "memory")
    server.start()
    try:
        assert server.process is not None
        client = await Client.connect(server.address)
        worker = new_worker(
            client,
            BareJob,
            activities=[bare_noop],
            task_queue=TASK_QUEUE,
            max_concurrent_activities=concurrency,
        )
        slots = asyncio.Semaphore(concurrency)

        async def job() -> None:
            async with slots:
                await client.execute_workflow(
                    BareJob.run, {}, id=f"store-{uuid.uuid4()}", task_queue=TASK_QUEUE
                )

        async with worker:
            await asyncio.gather(*(job() for _ in range(WARMUP)))
            cpu, started = cpu_seconds(server.process.pid), time.monotonic()
            await asyncio.gather(*(job() for _ in range(jobs)))
            elapsed = time.monotonic() - started
            cpu = cpu_seconds(server.process.pid) - cpu
        return jobs / elapsed, 1000 * cpu / jobs
    finally:
        server.stop()


async def run(args: argparse.Namespace, data: Path) -> None:
    """Every round, each store in turn; then the medians."""
    per_job: dict[str, list[float]] = {store: [] for store in STORES}
    for round_no in range(1, args.rounds + 1):
        for store in STORES:
            rate, ms = await one_round(data, store, args.jobs, args.concurrency)
            per_job[store].append(ms)
            print(f"round {round_no} {store}: {rate:.1f} jobs/s, server {ms:.1f} ms CPU per job")
            print(f"  load average now: {load_average()}", flush=True)
    medians = {store: statistics.median(values) for store, values in per_job.items()}
    for store in STORES:
        print(f"{store} median: {medians[store]:.1f} ms CPU per job")
    print(f"memory / file: {medians['memory'] / medians['file']:.2f}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description="A bare job's dev-server CPU with its database in a file and in memory."
    )
    parser.add_argument("--jobs", type=int, default=600, help="timed jobs per server")
    parser.add_argument("--rounds", type=int, default=3, help="servers per store")
    parser.add_argument("--concurrency", type=int, default=20, help="jobs in flight at once")
    args = parse(parser, argv)
    data = Path(tempfile.mkdtemp(prefix="jobforge-store-"))
    print(machine())
    print(f"jobs={args.jobs} rounds={args.rounds} concurrency={args.concurrency}; data in {data}")
    print(f"code: {code_version()}", flush=True)
    try:
        asyncio.run(run(args, data))
    finally:
        if not args.keep:
            shutil.rmtree(data, ignore_errors=True)
    return 0


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
