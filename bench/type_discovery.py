"""How soon an every-type worker serves a job type first submitted after it started, and
what the worker and the dev server spend while it waits for one.

Run it from the repository root with the project's interpreter:

    .venv/bin/python -m bench.type_discovery --types 30 --idle-s 30

It starts a headless dev server (jobforge's dynamic config, database in memory) and one
native worker process with `WORKER_TYPES` empty, as `jobforge dev` runs it. It registers
`--types` job types one at a time, as the API does on a type's first submit, and prints
how long each took to show in the worker's log as served (p50 and max). Then, with
nothing happening, it prints the CPU the worker and the server used per second over
`--idle-s` (/proc, user + system).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from temporalio.client import Client

from bench.harness import (
    code_version,
    cpu_seconds,
    describe,
    exit_now,
    load_average,
    machine,
    parse,
)
from engine.connection import TemporalSettings
from engine.directory import register_job_type
from tests.ports import free_port
from worker.devserver import DevServer

SERVED = "serving job type"


def served(log: Path) -> int:
    """How many types the worker's log says it serves."""
    return log.read_text(errors="replace").count(SERVED)


async def measure(
    server: DevServer, log: Path, worker: subprocess.Popen[bytes], args: argparse.Namespace
) -> None:
    client = await Client.connect(server.address)
    settings = TemporalSettings()
    waits = []
    for n in range(1, args.types + 1):
        started = time.monotonic()
        await register_job_type(client, settings, f"discovery-{n:04d}")
        while served(log) < n:
            if worker.poll() is not None:
                raise RuntimeError(f"the worker exited ({worker.returncode}); its log: {log}")
            await asyncio.sleep(0.005)
        waits.append(1000 * (time.monotonic() - started))
    print(f"a new type served after (ms): {describe(waits)}")
    assert server.process is not None
    await asyncio.sleep(5)  # the last type's polls settle
    pids = {"worker": worker.pid, "server": server.process.pid}
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    await asyncio.sleep(args.idle_s)
    for name, pid in pids.items():
        rate = 1000 * (cpu_seconds(pid) - before[name]) / args.idle_s
        print(f"idle, serving {args.types} types: {name} {rate:.1f} ms CPU a second")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="New job types reaching an every-type worker.")
    parser.add_argument("--types", type=int, default=30, help="types registered one by one")
    parser.add_argument("--idle-s", type=float, default=30.0, help="seconds of idle measured")
    args = parse(parser, argv)
    data = Path(tempfile.mkdtemp(prefix="jobforge-discovery-"))
    print(machine())
    print(f"types={args.types} idle_s={args.idle_s:g}; code: {code_version()}", flush=True)
    server = DevServer(data, port=free_port(), ui_port=None, in_memory=True)
    server.start()
    log = data / "worker.log"
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": server.address,
        "SOLVER_URL_SCHEMES": "https,http,file",
        "LOG_DIR": str(data / "job-logs"),
        "LOG_LEVEL": "INFO",
        "PYTHONUNBUFFERED": "1",
    }
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "worker.cli", "worker"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        asyncio.run(measure(server, log, worker, args))
        print(f"load average now: {load_average()}")
    finally:
        worker.terminate()
        worker.wait(timeout=60)
        server.stop()
        if not args.keep:
            shutil.rmtree(data, ignore_errors=True)
    return 0


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
