"""Container overhead: one command run as a container job against the same command run
as a subprocess solver, from the attempt's start to its result.

Run it from the repository root with the project's interpreter:

    .venv/bin/python -m bench.container_overhead --runs 20

One run starts one headless Temporal dev server (free port, fresh temp data dir), the
real API and one native worker (WORKER_TYPES=ctrbench, WORKER_CORES=1) with a
container runtime (CONTAINER_RUNTIME: podman, else docker; CONTAINER_RUNTIME_ARGS
`--runtime runc` for podman when runc is installed), and imports a busybox image
(tests/container_image.py). The command is `/bin/sh -c 'printf {}'` both ways: as
the worker's registered solver for plain jobs, and as the command of a container job
in the busybox image. Jobs run one at a time, solver and container taking turns, after
--warmup of each.

Per job, "start to result" = `completed_at` (the workflow's clock when the result was
recorded) - `claimed_at` (the worker's clock when the attempt began); the same machine
and the same path apart from the executor, so the difference of the two p50s is what
a container costs per job here. For context, the runtime's own calls are timed alone:
`<runtime> run --rm` of the same command, and the `ps` each container attempt makes to
find what an earlier attempt of its job left.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

import httpx

from bench.harness import (
    Bench,
    api_client,
    describe,
    exit_now,
    load_average,
    parse,
    percentile,
    run_bench,
)
from tests.container_image import INSTALL_HINT, Runtime, build_image, find_runtime, runtime_env

JOB_TYPE = "ctrbench"
COMMAND = ["/bin/sh", "-c", "printf {}"]


async def run_job(http: httpx.AsyncClient, spec: dict[str, Any]) -> float:
    """Submit, wait until completed; its start-to-result time in ms."""
    response = await http.post("/api/jobs", json={"type": JOB_TYPE, **spec})
    if response.status_code != 201:
        raise RuntimeError(f"POST /api/jobs: {response.status_code} {response.text}")
    job_id = response.json()["id"]
    end = time.monotonic() + 60
    while time.monotonic() < end:
        job = (await http.get(f"/api/jobs/{job_id}")).json()
        if job["status"] == "completed":
            return float(job["completed_at"] - job["claimed_at"])
        if job["status"] in ("failed", "quarantined"):
            raise RuntimeError(f"job {job_id} ended {job['status']}: {job['fail_reason']}")
        await asyncio.sleep(0.02)
    raise RuntimeError(f"job {job_id} did not complete within 60 s")


def timed_cli(runtime: Runtime, runs: int, *args: str) -> list[float]:
    """Milliseconds of `runs` calls of the runtime's CLI."""
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        runtime.run(*args)
        samples.append((time.perf_counter() - start) * 1000)
    return samples


async def run(bench: Bench) -> None:
    """The stack, the image, then the jobs in turns."""
    args = bench.args
    runtime = runtime_env(args.program, bench.data)
    image = build_image(runtime, bench.data)
    _, port = bench.start_api()
    bench.start_worker(
        WORKER_TYPES=JOB_TYPE,
        WORKER_SOLVERS=json.dumps({JOB_TYPE: COMMAND}),
        NODE_ID="bench-container-worker",
        **runtime.worker_env,
    )
    solver: dict[str, Any] = {}
    container = {"container": {"image": image, "command": COMMAND}}
    times: dict[str, list[float]] = {"solver": [], "container": []}
    async with api_client(port, timeout=60) as http:
        for _ in range(args.warmup):
            await run_job(http, solver)
            await run_job(http, container)
        for _ in range(args.runs):
            times["solver"].append(await run_job(http, solver))
            times["container"].append(await run_job(http, container))
    cli_run = timed_cli(runtime, args.runs, "run", "--rm", image, *COMMAND)
    cli_ps = timed_cli(runtime, args.runs, "ps", "-a", "-q", "--filter", "label=jobforge.job=x")
    print(f"runtime: {' '.join(runtime.cli())}; load average at end: {load_average()}")
    for name, samples in times.items():
        print(f"{name} start to result: {describe(samples, 0)}")
    print(f"{runtime.program} run --rm alone: {describe(cli_run, 0)}")
    print(f"{runtime.program} ps (leftover check) alone: {describe(cli_ps, 0)}")
    solver_p50 = percentile(times["solver"], 50)
    container_p50 = percentile(times["container"], 50)
    print(
        f"container overhead p50: {container_p50 - solver_p50:.0f} ms "
        f"(container {container_p50:.0f} ms, solver {solver_p50:.0f} ms, {args.runs} runs each)"
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.container_overhead",
        description="Start-to-result time of a container job against the same solver.",
    )
    parser.add_argument("--runs", type=int, default=20, help="measured jobs of each kind")
    parser.add_argument("--warmup", type=int, default=2, help="unmeasured jobs of each kind")
    args = parse(parser, argv)
    if args.runs < 1 or args.warmup < 0:
        parser.error("--runs must be at least 1, --warmup not negative")
    return args


def settings(bench: Bench) -> str:
    """The run's settings line."""
    args = bench.args
    return f"runs={args.runs} warmup={args.warmup} command={' '.join(COMMAND)!r}"


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    program = find_runtime()
    if program is None:
        print(f"no container runtime (podman or docker) on PATH: {INSTALL_HINT}", file=sys.stderr)
        return 2
    args.program = program
    return run_bench(args, run, settings=settings, data_prefix="jobforge-bench-container-")


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
