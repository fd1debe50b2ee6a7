"""Exact priority on a Temporal task queue: dispatch order, and what more levels cost.

Run it from the repository root with the project's interpreter:

    .venv/bin/python -m bench.priority --tasks 1000

Each configuration gets its own headless dev server (jobforge's dynamic config, plus
`matching.priorityLevels` and standalone activities) and the same work: `--tasks`
no-op activities on one task queue, their priorities drawn (seeded) from -29..29, each
started with the client while no worker polls, one after the other. Then one worker
with one slot drains the backlog, and the order it ran them in is compared with the
exact order, priority descending, then arrival (the start order; each start reaches
the queue on its own, so a few of one priority swap).

- `bands`: `matching.priorityLevels=5`, priorities folded into 5 keys by the former
  thresholds (>= 10, >= 1, 0, >= -9, below).
- `exact`: the shipped `matching.priorityLevels` (59) and `priority_key`: one key per
  priority, so 59 backlogs in use.
- `exact-5`: 59 levels, but the `bands` keys: what the setting alone costs.
- `unclamped-5` (not run by default): 5 levels, but each priority's own key (1 … 59):
  what the server does with keys above its levels. They share the last backlog and
  are sorted only among the tasks loaded at once; `--batch 10` makes that visible.

Standalone activities isolate the matching service: no workflow task per job, so the
server's CPU is mostly starting, queueing and dispatching tasks. Per configuration it
prints: start call p50/p99, server CPU per task while the backlog builds and the
server's resident memory once it is queued (each key loads up to a batch); drain
tasks/s and server CPU per task; pairs served out of the exact order; server CPU over
`--idle` seconds afterwards (each key keeps its own backlog reader). `--rounds` repeats
the configurations in turn, on fresh servers; compare ratios within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from temporalio import activity
from temporalio.common import Priority
from temporalio.worker import Worker

from bench.harness import (
    CpuMeter,
    code_version,
    connect_when_healthy,
    exit_now,
    machine,
    parse,
    percentile,
)
from tests.ports import free_port
from worker.devserver import DevServer
from workflows.models import PRIORITY_LEVELS, priority_key, priority_range

QUEUE = "bench-priority"
BANDS = (10, 1, 0, -9)  # the former default thresholds: key 1 for >= 10, … 5 below -9


def band_key(priority: int) -> int:
    """The key the former 5-band mapping gave `priority`."""
    return next((i + 1 for i, bound in enumerate(BANDS) if priority >= bound), len(BANDS) + 1)


@dataclass(frozen=True)
class Config:
    """One server setting and the priority → key mapping used on it."""

    name: str
    levels: int
    key: Callable[[int], int]


CONFIGS = (
    Config("bands", 5, band_key),
    Config("exact", PRIORITY_LEVELS, lambda p: priority_key(p, PRIORITY_LEVELS)),
    Config("exact-5", PRIORITY_LEVELS, band_key),
    Config("unclamped-5", 5, lambda p: (PRIORITY_LEVELS + 1) // 2 - p),
)
DEFAULT_CONFIGS = "bands,exact,exact-5"


class Recorder:
    """A no-op activity that records the order the tasks ran in."""

    def __init__(self, expected: int) -> None:
        self.ran: list[int] = []
        self.expected = expected
        self.all_ran = asyncio.Event()

    @activity.defn(name="bench_priority_noop")
    async def noop(self, seq: int) -> None:
        """Does nothing but note that `seq` ran."""
        self.ran.append(seq)
        if len(self.ran) >= self.expected:
            self.all_ran.set()


def rss_mib(pid: int) -> float:
    """A process's resident memory (Linux /proc), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def inverted_pairs(ranks: list[tuple[int, ...]]) -> int:
    """Pairs served in the wrong order by `ranks` (ties are not wrong): merge sort."""
    if len(ranks) <= 1:
        return 0
    mid = len(ranks) // 2
    left, right = sorted(ranks[:mid]), sorted(ranks[mid:])
    wrong = inverted_pairs(ranks[:mid]) + inverted_pairs(ranks[mid:])
    j = 0
    for item in left:  # for each of the left, the right ones that rank strictly lower
        while j < len(right) and right[j] < item:
            j += 1
        wrong += j
    return wrong


