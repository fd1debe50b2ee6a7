"""What one `GET /api/jobs/{id}` costs, by the job's state, against a workflow query.

Run it from the repository root with the project's interpreter:

    .venv/bin/python -m bench.job_read --jobs 60 --reads 3

One headless dev server, the real API (`python -m worker.cli api`) and one native
worker (`python -m worker.cli worker`, which also runs the workflows) serving two types:
`bench-read-ok`, whose solver prints `{}`, and `bench-read-fail`, whose solver exits 3.
Three kinds of job, `--jobs` of each:

- completed: closed, `bench-read-ok`;
- quarantined: closed, `bench-read-fail` with max_attempts=1;
- pending: open, `bench-read-pending`, a type nobody serves (its first attempt
  scheduled, no worker takes it).

Once every job has reached its state (polled: visibility counts for the closed ones, a
describe per pending job until its attempt is scheduled and no workflow task is due) and
the worker has gone quiet, each job is read `--reads` times in turn, one read at a time:

1. api: `GET /api/jobs/{id}` over HTTP (keep-alive). A closed job that completed or
   failed is read from its run's close event (`JobReader.ended`); an open one is asked
   of its workflow.
2. query: what the API did before for every job, a `job` workflow query per read
   (`client.get_workflow_handle(id).query("job")`), sent from this process. A closed
   run is replayed on the worker to answer it; the API's own share of the old read
   (the HTTP hop and the decode) is not in this figure.

Printed per kind and way: the CPU ms per read of the dev server, the API process and the
worker process (/proc, user + system, over the whole phase, background included) and
their sum, and the mean and p50 wall ms of a read. An idle window of `--idle` s first
(no read; a measurement, not a wait) prints the background rate of each process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
from temporalio.client import Client, WorkflowHandle

from bench.bulk import wait_quiet
from bench.harness import (
    NOOP_SOLVER,
    Bench,
    CpuMeter,
    api_client,
    connect_when_healthy,
    exit_now,
    load_average,
    parse,
    percentile,
    run_bench,
)
from workflows.models import Job
from workflows.names import JOB_QUERY

OK_TYPE = "bench-read-ok"
FAIL_TYPE = "bench-read-fail"
PENDING_TYPE = "bench-read-pending"  # served by nobody
FAIL_SOLVER = ["/bin/sh", "-c", "exit 3"]
SUBMITTERS = 8
POLL_S = 0.1
STATE_DEADLINE_S = 120.0
PROCESSES = ("temporal", "api", "worker")


@dataclass(frozen=True)
class Kind:
    """One kind of job: its name, how it is submitted, the status it reads as."""

    name: str
    job_type: str
    max_attempts: int
    status: str


KINDS = (
    Kind("completed", OK_TYPE, 3, "completed"),
    Kind("quarantined", FAIL_TYPE, 1, "quarantined"),
    Kind("pending", PENDING_TYPE, 3, "pending"),
)


async def submit_all(http: httpx.AsyncClient, kind: Kind, count: int) -> list[str]:
    """`count` jobs of `kind` over POST /api/jobs, SUBMITTERS at once; their ids."""
    ids: list[str] = [""] * count
    todo = iter(range(count))

    async def submitter() -> None:
        for index in todo:
            body = {
                "type": kind.job_type,
                "params": {"i": index},
                "max_attempts": kind.max_attempts,
            }
            response = await http.post("/api/jobs", json=body)
            if response.status_code != 201:
                raise RuntimeError(f"POST /api/jobs: {response.status_code} {response.text}")
            ids[index] = response.json()["id"]

    await asyncio.gather(*(submitter() for _ in range(min(SUBMITTERS, count))))
    return ids


async def poll(what: str, done: Callable[[], Awaitable[bool]]) -> None:
    """Poll `done` every POLL_S until true; TimeoutError after STATE_DEADLINE_S."""
    end = time.monotonic() + STATE_DEADLINE_S
    while not await done():
        if time.monotonic() > end:
            raise TimeoutError(f"{what}: not reached after {STATE_DEADLINE_S:g} s")
        await asyncio.sleep(POLL_S)


async def wait_closed(client: Client, kind: Kind, count: int, status: str) -> None:
    """Until `count` jobs of the kind's type are closed with `status` (visibility); an
    error as soon as one has closed otherwise."""
    of_type = f"JobforgeType='{kind.job_type}'"

    async def done() -> bool:
        wrong = f"{of_type} AND ExecutionStatus!='{status}' AND ExecutionStatus!='Running'"
        if (await client.count_workflows(wrong)).count:
            raise RuntimeError(f"a {kind.name} job closed other than {status}")
        closed = f"{of_type} AND ExecutionStatus='{status}'"
        return (await client.count_workflows(closed)).count >= count

    await poll(f"{count} {kind.name} jobs {status}", done)


async def wait_scheduled(client: Client, ids: list[str]) -> None:
    """Until each open job's first attempt is scheduled and no workflow task is due."""
    for job_id in ids:
        handle = client.get_workflow_handle(job_id)

        async def done(handle: WorkflowHandle[Any, Any] = handle) -> bool:
            raw = (await handle.describe()).raw_description
            return bool(raw.pending_activities) and not raw.HasField("pending_workflow_task")

        await poll(f"{job_id} scheduled", done)


