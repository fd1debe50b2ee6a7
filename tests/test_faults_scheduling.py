"""Fault battery, scheduling: pools, serial targets and a paused group under worker SIGKILL,
API kill and a Temporal restart; C S P F L (tests/faultkit.py) from each job's transitions.

The checks are pure functions; each has a test here on hand-made transitions that shows
it fails. Load: JOBFORGE_FAULT_LOAD=reduced (default, CI) or full (`make faults`).
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import faultkit
from tests.conftest import SECRET, base_env, wait_until
from tests.ports import free_port
from tests.procs import Proc
from worker.devserver import DevServer, wait_for_port

# -- the checks, on hand-made transitions --------------------------------------------------


def job(job_id: str, path: str, **fields: Any) -> dict[str, Any]:
    """A job as GET /api/jobs/{id} shows it; `path` is "status@ts[:reason] ..."."""
    transitions = []
    for seq, step in enumerate(path.split(), start=1):
        status, _, rest = step.partition("@")
        ts, _, reason = rest.partition(":")
        transitions.append({"seq": seq, "status": status, "ts": int(ts), "reason": reason or None})
    return {"id": job_id, "status": transitions[-1]["status"], "transitions": transitions, **fields}


def done(job_id: str, start: int, end: int, **fields: Any) -> dict[str, Any]:
    """A job that ran once, assigned at `start` and completed at `end`."""
    return job(job_id, f"pending@0 assigned@{start} running@{start} completed@{end}", **fields)


def by_id(*jobs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {j["id"]: j for j in jobs}


KILLED_AND_RETRIED = (
    "pending@0 assigned@100 running@150 failed@400:heartbeat_timeout pending@400 assigned@900"
)


def test_capacity_fails_when_a_pools_attempts_overlap_past_its_capacity() -> None:
    a = done("a", 100, 200, pool="p", cost_units=2)
    b = done("b", 150, 250, pool="p", cost_units=2)
    # c starts the millisecond b ends (spans are half-open); d is in another pool.
    c = done("c", 250, 300, pool="p", cost_units=3)
    d = done("d", 100, 300, pool="q", cost_units=3)
    assert faultkit.check_capacity(by_id(a, c, d), {"p": 3, "q": 3}) == []
    assert faultkit.peak_in_use(by_id(a, c, d), "p") == 3
    problems = faultkit.check_capacity(by_id(a, b, c, d), {"p": 3, "q": 3})
    assert len(problems) == 1 and "pool p: 4 > 3 at ts 150" in problems[0], problems


def test_capacity_counts_an_attempt_until_it_fails_and_an_open_one_for_ever() -> None:
    killed = job("k", KILLED_AND_RETRIED, pool="p", cost_units=1)
    assert faultkit.attempt_spans(killed) == [(100, 400), (900, float("inf"))]
    between = done("b", 500, 800, pool="p")
    assert faultkit.check_capacity(by_id(killed, between), {"p": 1}) == []
    assert faultkit.check_capacity(by_id(killed, done("i", 300, 350, pool="p")), {"p": 1})
    assert faultkit.check_capacity(by_id(killed, done("z", 5000, 6000, pool="p")), {"p": 1})


def test_capacity_by_group_counts_jobs_against_max_parallel() -> None:
    jobs = by_id(*(done(f"j{i}", 100 + i, 200, group="g", cost_units=5) for i in range(3)))
    assert faultkit.check_capacity(jobs, {"g": 3}, by="group") == []
    assert faultkit.check_capacity(jobs, {"g": 2}, by="group") != []


def test_serial_fails_when_a_targets_jobs_overlap_or_start_out_of_order() -> None:
    a = done("a", 100, 200, target="t")
    b = done("b", 200, 300, target="t")
    assert faultkit.check_serial(by_id(a, b), ["a", "b"]) == []
    overlapping = done("b", 199, 300, target="t")
    assert faultkit.check_serial(by_id(a, overlapping), ["a", "b"]) == [
        "target t: b assigned at 199 while a held it until 200"
    ]
    assert faultkit.check_serial(by_id(a, b), ["b", "a"]) == [
        "target t: a first assigned at 100, before b (submitted earlier) at 200"
    ]


def test_serial_holds_a_target_across_a_jobs_retries_until_it_ends() -> None:
    path = f"{KILLED_AND_RETRIED} quarantined@950:solver_exit pending@2000:requeued"
    retried = job("r", f"{path} assigned@2100 completed@2200", target="t")
    assert faultkit.lease_spans(retried) == [(100, 950), (2100, 2200)]
    while_quarantined = done("y", 1000, 1500, target="t")
    assert faultkit.check_serial(by_id(retried, while_quarantined), ["r", "y"]) == []
    between_attempts = done("x", 500, 600, target="t")
    assert faultkit.check_serial(by_id(retried, between_attempts), ["r", "x"]) == [
        "target t: x assigned at 500 while r held it until 950"
    ]


def test_paused_fails_when_a_groups_job_is_assigned_inside_a_pause() -> None:
    before = done("a", 100, 5000, group="g")  # assigned before the pause answered
    after = done("b", 3000, 3500, group="g")
    other = done("c", 1500, 1600, group="h")
    pauses = {"g": [(1000, 2000), (2500, 2600)]}
    assert faultkit.check_paused(by_id(before, after, other), pauses) == []
    retried = job("d", KILLED_AND_RETRIED.replace("900", "1500"), group="g")
    problems = faultkit.check_paused(by_id(before, retried), pauses)
    assert len(problems) == 1 and problems[0].startswith("d of paused group g: assigned at 1500")


def test_settled_allows_only_terminal_jobs_and_jobs_behind_a_halted_target() -> None:
    path = "pending@0 assigned@1 failed@2:solver_exit quarantined@2:solver_exit"
    halting = job("h", path, target="t")
    behind = job("w", "pending@0", target="t", waiting_for="target_halted")
    jobs = by_id(halting, behind, done("c", 1, 2))
    assert faultkit.check_settled(jobs, {"t": {"halted": True, "halted_by": "h"}}) == []
    assert faultkit.check_settled(jobs, {"t": {"halted": False, "halted_by": None}}) != []
    assert faultkit.check_settled(jobs, {"t": {"halted": True, "halted_by": "c"}}) != []
    running = job("r", "pending@0 assigned@1 running@2")
    assert faultkit.check_settled(by_id(running), {}) != []


def test_pools_idle_fails_on_units_still_in_use() -> None:
    assert faultkit.check_pools_idle({"p": {"in_use": 0}, "q": {"in_use": 0}}) == []
    idle = {"p": {"in_use": 0}, "q": {"in_use": 2}}
    assert faultkit.check_pools_idle(idle) == ["pool q: in_use 2"]


def test_fair_shares_fail_when_a_pool_serves_one_group_before_the_other() -> None:
    weights = {"h": 3.0, "l": 1.0}

    def jobs(groups: str) -> dict[str, dict[str, Any]]:
        made = (
            done(f"j{i}", 100 * i, 100 * i + 50, pool="p", group=g) for i, g in enumerate(groups)
        )
        return by_id(*made, done("other", 5, 10, pool="p", group="x"))

    assert faultkit.check_fair_shares(jobs("hlhhhlhh"), "p", weights) == []
    # Once l has had its last job, h's backlog alone is no share to check.
    assert faultkit.check_fair_shares(jobs("hlhhhlhhhhhh"), "p", weights) == []
    problems = faultkit.check_fair_shares(jobs("hhhhhhll"), "p", weights)
    assert problems and problems[0].startswith("pool p: after grant 5: group h had 5")
    never = job("n", "pending@0", pool="p", group="l")
    assert faultkit.check_fair_shares({**jobs("hlhh"), "n": never}, "p", weights) == [
        "n of pool p, group l: never assigned"
    ]


def test_a_requeue_is_an_edge_of_the_state_machine_only_with_its_reason() -> None:
    path = "pending@0 assigned@1 failed@2:solver_exit quarantined@2:solver_exit"
    requeued = job("r", f"{path} pending@3:requeued")
    assert faultkit.check_transitions(by_id(requeued)) == []
    assert faultkit.check_transitions(by_id(job("b", f"{path} pending@3"))) != []


# -- the process-level scenario -----------------------------------------------------------

PAUSED = "g-paused"  # paused and resumed once per round
CAPPED = "g-capped"
CAPPED_MAX = 2
POOLS = {"pa": 3, "pb": 2}
# F: a pool of capacity 1 whose jobs all wait before it opens, two groups 3:1, the
# light one submitted first (first come, first served would run it first).
FAIR_POOL = "pf"
FAIR_WEIGHTS = {"f-light": 1.0, "f-heavy": 3.0}
HALTING = "t-halting"  # one attempt per job: a fault quarantines it and halts the target
RETRYING = "tenant/t-retrying"  # retries under the same lease
SLEEP_S = 1.0  # > the worker's 0.5 s delay before it reports, so the spans show the runs
PAUSED_SLEEP_S = 4.0
ROUNDS = faultkit.scale(1, 3)
N = faultkit.scale(24, 240)
FAIR_LIGHT = faultkit.scale(3, 10)  # jobs of the light group; the heavy one has 3x
# Each round can fail a job's attempt twice (worker kills) and once (Temporal restart).
MAX_ATTEMPTS = 3 * ROUNDS + 2


def kinds(now_ms: int) -> list[dict[str, Any]]:
    """The job mix, one of each per cycle (priority left at 0)."""
    return [
        {"pool": "pa", "cost_units": 1},
        {"pool": "pa", "cost_units": 2, "group": PAUSED},
        {"target": HALTING, "pool": "pb"},
        {"group": PAUSED},
        {"target": RETRYING, "group": PAUSED},
        {"group": CAPPED, "pool": "pb"},
        {"pool": "pa", "earliest_start_at": now_ms + 3000, "deadline_at": now_ms + 900_000},
        {"group": CAPPED},
    ]


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Cluster:
    """A dev server of its own (it is restarted), an API on a fixed port, a workflow
    worker, and two activity workers for the job type."""

    server: DevServer
    spawn: Callable[..., Proc]
    job_type: str
    tmp: Path
    port: int = field(default_factory=free_port)
    procs: list[Proc] = field(default_factory=list)
    workers: dict[str, Proc] = field(default_factory=dict)
    api: Proc | None = None
    http: httpx.Client | None = None

    def env(self, **extra: str) -> dict[str, str]:
        return base_env(self.server, JOB_HEARTBEAT_TIMEOUT_S="3", **extra)

    def start_api(self, *, wait: bool = True) -> Proc:
        self.api = self.spawn(["api", "--port", str(self.port)], self.env())
        self.procs.append(self.api)
        if wait:
            wait_for_port(self.port, 30, self.api.process)
        return self.api

    def start_worker(self, name: str, **env: str) -> Proc:
        proc = self.spawn(["worker"], self.env(NODE_ID=name, **env))
        self.procs.append(proc)
        return proc

    def start_activity_worker(self, name: str) -> Proc:
        proc = self.start_worker(
            name,
            WORKER_TYPES=self.job_type,
            WORKER_RUN_WORKFLOWS="false",
            WORKER_CORES="2",
            SOLVER_CACHE_DIR=str(self.cache(name)),
        )
        self.workers[name] = proc
        return proc

    def cache(self, name: str) -> Path:
        return self.tmp / f"cache-{name}"

    def restart_worker(self, name: str) -> None:
        self.workers[name].kill()
        proc = self.start_activity_worker(name)
        proc.wait_for("serving job type", timeout=30)

    def stop(self) -> None:
        if self.http is not None:
            self.http.close()
        for proc in reversed(self.procs):
            proc.stop(timeout=15)
        self.server.stop()


def submit_in_thread(
    http: httpx.Client, specs: dict[str, dict[str, Any]], ids: dict[str, str], errors: list[Any]
) -> threading.Thread:
    """Submit `specs` (by Idempotency-Key) one after the other, each retried until accepted."""

    def run() -> None:
        try:
            for key, spec in specs.items():
                ids[key], _ = faultkit.submit_retrying(http, spec, key, timeout=120)
        except BaseException as err:  # reported by the test
            errors.append(err)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def explain(
    problems: list[str], jobs: dict[str, dict[str, Any]], tags: dict[str, str], log: Path
) -> str:
    """The problems, then the transitions and solver log lines of every job they name."""
    named = [job_id for job_id in jobs if any(job_id in problem for problem in problems)]
    lines = problems[:50]
    for job_id in named[:20]:
        job = jobs[job_id]
        fields = {k: job.get(k) for k in ("group", "pool", "cost_units", "target", "worker_id")}
        lines.append(f"{job_id} {fields}:")
        lines += [
            f"  {t['seq']} {t['status']} ts={t['ts']} attempt={t.get('attempt')}"
            f" worker={t.get('worker_id')} reason={t.get('reason')}"
            for t in job["transitions"]
        ]
        lines += [f"  log: {line}" for line in log.read_text().splitlines() if tags[job_id] in line]
    return "\n".join(lines)


@pytest.mark.slow(61)
@pytest.mark.timeout(1200 if faultkit.FULL else 300)
def test_pools_targets_and_a_paused_group_hold_under_process_faults(
    spawn: Callable[..., Proc], job_type: str, tmp_path: Path
) -> None:
    server = DevServer(tmp_path / "temporal", port=free_port(), ui_port=None)
    server.start()
    cluster = Cluster(server, spawn, job_type, tmp_path)
    try:
        run_scenario(cluster, tmp_path)
    finally:
        cluster.stop()


def run_scenario(cluster: Cluster, tmp_path: Path) -> None:
    rng = random.Random(11)
    began = time.monotonic()
    took: dict[str, float] = {}

    def lap(phase: str) -> None:
        took[phase] = round(time.monotonic() - began - sum(took.values()), 1)

    api = cluster.start_api(wait=False)  # the four processes start side by side
    flows = cluster.start_worker("sched-flows", WORKER_TYPES="no-such-type")
    for name in ("sched-a", "sched-b"):
        cluster.start_activity_worker(name)
    wait_for_port(cluster.port, 30, api.process)
    flows.wait_for("ready: workflows=True", timeout=30)
    for proc in cluster.workers.values():
        proc.wait_for("serving job type", timeout=30)
    http = cluster.http = httpx.Client(
        base_url=f"http://127.0.0.1:{cluster.port}",
        headers={"Authorization": f"Bearer {SECRET}"},
        timeout=30,
    )
    for pool, capacity in {**POOLS, FAIR_POOL: 0}.items():
        faultkit.call_retrying(http, "PUT", f"/api/pools/{pool}", {"capacity": capacity})
    for group, weight in FAIR_WEIGHTS.items():
        faultkit.call_retrying(http, "PATCH", f"/api/groups/{group}", {"weight": weight})
    faultkit.call_retrying(http, "PATCH", f"/api/groups/{CAPPED}", {"max_parallel": CAPPED_MAX})
    faultkit.call_retrying(http, "PATCH", f"/api/groups/{PAUSED}", {"weight": 2})

    solver = faultkit.write_solver(tmp_path / "bin")
    log = tmp_path / "runs.log"
    mix = kinds(now_ms())
    specs: dict[str, dict[str, Any]] = {}
    tags_by_key: dict[str, str] = {}

    def solver_spec(tag: str, sleep_s: float, **fields: Any) -> dict[str, Any]:
        params = faultkit.run_params(tag, log, sleep_s=sleep_s)
        return solver.spec(cluster.job_type, params=params, **fields)

    for i in range(N):
        kind = mix[i % len(mix)]
        tag = f"s{i}-{uuid.uuid4().hex[:6]}"
        sleep_s = PAUSED_SLEEP_S if kind.get("group") == PAUSED else SLEEP_S
        attempts = {} if kind.get("target") == HALTING else {"max_attempts": MAX_ATTEMPTS}
        specs[f"key-{tag}"] = solver_spec(tag, sleep_s, **kind, **attempts)
        tags_by_key[f"key-{tag}"] = tag
    keys = list(specs)
    # The first half before the faults, then one batch during each API and Temporal outage.
    half = N // 2
    batch = (N - half) // (2 * ROUNDS)
    batches = [keys[half + j * batch : half + (j + 1) * batch] for j in range(2 * ROUNDS)]
    batches[-1] += keys[half + 2 * ROUNDS * batch :]
    ids: dict[str, str] = {}
    lap("start")
    for key in keys[:half]:  # no fault yet: without a key (a keyed submit reads the job back)
        answer = http.post("/api/jobs", json=specs[key])
        assert answer.status_code == 201, answer.text
        ids[key] = answer.json()["id"]

    def fair_spec(tag: str, **kind: Any) -> dict[str, Any]:
        return solver_spec(tag, SLEEP_S, **kind)

    fair = submit_fair(http, specs, ids, tags_by_key, fair_spec)
    keys += fair
    # F: the pool opens once every one of its jobs waits for it (has asked it).

    def all_asked() -> bool:
        return all(
            faultkit.get_job(http, ids[key])["waiting_for"] == "pool_capacity" for key in fair
        )

    wait_until(all_asked, timeout=60, interval=0.2, what=f"every job to wait for {FAIR_POOL}")
    faultkit.call_retrying(http, "PUT", f"/api/pools/{FAIR_POOL}", {"capacity": 1})
    lap("submit")

    steps: list[tuple[str, int]] = []
    pauses = [
        fault_round(cluster, rng, specs, ids, batches[2 * round_ : 2 * round_ + 2], steps)
        for round_ in range(ROUNDS)
    ]

    lap("faults")
    # L: once the faults stop, every job ends or waits behind a halted target.
    order = [ids[key] for key in keys]
    tags = {ids[key]: tags_by_key[key] for key in keys}
    jobs, targets = faultkit.wait_settled(
        http, order, timeout=faultkit.scale(120, 600), interval=0.5
    )
    halted = sorted(name for name, view in targets.items() if view["halted"])
    lap("settle")
    resumes = 0
    ended: set[str] = set()  # read terminal since the last resume

    def all_terminal() -> bool:
        nonlocal resumes
        for name in (HALTING, RETRYING):
            view = faultkit.call_retrying(http, "GET", f"/api/targets/{name}")
            if view["halted"]:
                faultkit.call_retrying(
                    http, "POST", f"/api/targets/{name}/resume", {"job": "retry"}
                )
                resumes += 1
                ended.clear()  # a resume re-queues its quarantined job
        for job_id in order:
            if job_id not in ended:
                if not faultkit.is_terminal(faultkit.get_job(http, job_id)):
                    return False
                ended.add(job_id)
        return True

    wait_until(all_terminal, timeout=faultkit.scale(120, 600), interval=0.5, what="resumed targets")
    lap("resume")
    leaked = faultkit.wait_pools_idle(http, [*POOLS, FAIR_POOL], timeout=30)
    # L R D M O as the other scenarios check them (assert_invariants), then C S P: all of
    # them before the one assertion, so a failure lists every violation.
    jobs = faultkit.wait_terminal(http, order, timeout=60)
    problems = faultkit.check_results(jobs, tags)
    problems += faultkit.check_runs(jobs, tags, faultkit.read_runs(log))
    problems += faultkit.check_transitions(jobs)
    problems += faultkit.check_stable(http, jobs, pause_s=1.0)
    problems += faultkit.check_quiet(solver.path, [cluster.cache(n) for n in cluster.workers])
    lap("check")
    problems += leaked
    problems += faultkit.check_capacity(jobs, {**POOLS, FAIR_POOL: 1})
    problems += faultkit.check_fair_shares(jobs, FAIR_POOL, FAIR_WEIGHTS)
    problems += faultkit.check_capacity(jobs, {CAPPED: CAPPED_MAX}, by="group")
    problems += faultkit.check_serial(jobs, order)
    problems += faultkit.check_paused(jobs, {PAUSED: pauses})
    summary = {
        "jobs": len(jobs),
        "peak_in_use": {
            **{pool: faultkit.peak_in_use(jobs, pool) for pool in POOLS},
            CAPPED: faultkit.peak_in_use(jobs, CAPPED, by="group"),
        },
        "pauses": pauses,
        "fair_order": fair_order(jobs),
        "halted_after_faults": halted,
        "target_resumes": resumes,
        "failed_attempts": sum(len(j.get("fail_history") or []) for j in jobs.values()),
        "requeued": sum(
            1 for j in jobs.values() for t in j["transitions"] if t.get("reason") == "requeued"
        ),
        "seconds": took,
        "steps": steps,
    }
    print(f"scheduling faults: {json.dumps(summary)}")  # noqa: T201 - the run's figures
    assert not problems, f"{len(problems)} violations:\n" + explain(problems, jobs, tags, log)


def submit_fair(
    http: httpx.Client,
    specs: dict[str, dict[str, Any]],
    ids: dict[str, str],
    tags_by_key: dict[str, str],
    spec_of: Callable[..., dict[str, Any]],
) -> list[str]:
    """F's jobs, submitted before the faults to the closed pool, group after group;
    their keys."""
    keys = []
    for group, weight in FAIR_WEIGHTS.items():
        for i in range(int(FAIR_LIGHT * weight)):
            tag = f"{group}{i}-{uuid.uuid4().hex[:6]}"
            key = f"key-{tag}"
            specs[key] = spec_of(tag, group=group, pool=FAIR_POOL, max_attempts=MAX_ATTEMPTS)
            tags_by_key[key] = tag
            answer = http.post("/api/jobs", json=specs[key])
            assert answer.status_code == 201, answer.text
            ids[key] = answer.json()["id"]
            keys.append(key)
    return keys


def fair_order(jobs: dict[str, dict[str, Any]]) -> str:
    """The groups of F's jobs as first assigned (H heavy, L light), for the summary."""
    firsts = sorted(
        (
            min((t["ts"] for t in job["transitions"] if t["status"] == "assigned"), default=0),
            job["group"],
        )
        for job in jobs.values()
        if job.get("pool") == FAIR_POOL
    )
    return "".join(group.removeprefix("f-")[0].upper() for _, group in firsts)


