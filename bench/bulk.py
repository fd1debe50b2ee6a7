"""An operator's bulk action does not block the API: answer times of ordinary calls
before and while `POST /api/jobs/bulk` cancels a pile of pending jobs.

Run it from the repository root with the project's interpreter:

    .venv/bin/python -m bench.bulk --jobs 2000

One run starts one headless Temporal dev server (free port, fresh temp data dir), the
real API (`python -m worker.cli api`, which also runs the bulk operations) and one
workflow worker whose only type is one nobody submits, so jobs stay `pending`. Then:

1. `--jobs` jobs of type `bench-bulk-target` through `POST /api/jobs/batch`, batches of
   1,000; the bench waits for the worker to go quiet (their first workflow tasks run).
2. Before: `--seconds` of ordinary calls, one at a time, in turn: `GET /api/jobs/{id}`
   of one target job, `GET /api/jobs?limit=50`, and `POST /api/jobs` of one new job of
   another unserved type (so it is not among the jobs the action matches).
3. `POST /api/jobs/bulk {"filter": {"type": ..., "status": "pending"}, "action":
   "cancel"}` (202; its answer time printed), then the same calls while the operation
   runs, `GET /api/jobs/bulk/{id}` polled every 0.5 s until its state is `done`.

Printed per phase and call: p50/p95/max ms; the operation's duration (202 to the first
poll that sees `done`, so up to 0.5 s late), jobs/s cancelled and its matched/done/failed
counts. The last lines are `bulk accept ms: X` and `during/before p50 ratio: X.XX`
(every call kind pooled). A call answered other than 200/201 (a 503 when Temporal is too
slow for the API's deadline) is timed like any other and counted by kind and status.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.harness import (
    Bench,
    api_client,
    cpu_seconds,
    exit_now,
    load_average,
    parse,
    percentile,
    run_bench,
)

TARGET_TYPE = "bench-bulk-target"  # the jobs the bulk action cancels
OTHER_TYPE = "bench-bulk-other"  # the one-job submits of the call mix
UNUSED_TYPE = "bench-bulk-nothing"  # the workflow worker's type: nobody submits it
BATCH = 1000
POLL_S = 0.5
# The worker counts as quiet once it uses less than this share of a core over a second.
QUIET_CPU = 0.1
QUIET_DEADLINE_S = 300.0
KINDS = ("GET /api/jobs/{id}", "GET /api/jobs?limit=50", "POST /api/jobs")


async def submit_targets(http: httpx.AsyncClient, count: int) -> list[str]:
    """`count` target jobs in batches of 1,000; their ids."""
    ids: list[str] = []
    for start in range(0, count, BATCH):
        jobs = [
            {"type": TARGET_TYPE, "params": {"n": n}}
            for n in range(start, min(count, start + BATCH))
        ]
        response = await http.post("/api/jobs/batch", json={"jobs": jobs})
        if response.status_code != 200:
            raise RuntimeError(f"POST /api/jobs/batch: {response.status_code} {response.text}")
        answer = response.json()
        if answer["created"] != len(jobs):
            raise RuntimeError(f"batch of {len(jobs)} made {answer['created']}: {answer}")
        ids.extend(item["id"] for item in answer["results"])
    return ids


async def wait_quiet(pid: int) -> float:
    """Wait until the process uses less than QUIET_CPU of a core over a second; the
    seconds waited."""
    began = time.monotonic()
    while time.monotonic() - began < QUIET_DEADLINE_S:
        before = cpu_seconds(pid)
        await asyncio.sleep(1.0)
        if cpu_seconds(pid) - before < QUIET_CPU:
            return time.monotonic() - began
    raise TimeoutError(f"the worker still busy after {QUIET_DEADLINE_S:g} s")


def call_mix(http: httpx.AsyncClient, job_id: str) -> dict[str, Callable[[], Awaitable[int]]]:
    """The ordinary calls, by kind; each returns its status code."""

    async def read_one() -> int:
        return (await http.get(f"/api/jobs/{job_id}")).status_code

    async def list_page() -> int:
        return (await http.get("/api/jobs", params={"limit": 50})).status_code

    async def submit_one() -> int:
        body = {"type": OTHER_TYPE, "params": {"bench": "bulk"}}
        return (await http.post("/api/jobs", json=body)).status_code

    return dict(zip(KINDS, (read_one, list_page, submit_one), strict=True))


@dataclass
class Samples:
    """Answer times in ms by call kind, and the answers that were not 200/201 (timed
    too: a 503 is an answer) by kind and status."""

    ms: dict[str, list[float]]
    errors: Counter[str] = field(default_factory=Counter)


async def measure(
    calls: dict[str, Callable[[], Awaitable[int]]], until: Callable[[], bool]
) -> Samples:
    """The calls in turn, one at a time, until `until()`."""
    samples = Samples({kind: [] for kind in calls})
    while not until():
        for kind, call in calls.items():
            began = time.perf_counter()
            code = await call()
            samples.ms[kind].append(1000 * (time.perf_counter() - began))
            if code not in (200, 201):
                samples.errors[f"{kind} {code}"] += 1
    return samples


def report(phase: str, samples: Samples) -> None:
    """One line per call kind, and one for them all."""
    rows = [*samples.ms.items(), ("all", pooled(samples))]
    for kind, values in rows:
        print(
            f"{phase:>6} {kind:<24} n={len(values):4d} p50 {percentile(values, 50):6.1f} "
            f"p95 {percentile(values, 95):6.1f} max {max(values):7.1f} ms"
        )
    print(f"{phase:>6} answers other than 200/201: {dict(samples.errors) or 'none'}")


def pooled(samples: Samples) -> list[float]:
    """Every call's answer time, whatever its kind."""
    return [ms for values in samples.ms.values() for ms in values]


