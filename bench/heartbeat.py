"""What one activity heartbeat costs the dev server: the price of a shorter heartbeat
interval (a native worker learns of a stop or a cancel only from a heartbeat's answer).

Run it from the repository root with the project's interpreter:

    .venv/bin/python -m bench.heartbeat --beats 400 --every-ms 50

One run starts one headless Temporal dev server (free port, fresh temp data dir) and an
in-process worker with one activity. The server's CPU is read from /proc over an idle
phase (no activity running) and over an activity that heartbeats `--beats` times, one
every `--every-ms` (the worker's heartbeat throttle set below it, so every one is sent),
each with a progress detail as a solver's would carry. The difference, per heartbeat,
is what each heartbeat costs the server; the worker process's CPU is printed too.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

from temporalio import activity, workflow
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from bench.harness import (
    code_version,
    connect_when_healthy,
    cpu_seconds,
    load_average,
    machine,
    start_dev_server,
)


@activity.defn(name="bench_beats")
async def beats(count: int, every_ms: int) -> int:
    """Heartbeat `count` times, one every `every_ms`."""
    for n in range(count):
        activity.heartbeat({"done": n, "of": count})
        await asyncio.sleep(every_ms / 1000)
    return count


@workflow.defn(name="BenchHeartbeats")
class BenchHeartbeats:
    @workflow.run
    async def run(self, count: int, every_ms: int) -> int:
        return await workflow.execute_activity(
            beats,
            args=[count, every_ms],
            start_to_close_timeout=timedelta(minutes=30),
            heartbeat_timeout=timedelta(seconds=30),
        )


async def measure(address: str, server_pid: int, count: int, every_ms: int, idle_s: float) -> None:
    client = await connect_when_healthy(address)
    queue = f"bench-heartbeat-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client,
        task_queue=queue,
        workflows=[BenchHeartbeats],
        activities=[beats],
        workflow_runner=UnsandboxedWorkflowRunner(),
        max_heartbeat_throttle_interval=timedelta(milliseconds=max(every_ms // 2, 1)),
        default_heartbeat_throttle_interval=timedelta(milliseconds=max(every_ms // 2, 1)),
    ):
        # Idle: the server's own floor with a worker polling.
        start, server_before, me_before = time.monotonic(), cpu_seconds(server_pid), _own()
        await asyncio.sleep(idle_s)
        idle_wall = time.monotonic() - start
        idle_server = cpu_seconds(server_pid) - server_before
        idle_me = _own() - me_before
        # One activity that heartbeats `count` times.
        start, server_before, me_before = time.monotonic(), cpu_seconds(server_pid), _own()
        await client.execute_workflow(
            BenchHeartbeats.run,
            args=[count, every_ms],
            id=f"beats-{uuid.uuid4()}",
            task_queue=queue,
        )
        wall = time.monotonic() - start
        server = cpu_seconds(server_pid) - server_before
        me = _own() - me_before
    server_per_s, me_per_s = idle_server / idle_wall, idle_me / idle_wall
    server_beats = server - server_per_s * wall
    me_beats = me - me_per_s * wall
    print(f"idle over {idle_wall:.1f} s: server {idle_server:.2f} s, worker {idle_me:.2f} s of CPU")
    print(f"{count} heartbeats over {wall:.1f} s: server {server:.2f} s, worker {me:.2f} s of CPU")
    print(
        f"per heartbeat above idle: server {server_beats / count * 1000:.2f} ms, "
        f"worker {me_beats / count * 1000:.2f} ms of CPU"
    )


def _own() -> float:
    return time.process_time()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--beats", type=int, default=400)
    parser.add_argument("--every-ms", type=int, default=50)
    parser.add_argument("--idle", type=float, default=10.0, help="idle phase, s")
    args = parser.parse_args()
    print(f"bench.heartbeat: {code_version()}; {machine()}; {load_average()}")
    with tempfile.TemporaryDirectory(prefix="bench-heartbeat-") as tmp:
        server = start_dev_server(Path(tmp))
        assert server.process is not None  # started
        try:
            asyncio.run(
                measure(server.address, server.process.pid, args.beats, args.every_ms, args.idle)
            )
        finally:
            server.stop()
        print(f"end: {load_average()}")
    sys.exit(0)


if __name__ == "__main__":
    main()