def fault_round(
    cluster: Cluster,
    rng: random.Random,
    specs: dict[str, dict[str, Any]],
    ids: dict[str, str],
    batches: list[list[str]],
    steps: list[tuple[str, int]],
) -> tuple[int, int]:
    """Pause the group, SIGKILL the worker running one of its jobs, kill the API with a
    batch of submissions in flight, restart Temporal with the next batch in flight, resume,
    SIGKILL a worker. Returns the pause window (epoch ms); `steps` gets each step's time."""
    assert cluster.http is not None and cluster.api is not None
    http = cluster.http
    paused_ids = [ids[k] for k in ids if specs[k].get("group") == PAUSED]

    ended: set[str] = set()  # read once terminal, not read again

    def paused_jobs_active() -> list[dict[str, Any]] | None:
        read = [faultkit.get_job(http, job_id) for job_id in paused_ids if job_id not in ended]
        ended.update(job["id"] for job in read if faultkit.is_terminal(job))
        active = [job for job in read if job["status"] in faultkit.ACTIVE]
        return active if any(job["status"] == "running" for job in active) else None

    before: list[dict[str, Any]] = []
    with contextlib.suppress(TimeoutError):  # none late in a full run: pause anyway
        before = wait_until(paused_jobs_active, timeout=30, interval=0.2, what="a running job")
    faultkit.call_retrying(http, "POST", f"/api/groups/{PAUSED}/pause")
    paused_at = now_ms()

    # A worker dies under jobs of the paused group that run on after the pause: their
    # attempts fail, and their retries must wait for the resume.
    now = (faultkit.get_job(http, job["id"]) for job in before)
    active = [job for job in now if job["status"] in faultkit.ACTIVE]
    running = [job for job in active if job["status"] == "running"]
    name = running[0]["worker_id"] if running else rng.choice(sorted(cluster.workers))
    hit = {job["id"]: len(job["transitions"]) for job in active if job["worker_id"] == name}
    steps.append((f"paused; SIGKILL {name}", paused_at))
    cluster.restart_worker(name)

    errors: list[Any] = []
    thread = submit_in_thread(http, {k: specs[k] for k in batches[0]}, ids, errors)
    steps.append(("SIGKILL api", now_ms()))
    cluster.api.kill()
    cluster.start_api()
    thread.join(150)
    assert not thread.is_alive() and not errors, errors

    def attempts_ended() -> bool:
        for job_id, seen in hit.items():
            later = faultkit.get_job(http, job_id)["transitions"][seen:]
            if not any(t["status"] not in faultkit.ACTIVE for t in later):
                return False
        return True

    wait_until(attempts_ended, timeout=30, interval=0.2, what="the killed attempts to end")
    steps.append((f"attempts on {name} ended: {sorted(hit)}", now_ms()))

    thread = submit_in_thread(http, {k: specs[k] for k in batches[1]}, ids, errors)
    server = cluster.server
    assert server.process is not None
    steps.append(("SIGKILL temporal", now_ms()))
    server.process.send_signal(signal.SIGKILL)
    server.process.wait(30)
    server.start()
    steps.append(("temporal up", now_ms()))
    thread.join(150)
    assert not thread.is_alive() and not errors, errors

    resumed_at = now_ms()
    faultkit.call_retrying(http, "POST", f"/api/groups/{PAUSED}/resume")
    name = rng.choice(sorted(cluster.workers))
    steps.append((f"resumed; SIGKILL {name}", resumed_at))
    cluster.restart_worker(name)
    return paused_at, resumed_at
