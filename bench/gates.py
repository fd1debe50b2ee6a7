"""Scheduling: what gates (groups, pools, serial targets) cost a job, how fast one gate
admits, and whether groups share dispatch by weight.

Run it from the repository root with the project's interpreter:

    .venv/bin/python -m bench.gates --jobs 300

One headless dev server, the real API and one native worker (`python -m worker.cli
worker`: the workflows, gates included, and the no-op type, WORKER_CORES=--cores) as
subprocesses, then, one part after the other:

1. throughput: N no-op jobs ungated, N with a pool of capacity 1,000,000 (cost 1: it
   never blocks), N with a group (no limit), all on the same worker process; each timed
   from the first submit to the last CloseTime after an untimed warm-up, as
   bench.throughput times its phases. Then --histories jobs with a group, a pool and a
   serial target. The round trips per job are counted from sampled job histories, and
   each gate's own cost from its whole history (every continue-as-new run) per job it
   served.
2. burst: --burst jobs of a type nobody serves queued at a pool of capacity 0 until
   each has asked the gate itself, then the capacity raised with `PUT /api/pools`: the
   gate grants them all at once; the figure is grants delivered per second, read from
   the gate's history (server times). A worker started afterwards drains them.
3. fairness: --fair-backlog jobs per group on one type nobody serves, submitted group
   after group (first-come-first-served would dispatch the first group's whole backlog
   first), three groups of equal weight; once the backlog is in the task queue, one
   worker with --fair-slots slots starts, and the groups' shares of the first
   --fair-first dispatches (ordered by each job's claimed_at) are printed; the worker
   stops once they are known, and the rest stay queued. Then two groups weighted
   --heavy-weight:1 (set with PATCH before submitting), the light one submitted first.
4. pool-shares: the same where a pool decides who starts (a 002 workspace's
   max_parallel): --pool-backlog jobs per group of two groups, the light one first,
   queued at a pool of capacity 0 until each has asked it, then the capacity set to
   --pool-capacity and a worker with that many slots started. The groups' shares of
   the pool's first --pool-first grants, read from its history in the order it sent
   them, at 1:1 and at --heavy-weight:1, and the most a group was off its share at any
   point (invariant F: at most one grant).

Where the time goes: each part prints the dev server's `Slow gRPC call` warnings; the
throughput part prints a median timeline of sampled jobs, the CPU each process used
per job, each gate's workflow-task times, and the workflow code's own CPU (histories
replayed in the bench process). Everything runs on one machine: the load average is
printed at each part.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
from temporalio.api.enums.v1 import EventType, TaskQueueKind, TaskQueueType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from bench.harness import (
    NOOP_SOLVER,
    Bench,
    CpuMeter,
    api_client,
    code_version,
    connect_when_healthy,
    exit_now,
    load_average,
    parse,
    percentile,
    run_bench,
)
from bench.throughput import Phase, measure, run_batch, wait_completed
from engine.connection import TemporalSettings
from tests.procs import Proc, jobforge
from worker.native import workflow_runner
from workflows.gate_workflow import GateWorkflow
from workflows.job_workflow import JobWorkflow
from workflows.names import (
    ACQUIRE_SIGNAL,
    GRANT_SIGNAL,
    JOB_WORKFLOW,
    gate_workflow_id,
)

T = TypeVar("T")

JOB_TYPE = "noop"
BIG_CAPACITY = 1_000_000
PARTS = ("throughput", "burst", "fairness", "pool-shares")
# Columns of the round-trip table: a label and the history event types it counts.
COLUMNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("wf tasks", ("WORKFLOW_TASK_COMPLETED",)),
    ("act tasks", ("ACTIVITY_TASK_STARTED",)),
    ("sig in", ("WORKFLOW_EXECUTION_SIGNALED",)),
    ("sig out", ("SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED",)),
    ("updates", ("WORKFLOW_EXECUTION_UPDATE_ACCEPTED",)),
    ("sa upserts", ("UPSERT_WORKFLOW_SEARCH_ATTRIBUTES",)),
    ("memo", ("WORKFLOW_PROPERTIES_MODIFIED",)),
    ("timers", ("TIMER_STARTED",)),
    ("markers", ("MARKER_RECORDED",)),
    ("children", ("START_CHILD_WORKFLOW_EXECUTION_INITIATED",)),
)


def kind(event: HistoryEvent) -> str:
    return EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")


def ms(event: HistoryEvent) -> float:
    return event.event_time.ToMicroseconds() / 1000


async def until(
    condition: Callable[[], Awaitable[T | None]], *, limit_s: float, what: str, every: float = 0.5
) -> T:
    """Poll an async `condition` until it returns something truthy; TimeoutError at the
    deadline."""
    end = time.monotonic() + limit_s
    last: T | None = None
    while time.monotonic() < end:
        last = await condition()
        if last:
            return last
        await asyncio.sleep(every)
    raise TimeoutError(f"timed out after {limit_s:g} s waiting for {what}: {last!r}")


# -- the API ---------------------------------------------------------------------------


async def call(http: httpx.AsyncClient, method: str, path: str, body: object = None) -> Any:
    """One API call; its JSON answer (RuntimeError on a status >= 300). An idempotent
    call whose connection breaks is sent once more (a kept-alive connection the API
    closed while the bench waited), and says so."""
    try:
        response = await http.request(method, path, json=body)
    except httpx.TransportError as err:
        if method == "POST":
            raise
        print(f"  ({method} {path}: {err!r}; sent again)", file=sys.stderr, flush=True)
        response = await http.request(method, path, json=body)
    if response.status_code >= 300:
        raise RuntimeError(f"{method} {path}: {response.status_code} {response.text}")
    return response.json()


def submitter(http: httpx.AsyncClient, **fields: object) -> Callable[[int], Awaitable[str]]:
    """A submit function for run_batch: POST /api/jobs with `fields`."""

    async def submit(index: int) -> str:
        job = await call(http, "POST", "/api/jobs", {"params": {"i": index}, **fields})
        job_id: str = job["id"]
        return job_id

    return submit


# -- histories -------------------------------------------------------------------------


async def gate_runs(client: Client, workflow_id: str) -> list[WorkflowHistory]:
    """Every run of a gate (it continues as new), oldest first."""
    runs: list[WorkflowHistory] = []
    run_id: str | None = None
    while True:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        runs.append(history)
        started = history.events[0].workflow_execution_started_event_attributes
        if not started.continued_execution_run_id:
            return runs[::-1]
        run_id = started.continued_execution_run_id


@dataclass
class GateStats:
    """One gate's history, summed over its runs."""

    runs: int = 0
    events: Counter[str] = field(default_factory=Counter)
    signals_in: Counter[str] = field(default_factory=Counter)
    signals_out: Counter[str] = field(default_factory=Counter)
    task_wait_ms: list[float] = field(default_factory=list)  # scheduled → started
    task_run_ms: list[float] = field(default_factory=list)  # started → completed
    grants_initiated_ms: list[float] = field(default_factory=list)
    grants_delivered_ms: list[float] = field(default_factory=list)
    updates_accepted_ms: list[float] = field(default_factory=list)