async def measure(
    config: Config, priorities: list[int], data: Path, args: argparse.Namespace
) -> str:
    """One configuration on a fresh server: its result line."""
    dynamic = {
        "matching.priorityLevels": str(config.levels),
        "activity.enableStandalone": "true",
    }
    if args.batch:
        # The reload mark must stay below the batch (the server fails on a batch of 0).
        dynamic["matching.getTasksBatchSize"] = str(args.batch)
        dynamic["matching.getTasksReloadAt"] = str(args.batch // 5)
    server = DevServer(
        data / config.name, port=free_port(), ui_port=None, extra_dynamic_config=dynamic
    )
    server.start()
    try:
        assert server.process is not None
        client = await connect_when_healthy(server.address)
        recorder = Recorder(len(priorities))
        meter = CpuMeter({"server": server.process.pid})
        meter.start()
        start_ms: list[float] = []
        for seq, priority in enumerate(priorities):
            sent = time.perf_counter()
            await client.start_activity(
                recorder.noop,
                seq,
                id=f"task-{seq}",
                task_queue=QUEUE,
                start_to_close_timeout=timedelta(minutes=1),
                priority=Priority(priority_key=config.key(priority)),
            )
            start_ms.append((time.perf_counter() - sent) * 1000)
        queued_cpu = meter.stop()["server"]
        queued_rss = rss_mib(server.process.pid)

        meter.start()
        began = time.perf_counter()
        worker = Worker(
            client, task_queue=QUEUE, activities=[recorder.noop], max_concurrent_activities=1
        )
        async with worker:
            await asyncio.wait_for(recorder.all_ran.wait(), timeout=600)
            drain_s = time.perf_counter() - began
            drain_cpu = meter.stop()["server"]
            meter.start()
            await asyncio.sleep(args.idle)
            idle_cpu = meter.stop()["server"]
    finally:
        server.stop()

    n = len(priorities)
    # Pairs of different priorities served out of order; pairs of one priority served
    # out of arrival order (each task reaches the queue on its own, so a few swap).
    wrong = inverted_pairs([(-priorities[seq],) for seq in recorder.ran])
    swapped = inverted_pairs([(-priorities[seq], seq) for seq in recorder.ran]) - wrong
    keys = len({config.key(p) for p in priorities})
    return (
        f"{config.name:8} levels={config.levels:<3} keys used={keys:<3} "
        f"start p50 {percentile(start_ms, 50):.1f} ms p99 {percentile(start_ms, 99):.1f} ms, "
        f"server {queued_cpu / n * 1000:.2f} ms cpu/task, {queued_rss:.0f} MiB | "
        f"drain {n / drain_s:.0f} tasks/s, server {drain_cpu / n * 1000:.2f} ms cpu/task | "
        f"out of priority order: {wrong} of {n * (n - 1) // 2} pairs, "
        f"of arrival order within a priority: {swapped} | "
        f"idle {idle_cpu / args.idle * 100:.1f} % cpu"
    )


async def main(args: argparse.Namespace, data: Path) -> None:
    low, high = priority_range(PRIORITY_LEVELS)
    rng = random.Random(args.seed)
    priorities = [rng.randint(low, high) for _ in range(args.tasks)]
    chosen = [c for c in CONFIGS if c.name in args.configs.split(",")]
    for round_no in range(1, args.rounds + 1):
        for config in chosen:
            line = await measure(config, priorities, data / f"round{round_no}", args)
            print(f"round {round_no}: {line}")
            sys.stdout.flush()


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--idle", type=float, default=10.0, help="idle seconds measured")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--configs", default=DEFAULT_CONFIGS, help="comma list of names")
    parser.add_argument(
        "--batch", type=int, default=0, help="matching.getTasksBatchSize (default: server's)"
    )
    args = parse(parser, argv)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # cleans up like Ctrl-C
    data = Path(tempfile.mkdtemp(prefix="bench-priority-"))
    print(machine())
    batch = f", batch {args.batch}" if args.batch else ""
    print(
        f"{args.tasks} tasks, priorities {priority_range(PRIORITY_LEVELS)}{batch}; data in {data}"
    )
    print(f"code: {code_version()}")
    sys.stdout.flush()
    ok = False
    try:
        asyncio.run(main(args, data))
        ok = True
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
    finally:
        if ok and not args.keep:
            shutil.rmtree(data, ignore_errors=True)
        else:
            print(f"kept {data}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    exit_now(run(sys.argv[1:]))
