"""Fault-battery kit: a logging solver double and the "nothing lost" invariant checks.

Shared by tests/test_faults_processes.py, tests/test_faults_inputs.py, tests/test_fuzz.py,
tests/test_faults_scheduling.py and tests/test_faults_job_control.py.

Load
    ``LOAD`` is ``"reduced"`` (default, CI) or ``"full"`` (env ``JOBFORGE_FAULT_LOAD``);
    ``scale(reduced, full)`` picks the number for the current load.

Solver double
    ``write_solver(directory) -> Solver`` writes ``faultsolver-<hex>.py``; a job runs it
    with ``params = run_params(tag, log, sleep_s=..., exit_code=0)``. Each run appends
    ``"<tag> <attempt> <pid> start <ppid> <unix time>"`` and the same with ``end`` to
    ``log`` (append mode, one ``write`` per line; ``attempt`` is ``-``: the solver is
    not told it; ppid 1 means its worker died), sleeps ``sleep_s``, exits
    ``exit_code`` or prints ``{"tag": tag}``. Build a spec with
    ``solver.spec(job_type, params=run_params(...))`` (``Solver`` is conftest's).
    ``read_runs(log) -> dict[tag, list[Run]]`` parses the log.

Invariants (each ``check_*`` returns a list of problems, ``[]`` when it holds;
``assert_invariants`` runs L, R, D, M together and fails with every problem listed)
    L  ``wait_terminal(http, ids, timeout)`` -> ``{id: job}`` once every job is
       terminal (``completed``, ``quarantined``, or ``failed`` with reason
       ``cancelled``); raises listing the stragglers.
    R  ``check_results(jobs, tags)``: every job completed (the solver double succeeds,
       and the scenarios give ``max_attempts`` above the faults they inject), with one
       ``completed`` transition and a result that is its own tag's;
       ``check_stable(http, jobs, pause_s)`` reads every job again after a pause: its
       status, result and transitions are unchanged.
    D  ``check_runs(jobs, tags, runs, extra={})``: runs per job <= 1 + the faults that
       hit it (its ``fail_history`` entries, plus ``extra[id]``).
    M  ``check_transitions(jobs)``: each job's ``transitions`` follows the one table of
       edges (workflows/job_states.py ``is_legal``), ``seq`` 1..n;
       ``check_events(events, jobs)``: the SSE events seen (any list of
       ``(event_name, data_dict)``, duplicates from reconnects allowed if identical)
       follow those edges per job, in seq order, and cover every transition
       (``complete=True``).
    O  ``check_quiet(solver_path, cache_dirs, timeout)``: no live process runs the
       solver script, no ``.part-*`` file in the caches, each ``cache/<sha256>`` file
       hashes to its name (waits up to ``timeout`` for solvers to exit).

Scheduling invariants (tests/test_faults_scheduling.py), from each job's ``transitions``
(``ts`` is workflow time, one server clock for every job). An attempt's span runs from
its ``assigned`` to the next transition that is neither ``assigned`` nor ``running``
(``attempt_spans``); a lease's span runs on across retries (a ``failed`` followed by
``pending``) to ``completed``, ``quarantined`` or a final ``failed`` (``lease_spans``).
Spans are half-open, so a job assigned in the millisecond another ends is not counted
with it.
    C  ``check_capacity(jobs, {pool: capacity})``: at no instant do the attempt spans of
       a pool's jobs add up to more ``cost_units`` than its capacity;
       ``by="group"`` with ``{group: max_parallel}`` counts jobs against a group's limit;
       ``peak_in_use(jobs, key)`` is the most they held at once (the check had teeth).
    S  ``check_serial(jobs, order)``: the lease spans of one target's jobs never overlap,
       and its jobs are first ``assigned`` in ``order`` (submission order; by
       ``created_at`` when not given).
    P  ``check_paused(jobs, {group: [(paused_at, resumed_at)]})``: no job of a group has
       an ``assigned`` transition strictly inside one of its pause windows (epoch ms:
       from the pause's answer to the resume's request).
    F  ``check_fair_shares(jobs, pool, {group: weight})``: the pool's jobs of those
       groups, in the order they were first ``assigned`` (the grant order when the pool
       has capacity 1), share the grants by weight: up to the grant that takes a
       group's last job, after each grant n every group has had within one grant of
       n * weight / (sum of the weights); ``share_problems(order, weights)`` checks a
       sequence of groups.
    L  ``check_settled(jobs, targets)``: each job is terminal, or ``pending`` behind a
       halted target whose ``halted_by`` is a quarantined job of that target (what
       ``wait_settled`` waits for); ``check_pools_idle(pools)``: every pool's ``in_use``
       is 0 (``wait_pools_idle`` waits for it).

Host pinning invariant (tests/test_faults_processes.py)
    H  ``check_pinned(jobs, {host: {worker_id, ...}})``: every ``assigned`` transition
       of a job with ``require_host`` is by one of that host's workers, and a completed
       one reads that ``host``. Its edges: pending->pending with reason
       ``preferred_host_timeout``, pending->failed with ``host_unavailable`` (terminal).

Job-control invariants (tests/test_faults_job_control.py)
    K  ``check_stop_outcomes(jobs, answers, tags)``: each job asked to stop ends as the
       answer to its stop allows (``STOP_ALLOWS``: 202 ``stop_requested`` -> stopped or
       completed, 202 ``failed`` (cancelled) -> failed, 409 ``completed`` ->
       completed), never both completed and stopped; a completed one has exactly one
       ``completed`` transition and its own tag as result, a stopped one no result and
       ``fail_reason`` ``stopped``; no attempt follows a ``stop_requested``.
       ``stop_job(http, id, timeout) -> StopAnswer`` sends the stop, through 503s and
       connection errors, and keeps every status seen.
    L  ``wait_ended(http, address, ids, timeout)`` -> ``(jobs, stuck)``: as
       ``wait_terminal``, but a job that still reads live while its Temporal execution
       has closed is returned in ``stuck`` (no transition can come any more) instead of
       waited for.
    T  ``check_execution_statuses(jobs, statuses)``: completed -> COMPLETED; stopped or
       cancelled -> CANCELED, but a stopped job of a group or target stays RUNNING
       (held for a re-queue); ``execution_statuses(address, ids)`` describes them.
    G  ``wait_gates_released(address, task_queue, [(kind, key)], timeout, closed=())``:
       once every job has ended, no gate lists a holder (``gate_holders`` queries one);
       holders in ``closed`` are not waited for.
    O  ``process_group(pgid)``: the live members of a solver's process group.

Dispatch-timeout invariant (tests/test_faults_dispatch.py)
    N  ``check_counted(jobs)``: each attempt number is assigned at most once per job, and
       ``attempts`` is the number of ``assigned`` transitions less the stale claims sent
       back (``assigned -> pending``, ``dispatch_timeout``): an attempt that timed out
       before a worker took it is never counted, one taken is counted once.

Tenant invariant (tests/test_faults_tenants.py)
    T2 ``check_tenants(jobs, workers, expected)``: each job reads the tenant it was
       submitted with (``expected``: id -> tenant or None), and every transition of it
       that names a worker (assigned, running, completed, failed) names a worker or
       agent of that tenant (``workers``: worker id -> its tenant, None for one
       without): no claim crosses tenants, and a worker without a tenant takes no
       tenant's job. An attempt whose worker died before it reported its claim names
       none, and is not checked.

Helpers
    ``submit_retrying(http, spec, key, timeout)``: POST /api/jobs with
    ``Idempotency-Key: key`` until it answers 201/200; any status other than 2xx/503
    (or a connection error) fails the test, and every status seen is returned.
    ``call_retrying(http, method, path, json, timeout)``: any other request, retried
    through 503s and connection errors (an API restarting); fails on any other non-2xx.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import math
import os
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client

from tests.conftest import PYTHON, Solver
from workflows.job_states import HELD, is_ended, is_legal
from workflows.names import GATE_QUERY, gate_workflow_id

LOAD = os.environ.get("JOBFORGE_FAULT_LOAD", "reduced")
FULL = LOAD == "full"


def scale(reduced: int, full: int) -> int:
    """The figure for the current load."""
    return full if FULL else reduced


# -- solver double ---------------------------------------------------------------------

SOLVER_SOURCE = """\
import json, os, sys, time
params = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
tag = params.get("tag", "-")
log = params.get("log")