def gate_stats(runs: list[WorkflowHistory], since_ms: float = 0.0) -> GateStats:
    """A gate's history summed over its runs, from `since_ms` (epoch ms) on."""
    stats = GateStats(runs=len(runs))
    for run in runs:
        # Event ids count from 1 in each run.
        out_names: dict[int, str] = {}
        scheduled = started = 0.0
        for event in run.events:
            if ms(event) < since_ms:
                continue
            name = kind(event)
            stats.events[name] += 1
            if name == "WORKFLOW_EXECUTION_SIGNALED":
                stats.signals_in[
                    event.workflow_execution_signaled_event_attributes.signal_name
                ] += 1
            elif name == "SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED":
                attrs = event.signal_external_workflow_execution_initiated_event_attributes
                stats.signals_out[attrs.signal_name] += 1
                out_names[event.event_id] = attrs.signal_name
                if attrs.signal_name == GRANT_SIGNAL:
                    stats.grants_initiated_ms.append(ms(event))
            elif name == "EXTERNAL_WORKFLOW_EXECUTION_SIGNALED":
                initiated = event.external_workflow_execution_signaled_event_attributes
                if out_names.get(initiated.initiated_event_id) == GRANT_SIGNAL:
                    stats.grants_delivered_ms.append(ms(event))
            elif name == "WORKFLOW_EXECUTION_UPDATE_ACCEPTED":
                stats.updates_accepted_ms.append(ms(event))
            elif name == "WORKFLOW_TASK_SCHEDULED":
                scheduled = ms(event)
            elif name == "WORKFLOW_TASK_STARTED":
                started = ms(event)
                stats.task_wait_ms.append(started - scheduled)
            elif name == "WORKFLOW_TASK_COMPLETED":
                stats.task_run_ms.append(ms(event) - started)
    return stats


def job_points(events: Sequence[HistoryEvent]) -> dict[str, float]:
    """Named points of one job's history, ms after WorkflowExecutionStarted."""
    origin = ms(events[0])
    points: dict[str, float] = {}
    for event in events:
        name = kind(event)
        at = ms(event) - origin
        if name == "WORKFLOW_EXECUTION_SIGNALED":
            if event.workflow_execution_signaled_event_attributes.signal_name == GRANT_SIGNAL:
                points["last gate_grant received"] = at  # the last gate's grant
            continue
        label = {
            "WORKFLOW_TASK_COMPLETED": "first workflow task completed",
            # An acquire (a job that had to ask), or else the release at its end.
            "EXTERNAL_WORKFLOW_EXECUTION_SIGNALED": "first signal delivered to a gate",
            "ACTIVITY_TASK_SCHEDULED": "activity scheduled",
            "ACTIVITY_TASK_STARTED": "activity started (worker polled it)",
            "ACTIVITY_TASK_COMPLETED": "activity completed",
            "WORKFLOW_EXECUTION_COMPLETED": "workflow completed",
        }.get(name)
        if label is not None and label not in points:
            points[label] = at
    return points


@dataclass
class Sample:
    """Sampled job histories of one kind of job."""

    label: str
    histories: list[WorkflowHistory]
    mean: dict[str, float]
    points: dict[str, list[float]]
    priorities: Counter[str] = field(default_factory=Counter)