async def run(bench: Bench) -> None:
    """Submit, measure before, start the action, measure during; the figures."""
    args = bench.args
    _, port = bench.start_api()
    worker = bench.start_worker(
        "workflow-worker", WORKER_TYPES=UNUSED_TYPE, NODE_ID="bench-bulk-workflows"
    )
    async with api_client(port, timeout=600) as http:
        began = time.monotonic()
        ids = await submit_targets(http, args.jobs)
        print(f"submitted {len(ids)} jobs in {time.monotonic() - began:.1f} s")
        quiet = await wait_quiet(worker.process.pid)
        print(f"worker quiet after {quiet:.1f} s more; load average {load_average()}")
        calls = call_mix(http, ids[len(ids) // 2])
        for _ in range(3):  # warm-up (not timed)
            for call in calls.values():
                await call()

        end = time.monotonic() + args.seconds
        before = await measure(calls, lambda: time.monotonic() >= end)
        report("before", before)
        print(f"load average {load_average()}")

        body = {"filter": {"type": TARGET_TYPE, "status": "pending"}, "action": "cancel"}
        sent = time.perf_counter()
        response = await http.post("/api/jobs/bulk", json=body)
        accept_ms = 1000 * (time.perf_counter() - sent)
        if response.status_code != 202:
            raise RuntimeError(f"POST /api/jobs/bulk: {response.status_code} {response.text}")
        op_id: str = response.json()["id"]
        started = time.monotonic()
        print(f"POST /api/jobs/bulk: 202 in {accept_ms:.1f} ms, operation {op_id}")

        final: dict[str, Any] = {}
        finished_at = 0.0

        async def poll() -> None:
            nonlocal final, finished_at
            while True:
                answer = await http.get(f"/api/jobs/bulk/{op_id}")
                if answer.status_code != 200:
                    raise RuntimeError(f"GET bulk: {answer.status_code} {answer.text}")
                progress = answer.json()
                if progress["state"] == "done":
                    final, finished_at = progress, time.monotonic()
                    return
                await asyncio.sleep(POLL_S)

        poller = asyncio.create_task(poll())
        during = await measure(calls, poller.done)
        await poller  # its error, if any
        duration = finished_at - started
        report("during", during)
        print(f"load average {load_average()}")
        print(
            f"operation: {duration:.1f} s (to the first poll that saw done), "
            f"{final['done'] / duration:.1f} jobs/s cancelled; matched {final['matched']} "
            f"done {final['done']} failed {final['failed']}"
        )
        if final["errors"]:
            print(f"first refusals: {final['errors'][:3]}")
    print(f"bulk accept ms: {accept_ms:.0f}")
    ratio = percentile(pooled(during), 50) / percentile(pooled(before), 50)
    print(f"during/before p50 ratio: {ratio:.2f}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.bulk",
        description="API answer times before and while a bulk cancel runs.",
    )
    parser.add_argument("--jobs", type=int, default=2000, help="pending jobs to cancel")
    parser.add_argument(
        "--seconds", type=float, default=10.0, help="length of the measurement before"
    )
    args = parse(parser, argv)
    if args.jobs < 1 or args.seconds <= 0:
        parser.error("--jobs must be at least 1 and --seconds above 0")

    def settings(bench: Bench) -> str:
        a = bench.args
        return f"jobs={a.jobs}, before={a.seconds:g} s, calls one at a time"

    return run_bench(args, run, settings=settings, data_prefix="jobforge-bulk-bench-")


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