def note(what):
    if log:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            line = f"{tag} - {os.getpid()} {what} {os.getppid()} {time.time():.3f}\\n"
            os.write(fd, line.encode())
        finally:
            os.close(fd)


note("start")
time.sleep(float(params.get("sleep_s", 0)))
note("end")
code = int(params.get("exit_code", 0))
if code:
    sys.exit(code)
print(json.dumps({"tag": tag}))
"""


def write_solver(directory: Path) -> Solver:
    """Write the logging solver double (executable) into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"faultsolver-{uuid.uuid4().hex[:8]}.py"
    path.write_text(f"#!{PYTHON}\n" + SOLVER_SOURCE)
    path.chmod(0o755)
    return Solver(path)


def run_params(tag: str, log: Path, *, sleep_s: float = 0.0, exit_code: int = 0) -> dict[str, Any]:
    """Params that make the solver double log under `tag`."""
    return {"tag": tag, "log": str(log), "sleep_s": sleep_s, "exit_code": exit_code}


@dataclass(frozen=True)
class Run:
    """One solver process as its log lines tell it."""

    pid: int
    started: bool
    ended: bool


def read_runs(log: Path) -> dict[str, list[Run]]:
    """Runs per tag, from the solver's append-only log."""
    lines: dict[tuple[str, int], set[str]] = defaultdict(set)
    if log.exists():
        for line in log.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 4:
                lines[(parts[0], int(parts[2]))].add(parts[3])
    runs: dict[str, list[Run]] = defaultdict(list)
    for (tag, pid), what in lines.items():
        runs[tag].append(Run(pid, "start" in what, "end" in what))
    return runs


# -- the state machine -------------------------------------------------------------------

EVENT_STATUS = {
    "job:created": "pending",
    "job:assigned": "assigned",
    "job:running": "running",
    "job:completed": "completed",
    "job:failed": "failed",
    "job:pending": "pending",
    "job:quarantined": "quarantined",
    "job:stop_requested": "stop_requested",
    "job:stopped": "stopped",
}


def is_terminal(job: dict[str, Any]) -> bool:
    """The job has ended for good (workflows/job_states.py `is_ended`)."""
    return is_ended(job["status"], job.get("fail_reason"))


def _path_problems(job_id: str, steps: list[tuple[int, str, str | None]]) -> list[str]:
    """Problems in one job's (seq, status, reason) path."""
    problems = []
    if not steps:
        return [f"{job_id}: no transitions"]
    seqs = [seq for seq, _, _ in steps]
    if seqs != list(range(1, len(steps) + 1)):
        problems.append(f"{job_id}: seq {seqs}")
    if steps[0][1] != "pending":
        problems.append(f"{job_id}: starts at {steps[0][1]}")
    for (_, a, _), (_, b, reason) in itertools.pairwise(steps):
        if is_legal(a, b, reason):
            continue
        problems.append(f"{job_id}: edge {a}->{b} ({reason}) in {[s for _, s, _ in steps]}")
    return problems