async def sample_jobs(client: Client, label: str, ids: list[str], count: int) -> Sample:
    """Event counts and timeline points of `count` histories spread over `ids`."""
    step = max(1, len(ids) // count)
    picked = ids[::step][:count]
    totals: Counter[str] = Counter()
    points: dict[str, list[float]] = {}
    priorities: Counter[str] = Counter()
    histories = [await client.get_workflow_handle(job_id).fetch_history() for job_id in picked]
    for history in histories:
        events = list(history.events)
        for event in events:
            totals[kind(event)] += 1
            if kind(event) == "ACTIVITY_TASK_SCHEDULED":
                priority = event.activity_task_scheduled_event_attributes.priority
                priorities[
                    f"fairness_key={priority.fairness_key or '-'} "
                    f"fairness_weight={priority.fairness_weight:g}"
                ] += 1
        for name, at in job_points(events).items():
            points.setdefault(name, []).append(at)
    mean = {name: n / len(picked) for name, n in totals.items()}
    return Sample(label, histories, mean, points, priorities)


def column(mean: dict[str, float], kinds: tuple[str, ...]) -> float:
    return sum(mean.get(name, 0.0) for name in kinds)


def print_round_trips(samples: list[Sample]) -> None:
    """The table of round trips per job, and each gated kind's extra over ungated."""
    head = f"  {'job':<20}{'events':>8}" + "".join(f"{label:>11}" for label, _ in COLUMNS)
    print(
        f"round trips per job, from each job's own history (mean of {len(samples[0].histories)}):"
    )
    print(head)
    for sample in samples:
        print(
            f"  {sample.label:<20}{sum(sample.mean.values()):8.2f}"
            + "".join(f"{column(sample.mean, kinds):11.2f}" for _, kinds in COLUMNS)
        )
    base = samples[0]
    for sample in samples[1:]:
        delta = sum(sample.mean.values()) - sum(base.mean.values())
        print(
            f"  {'+ ' + sample.label:<20}{delta:+8.2f}"
            + "".join(
                f"{column(sample.mean, kinds) - column(base.mean, kinds):+11.2f}"
                for _, kinds in COLUMNS
            )
        )
    print(
        "  not in a job's history: the API's admission at each gate (an update-with-start, "
        "batched: `admit`) or its signal-with-start (`enqueue`), counted with the gate "
        "below, and the HTTP POST"
    )


def print_timelines(samples: list[Sample]) -> None:
    """Median ms after WorkflowExecutionStarted of each point, per kind."""
    for sample in samples:
        parts = [
            f"{name} {statistics.median(values):.0f}"
            for name, values in sorted(
                sample.points.items(), key=lambda item: statistics.median(item[1])
            )
        ]
        print(f"  {sample.label}: " + ", ".join(parts))


def per_job_line(label: str, stats: GateStats, jobs: int) -> str:
    """One gate's cost per job it served."""
    events = sum(stats.events.values())
    tasks = stats.events["WORKFLOW_TASK_COMPLETED"]

    def per(counter: Counter[str]) -> str:
        return ", ".join(f"{key} {n / jobs:.2f}" for key, n in sorted(counter.items()))

    waits = stats.task_wait_ms or [0.0]
    runs = stats.task_run_ms or [0.0]
    held = sum(runs) / jobs
    return (
        f"{label} ({jobs} jobs, {stats.runs} run(s)): {tasks / jobs:.2f} workflow tasks, "
        f"{events / jobs:.2f} events per job; signals in: {per(stats.signals_in)} "
        f"({sum(stats.signals_in.values()) / max(1, tasks):.1f} per workflow task); out: "
        f"{per(stats.signals_out)}; memo upserts "
        f"{stats.events['WORKFLOW_PROPERTIES_MODIFIED'] / jobs:.2f}; its tasks waited in the "
        f"queue p50 {percentile(waits, 50):.0f} ms p99 {percentile(waits, 99):.0f} ms and ran "
        f"p50 {percentile(runs, 50):.0f} ms p99 {percentile(runs, 99):.0f} ms: held "
        f"{held:.0f} ms per job (one task at a time: at most {1000 / max(held, 0.1):.0f} "
        "jobs/s at these task times)"
    )


# -- where the time goes ---------------------------------------------------------------


class SlowCalls:
    """The dev server's `Slow gRPC call` warnings, read part by part from its log."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.offset = 0

    def since_last(self) -> str:
        """Warnings since the last call, by method and by what they addressed."""
        try:
            with self.log.open("rb") as out:
                out.seek(self.offset)
                text = out.read().decode(errors="replace")
                self.offset = out.tell()
        except OSError:
            return "(no server log)"
        calls: dict[str, list[float]] = {}
        for line in text.splitlines():
            if 'msg="Slow gRPC call"' not in line:
                continue
            method = re.search(r"method=\S*/(\w+)", line)
            workflow_id = re.search(r"wf-id=(\S+)", line)
            target = "" if workflow_id is None else " to a job"
            if workflow_id is not None and "-gate" in workflow_id.group(1):
                target = " to a gate"
            key = f"{method.group(1) if method else '?'}{target}"
            calls.setdefault(key, []).append(_seconds(re.search(r"duration=(\S+)", line)))
        if not calls:
            return "none"
        return ", ".join(
            f"{key} x{len(values)} (max {max(values):.1f} s)"
            for key, values in sorted(calls.items(), key=lambda item: -len(item[1]))
        )


def _seconds(match: re.Match[str] | None) -> float:
    """A Go duration (`5.01s`, `1m9.9s`, `812ms`) in seconds."""
    parts = re.fullmatch(r"(?:(\d+)m)?([\d.]+)(s|ms|µs|us|ns)", match.group(1) if match else "")
    if parts is None:
        return float("nan")
    scale = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9}[parts.group(3)]
    return int(parts.group(1) or 0) * 60 + float(parts.group(2)) * scale


async def replay_cpu_ms(replayer: Replayer, histories: Sequence[WorkflowHistory]) -> float:
    """CPU ms this process spends replaying `histories`: the workflow code's own cost,
    without the server or any queue. A replay failure (non-determinism) is an error."""
    began = time.process_time()
    for history in histories:
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        if result.replay_failure is not None:
            raise RuntimeError(f"{history.workflow_id} does not replay: {result.replay_failure}")
    return (time.process_time() - began) * 1000


def tasks_in(histories: Sequence[WorkflowHistory]) -> int:
    return sum(kind(e) == "WORKFLOW_TASK_COMPLETED" for h in histories for e in h.events)


# -- part 1: throughput and round trips ------------------------------------------------


@dataclass
class Run:
    """What every part uses: the bench, the clients, where the gates are."""

    bench: Bench
    client: Client
    http: httpx.AsyncClient
    temporal: TemporalSettings
    meter: CpuMeter
    slow: SlowCalls

    def gate_id(self, kind_: str, key: str) -> str:
        return gate_workflow_id(self.temporal.task_queue, kind_, key)

    async def completed(self) -> int:
        query = f"WorkflowType='{JOB_WORKFLOW}' AND ExecutionStatus='Completed'"
        return (await self.client.count_workflows(query)).count


def cpu_line(phase: Phase, jobs: int) -> str:
    parts = [f"{name} {seconds / jobs * 1000:.1f}" for name, seconds in phase.cpu.items()]
    total = sum(v for k, v in phase.cpu.items() if k != "bench")
    return (
        f"  {phase.name}: " + ", ".join(parts) + f"; all but the bench {total / jobs * 1000:.1f}"
        f" (wall {phase.seconds:.1f} s x {os.cpu_count()} cores = "
        f"{phase.seconds * (os.cpu_count() or 1):.0f} core-s)"
    )


async def throughput(run: Run) -> list[str]:
    """Ungated, pool-gated and group-gated phases, then the round trips; summary lines."""
    args, client, http = run.bench.args, run.client, run.http
    pool, group = "bench-pool", "bench-group"
    await call(http, "PUT", f"/api/pools/{pool}", {"capacity": BIG_CAPACITY})
    phases: list[Phase] = []
    for name, fields in (("ungated", {}), ("pool", {"pool": pool}), ("group", {"group": group})):
        began = time.monotonic()
        submit = submitter(http, type=JOB_TYPE, **fields)
        phase = await measure(name, client, JOB_WORKFLOW, args, submit, run.meter)
        phases.append(phase)
        print(
            f"{name}: {args.jobs} jobs in {phase.seconds:.2f} s = "
            f"{args.jobs / phase.seconds:.1f} jobs/s (submits took {phase.submit_seconds:.1f} s; "
            f"phase {time.monotonic() - began:.0f} s, load average now {load_average()})",
            flush=True,
        )
    # A sample through all three kinds of gate (its target runs one job at a time).
    combo = {"group": "rt-group", "pool": "rt-pool", "target": "rt-target"}
    baseline = await run.completed()
    combo_ids, _ = await run_batch(
        args.histories, args.concurrency, submitter(http, type=JOB_TYPE, **combo)
    )
    await wait_completed(client, JOB_WORKFLOW, baseline + args.histories, args.timeout)
    print(f"server slow-call warnings in this part: {run.slow.since_last()}")

    print()
    samples = [await sample_jobs(client, phase.name, phase.ids, args.histories) for phase in phases]
    samples.append(await sample_jobs(client, "group+pool+target", combo_ids, args.histories))
    print_round_trips(samples)
    served = args.jobs + args.warmup
    print("gate workflows, per job served (their histories over every run):")
    gate_lines: list[str] = []
    gate_histories: dict[str, tuple[list[WorkflowHistory], int]] = {}
    for label, kind_, key, jobs in (
        ("pool gate", "pool", pool, served),
        ("group gate", "group", group, served),
        ("target gate of the group+pool+target jobs", "target", combo["target"], args.histories),
        ("group gate of the group+pool+target jobs", "group", combo["group"], args.histories),
        ("pool gate of the group+pool+target jobs", "pool", combo["pool"], args.histories),
    ):
        runs = await gate_runs(client, run.gate_id(kind_, key))
        gate_histories[label] = (runs, jobs)
        gate_lines.append(per_job_line(label, gate_stats(runs), jobs))
        print(f"  {gate_lines[-1]}")

    print("where the time goes:")
    print("  median ms after WorkflowExecutionStarted, sampled jobs (queueing under the load):")
    print_timelines(samples)
    print("  cpu per job by process during each timed phase (ms/job):")
    for phase in phases:
        print(cpu_line(phase, args.jobs))
    replayer = Replayer(
        workflows=[JobWorkflow, GateWorkflow],
        workflow_runner=workflow_runner(),
        data_converter=pydantic_data_converter,
    )
    await replay_cpu_ms(replayer, samples[0].histories[:1])  # imports into the sandbox
    parts = []
    for sample in samples:
        cpu = await replay_cpu_ms(replayer, sample.histories)
        tasks = tasks_in(sample.histories)
        parts.append(
            f"{sample.label} job {cpu / len(sample.histories):.1f} ms "
            f"({cpu / max(1, tasks):.1f} per workflow task)"
        )
    for label in ("pool gate", "group gate"):
        runs, jobs = gate_histories[label]
        cpu = await replay_cpu_ms(replayer, runs)
        parts.append(
            f"{label} {cpu / jobs:.1f} ms per job served "
            f"({cpu / max(1, tasks_in(runs)):.1f} per workflow task)"
        )
    print("  workflow code alone (histories replayed in this process, cpu): " + ", ".join(parts))

    rates = {phase.name: args.jobs / phase.seconds for phase in phases}
    ratio = rates["pool"] / rates["ungated"]
    print(f"ratio: {ratio:.2f} (pool-gated / ungated jobs/s; target >= 0.6)")
    print(f"ratio, group-gated / ungated: {rates['group'] / rates['ungated']:.2f}")
    summary = [
        f"jobs/s: ungated {rates['ungated']:.1f}, pool-gated {rates['pool']:.1f}, "
        f"group-gated {rates['group']:.1f} ({args.jobs} jobs each)",
        f"ratio: {ratio:.2f} (pool-gated / ungated; target >= 0.6)",
        f"ratio, group-gated / ungated: {rates['group'] / rates['ungated']:.2f}",
    ]
    summary.extend(
        f"round trips per {sample.label} job: "
        + ", ".join(f"{label} {column(sample.mean, kinds):.2f}" for label, kinds in COLUMNS)
        + f", events {sum(sample.mean.values()):.2f}"
        for sample in samples
    )
    summary.extend(line.split("; signals in")[0] for line in gate_lines)
    return summary


# -- part 2: one gate's admissions -----------------------------------------------------


def start_plain_worker(bench: Bench, name: str, job_type: str, slots: int) -> Proc:
    """A worker for one type that runs no workflows (jobforge's worker then logs
    `ready: workflows=False`)."""
    worker = bench.spawn(
        name,
        jobforge("worker"),
        bench.env(
            WORKER_TYPES=job_type,
            WORKER_SOLVERS=json.dumps({job_type: NOOP_SOLVER}),
            WORKER_CORES=str(slots),
            WORKER_RUN_WORKFLOWS="false",
            NODE_ID=name,
        ),
    )
    worker.wait_for("ready: workflows=False")
    return worker


async def backlog(client: Client, queue: str) -> int:
    """The approximate number of tasks waiting in an activity task queue."""
    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
        report_stats=True,
    )
    response = await client.workflow_service.describe_task_queue(request)
    return int(response.stats.approximate_backlog_count)


async def wait_backlog(run: Run, job_type: str, count: int) -> None:
    """Until `count` attempts of `job_type` wait in its task queue."""
    queue = run.temporal.activity_queue(job_type)

    async def queued() -> int | None:
        waiting = await backlog(run.client, queue)
        return waiting if waiting >= count else None

    await until(queued, limit_s=run.bench.args.timeout, what=f"{count} in {queue}", every=0.1)


async def burst(run: Run) -> list[str]:
    """Queue jobs at a closed pool, open it, time the grants; summary lines."""
    args, client, http = run.bench.args, run.client, run.http
    pool, job_type, count = "bench-burst", "burst", args.burst
    gate_id = run.gate_id("pool", pool)
    await call(http, "PUT", f"/api/pools/{pool}", {"capacity": 0})
    began = time.monotonic()
    await run_batch(count, args.concurrency, submitter(http, type=job_type, pool=pool))
    print(f"{count} jobs submitted to pool {pool} in {time.monotonic() - began:.1f} s", flush=True)

    async def asked() -> bool | None:
        stats = gate_stats(await gate_runs(client, gate_id))
        return stats.signals_in[ACQUIRE_SIGNAL] >= count or None

    await until(asked, limit_s=args.timeout, what=f"{count} jobs to ask pool {pool}")
    opened = time.time()
    await call(http, "PUT", f"/api/pools/{pool}", {"capacity": BIG_CAPACITY})
    answered = time.time()

    async def delivered() -> list[WorkflowHistory] | None:
        runs = await gate_runs(client, gate_id)
        return runs if len(gate_stats(runs).grants_delivered_ms) >= count else None

    runs = await until(delivered, limit_s=args.timeout, what=f"{count} grants delivered")
    await wait_backlog(run, job_type, count)
    in_queue = time.time()
    opened_ms = gate_stats(runs).updates_accepted_ms[-1]
    stats = gate_stats(runs, since_ms=opened_ms)
    last_delivered = max(stats.grants_delivered_ms)
    span_s = (last_delivered - opened_ms) / 1000
    waits, runs_ms = stats.task_wait_ms or [0.0], stats.task_run_ms or [0.0]
    print(
        f"  PUT capacity answered in {(answered - opened) * 1000:.0f} ms; in the gate's "
        f"history (server times, from the capacity update accepted): {count} grants sent "
        f"between +{min(stats.grants_initiated_ms) - opened_ms:.0f} and "
        f"+{max(stats.grants_initiated_ms) - opened_ms:.0f} ms, delivered between "
        f"+{min(stats.grants_delivered_ms) - opened_ms:.0f} and "
        f"+{last_delivered - opened_ms:.0f} ms; all {count} attempts in the task queue "
        f"{in_queue - opened:.2f} s after the PUT (bench clock, polled)"
    )
    print(
        f"  the gate meanwhile: {stats.events['WORKFLOW_TASK_COMPLETED']} workflow tasks (a "
        f"delivery wakes it), {sum(stats.events.values())} events; its tasks waited in the "
        f"queue p50 {percentile(waits, 50):.0f} ms max {max(waits):.0f} ms and ran p50 "
        f"{percentile(runs_ms, 50):.0f} ms max {max(runs_ms):.0f} ms"
    )
    print(f"  server slow-call warnings in this part: {run.slow.since_last()}")
    line = (
        f"one pool gate's admissions: {count} grants delivered in {span_s:.2f} s = "
        f"{count / span_s:.0f}/s (burst from capacity 0 to {BIG_CAPACITY:,}; "
        f"{count / (in_queue - opened):.0f}/s to all attempts queued)"
    )
    print(line)
    baseline = await run.completed()
    with start_plain_worker(run.bench, "burst-worker", job_type, args.cores):
        began = time.monotonic()
        await wait_completed(client, JOB_WORKFLOW, baseline + count, args.timeout)
        print(f"  drained by a worker in {time.monotonic() - began:.1f} s", flush=True)
    run.slow.since_last()
    return [line]


# -- part 3: fairness ------------------------------------------------------------------


async def claimed_order(run: Run, job_type: str, group_of: dict[str, str]) -> list[str]:
    """The groups of the completed jobs of `job_type` in the order workers claimed them
    (claimed_at, read from each closed job's result)."""
    query = (
        f"WorkflowType='{JOB_WORKFLOW}' AND ExecutionStatus='Completed' "
        f"AND JobforgeType='{job_type}'"
    )
    done = [execution.id async for execution in run.client.list_workflows(query, page_size=1000)]
    gate = asyncio.Semaphore(16)

    async def claimed(job_id: str) -> tuple[int, str]:
        async with gate:
            job = await run.client.get_workflow_handle(job_id).result()
        return int(job["claimed_at"]), job_id

    rows = await asyncio.gather(*(claimed(job_id) for job_id in done))
    return [group_of[job_id] for _, job_id in sorted(rows)]


async def fairness(run: Run, job_type: str, weights: dict[str, float]) -> list[str]:
    """A backlog per group, then one small worker; the shares of the first dispatches."""
    args, http = run.bench.args, run.http
    total = args.fair_backlog * len(weights)
    for group, weight in weights.items():
        await call(http, "PATCH", f"/api/groups/{group}", {"weight": weight})
    baseline = await run.completed()
    ids_by_group: dict[str, list[str]] = {}
    began = time.monotonic()
    for group in weights:  # group after group: FIFO would serve the first one first
        submit = submitter(http, type=job_type, group=group)
        ids_by_group[group], _ = await run_batch(args.fair_backlog, args.concurrency, submit)
    submitted = time.monotonic() - began
    await wait_backlog(run, job_type, total)
    print(
        f"  {total} jobs submitted in {submitted:.1f} s, all in the task queue "
        f"{time.monotonic() - began - submitted:.1f} s later; load average {load_average()}",
        flush=True,
    )
    # The first dispatches are known once that many jobs (and the few a slot may still
    # run) have completed; the rest stay queued, unserved, until the server stops.
    wanted = min(total, args.fair_first + args.fair_slots)
    with start_plain_worker(run.bench, f"worker-{job_type}", job_type, args.fair_slots):
        began = time.monotonic()
        await wait_completed(run.client, JOB_WORKFLOW, baseline + wanted, args.timeout)
        drained = time.monotonic() - began
    group_of = {job_id: g for g, ids in ids_by_group.items() for job_id in ids}
    order = await claimed_order(run, job_type, group_of)
    first = order[: args.fair_first]
    letters = {group: chr(ord("A") + i) for i, group in enumerate(weights)}
    print(
        f"  one worker with {args.fair_slots} slots completed {len(order)} jobs in "
        f"{drained:.1f} s (then stopped); the first 60 dispatches "
        f"({', '.join(f'{v}={k}' for k, v in letters.items())}): "
        + "".join(letters[group] for group in order[:60])
    )
    for start in range(0, len(first), 100):
        window = first[start : start + 100]
        print(
            f"  dispatches {start + 1}-{start + len(window)}: "
            + ", ".join(f"{g} {100 * window.count(g) / len(window):.0f} %" for g in weights)
        )
    for group, ids in ids_by_group.items():
        sample = await sample_jobs(run.client, group, ids, 3)
        print(f"  {group}'s attempts were scheduled with " + "; ".join(sample.priorities))
    print(f"  server slow-call warnings in this part: {run.slow.since_last()}")
    weight_sum = sum(weights.values())
    if max(weights.values()) / weight_sum * len(first) > args.fair_backlog:
        print("  (a group's backlog ran out within the dispatches counted: a short share)")
    line = (
        f"fairness, weights {':'.join(f'{w:g}' for w in weights.values())}, first "
        f"{len(first)} of {total} dispatches: "
        + ", ".join(f"{g} {100 * first.count(g) / len(first):.1f} %" for g in weights)
        + " (target "
        + ", ".join(f"{100 * w / weight_sum:.0f}" for w in weights.values())
        + " % +/- 5)"
    )
    print(line)
    return [line]


# -- part 4: shares through a full pool -------------------------------------------------


def grant_order(runs: list[WorkflowHistory]) -> list[str]:
    """The jobs a gate granted, in the order it sent the grants (over its runs)."""
    order = []
    for run in runs:
        for event in run.events:
            if kind(event) == "SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED":
                attrs = event.signal_external_workflow_execution_initiated_event_attributes
                if attrs.signal_name == GRANT_SIGNAL:
                    order.append(attrs.workflow_execution.workflow_id)
    return order


def most_off_share(order: list[str], weights: dict[str, float]) -> float:
    """The most any group was off its share after any grant (F's measure), up to the
    grant that took a group's last job of `order`."""
    total, had, left = sum(weights.values()), Counter[str](), Counter(order)
    worst = 0.0
    for n, group in enumerate(order, start=1):
        had[group] += 1
        left[group] -= 1
        worst = max(worst, *(abs(had[g] - n * w / total) for g, w in weights.items()))
        if any(left[g] <= 0 for g in weights):
            break
    return worst


async def pool_shares(run: Run, label: str, weights: dict[str, float]) -> list[str]:
    """Two groups' backlogs queued at a closed pool, then the pool opened; the shares
    of its first grants."""
    args, client, http = run.bench.args, run.client, run.http
    pool, job_type = f"bench-shares-{label}", f"shares-{label}"
    gate_id = run.gate_id("pool", pool)
    total = args.pool_backlog * len(weights)
    await call(http, "PUT", f"/api/pools/{pool}", {"capacity": 0})
    for group, weight in weights.items():
        await call(http, "PATCH", f"/api/groups/{group}", {"weight": weight})
    group_of: dict[str, str] = {}
    began = time.monotonic()
    for group in weights:  # group after group: FIFO would serve the first one first
        submit = submitter(http, type=job_type, group=group, pool=pool)
        ids, _ = await run_batch(args.pool_backlog, args.concurrency, submit)
        group_of.update(dict.fromkeys(ids, group))

    async def asked() -> bool | None:
        stats = gate_stats(await gate_runs(client, gate_id))
        return stats.signals_in[ACQUIRE_SIGNAL] >= total or None

    await until(asked, limit_s=args.timeout, what=f"{total} jobs to ask pool {pool}")
    print(
        f"  {total} jobs submitted and asking pool {pool} after "
        f"{time.monotonic() - began:.1f} s; load average {load_average()}",
        flush=True,
    )
    wanted = min(total, args.pool_first)
    await call(http, "PUT", f"/api/pools/{pool}", {"capacity": args.pool_capacity})
    with start_plain_worker(run.bench, f"worker-{job_type}", job_type, args.pool_capacity):
        began = time.monotonic()

        async def granted() -> list[str] | None:
            order = grant_order(await gate_runs(client, gate_id))
            return order if len(order) >= wanted else None

        order = await until(granted, limit_s=args.timeout, what=f"{wanted} grants")
        drained = time.monotonic() - began
    groups = [group_of[job_id] for job_id in order[:wanted]]
    letters = {group: chr(ord("A") + i) for i, group in enumerate(weights)}
    weight_sum = sum(weights.values())
    print(
        f"  {wanted} grants in {drained:.1f} s through capacity {args.pool_capacity}; the "
        f"first 60 ({', '.join(f'{v}={k}' for k, v in letters.items())}): "
        + "".join(letters[group] for group in groups[:60])
    )
    print(f"  server slow-call warnings in this part: {run.slow.since_last()}")
    if max(weights.values()) / weight_sum * wanted > args.pool_backlog:
        print("  (a group's backlog ran out within the grants counted: a short share)")
    line = (
        f"pool shares, weights {':'.join(f'{w:g}' for w in weights.values())}, first "
        f"{wanted} grants of {total} through a pool of capacity {args.pool_capacity}: "
        + ", ".join(f"{g} {100 * groups.count(g) / len(groups):.1f} %" for g in weights)
        + " (target "
        + ", ".join(f"{100 * w / weight_sum:.0f}" for w in weights.values())
        + f" % +/- 5); most off its share at any point: "
        f"{most_off_share(groups, weights):.2f} grants (F: <= 1)"
    )
    print(line)
    return [line]


# -- the run ---------------------------------------------------------------------------


async def main_async(bench: Bench) -> None:
    """The parts asked for, then the figures again with the commit measured."""
    args = bench.args
    client = await connect_when_healthy(bench.server.address)
    api, api_port = bench.start_api()
    worker = bench.start_noop_worker(JOB_TYPE, "bench-worker", WORKER_CORES=str(args.cores))
    meter = bench.meter(api, worker)
    server_log = bench.server.log_path or bench.server.data_dir / "temporal.log"
    # Idle connections are dropped before the API closes them (hub_client.pool_limits).
    async with api_client(api_port, timeout=120, connections=args.concurrency) as http:
        run = Run(
            bench,
            client,
            http,
            TemporalSettings(address=bench.server.address),
            meter,
            SlowCalls(server_log),
        )
        run.slow.since_last()  # start-up
        try:
            summary = await run_parts(run)
        except Exception:
            for name, proc in (("api", api), ("worker", worker)):
                code = proc.process.poll()
                state = "running" if code is None else f"exited with {code}"
                print(f"{name} process: {state}", file=sys.stderr)
            raise
    print(f"\nfigures measured on {code_version()}; load average at end {load_average()}:")
    for line in summary:
        print(f"  {line}")


async def run_parts(run: Run) -> list[str]:
    """The parts asked for, one after the other; their summary lines."""
    args = run.bench.args
    summary: list[str] = []
    if "throughput" in args.parts:
        print(f"-- throughput and round trips (load average {load_average()})", flush=True)
        summary += await throughput(run)
    if "burst" in args.parts:
        print(f"\n-- one gate's admissions (load average {load_average()})", flush=True)
        summary += await burst(run)
    if "fairness" in args.parts:
        print(f"\n-- fairness, equal weights (load average {load_average()})", flush=True)
        equal = {"fair-a": 1.0, "fair-b": 1.0, "fair-c": 1.0}
        summary += await fairness(run, "fair-equal", equal)
        print(f"\n-- fairness, weighted (load average {load_average()})", flush=True)
        # The light group first, so first-come-first-served would favour it.
        weighted = {"fair-light": 1.0, "fair-heavy": float(args.heavy_weight)}
        summary += await fairness(run, "fair-weighted", weighted)
    if "pool-shares" in args.parts:
        print(f"\n-- shares through a pool, equal weights (load average {load_average()})")
        equal = {"pool-a": 1.0, "pool-b": 1.0}
        summary += await pool_shares(run, "equal", equal)
        print(f"\n-- shares through a pool, weighted (load average {load_average()})")
        weighted = {"pool-light": 1.0, "pool-heavy": float(args.heavy_weight)}
        summary += await pool_shares(run, "weighted", weighted)
    return summary


def settings(bench: Bench) -> str:
    args = bench.args
    return (
        f"parts={','.join(args.parts)} jobs={args.jobs} concurrency={args.concurrency} "
        f"cores={args.cores} warmup={args.warmup} histories={args.histories} "
        f"burst={args.burst} fair-backlog={args.fair_backlog} fair-first={args.fair_first} "
        f"fair-slots={args.fair_slots} heavy-weight={args.heavy_weight:g} "
        f"pool-backlog={args.pool_backlog} pool-first={args.pool_first} "
        f"pool-capacity={args.pool_capacity}"
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.gates",
        description="Scheduling: gate round trips, gated vs ungated jobs/s, one gate's "
        "admissions/s, fairness between groups, in a task queue and through a pool.",
    )
    parser.add_argument("--jobs", type=int, default=300, help="jobs per throughput phase")
    parser.add_argument("--concurrency", type=int, default=50, help="submissions in flight")
    parser.add_argument("--cores", type=int, default=8, help="WORKER_CORES of the no-op worker")
    parser.add_argument("--warmup", type=int, default=20, help="untimed jobs before each phase")
    parser.add_argument("--histories", type=int, default=20, help="job histories per kind")
    parser.add_argument("--burst", type=int, default=300, help="jobs queued at the closed pool")
    parser.add_argument("--fair-backlog", type=int, default=300, help="backlog per group")
    parser.add_argument("--fair-first", type=int, default=300, help="dispatches counted")
    parser.add_argument("--fair-slots", type=int, default=2, help="WORKER_CORES of the worker")
    parser.add_argument("--heavy-weight", type=float, default=3.0, help="the heavy group's weight")
    parser.add_argument("--pool-backlog", type=int, default=200, help="backlog per group")
    parser.add_argument("--pool-first", type=int, default=200, help="grants counted")
    parser.add_argument("--pool-capacity", type=int, default=2, help="the pool's capacity")
    parser.add_argument("--timeout", type=float, default=900, help="max seconds per wait")
    parser.add_argument(
        "--parts",
        type=lambda text: [part for part in text.split(",") if part],
        default=list(PARTS),
        help=f"comma-separated subset of {','.join(PARTS)}",
    )
    args = parse(parser, argv)
    if unknown := set(args.parts) - set(PARTS):
        parser.error(f"unknown part(s): {', '.join(sorted(unknown))}")
    if min(args.jobs, args.concurrency, args.cores, args.histories, args.burst) < 1:
        parser.error("--jobs, --concurrency, --cores, --histories and --burst must be >= 1")
    fair = (args.fair_backlog, args.fair_first, args.fair_slots)
    pool = (args.pool_backlog, args.pool_first, args.pool_capacity)
    if min(*fair, *pool) < 1 or args.heavy_weight <= 0:
        parser.error("the fairness and pool-shares options must be positive")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    return run_bench(args, main_async, settings=settings, data_prefix="jobforge-bench-gates-")


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
