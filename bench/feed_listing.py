"""What one event-feed listing costs, by the rows it lists.

Run it from the repository root with the project's interpreter:

    .venv/bin/python -m bench.feed_listing --jobs 200

One run starts one headless Temporal dev server (free port, fresh temp data dir), the
real API (idle: EVENTS_POLL_MS and EVENTS_IDLE_POLL_MS 10 s, so its own looks stay out
of the figures) and one native worker, and runs --jobs no-op jobs to the end. Then it
makes the event feed's listing (jobs updated since a time, ids and memos, the memos
decoded as the feed decodes them) --listings times for each size in --rows, and prints
the CPU seconds per listing of the dev server and of this process, read from /proc.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

from temporalio.client import Client

from api import visibility_queries as visibility
from api.event_feed import _iso
from bench.harness import (
    Bench,
    CpuMeter,
    api_client,
    connect_when_healthy,
    exit_now,
    parse,
    run_bench,
    submit_job,
)
from bench.throughput import wait_completed
from workflows import search_attributes
from workflows.models import EventsMemo
from workflows.names import EVENTS_MEMO
from workflows.search_attributes import JOBS

JOB_TYPE = "noop"


def feed_query(since_ms: int) -> str:
    """The feed's listing: jobs updated since `since_ms`."""
    return f"{JOBS} AND {search_attributes.UPDATED_AT.name} >= '{_iso(since_ms)}'"


async def listed(client: Client, since_ms: int) -> int:
    rows = await visibility.every_memo(client, feed_query(since_ms), EVENTS_MEMO, EventsMemo)
    return len(rows)


async def since_for(client: Client, rows: int, low: int, high: int) -> int:
    """A time from which about `rows` jobs were updated (bisection over [low, high])."""
    for _ in range(24):
        mid = (low + high) // 2
        if await listed(client, mid) > rows:
            low = mid
        else:
            high = mid
    return high


async def run(bench: Bench) -> None:
    args = bench.args
    client = await connect_when_healthy(bench.server.address)
    idle = {"EVENTS_POLL_MS": "10000", "EVENTS_IDLE_POLL_MS": "10000"}
    api, port = bench.start_api(**idle)
    worker = bench.start_noop_worker(JOB_TYPE, "bench-worker")
    with api, worker:
        began = int(time.time() * 1000) - 1000
        async with api_client(port, timeout=120, connections=20) as http:
            await asyncio.gather(*(submit_job(http, JOB_TYPE, {"i": i}) for i in range(args.jobs)))
        await wait_completed(client, "JobWorkflow", args.jobs, 600)
        ended = int(time.time() * 1000) + 1000
        meter_pids = {"temporal": bench.server_pid(), "lister": os.getpid()}
        for rows in args.rows:
            since = ended + 60_000 if rows == 0 else await since_for(client, rows, began, ended)
            query = feed_query(since)
            count = len(await visibility.every_memo(client, query, EVENTS_MEMO, EventsMemo))
            meter = CpuMeter(meter_pids)
            meter.start()
            for _ in range(args.listings):
                await visibility.every_memo(client, query, EVENTS_MEMO, EventsMemo)
            cpu = meter.stop()
            server_ms = cpu["temporal"] / args.listings * 1000
            lister_ms = cpu["lister"] / args.listings * 1000
            per_row = f", {server_ms / count:.2f} ms a row" if count else ""
            print(
                f"{count} rows: per listing, server {server_ms:.2f} ms cpu{per_row}; "
                f"lister (memo decode included) {lister_ms:.2f} ms cpu"
            )


def settings(bench: Bench) -> str:
    """The run's settings line."""
    args = bench.args
    return f"jobs={args.jobs} rows={args.rows} listings={args.listings}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.feed_listing",
        description="CPU of one event-feed listing, by rows listed.",
    )
    parser.add_argument("--jobs", type=int, default=200, help="no-op jobs run first")
    parser.add_argument(
        "--rows",
        type=lambda raw: [int(part) for part in raw.split(",")],
        default=[0, 50, 200],
        help="rows per listing, comma-separated (at most --jobs)",
    )
    parser.add_argument("--listings", type=int, default=200, help="listings per size")
    args = parse(parser, argv)
    if args.jobs < 1 or args.listings < 1 or any(r < 0 or r > args.jobs for r in args.rows):
        parser.error("--jobs and --listings must be at least 1, --rows within 0..--jobs")

    return run_bench(args, run, settings=settings, data_prefix="jobforge-feed-listing-")


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
