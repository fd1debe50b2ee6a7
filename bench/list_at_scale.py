"""List, count and metrics routes as the job pile grows: 1,000, 10,000, 100,000 jobs.

    .venv/bin/python -m bench.list_at_scale [--steps 1000,10000,100000] [--requests 20]
        [--keep-data DIR] [--paints 3] [--fill-only | --no-fill] [--pending-share 0.03]

One headless dev server (its data in `--keep-data DIR` when given, kept between runs:
a rerun counts the jobs already there and fills only the difference; `--no-fill` times
them as they are, with no worker running). At each step the
bench fills the server up to that many jobs, then times every route through a real API
process (`jobforge api`) and prints one line per route and step:

    jobs=N route=<route> p50: N ms p99: N ms

The routes are timed on an API with METRICS_CACHE_MS=0 (the uncached cost), and counts
and /metrics once more on an API with the default cache (N scrapers; `(cached)` in the
route). Then the dashboard's first paint in headless Chromium (from opening
`/#token=…` to the jobs table's first row): `jobs=N route=dashboard first paint: N ms`.

The fill starts JobWorkflows directly with the Temporal client (the API's input, memo
and search attributes) at bounded concurrency, and runs in this process the real
workflow worker plus a stand-in `run_job` activity per served type that returns at
once. The mix: most jobs complete; a few per cent (`--pending-share`) are of types no
worker polls (they stay pending); about one per cent are of a type whose stand-in fails with
`solver_checksum_mismatch` (quarantined at once); priorities mostly 0, some 10, 5
and -5. The fill prints its progress (jobs/s, ETA) and where its time goes: starts vs
completions, and the CPU of the dev server and of this process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import random
import sys
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from temporalio import activity
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from api import visibility_queries
from bench.harness import (
    SECRET,
    Bench,
    CpuMeter,
    api_client,
    code_version,
    connect_when_healthy,
    describe,
    exit_now,
    load_average,
    p50_p99,
    percentile,
    run_bench,
)
from engine.clock import now_ms
from engine.connection import TemporalSettings
from engine.directory import register_job_type
from tests.procs import CHROMIUM, CHROMIUM_ARGS
from worker.native import build_workflow_worker
from workflows import search_attributes
from workflows.errors import ErrorType
from workflows.job_states import COUNT_KINDS
from workflows.models import (
    PRIORITY_LEVELS,
    AttemptInput,
    AttemptResult,
    JobInput,
    JobSpec,
    events_memo,
    pending_job,
    priority_key,
)
from workflows.names import EVENTS_MEMO, JOB_WORKFLOW, RUN_JOB_ACTIVITY

# -- the mix ---------------------------------------------------------------------------

# Types a stand-in serves: their jobs complete. The type filter is timed on the first.
SERVED_TYPES = ("solve", "render", "ingest")
# Types nobody serves: their jobs stay pending.
PENDING_TYPES = ("archive", "export")
# The type whose stand-in fails as a bad solver checksum does: quarantined at once.
QUARANTINE_TYPE = "verify"
FILTER_TYPE = SERVED_TYPES[0]
PENDING_SHARE = 0.03
QUARANTINE_SHARE = 0.01
# (priority, weight): mostly 0, some 10, 5 and -5.
PRIORITIES = ((0, 80), (5, 10), (10, 5), (-5, 5))
HEARTBEAT_TIMEOUT_MS = 60_000
TASK_QUEUE = "jobforge"
WORKER_ID = "bench-stand-in"

JOBS = search_attributes.JOBS
UNSETTLED = f"{JOBS} AND ExecutionStatus = 'Running' AND " + " AND ".join(
    f"{search_attributes.TYPE.name} != '{t}'" for t in PENDING_TYPES
)

ROUTES = (
    "/api/jobs?status=pending&limit=50",
    "/api/jobs?limit=50",
    f"/api/jobs?type={FILTER_TYPE}&limit=50",
    "/api/jobs?order=priority&limit=50",
    "/api/jobs?order=priority&status=pending&limit=50",
    "/api/jobs/page?limit=50",
    "/api/jobs/page?status=pending&limit=50",
    "/api/jobs/counts",
    "/metrics",  # last: it starts the API's event feed, which then polls
)
CACHED_ROUTES = ("/api/jobs/counts", "/metrics")
FIRST_ROW = "#jobs-body tr"


def pick_job(rng: random.Random, pending_share: float = PENDING_SHARE) -> tuple[str, int]:
    """A job's type and priority, drawn from the mix (`pending_share` of the jobs stay
    pending)."""
    draw = rng.random()
    if draw < pending_share:
        job_type = rng.choice(PENDING_TYPES)
    elif draw < pending_share + QUARANTINE_SHARE:
        job_type = QUARANTINE_TYPE
    else:
        job_type = rng.choice(SERVED_TYPES)
    priority = rng.choices([p for p, _ in PRIORITIES], [w for _, w in PRIORITIES])[0]
    return job_type, priority


# -- the stand-in activities -----------------------------------------------------------


@dataclass
class Tally:
    """What the fill has done so far, in this process."""

    started: int = 0
    settled: int = 0  # attempts the stand-ins answered (each ends a job)
    expected_to_settle: int = 0  # started jobs of served or quarantine types
    start_errors: Counter[str] = field(default_factory=Counter)
    ahead: int = 2000  # max started jobs not yet settled
    room: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def backlog(self) -> int:
        return self.expected_to_settle - self.settled

    def note_settled(self) -> None:
        self.settled += 1
        if self.backlog <= self.ahead:
            self.room.set()

    async def wait_for_room(self) -> None:
        """Wait until no more than `ahead` started jobs are unsettled."""
        while self.backlog > self.ahead:
            self.room.clear()
            await self.room.wait()


TALLY = Tally()


@activity.defn(name=RUN_JOB_ACTIVITY)
async def run_job_ok(_inp: AttemptInput) -> AttemptResult:
    """A solver that returns `{}` at once (no reports: a short job sends none)."""
    TALLY.note_settled()
    stamp = now_ms()
    return AttemptResult(
        worker_id=WORKER_ID, result={}, result_hash="0" * 64, claimed_at=stamp, started_at=stamp
    )


@activity.defn(name=RUN_JOB_ACTIVITY)
async def run_job_bad_checksum(_inp: AttemptInput) -> AttemptResult:
    """A solver whose download does not match its checksum: the job is quarantined."""
    TALLY.note_settled()
    raise ApplicationError(
        "sha256 of the downloaded solver does not match solver_checksum",
        type=ErrorType.SOLVER_CHECKSUM_MISMATCH.value,
        non_retryable=True,
    )


def workers(client: Client, temporal: TemporalSettings) -> list[Worker]:
    """The real workflow worker, and a stand-in activity worker per served type."""
    found = [build_workflow_worker(client, temporal)]
    found.extend(
        Worker(
            client,
            task_queue=temporal.activity_queue(job_type),
            activities=[run_job_ok],
            max_concurrent_activities=64,
        )
        for job_type in SERVED_TYPES
    )
    found.append(
        Worker(
            client,
            task_queue=temporal.activity_queue(QUARANTINE_TYPE),
            activities=[run_job_bad_checksum],
            max_concurrent_activities=16,
        )
    )
    return found


# -- the fill --------------------------------------------------------------------------


async def count(client: Client, query: str) -> int:
    return (await client.count_workflows(query)).count


async def start_job(
    client: Client, temporal: TemporalSettings, rng: random.Random, pending_share: float
) -> None:
    """Start one JobWorkflow as `POST /api/jobs` does (input, memo, search attributes)."""
    job_type, priority = pick_job(rng, pending_share)
    spec = JobSpec(type=job_type, params={"n": rng.randrange(1 << 30)}, priority=priority)
    created = now_ms()
    inp = JobInput(
        id=uuid.uuid4().hex,
        spec=spec,
        created_at=created,
        priority_key=priority_key(priority, PRIORITY_LEVELS),
        activity_task_queue=temporal.activity_queue(job_type),
        heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS,
    )
    await client.start_workflow(
        JOB_WORKFLOW,
        inp,
        id=inp.id,
        task_queue=temporal.task_queue,
        search_attributes=search_attributes.at_submit(job_type, priority, created),
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        static_summary=f"{job_type} job",
        memo={EVENTS_MEMO: events_memo(pending_job(inp))},
    )
    TALLY.started += 1
    if job_type not in PENDING_TYPES:
        TALLY.expected_to_settle += 1


def eta(seconds: float) -> str:
    if seconds != seconds or seconds == float("inf"):
        return "?"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


async def progress(
    args: argparse.Namespace, step_target: int, final_target: int, base: int, began: float
) -> None:
    """Every `--progress-s`: jobs started and settled, their rates, the ETAs."""
    last_t, last_settled, last_started = began, TALLY.settled, TALLY.started
    while True:
        await asyncio.sleep(args.progress_s)
        now = time.monotonic()
        span = now - last_t
        start_rate = (TALLY.started - last_started) / span
        settle_rate = (TALLY.settled - last_settled) / span
        last_t, last_settled, last_started = now, TALLY.settled, TALLY.started
        overall = TALLY.settled / max(now - began, 1e-9)
        # Jobs still to settle, this step and to the last step (pending ones never do).
        settle_share = 1 - args.pending_share
        left_step = (step_target - base - TALLY.started) * settle_share + TALLY.backlog
        left_all = left_step + (final_target - step_target) * settle_share
        rate = overall if overall > 0 else float("nan")
        print(
            f"  fill: {base + TALLY.started}/{step_target} started ({start_rate:.0f}/s), "
            f"{TALLY.settled} settled ({settle_rate:.0f}/s, {overall:.0f}/s overall), "
            f"backlog {TALLY.backlog}; "
            f"ETA step {eta(left_step / rate)}, all steps {eta(left_all / rate)}; "
            f"load {load_average()}",
            flush=True,
        )


async def fill_to(
    bench: Bench, client: Client, temporal: TemporalSettings, target: int, final_target: int
) -> None:
    """Start jobs until `target` exist, then wait until every served one has settled."""
    args = bench.args
    present = await count(client, JOBS)
    missing = max(0, target - present)
    print(f"fill to {target}: {present} jobs present, starting {missing}", flush=True)
    meter = CpuMeter({"temporal": bench.server_pid(), "bench": os.getpid()})
    meter.start()
    began = time.monotonic()
    TALLY.started = TALLY.settled = TALLY.expected_to_settle = 0
    TALLY.ahead = args.ahead
    rng = random.Random(f"{args.seed}-{present}")
    reporter = asyncio.create_task(progress(args, target, final_target, present, began))
    next_index = 0

    async def starter() -> None:
        nonlocal next_index
        while next_index < missing:
            # Start at most `--ahead` jobs beyond what the stand-ins have settled.
            await TALLY.wait_for_room()
            next_index += 1
            for attempt in range(5):
                try:
                    await start_job(client, temporal, rng, args.pending_share)
                    break
                except Exception as err:  # a busy server: count it, back off, retry
                    TALLY.start_errors[type(err).__name__] += 1
                    await asyncio.sleep(0.5 * (attempt + 1))
            else:
                raise RuntimeError(f"five starts in a row failed: {dict(TALLY.start_errors)}")

    try:
        await asyncio.gather(*(starter() for _ in range(min(args.concurrency, missing))))
        started_s = time.monotonic() - began
        # Settled by the stand-ins is not yet closed in visibility: wait for that.
        while (left := await count(client, UNSETTLED)) > 0:
            if time.monotonic() - began > args.fill_timeout:
                raise TimeoutError(f"{left} jobs still running after {args.fill_timeout:g} s")
            await asyncio.sleep(1.0)
    finally:
        reporter.cancel()
    seconds = time.monotonic() - began
    cpu = meter.stop()
    if missing:
        per_job = {name: value / missing * 1000 for name, value in cpu.items()}
        cores = os.cpu_count() or 1
        print(
            f"fill to {target}: {missing} jobs in {seconds:.1f} s = {missing / seconds:.1f} jobs/s "
            f"(starts took {started_s:.1f} s = {missing / max(started_s, 1e-9):.0f}/s, "
            f"concurrency {args.concurrency}, ahead {args.ahead}); "
            f"{TALLY.settled} attempts settled by the stand-ins"
        )
        print(
            "  where the time goes: cpu "
            + ", ".join(f"{name} {cpu[name]:.1f} s ({per_job[name]:.1f} ms/job)" for name in cpu)
            + f"; wall {seconds:.1f} s x {cores} cores = {seconds * cores:.0f} core-s, "
            f"{sum(cpu.values()) / (seconds * cores) * 100:.0f}% of it in these two; "
            f"load {load_average()}"
        )
        if TALLY.start_errors:
            print(f"  start errors retried: {dict(TALLY.start_errors)}")
    await print_mix(client)


async def print_mix(client: Client) -> None:
    """The jobs present, by status (from visibility; `cancelled` apart from `failed`)."""
    total = await count(client, JOBS)
    found = await asyncio.gather(
        *(count(client, search_attributes.job_filter(kind)) for kind in COUNT_KINDS)
    )
    by_status = ", ".join(f"{s} {n}" for s, n in zip(COUNT_KINDS, found, strict=True) if n)
    print(f"jobs present: {total} ({by_status})", flush=True)


# -- timing the routes -----------------------------------------------------------------


async def time_route(
    http: httpx.AsyncClient, route: str, requests: int, budget_s: float
) -> tuple[list[float], Counter[int], str]:
    """`requests` sequential GETs (after one untimed); the times in ms, the statuses, and
    what the first timed answer held. Stops early (after 3) once `budget_s` is spent."""
    await http.get(route)
    times: list[float] = []
    codes: Counter[int] = Counter()
    shape = ""
    began = time.monotonic()
    for index in range(requests):
        t0 = time.perf_counter()
        response = await http.get(route)
        times.append((time.perf_counter() - t0) * 1000)
        codes[response.status_code] += 1
        if index == 0:
            shape = answer_shape(response)
        if index >= 2 and time.monotonic() - began > budget_s:
            break
    return times, codes, shape


def answer_shape(response: httpx.Response) -> str:
    """What an answer held, briefly: rows of a list, entries of a count, bytes."""
    if response.status_code != 200:
        return f"{response.status_code} {response.text[:120]}"
    kind = response.headers.get("content-type", "")
    if "json" not in kind:
        return f"{len(response.content)} bytes"
    body = response.json()
    if isinstance(body, list):
        return f"{len(body)} rows"
    if isinstance(body, dict) and isinstance(body.get("jobs"), list):
        return f"{len(body['jobs'])} rows"
    return f"{len(response.content)} bytes"


async def time_routes(
    port: int, jobs: int, routes: Sequence[str], args: argparse.Namespace, suffix: str = ""
) -> None:
    async with api_client(port, timeout=args.request_timeout) as http:
        for route in routes:
            times, codes, shape = await time_route(http, route, args.requests, args.route_budget)
            print(p50_p99(f"jobs={jobs} route={route}{suffix}", times))
            statuses = ", ".join(f"{code} x{n}" for code, n in sorted(codes.items()))
            capped = (
                f", stopped at {len(times)} by --route-budget" if len(times) < args.requests else ""
            )
            print(f"  {describe(times)}; answers {statuses}; first {shape}{capped}", flush=True)


async def first_paints(port: int, jobs: int, paints: int) -> None:
    """Open the dashboard `paints` times in fresh contexts (after one untimed load); time
    from navigation until the jobs table shows its first row."""
    if not CHROMIUM.exists():
        print(f"jobs={jobs} route=dashboard skipped: {CHROMIUM} is missing")
        return
    from playwright.async_api import async_playwright

    url = f"http://127.0.0.1:{port}/#token={SECRET}"
    times: list[float] = []
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            # One untimed load first: the browser's own start-up is not the page's.
            for index in range(paints + 1):
                context = await browser.new_context(viewport={"width": 1440, "height": 900})
                page = await context.new_page()
                t0 = time.perf_counter()
                await page.goto(url)
                await page.locator(FIRST_ROW).first.wait_for(state="visible", timeout=120_000)
                if index:
                    times.append((time.perf_counter() - t0) * 1000)
                await context.close()
        finally:
            await browser.close()
    print(f"jobs={jobs} route=dashboard first paint: {percentile(times, 50):.0f} ms")
    print(
        f"  {describe(times, 0)} (after one untimed load; a fresh browser context each, "
        f"{url.split('#')[0]})",
        flush=True,
    )


async def measure(bench: Bench, jobs: int) -> None:
    """Every route on an uncached API; counts and /metrics cached; the first paint."""
    args = bench.args
    # The API process imports the code as it is now, which may differ from the start's.
    print(f"measuring at {jobs} jobs; code: {code_version()}", flush=True)
    uncached, port = bench.start_api(f"api-uncached-{jobs}", METRICS_CACHE_MS="0")
    try:
        await time_routes(port, jobs, ROUTES, args)
    finally:
        uncached.stop(timeout=20)
    cached, port = bench.start_api(f"api-cached-{jobs}")
    try:
        await time_routes(port, jobs, CACHED_ROUTES, args, suffix="(cached)")
        if args.paints:
            await first_paints(port, jobs, args.paints)
    finally:
        cached.stop(timeout=20)


# -- where the time goes ----------------------------------------------------------------


async def visibility_costs(client: Client, jobs: int, rounds: int = 5) -> None:
    """What the list and count routes are made of, timed alone (p50 of `rounds`): a count
    of pending jobs at one priority with the range written as an inclusion (SQLite takes
    the priority index) and as exclusions (it keeps the status index); a count of the
    completed jobs; a listing of pending rows, per row."""
    pending = f"{JOBS} AND {search_attributes.STATUS.name} = 'pending'"
    completed = f"{JOBS} AND {search_attributes.STATUS.name} = 'completed'"
    name = search_attributes.PRIORITY.name
    probes = {
        "count pending at priority 0, inclusion": f"{pending} AND {name} BETWEEN 0 AND 0",
        "count pending at priority 0, exclusions": (
            f"{pending} AND {name} NOT BETWEEN -1000001 AND -1 AND {name} NOT BETWEEN 1 AND 1000001"
        ),
        "count completed": completed,
    }
    for label, query in probes.items():
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            found = await count(client, query)
            times.append((time.perf_counter() - t0) * 1000)
        print(f"jobs={jobs} cost {label} ({found} rows): {percentile(times, 50):.0f} ms")
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        rows = (await visibility_queries.recent(client, pending, offset=0, limit=1000)).executions
        times.append((time.perf_counter() - t0) * 1000 / max(len(rows), 1))
    print(
        f"jobs={jobs} cost listing pending rows ({len(rows)}): {percentile(times, 50):.2f} ms a row"
    )


# -- the run ---------------------------------------------------------------------------


async def run(bench: Bench) -> None:
    args = bench.args
    await connect_when_healthy(bench.server.address)
    client = await Client.connect(
        bench.server.address, data_converter=pydantic_data_converter, identity="bench-list"
    )
    temporal = TemporalSettings(address=bench.server.address, task_queue=TASK_QUEUE)
    running = [] if args.no_fill else workers(client, temporal)
    async with contextlib.AsyncExitStack() as stack:
        for worker in running:
            await stack.enter_async_context(worker)
        for job_type in (*SERVED_TYPES, *PENDING_TYPES, QUARANTINE_TYPE):
            await register_job_type(client, temporal, job_type)
        final = args.steps[-1]
        for step in args.steps:
            print(f"\n== step: {step} jobs (load {load_average()})", flush=True)
            if args.no_fill:
                await print_mix(client)
            else:
                await fill_to(bench, client, temporal, step, final)
            if not args.fill_only:
                present = await count(client, JOBS)
                await visibility_costs(client, present)
                await measure(bench, present)


def parse_steps(text: str) -> list[int]:
    steps = [int(part) for part in text.split(",") if part.strip()]
    if not steps or steps != sorted(steps) or steps[0] < 1:
        raise argparse.ArgumentTypeError("steps are ascending positive job counts, e.g. 1000,10000")
    return steps


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.list_at_scale",
        description="Time the list, count and metrics routes and the dashboard as jobs pile up.",
    )
    parser.add_argument(
        "--steps", type=parse_steps, default=[1000, 10_000, 100_000], help="job totals to time at"
    )
    parser.add_argument("--requests", type=int, default=20, help="timed requests per route")
    parser.add_argument(
        "--route-budget",
        type=float,
        default=90.0,
        help="stop timing a route after this many seconds (at least 3 requests)",
    )
    parser.add_argument("--request-timeout", type=float, default=180.0, help="seconds per request")
    parser.add_argument("--paints", type=int, default=3, help="dashboard loads per step (0: skip)")
    parser.add_argument(
        "--keep-data",
        type=Path,
        help="the dev server's data dir, kept between runs: a rerun fills only what is missing",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (no --keep-data)")
    parser.add_argument("--concurrency", type=int, default=64, help="workflow starts in flight")
    parser.add_argument(
        "--ahead", type=int, default=2000, help="max started jobs not yet settled by the stand-ins"
    )
    parser.add_argument(
        "--progress-s", type=float, default=15.0, help="seconds between progress lines"
    )
    parser.add_argument(
        "--fill-timeout", type=float, default=6 * 3600, help="max seconds per fill step"
    )
    parser.add_argument("--seed", default="list-at-scale", help="seed of the job mix")
    parser.add_argument(
        "--pending-share",
        type=float,
        default=PENDING_SHARE,
        help="share of the jobs filled that stay pending (of types nobody serves)",
    )
    parser.add_argument(
        "--fill-only", action="store_true", help="fill to each step and time nothing"
    )
    parser.add_argument(
        "--no-fill",
        action="store_true",
        help="time the jobs in --keep-data as they are: no fill, no worker (one step)",
    )
    args = parser.parse_args(argv)
    if args.requests < 1 or args.concurrency < 1 or args.ahead < 1:
        parser.error("--requests, --concurrency and --ahead must be at least 1")
    if args.no_fill and (args.fill_only or args.keep_data is None or len(args.steps) > 1):
        parser.error("--no-fill times one step of a --keep-data dir, and is not --fill-only")
    if not 0 <= args.pending_share <= 1 - QUARANTINE_SHARE:
        parser.error(f"--pending-share is between 0 and {1 - QUARANTINE_SHARE:g}")
    return args


def settings(bench: Bench) -> str:
    """The run's settings line."""
    args = bench.args
    steps = ",".join(str(step) for step in args.steps)
    kept = " (kept)" if args.keep_data is not None else ""
    return (
        f"steps={steps} requests={args.requests} paints={args.paints} "
        f"concurrency={args.concurrency} ahead={args.ahead} "
        f"pending-share={args.pending_share:g}{kept}"
    )


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    # The quarantine stand-in fails on purpose: no warning with a traceback for each.
    logging.getLogger("temporalio.activity").setLevel(logging.ERROR)
    return run_bench(
        args, run, settings=settings, data_prefix="jobforge-list-", keep_data=args.keep_data
    )


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
