"""What a retry of an ended job costs: `POST /api/ops/jobs/{id}/requeue` of closed jobs.

Run it from the repository root with the project's interpreter:

    .venv/bin/python -m bench.requeue --jobs 50

One headless dev server, the real API and a native no-op worker (which also runs the
workflows). Each job is submitted, completes, and is then re-queued through the API,
one at a time; the bench times the re-queue call and the time until the job has
completed again, and checks that a listing of the job's type holds it once. The last
line keeps a fixed form: `requeue p50: X ms`.

A re-queue of a closed job makes four Temporal calls (describe, the job query that
reads the run as it ended, start of the new run, delete of the closed run), plus its
gates' admit for a gated job (docs/architecture.md, "Retry").
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from bench.harness import (
    Bench,
    api_client,
    connect_when_healthy,
    describe,
    exit_now,
    parse,
    percentile,
    run_bench,
    submit_job,
)

JOB_TYPE = "bench-requeue"


async def run(bench: Bench) -> None:
    """Submit, complete, re-queue, complete again: one job at a time."""
    args = bench.args
    client = await connect_when_healthy(bench.server.address)
    worker = bench.start_noop_worker(JOB_TYPE, "bench-requeue-worker")
    api, port = bench.start_api()
    requeue_ms: list[float] = []
    rerun_ms: list[float] = []
    gone_ms: list[float] = []
    async with api_client(port, timeout=60) as http:
        for index in range(args.warmup + args.jobs):
            job_id = await submit_job(http, JOB_TYPE, {"i": index})
            await client.get_workflow_handle(job_id).result()
            sent = time.perf_counter()
            answer = await http.post(f"/api/ops/jobs/{job_id}/requeue")
            took = (time.perf_counter() - sent) * 1000
            if answer.status_code != 200 or answer.json()["status"] != "pending":
                raise RuntimeError(f"requeue {job_id}: {answer.status_code} {answer.text}")
            # The closed run's visibility row, deleted by the call: how long it lingers.
            while (await client.count_workflows(f"WorkflowId = '{job_id}'")).count > 1:
                if time.perf_counter() - sent > 60:
                    raise RuntimeError(f"{job_id}: its closed run is still listed after 60 s")
                await asyncio.sleep(0.005)
            gone = (time.perf_counter() - sent) * 1000 - took
            await client.get_workflow_handle(job_id).result()
            done = (time.perf_counter() - sent) * 1000
            if index >= args.warmup:
                requeue_ms.append(took)
                rerun_ms.append(done)
                gone_ms.append(gone)
        listed = await http.get("/api/jobs", params={"type": JOB_TYPE, "limit": 500})
        ids = [job["id"] for job in listed.json()]
        if len(ids) != len(set(ids)):
            raise RuntimeError(f"a job is listed twice: {len(ids)} rows, {len(set(ids))} jobs")
        print(f"listed {len(ids)} rows for {len(set(ids))} jobs (each re-queued once)")
    api.stop(timeout=20)
    worker.stop(timeout=20)
    print(f"requeue call (ms): {describe(requeue_ms)}")
    print(f"requeue call to completed again (ms): {describe(rerun_ms)}")
    print(f"closed run gone from visibility after the call (ms): {describe(gone_ms)}")
    print(f"requeue p50: {percentile(requeue_ms, 50):.0f} ms")


def settings(bench: Bench) -> str:
    return f"jobs={bench.args.jobs} sequential, warmup={bench.args.warmup}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.requeue", description="The cost of re-queueing a closed job."
    )
    parser.add_argument("--jobs", type=int, default=50, help="timed re-queues")
    parser.add_argument("--warmup", type=int, default=5, help="untimed ones first")
    args = parse(parser, argv)
    if args.jobs < 1 or args.warmup < 0:
        parser.error("--jobs must be at least 1, --warmup not negative")
    return run_bench(args, run, settings=settings, data_prefix="jobforge-bench-requeue-")


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