async def timed_reads(
    ids: list[str], reads: int, meter: CpuMeter, read: Callable[[str], Awaitable[str]]
) -> tuple[list[float], dict[str, float], float]:
    """Each id read `reads` times in turn (round after round), one read at a time."""
    ms: list[float] = []
    meter.start()
    began = time.perf_counter()
    for _ in range(reads):
        for job_id in ids:
            sent = time.perf_counter()
            await read(job_id)
            ms.append((time.perf_counter() - sent) * 1000)
    seconds = time.perf_counter() - began
    return ms, meter.stop(), seconds


def checked(kind: Kind, job_id: str, status: str) -> str:
    """`status`, or an error if it is not the kind's."""
    if status != kind.status:
        raise RuntimeError(f"{job_id} reads as {status}, not {kind.status}")
    return status


def line(label: str, ms: list[float], cpu: dict[str, float], seconds: float) -> str:
    """One printed result: CPU ms per read by process, then wall ms."""
    n = len(ms)
    per = {name: cpu[name] / n * 1000 for name in PROCESSES}
    parts = " ".join(f"{name} {per[name]:.1f}" for name in PROCESSES)
    return (
        f"  {label:<6} {n} reads in {seconds:.1f} s: cpu ms/read {sum(per.values()):.1f} "
        f"({parts}); wall ms mean {statistics.fmean(ms):.1f} p50 {percentile(ms, 50):.1f}"
    )


async def run(bench: Bench) -> None:
    """Submit, let each kind reach its state, then read every job both ways."""
    args = bench.args
    client = await connect_when_healthy(bench.server.address)
    worker = bench.start_worker(
        WORKER_TYPES=f"{OK_TYPE},{FAIL_TYPE}",
        WORKER_SOLVERS=json.dumps({OK_TYPE: NOOP_SOLVER, FAIL_TYPE: FAIL_SOLVER}),
        NODE_ID="bench-read-worker",
    )
    api, port = bench.start_api()
    meter = bench.meter(api, worker)
    async with api_client(port, timeout=60) as http:
        ids: dict[str, list[str]] = {}
        for kind in KINDS:
            ids[kind.name] = await submit_all(http, kind, args.jobs)
        await wait_closed(client, KINDS[0], args.jobs, "Completed")
        await wait_closed(client, KINDS[1], args.jobs, "Failed")
        await wait_scheduled(client, ids["pending"])
        await wait_quiet(worker.process.pid)
        print(f"{args.jobs} jobs of each kind in their state; load average {load_average()}")

        if args.idle > 0:
            meter.start()
            await asyncio.sleep(args.idle)  # an idle window measured, not a wait
            idle = meter.stop()
            rates = " ".join(f"{n} {idle[n] / args.idle * 1000:.1f}" for n in PROCESSES)
            print(f"idle {args.idle:g} s, no read: cpu ms/s {rates}")

        for kind in KINDS:

            async def by_api(job_id: str, kind: Kind = kind) -> str:
                response = await http.get(f"/api/jobs/{job_id}")
                if response.status_code != 200:
                    raise RuntimeError(f"GET {job_id}: {response.status_code} {response.text}")
                body: dict[str, Any] = response.json()
                return checked(kind, job_id, body["status"])

            async def by_query(job_id: str, kind: Kind = kind) -> str:
                job = await client.get_workflow_handle(job_id).query(JOB_QUERY, result_type=Job)
                return checked(kind, job_id, job.status.value)

            print(f"{kind.name} ({args.jobs} jobs x {args.reads} reads):")
            for label, read in (("api", by_api), ("query", by_query)):
                await read(ids[kind.name][0])  # warm-up, untimed
                ms, cpu, seconds = await timed_reads(ids[kind.name], args.reads, meter, read)
                print(line(label, ms, cpu, seconds))
    print(f"load average {load_average()} at end")


def settings(bench: Bench) -> str:
    args = bench.args
    return f"jobs={args.jobs} per kind, reads={args.reads} each, sequential, idle={args.idle:g} s"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.job_read",
        description="CPU and latency of GET /api/jobs/{id} by job state, against a query.",
    )
    parser.add_argument("--jobs", type=int, default=60, help="jobs of each kind")
    parser.add_argument("--reads", type=int, default=3, help="reads of each job, each way")
    parser.add_argument("--idle", type=float, default=2.0, help="idle window measured first (s)")
    args = parse(parser, argv)
    if args.jobs < 1 or args.reads < 1 or args.idle < 0:
        parser.error("--jobs and --reads must be at least 1, --idle not negative")
    return run_bench(args, run, settings=settings, data_prefix="jobforge-bench-job-read-")


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