# -- L ---------------------------------------------------------------------------------


def get_job(http: httpx.Client, job_id: str) -> dict[str, Any]:
    """GET /api/jobs/{id}, retried through 503s."""
    deadline = time.monotonic() + 60
    while True:
        try:
            response = http.get(f"/api/jobs/{job_id}")
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
            continue
        if response.status_code == 503 and time.monotonic() < deadline:
            time.sleep(0.5)
            continue
        assert response.status_code == 200, (job_id, response.status_code, response.text)
        body: dict[str, Any] = response.json()
        return body


def read_in_order(
    http: httpx.Client, ids: list[str], batch: int = 8
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Read `ids` in order, `batch` at a time, up to the first batch holding a job that is
    not terminal: (the terminal jobs read, the live ones of that batch).

    Jobs end about in the order they were submitted, so a wait costs a read or a batch
    per round rather than one per job still live (each read is a workflow query, which
    replays a closed job's history on a worker)."""
    done: dict[str, dict[str, Any]] = {}
    live: dict[str, dict[str, Any]] = {}
    with ThreadPoolExecutor(batch) as readers:
        for start in range(0, len(ids), batch):
            chunk = ids[start : start + batch]
            for job_id, job in zip(
                chunk, readers.map(lambda j: get_job(http, j), chunk), strict=True
            ):
                (done if is_terminal(job) else live)[job_id] = job
            if live:
                break
    return done, live


def wait_terminal(
    http: httpx.Client, ids: Iterable[str], timeout: float, interval: float = 1.0
) -> dict[str, dict[str, Any]]:
    """L: wait until every job is terminal; return them."""
    pending = list(dict.fromkeys(ids))
    done: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout
    while True:
        ended, _ = read_in_order(http, pending)
        done.update(ended)
        pending = [job_id for job_id in pending if job_id not in done]
        if not pending:
            return done
        if time.monotonic() > deadline:
            sample = {j: get_job(http, j)["status"] for j in pending[:10]}
            raise AssertionError(f"L: {len(pending)} jobs not terminal after {timeout}s: {sample}")
        time.sleep(interval)


# -- R ---------------------------------------------------------------------------------


def check_results(jobs: dict[str, dict[str, Any]], tags: dict[str, str]) -> list[str]:
    """R: every job completed once, carrying its own tag."""
    problems = []
    for job_id, job in jobs.items():
        completions = [t for t in job["transitions"] if t["status"] == "completed"]
        if job["status"] != "completed":
            problems.append(f"{job_id}: {job['status']} ({job.get('fail_reason')}), not completed")
        elif len(completions) != 1:
            problems.append(f"{job_id}: {len(completions)} completed transitions")
        result = job.get("result")
        if job["status"] == "completed" and result != {"tag": tags.get(job_id)}:
            problems.append(f"{job_id}: result {result!r} is not its tag {tags.get(job_id)}")
    return problems


def check_stable(
    http: httpx.Client, jobs: dict[str, dict[str, Any]], pause_s: float = 2.0
) -> list[str]:
    """R: a terminal state never changes (read again after `pause_s`)."""
    time.sleep(pause_s)
    problems: list[str] = []
    for job_id, before in jobs.items():
        after = get_job(http, job_id)
        problems.extend(
            f"{job_id}: {key} changed {before.get(key)!r} -> {after.get(key)!r}"
            for key in ("status", "result", "transitions", "fail_reason")
            if after.get(key) != before.get(key)
        )
    return problems


# -- D ---------------------------------------------------------------------------------


def check_runs(
    jobs: dict[str, dict[str, Any]],
    tags: dict[str, str],
    runs: dict[str, list[Run]],
    extra: dict[str, int] | None = None,
) -> list[str]:
    """D: solver runs per job <= 1 + faults that hit it (fail_history + extra)."""
    extra = extra or {}
    problems = []
    for job_id, job in jobs.items():
        tag = tags.get(job_id)
        if tag is None:
            continue
        allowed = 1 + len(job.get("fail_history") or []) + extra.get(job_id, 0)
        count = len(runs.get(tag, []))
        if count > allowed:
            problems.append(
                f"{job_id}: {count} solver runs > {allowed} allowed: {runs.get(tag)}"
                f" transitions {[(t['status'], t.get('reason')) for t in job['transitions']]}"
            )
        if job["status"] == "completed" and not any(r.ended for r in runs.get(tag, [])):
            problems.append(f"{job_id}: completed with no finished solver run")
    return problems


# -- M ---------------------------------------------------------------------------------


def check_transitions(jobs: dict[str, dict[str, Any]]) -> list[str]:
    """M: each job's recorded transitions follow the state machine's edges."""
    problems = []
    for job_id, job in jobs.items():
        steps = [(t["seq"], t["status"], t.get("reason")) for t in job["transitions"]]
        problems += _path_problems(job_id, steps)
    return problems


def check_events(
    events: Iterable[tuple[str, dict[str, Any]]],
    jobs: dict[str, dict[str, Any]],
    *,
    complete: bool = True,
) -> list[str]:
    """M over SSE: per job, events in seq order along the table's edges, matching
    `transitions`."""
    problems = []
    seen: dict[str, dict[int, tuple[str, dict[str, Any]]]] = defaultdict(dict)
    order: dict[str, list[int]] = defaultdict(list)
    for name, data in events:
        job_id = data["id"]
        if job_id not in jobs:
            continue
        seq = data["seq"]
        if seq in seen[job_id]:
            if seen[job_id][seq][0] != name:
                problems.append(f"{job_id}: seq {seq} seen as {seen[job_id][seq][0]} and {name}")
            continue
        seen[job_id][seq] = (name, data)
        order[job_id].append(seq)
    for job_id, job in jobs.items():
        seqs = order.get(job_id, [])
        if seqs != sorted(seqs):
            problems.append(f"{job_id}: events out of seq order {seqs}")
        steps = []
        for seq in sorted(seqs):
            name, data = seen[job_id][seq]
            status = EVENT_STATUS.get(name)
            if status is None or data["status"] != status:
                problems.append(f"{job_id}: event {name} with status {data['status']}")
            steps.append((seq, data["status"], data.get("reason")))
        recorded = [(t["seq"], t["status"]) for t in job["transitions"]]
        if complete:
            problems += _path_problems(job_id, steps)
            if [(s, st) for s, st, _ in steps] != recorded:
                got = [(s, st) for s, st, _ in steps]
                problems.append(f"{job_id}: events {got} != transitions {recorded}")
        else:
            for seq, status, _ in steps:
                if (seq, status) not in recorded:
                    problems.append(f"{job_id}: event seq {seq} {status} not recorded")
    return problems


# -- scheduling: C S P L ------------------------------------------------------------------

# A stop asked of a running job leaves its solver running until the worker kills it.
ACTIVE = HELD
Span = tuple[int, float]


def _steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted(job["transitions"], key=lambda t: t["seq"])


def attempt_spans(job: dict[str, Any]) -> list[Span]:
    """(assigned ts, ts of the next transition neither assigned nor running) per attempt;
    the end is infinite while the attempt is still on."""
    spans: list[Span] = []
    start: int | None = None
    for step in _steps(job):
        if start is None:
            if step["status"] == "assigned":
                start = step["ts"]
        elif step["status"] not in ACTIVE:
            spans.append((start, step["ts"]))
            start = None
    if start is not None:
        spans.append((start, math.inf))
    return spans


def lease_spans(job: dict[str, Any]) -> list[Span]:
    """(assigned ts, ts the job gives its gates back): a failed attempt followed by
    `pending` is a retry under the same leases, so the span runs on to `completed`,
    `quarantined` or a final `failed`; infinite while the job still holds them."""
    steps = _steps(job)
    spans: list[Span] = []
    start: int | None = None
    for i, step in enumerate(steps):
        status = step["status"]
        if start is None:
            if status == "assigned":
                start = step["ts"]
            continue
        retried = i + 1 < len(steps) and steps[i + 1]["status"] == "pending"
        if status in ("completed", "quarantined", "stopped") or (
            status == "failed" and not retried
        ):
            spans.append((start, step["ts"]))
            start = None
    if start is not None:
        spans.append((start, math.inf))
    return spans


def _in_use(
    jobs: dict[str, dict[str, Any]], key: str, by: str
) -> list[tuple[float, dict[str, int]]]:
    """Each instant an attempt of `key` starts or ends, and the attempts held then."""
    # (ts, 0 = an end, 1 = a start, job id, cost): at one instant ends come first.
    edges: list[tuple[float, int, str, int]] = []
    for job_id, job in jobs.items():
        if job.get(by) != key:
            continue
        cost = int(job.get("cost_units") or 1) if by == "pool" else 1
        for start, end in attempt_spans(job):
            if end > start:
                edges += [(start, 1, job_id, cost), (end, 0, job_id, cost)]
    holding: dict[str, int] = {}
    series = []
    for ts, kind, job_id, cost in sorted(edges):
        if kind == 0:
            holding.pop(job_id, None)
        else:
            holding[job_id] = cost
        series.append((ts, dict(holding)))
    return series


def peak_in_use(jobs: dict[str, dict[str, Any]], key: str, *, by: str = "pool") -> int:
    """The most cost units (jobs, `by="group"`) the attempts of `key` held at once."""
    return max((sum(held.values()) for _, held in _in_use(jobs, key, by)), default=0)


def check_capacity(
    jobs: dict[str, dict[str, Any]], limits: dict[str, int], *, by: str = "pool"
) -> list[str]:
    """C: at every instant, the cost units of a pool's attempts (assigned or running) are
    within its capacity; `by="group"` counts a group's attempts against max_parallel."""
    problems = []
    for key, limit in limits.items():
        over = False
        for ts, held in _in_use(jobs, key, by):
            in_use = sum(held.values())
            if in_use > limit and not over:
                problems.append(
                    f"{by} {key}: {in_use} > {limit} at ts {ts:.0f}, held by {sorted(held.items())}"
                )
            over = in_use > limit
    return problems


def check_serial(jobs: dict[str, dict[str, Any]], order: Iterable[str] | None = None) -> list[str]:
    """S: a target's jobs never hold it at once (lease spans), and they are first assigned
    in submission order (`order`; by created_at when not given)."""
    if order is None:
        order = sorted(jobs, key=lambda j: (jobs[j].get("created_at") or 0, j))
    by_target: dict[str, list[str]] = defaultdict(list)
    for job_id in order:
        target = jobs[job_id].get("target")
        if target is not None:
            by_target[target].append(job_id)
    problems = []
    for target, members in by_target.items():
        spans = sorted((s, e, job_id) for job_id in members for s, e in lease_spans(jobs[job_id]))
        until: float = -math.inf
        holder = ""
        for start, end, job_id in spans:
            if start < until and job_id != holder:
                problems.append(
                    f"target {target}: {job_id} assigned at {start} while {holder} held it"
                    f" until {until:.0f}"
                )
            if end > until:
                until, holder = end, job_id
        firsts = [
            (job_id, next(t["ts"] for t in _steps(jobs[job_id]) if t["status"] == "assigned"))
            for job_id in members
            if any(t["status"] == "assigned" for t in jobs[job_id]["transitions"])
        ]
        for (earlier, a), (later, b) in itertools.pairwise(firsts):
            if b < a:
                problems.append(
                    f"target {target}: {later} first assigned at {b}, before {earlier}"
                    f" (submitted earlier) at {a}"
                )
    return problems


def check_paused(
    jobs: dict[str, dict[str, Any]], pauses: dict[str, list[tuple[int, int]]]
) -> list[str]:
    """P: no job of a group is assigned inside one of the group's pause windows
    (paused_at: the pause answered; resumed_at: the resume was asked; epoch ms)."""
    problems: list[str] = []
    for job_id, job in jobs.items():
        windows = pauses.get(job.get("group") or "", [])
        for step in _steps(job):
            if step["status"] != "assigned":
                continue
            problems.extend(
                f"{job_id} of paused group {job['group']}: assigned at {step['ts']}"
                f" (attempt {step.get('attempt')}, worker {step.get('worker_id')}),"
                f" paused {paused_at}..{resumed_at}"
                for paused_at, resumed_at in windows
                if paused_at < step["ts"] < resumed_at
            )
    return problems


def share_problems(order: Sequence[str], weights: Mapping[str, float]) -> list[str]:
    """F on a pool's grants: `order` names the group of each grant, in the order the pool
    granted them, from a point where every group of `weights` waits. Up to the grant
    that takes a group's last job, after each grant n every group g has had within one
    grant of n * w_g / W (W the sum of the weights)."""
    total = sum(weights.values())
    left = Counter(order)
    had: Counter[str] = Counter()
    problems: list[str] = []
    for n, group in enumerate(order, start=1):
        had[group] += 1
        left[group] -= 1
        for name, weight in weights.items():
            due = n * weight / total
            if abs(had[name] - due) > 1 + 1e-9:
                problems.append(
                    f"after grant {n}: group {name} had {had[name]}, its share is {due:.2f}"
                    f" (grants so far: {''.join(_letters(order[:n], weights))})"
                )
        if any(left[name] <= 0 for name in weights):
            break  # a group has nothing left waiting: shares are owed no more
    return problems


def _letters(order: Sequence[str], weights: Mapping[str, float]) -> list[str]:
    names = {name: chr(ord("A") + i) for i, name in enumerate(weights)}
    return [names.get(group, "?") for group in order]


def check_fair_shares(
    jobs: dict[str, dict[str, Any]], pool: str, weights: Mapping[str, float]
) -> list[str]:
    """F: the pool's jobs of the groups in `weights`, by their first `assigned`, share
    the grants by weight within one grant at every point (`share_problems`). The
    scenario must make the first `assigned` order the grant order (capacity 1, cost 1:
    each grant waits for the previous job to end) and have every job of these groups
    waiting when the pool starts granting them. A job never assigned fails it."""
    firsts: list[tuple[int, str]] = []
    problems: list[str] = []
    for job_id, job in jobs.items():
        if job.get("pool") != pool or job.get("group") not in weights:
            continue
        assigned = [step["ts"] for step in _steps(job) if step["status"] == "assigned"]
        if not assigned:
            problems.append(f"{job_id} of pool {pool}, group {job.get('group')}: never assigned")
            continue
        firsts.append((assigned[0], job["group"]))
    order = [group for _, group in sorted(firsts)]
    return problems + [f"pool {pool}: {p}" for p in share_problems(order, weights)]


def check_settled(jobs: dict[str, dict[str, Any]], targets: dict[str, dict[str, Any]]) -> list[str]:
    """L: each job is terminal, or pending behind a halted target (`targets`: GET
    /api/targets/{t} views) that a quarantined job of its own halted, so a resume moves it."""
    problems = []
    for job_id, job in jobs.items():
        if is_terminal(job):
            continue
        view = targets.get(job.get("target") or "")
        if job["status"] == "pending" and view is not None and view["halted"]:
            continue
        problems.append(
            f"{job_id}: {job['status']} (waiting_for {job.get('waiting_for')}), neither"
            " terminal nor behind a halted target"
        )
    for name, view in targets.items():
        if not view["halted"]:
            continue
        by = jobs.get(view.get("halted_by") or "")
        if by is None or by["status"] != "quarantined" or by.get("target") != name:
            state = None if by is None else (by["status"], by.get("target"))
            problems.append(f"target {name}: halted by {view.get('halted_by')} {state}")
    return problems


def check_pools_idle(pools: dict[str, dict[str, Any]]) -> list[str]:
    """L: every pool (GET /api/pools/{p} views) has given back all its units."""
    return [
        f"pool {name}: in_use {view['in_use']}" for name, view in pools.items() if view["in_use"]
    ]


def wait_settled(
    http: httpx.Client, ids: Iterable[str], timeout: float, interval: float = 1.0
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """L: wait until `check_settled` holds; return the jobs and their targets' views."""
    ids = list(dict.fromkeys(ids))
    jobs: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout
    while True:
        # In order, up to the first job neither terminal nor pending behind a target:
        # until then the round cannot settle (see read_in_order for why).
        blocked = None
        for job_id in ids:
            if job_id not in jobs or not is_terminal(jobs[job_id]):
                job = jobs[job_id] = get_job(http, job_id)
                if not is_terminal(job) and not (job["status"] == "pending" and job.get("target")):
                    blocked = job
                    break
        problems = [] if blocked is None else check_settled({blocked["id"]: blocked}, {})
        if blocked is None:
            names = {job["target"] for job in jobs.values() if job.get("target")}
            targets = {name: call_retrying(http, "GET", f"/api/targets/{name}") for name in names}
            problems = check_settled(jobs, targets)
            if not problems:
                return jobs, targets
        if time.monotonic() > deadline:
            raise AssertionError(f"L: not settled after {timeout}s: {problems[:10]}")
        time.sleep(interval)


def wait_pools_idle(http: httpx.Client, names: Iterable[str], timeout: float) -> list[str]:
    """L: wait until every named pool's in_use is 0; the problems left at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        pools = {name: call_retrying(http, "GET", f"/api/pools/{name}") for name in names}
        problems = check_pools_idle(pools)
        if not problems or time.monotonic() > deadline:
            return problems
        time.sleep(0.5)


# -- O ---------------------------------------------------------------------------------


def solver_processes(solver_path: Path) -> list[int]:
    """Live (non-zombie) processes whose command line names the solver script."""
    needle = str(solver_path).encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError):
            continue
        if needle in cmdline and state != "Z":
            pids.append(int(entry.name))
    return pids


def check_cache(cache_dir: Path) -> list[str]:
    """O: no temp files, and every entry hashes to its name."""
    problems: list[str] = []
    if not cache_dir.exists():
        return problems
    for path in cache_dir.iterdir():
        if path.name.startswith(".part-"):
            problems.append(f"{cache_dir}: leftover {path.name}")
        elif path.is_file() and len(path.name) == 64:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            if digest != path.name:
                problems.append(f"{cache_dir}: {path.name} hashes to {digest}")
    return problems


def check_quiet(solver_path: Path, cache_dirs: Iterable[Path], timeout: float = 15.0) -> list[str]:
    """O: no leftover solver processes or cache temp files once quiet."""
    deadline = time.monotonic() + timeout
    while solver_processes(solver_path) and time.monotonic() < deadline:
        time.sleep(0.2)
    problems = [f"leftover solver pid {pid}" for pid in solver_processes(solver_path)]
    for cache in cache_dirs:
        problems += check_cache(cache)
    return problems


# -- together ----------------------------------------------------------------------------


def assert_invariants(
    http: httpx.Client,
    ids: Iterable[str],
    tags: dict[str, str],
    log: Path,
    *,
    timeout: float,
    extra_faults: dict[str, int] | None = None,
    events: list[tuple[str, dict[str, Any]]] | None = None,
    stable_pause_s: float = 2.0,
) -> dict[str, dict[str, Any]]:
    """L, R, D, M (and M over `events` when given); returns the terminal jobs."""
    jobs = wait_terminal(http, ids, timeout)
    problems = check_results(jobs, tags)
    problems += check_runs(jobs, tags, read_runs(log), extra_faults)
    problems += check_transitions(jobs)
    problems += check_stable(http, jobs, stable_pause_s)
    if events is not None:
        problems += check_events(events, jobs)
    assert not problems, f"{len(problems)} invariant violations:\n" + "\n".join(problems[:50])
    return jobs


# -- H ---------------------------------------------------------------------------------


def check_pinned(jobs: dict[str, dict[str, Any]], hosts: dict[str, set[str]]) -> list[str]:
    """Every claim (`assigned` transition) of a job with `require_host` was made by a
    worker serving under that host (`hosts`: host id -> its worker ids), and the job
    reads that host as `host` once it has run."""
    problems = []
    for job_id, job in jobs.items():
        host = job.get("require_host")
        if host is None:
            continue
        allowed = hosts.get(host, set())
        claimers = [s.get("worker_id") for s in _steps(job) if s["status"] == "assigned"]
        problems += [
            f"{job_id}: pinned to {host}, claimed by {worker}"
            for worker in claimers
            if worker not in allowed
        ]
        if job["status"] == "completed" and job.get("host") not in (host, *allowed):
            problems.append(f"{job_id}: pinned to {host}, ran on host {job.get('host')}")
    return problems


def submit_retrying(
    http: httpx.Client, spec: dict[str, Any], key: str, timeout: float = 120.0
) -> tuple[str, list[int | str]]:
    """POST with an Idempotency-Key until accepted; only 2xx and 503 are acceptable."""
    seen: list[int | str] = []
    deadline = time.monotonic() + timeout
    while True:
        try:
            response = http.post("/api/jobs", json=spec, headers={"Idempotency-Key": key})
        except httpx.TransportError as err:
            seen.append(type(err).__name__)
        else:
            seen.append(response.status_code)
            if response.status_code in (200, 201):
                return str(response.json()["id"]), seen
            assert response.status_code == 503, (response.status_code, response.text)
        assert time.monotonic() < deadline, f"submission not accepted in {timeout}s: {seen}"
        time.sleep(0.3)


def call_retrying(
    http: httpx.Client,
    method: str,
    path: str,
    json: dict[str, Any] | None = None,
    timeout: float = 120.0,
) -> dict[str, Any]:
    """A request retried through 503s and connection errors; its 2xx body."""
    seen: list[int | str] = []
    deadline = time.monotonic() + timeout
    while True:
        try:
            response = http.request(method, path, json=json)
        except httpx.TransportError as err:
            seen.append(type(err).__name__)
        else:
            seen.append(response.status_code)
            if response.is_success:
                body: dict[str, Any] = response.json()
                return body
            assert response.status_code == 503, (method, path, response.status_code, response.text)
        assert time.monotonic() < deadline, f"{method} {path} not answered in {timeout}s: {seen}"
        time.sleep(0.3)


# -- job control: K T G, and L and O for stops ------------------------------------------


@dataclass(frozen=True)
class StopAnswer:
    """What `POST /api/jobs/{id}/stop` answered last, and every status seen before."""

    code: int
    status: str | None
    fail_reason: str | None
    seen: tuple[int | str, ...] = ()


def stop_job(http: httpx.Client, job_id: str, timeout: float = 60.0) -> StopAnswer:
    """POST the stop until it answers other than 503 or a connection error (an API or
    a workflow worker that is down); that answer, for `check_stop_outcomes` to judge."""
    seen: list[int | str] = []
    deadline = time.monotonic() + timeout
    while True:
        try:
            response = http.post(f"/api/jobs/{job_id}/stop")
        except httpx.TransportError as err:
            seen.append(type(err).__name__)
        else:
            seen.append(response.status_code)
            if response.status_code != 503:
                try:
                    body = response.json()
                except ValueError:
                    body = {}
                body = body if isinstance(body, dict) else {}
                return StopAnswer(
                    response.status_code, body.get("status"), body.get("fail_reason"), tuple(seen)
                )
        assert time.monotonic() < deadline, f"stop of {job_id} not answered in {timeout}s: {seen}"
        time.sleep(0.3)


# The end each answer to a stop allows: a running job asked to stop ends stopped, or
# completed if its result landed first; a pending or assigned one ends as a cancel does.
STOP_ALLOWS: dict[tuple[int, str | None], set[str]] = {
    (202, "stop_requested"): {"stopped", "completed"},
    (202, "stopped"): {"stopped"},
    (202, "failed"): {"failed"},
    (409, "completed"): {"completed"},
}


def check_stop_outcomes(
    jobs: dict[str, dict[str, Any]], answers: dict[str, StopAnswer], tags: dict[str, str]
) -> list[str]:
    """K: each job that was asked to stop ended as its answer allows, with one result
    if completed and none if stopped, and had no attempt after its stop."""
    problems = []
    for job_id, job in jobs.items():
        steps = [t["status"] for t in _steps(job)]
        status = job["status"]
        answer = answers.get(job_id)
        if answer is None:
            problems.append(f"{job_id}: no answer to its stop")
        else:
            allowed = STOP_ALLOWS.get((answer.code, answer.status), set())
            if answer.status == "failed" and answer.fail_reason != "cancelled":
                allowed = set()
            if status not in allowed:
                problems.append(f"{job_id}: ended {status} after the stop answered {answer}")
        if "completed" in steps and "stopped" in steps:
            problems.append(f"{job_id}: both completed and stopped: {steps}")
        if status == "completed":
            if steps.count("completed") != 1:
                problems.append(f"{job_id}: {steps.count('completed')} completed transitions")
            if job.get("result") != {"tag": tags.get(job_id)}:
                problems.append(f"{job_id}: result {job.get('result')!r} is not its tag's")
        elif status == "stopped":
            if job.get("result") is not None or job.get("fail_reason") != "stopped":
                problems.append(
                    f"{job_id}: stopped with result {job.get('result')!r},"
                    f" fail_reason {job.get('fail_reason')}"
                )
            if "stop_requested" not in steps:
                problems.append(f"{job_id}: stopped without stop_requested: {steps}")
        elif status == "failed":
            if job.get("fail_reason") != "cancelled" or "stop_requested" in steps:
                problems.append(f"{job_id}: failed {job.get('fail_reason')} after {steps}")
        else:
            problems.append(f"{job_id}: ended {status} ({job.get('fail_reason')})")
        if "stop_requested" in steps:
            after = steps[steps.index("stop_requested") + 1 :]
            if any(s in ("pending", "assigned", "running") for s in after):
                problems.append(f"{job_id}: another attempt after its stop: {steps}")
    return problems


def check_execution_statuses(
    jobs: dict[str, dict[str, Any]], statuses: dict[str, str]
) -> list[str]:
    """T: completed → COMPLETED; stopped or cancelled → CANCELED, except a stopped job of
    a group or target, which stays RUNNING while it is held for a re-queue."""
    problems = []
    for job_id, job in jobs.items():
        if job["status"] == "completed":
            wanted = {"COMPLETED"}
        elif job["status"] == "stopped" and (job.get("group") or job.get("target")):
            wanted = {"RUNNING"}
        elif job["status"] in ("stopped", "failed"):
            wanted = {"CANCELED"}
        else:
            wanted = set()
        if statuses.get(job_id) not in wanted:
            gates = {key: job[key] for key in ("group", "pool", "target") if job.get(key)}
            problems.append(
                f"{job_id} {gates}: {job['status']} but its execution is {statuses.get(job_id)}"
            )
    return problems


async def execution_statuses(address: str, ids: Iterable[str]) -> dict[str, str]:
    """Each job workflow's execution status name, as Temporal describes it."""
    client = await Client.connect(address)
    gate = asyncio.Semaphore(16)

    async def one(job_id: str) -> tuple[str, str]:
        async with gate:
            desc = await client.get_workflow_handle(job_id).describe()
        return job_id, desc.status.name if desc.status is not None else "UNKNOWN"

    return dict(await asyncio.gather(*(one(job_id) for job_id in ids)))


def process_group(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group `pgid`."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def wait_ended(
    http: httpx.Client, address: str, ids: Iterable[str], timeout: float, interval: float = 1.0
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """L under stops: wait until every job is terminal, or reads live while its execution
    has closed (no transition can come any more). Returns (every job, those stuck)."""
    pending = list(dict.fromkeys(ids))
    done: dict[str, dict[str, Any]] = {}
    stuck: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout
    while True:
        # In order, up to the first live jobs whose executions still run (read_in_order).
        while pending:
            ended, live = read_in_order(http, pending)
            done.update(ended)
            if live:
                closed = asyncio.run(execution_statuses(address, live))
                for job_id, status in closed.items():
                    if status == "RUNNING":
                        continue
                    # Read again: it may have ended between the two reads; now it cannot.
                    job = done[job_id] = get_job(http, job_id)
                    live.pop(job_id)
                    if not is_terminal(job):
                        stuck[job_id] = job
            pending = [job_id for job_id in pending if job_id not in done]
            if live:
                break
        if not pending:
            return done, stuck
        if time.monotonic() > deadline:
            sample = {j: live[j]["status"] for j in pending[:10] if j in live}
            raise AssertionError(f"L: {len(pending)} jobs not terminal after {timeout}s: {sample}")
        time.sleep(interval)


async def gate_holders(address: str, task_queue: str, kind: str, key: str) -> list[str]:
    """The jobs a gate (`kind` group, pool or target) lists as holding a lease."""
    client = await Client.connect(address)
    handle = client.get_workflow_handle(gate_workflow_id(task_queue, kind, key))
    view: dict[str, Any] = await handle.query(GATE_QUERY)
    return [str(holder) for holder in view["holders"]]


def wait_gates_released(
    address: str,
    task_queue: str,
    gates: Iterable[tuple[str, str]],
    timeout: float,
    closed: Iterable[str] = (),
) -> dict[tuple[str, str], list[str]]:
    """G: once every job has ended, wait until no gate lists a holder; what is left.
    Holders in `closed` (jobs whose execution has closed: they release nothing more)
    are not waited for."""
    gates, final = list(gates), set(closed)
    deadline = time.monotonic() + timeout
    while True:
        held = {
            gate: found
            for gate in gates
            if (found := asyncio.run(gate_holders(address, task_queue, *gate)))
        }
        waiting = any(h not in final for holders in held.values() for h in holders)
        if not waiting or time.monotonic() > deadline:
            return held
        time.sleep(0.5)


# -- W ---------------------------------------------------------------------------------


def check_unrunnable(jobs: dict[str, dict[str, Any]]) -> list[str]:
    """W: a job no live worker could run was never claimed: pending, waiting for a
    worker, no attempt counted, nothing in its fail_history."""
    problems = []
    for job_id, job in jobs.items():
        seen = (job.get("status"), job.get("waiting_for"), job.get("attempts"))
        if seen != ("pending", "no_worker", 0):
            problems.append(f"{job_id}: {seen}, not pending for a worker with no attempt")
        if job.get("fail_history"):
            problems.append(f"{job_id}: fail_history {job['fail_history']}")
        claims = [t for t in _steps(job) if t["status"] != "pending"]
        if claims:
            problems.append(f"{job_id}: moved past pending: {[t['status'] for t in claims]}")
    return problems


# -- N ---------------------------------------------------------------------------------

DISPATCH_TIMEOUT = "dispatch_timeout"


def check_counted(jobs: dict[str, dict[str, Any]]) -> list[str]:
    """N: each attempt assigned at most once; `attempts` = claims less stale ones."""
    problems = []
    for job_id, job in jobs.items():
        steps = _steps(job)
        claimed = [t.get("attempt") for t in steps if t["status"] == "assigned"]
        if len(claimed) != len(set(claimed)):
            problems.append(f"{job_id}: an attempt assigned twice: {claimed}")
        stale = sum(
            1
            for before, after in itertools.pairwise(steps)
            if before["status"] == "assigned"
            and after["status"] == "pending"
            and after.get("reason") == DISPATCH_TIMEOUT
        )
        if job.get("attempts") != len(claimed) - stale:
            problems.append(
                f"{job_id}: attempts {job.get('attempts')} != {len(claimed)} claims"
                f" - {stale} stale ones"
            )
    return problems


# -- T2 --------------------------------------------------------------------------------


def check_tenants(
    jobs: dict[str, dict[str, Any]],
    workers: Mapping[str, str | None],
    expected: Mapping[str, str | None],
) -> list[str]:
    """T2: no claim crosses tenants. Each job reads its submitted tenant, and each of its
    transitions that names a worker names a known worker of that tenant."""
    problems = []
    for job_id, job in jobs.items():
        tenant = job.get("tenant")
        if tenant != expected.get(job_id):
            problems.append(f"{job_id}: tenant {tenant!r}, submitted {expected.get(job_id)!r}")
        for step in _steps(job):
            if step.get("worker_id") is None:
                # No worker named: an attempt whose worker died before it reported its
                # claim (assigned, then failed by its heartbeat timeout).
                continue
            worker = str(step["worker_id"])
            if worker not in workers:
                problems.append(f"{job_id}: attempt {step.get('attempt')} by unknown {worker}")
            elif workers[worker] != tenant:
                problems.append(
                    f"{job_id} (tenant {tenant!r}): attempt {step.get('attempt')} "
                    f"{step['status']} by "
                    f"{worker} (tenant {workers[worker]!r})"
                )
    return problems
