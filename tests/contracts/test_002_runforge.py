"""002, the run queue (`002_*`), as its users run it: `runforge-cli` against a real API,
with its daemon (a real jobforge worker) running a tiny run command. The design's
commands and flags, exit codes 0/1/5/6, `[RF:…]` tokens, state names and daemon health
rule; pause (running runs finish, no new run starts) and retry-failed."""

from __future__ import annotations

import itertools
import json
import re
import signal
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from tests import faultkit, procs
from tests.conftest import PYTHON, Api, base_env, wait_until
from tests.procs import Proc
from worker import runforge_cli
from worker.devserver import DevServer
from worker.runforge import LEGACY_RUN_TYPE, RUN_MAX_ATTEMPTS, iso, pool_name, run_type
from workflows.contract_states import state_name
from workflows.models import Job

pytestmark = pytest.mark.usefixtures("session_worker")

PREFIX = f"c002-{uuid.uuid4().hex[:8]}-"
# The run command: it marks that the run started, waits for `release` in the workspace,
# and fails while `fail-<run_id>` is there.
RUN_COMMAND = textwrap.dedent(
    """\
    import json, sys, time
    from pathlib import Path
    params = json.loads(sys.argv[sys.argv.index("--params") + 1])
    workspace, run_id = Path(params["workspace"]), params["run_id"]
    (workspace / f"started-{run_id}").touch()
    while not (workspace / "release").exists():
        time.sleep(0.05)
    print(json.dumps({"run_id": run_id}))
    sys.exit(1 if (workspace / f"fail-{run_id}").exists() else 0)
    """
)


@pytest.fixture(scope="module")
def hub(start_api: Callable[..., Api]) -> Api:
    """An API whose run queue only this module's daemons poll."""
    return start_api(TEMPORAL_ACTIVITY_QUEUE_PREFIX=PREFIX)


@pytest.fixture(scope="module")
def run_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("runforge") / "run.py"
    path.write_text(RUN_COMMAND)
    return path


@pytest.fixture
def env(temporal: DevServer, hub: Api, run_script: Path, tmp_path: Path) -> dict[str, str]:
    """What runforge-cli and its daemon run with."""
    return base_env(
        temporal,
        HUB_URL=hub.url,
        TEMPORAL_ACTIVITY_QUEUE_PREFIX=PREFIX,
        WORKER_RUN_WORKFLOWS="false",
        RUNFORGE_RUN_COMMAND=f"{PYTHON} {run_script}",
        SOLVER_CACHE_DIR=str(tmp_path / "solver-cache"),
    )


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.fixture
def group() -> str:
    return f"grp_{uuid.uuid4().hex[:10]}_Test"


def rf(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`runforge-cli <args>`: its entry point, in this process and over real HTTP, with
    `env` (a process start costs about 0.7 s of CPU; `daemon`, and the console script in
    test_the_console_script_exists_and_bad_input_is_one_error_line_and_exit_1, run as
    processes of their own)."""
    if args[0] == "daemon":
        argv = [PYTHON, "-m", "worker.runforge_cli", *args]
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    argv = sys.argv
    with CliRunner().isolation(env=env) as (out, err, _):
        sys.argv = ["runforge-cli", *args]
        try:
            runforge_cli.main()
            code = 0
        except SystemExit as ended:
            code = ended.code if isinstance(ended.code, int) else 1
        finally:
            sys.argv = argv
        return subprocess.CompletedProcess(
            ["runforge-cli", *args], code, out.getvalue().decode(), err.getvalue().decode()
        )


def ok(done: subprocess.CompletedProcess[str], code: int = 0) -> str:
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    return done.stdout


def one_error(done: subprocess.CompletedProcess[str], code: int) -> str:
    """The one `error: ` line a failed command printed, having exited `code`."""
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


@pytest.fixture
def start_daemon(env: dict[str, str], tmp_path: Path) -> Iterator[Callable[[Path, int], Proc]]:
    """Factory: `runforge-cli daemon`, returned once it printed its start token."""
    started: list[Proc] = []

    def start(workspace: Path, max_parallel: int) -> Proc:
        argv = [PYTHON, "-m", "worker.runforge_cli", "daemon"]
        argv += ["--workspace", str(workspace), "--max-parallel", str(max_parallel)]
        proc = procs.spawn(argv, tmp_path / f"daemon-{len(started)}.log", env)
        started.append(proc)
        proc.wait_for("[RF:DAEMON=STARTED", timeout=60)
        return proc

    yield start
    for proc in started:
        proc.stop(timeout=30)


def enqueued(out: str) -> dict[str, str]:
    """run id → job id, from the JOB_ENQUEUED tokens."""
    found = re.findall(r"^\[RF:QUEUE=JOB_ENQUEUED (\S+) run_id=(\S+)\]$", out, re.M)
    return {run_id: job_id for job_id, run_id in found}


def run_lines(status: str) -> dict[str, dict[str, str]]:
    """queue-status' run lines: job id → {run_id, state, priority, attempt, started_at,
    finished_at, error?} (the error last: it may hold spaces)."""
    rows = {}
    for line in status.splitlines():
        if line.startswith("  "):
            line, _, error = line.partition(" error=")
            job_id, *fields = line.split()
            rows[job_id] = dict(field.split("=", 1) for field in fields)
            if error:
                rows[job_id]["error"] = error
    return rows


def group_line(status: str, group: str) -> str:
    found = re.search(rf"^group {re.escape(group)}\b.*$", status, re.M)
    assert found, status
    return found.group(0)


def status_when(
    env: dict[str, str], workspace: Path, ready: Callable[[str], bool], what: str
) -> str:
    """`queue-status` once `ready` holds of what it prints: its lists and counts read
    visibility, which shows a change a moment after it is made."""

    def shown() -> str | None:
        status = ok(rf(env, "queue-status", "--workspace", str(workspace)))
        return status if ready(status) else None

    found: str = wait_until(shown, timeout=30, what=what)
    return found


def has_line(status: str, line: str) -> bool:
    """Whether `queue-status` printed `line` as a line of its own."""
    return line in status.splitlines()


def daemon_line(status: str) -> str:
    found = re.search(r"^daemon: .*$", status, re.M)
    assert found, status
    return found.group(0)


def job_when(hub: Api, job_id: str, **wanted: Any) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        job = hub.job(job_id)
        return job if all(job[key] == value for key, value in wanted.items()) else None

    found: dict[str, Any] = wait_until(reached, timeout=60, what=f"job {job_id} with {wanted}")
    return found


def design_state(hub: Api, job_id: str) -> str:
    """The job's state in the one table's 002 column (workflows/contract_states.py)."""
    return state_name(Job.model_validate(hub.job(job_id)), "002")


def test_an_enqueued_run_is_queued_then_the_daemon_runs_it_and_status_says_so(
    env: dict[str, str],
    hub: Api,
    workspace: Path,
    group: str,
    start_daemon: Callable[[Path, int], Proc],
) -> None:
    (workspace / "release").touch()
    out = ok(
        rf(env, "enqueue-run", "--run-id", "r-0001", "--workspace", str(workspace),
           "--group-id", group, "--priority", "3")
    )  # fmt: skip
    job_id = enqueued(out)["r-0001"]
    job = hub.job(job_id)
    assert (job["type"], job["params"]) == (
        run_type(pool_name(workspace)),
        {"run_id": "r-0001", "workspace": str(workspace)},
    )
    assert (job["group"], job["pool"], job["cost_units"], job["priority"]) == (
        group,
        pool_name(workspace),
        1,
        3,
    )

    status = status_when(
        env,
        workspace,
        lambda s: job_id in run_lines(s) and has_line(s, f"group {group}: queued=1"),
        "the run listed",
    )
    assert daemon_line(status) == "daemon: none (unhealthy)"
    assert group_line(status, group) == f"group {group}: queued=1"
    row = run_lines(status)[job_id]
    assert (row["run_id"], row["state"], row["priority"]) == ("r-0001", "queued", "3")
    assert row["state"] == design_state(hub, job_id)
    assert (row["started_at"], row["finished_at"], row.get("error")) == ("-", "-", None)

    daemon = start_daemon(workspace, 2)
    assert f"[RF:DAEMON=STARTED pid={daemon.process.pid} max_parallel=2]" in daemon.output()
    assert hub.http.get(f"/api/pools/{pool_name(workspace)}").json()["capacity"] == 2
    job_when(hub, job_id, status="completed")
    daemon.wait_for(f"[RF:QUEUE=JOB_STARTED {job_id} run_id=r-0001]")
    daemon.wait_for(f"[RF:QUEUE=JOB_DONE {job_id} run_id=r-0001 status=succeeded]")

    def healthy_status() -> str | None:
        shown = ok(rf(env, "queue-status", "--workspace", str(workspace)))
        return shown if "(healthy)" in daemon_line(shown) else None

    status = wait_until(healthy_status, timeout=30, what="the daemon to be listed healthy")
    line = daemon_line(status)
    assert line.startswith(f"daemon: running pid={daemon.process.pid} max_parallel=2 ")
    assert run_lines(status)[job_id]["state"] == "succeeded" == design_state(hub, job_id)
    assert group_line(status, group) == f"group {group}: succeeded=1"
    # One daemon per workspace: a second one is refused while the first is healthy.
    second = rf(env, "daemon", "--workspace", str(workspace))
    assert one_error(second, 1).startswith(f"error: a daemon already serves {workspace} ")


STARTED = "[RF:DAEMON=STARTED"


def test_of_two_daemons_started_at_once_one_runs_and_a_killed_ones_lock_is_taken_over(
    env: dict[str, str], workspace: Path, tmp_path: Path
) -> None:
    """The workspace's lock is taken in one update at its pool: of two daemons started
    together exactly one runs, the other exits 1 naming it. A daemon killed outright
    keeps the lock until its ttl passes unrenewed; then a new daemon takes it over, and
    one that was only cut off stops when it comes back."""
    env = {**env, "RUNFORGE_LOCK_TTL_S": "4"}
    argv = [PYTHON, "-m", "worker.runforge_cli", "daemon", "--workspace", str(workspace)]
    daemons: list[Proc] = []

    def spawn() -> Proc:
        proc = procs.spawn(argv, tmp_path / f"daemon-{len(daemons)}.log", env)
        daemons.append(proc)
        return proc

    def settled(proc: Proc) -> bool:
        return STARTED in proc.output() or proc.process.poll() is not None

    def refused_by(proc: Proc, holder: Proc, *, ran: bool = False) -> None:
        assert proc.process.wait(60) == 1, proc.output()
        errors = [line for line in proc.output().splitlines() if line.startswith("error: ")]
        assert len(errors) == 1, proc.output()
        named = f"error: a daemon already serves {workspace} (pid {holder.process.pid} on "
        assert errors[0].startswith(named), errors[0]
        assert ", locked since " in errors[0]
        assert (STARTED in proc.output()) == ran

    try:
        pair = [spawn(), spawn()]
        wait_until(lambda: all(map(settled, pair)), timeout=90, what="both daemons to settle")
        running = [proc for proc in pair if STARTED in proc.output()]
        assert len(running) == 1, [proc.output() for proc in pair]
        (first,) = running
        (second,) = [proc for proc in pair if proc is not first]
        refused_by(second, first)
        assert first.process.poll() is None

        first.kill()
        refusals: list[Proc] = []

        def next_daemon_runs() -> Proc | None:
            proc = spawn()
            wait_until(lambda: settled(proc), timeout=60, what="a new daemon to settle")
            if STARTED in proc.output():
                return proc
            refusals.append(proc)
            return None

        taker: Proc = wait_until(next_daemon_runs, timeout=120, what="the lock taken over")
        for proc in refusals:  # refused only while the killed daemon's ttl ran
            refused_by(proc, first)
        refused_by(spawn(), taker)

        # A daemon cut off past its ttl (stopped, not killed) finds its lock taken over
        # when it comes back: it stops, and exits 1 naming the new holder.
        taker.process.send_signal(signal.SIGSTOP)
        refusals.clear()
        third: Proc = wait_until(next_daemon_runs, timeout=120, what="the lock taken over")
        taker.process.send_signal(signal.SIGCONT)
        refused_by(taker, third, ran=True)
        assert "the workspace lock was taken over by pid " in taker.output()
        assert third.process.poll() is None
    finally:
        for proc in daemons:
            proc.stop(timeout=30)


def test_a_daemon_takes_only_its_own_workspaces_runs(
    env: dict[str, str],
    hub: Api,
    tmp_path: Path,
    start_daemon: Callable[[Path, int], Proc],
) -> None:
    """Each workspace's runs are on their own queue: a daemon never starts another
    workspace's run, which waits for its own daemon (no attempt, nothing refused)."""
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    for path in (mine, theirs):
        path.mkdir()
        (path / "release").touch()
    other = enqueued(ok(rf(env, "enqueue-run", "--run-id", "t-1", "--workspace", str(theirs))))
    own = enqueued(ok(rf(env, "enqueue-run", "--run-id", "m-1", "--workspace", str(mine))))

    daemon = start_daemon(mine, 2)
    job_when(hub, own["m-1"], status="completed")

    job = job_when(hub, other["t-1"], status="pending", waiting_for="no_worker")
    assert (job["attempts"], job["fail_history"], job["type"]) == (
        0,
        [],
        run_type(pool_name(theirs)),
    )
    assert not (theirs / "started-t-1").exists()
    assert other["t-1"] not in daemon.output()
    status = status_when(
        env, mine, lambda s: list(run_lines(s)) == [own["m-1"]], "its own run alone"
    )
    status = status_when(
        env, theirs, lambda s: list(run_lines(s)) == [other["t-1"]], "the other's run alone"
    )
    assert run_lines(status)[other["t-1"]]["state"] == "queued"

    start_daemon(theirs, 1)
    job_when(hub, other["t-1"], status="completed")


def test_a_daemon_moves_its_workspaces_runs_queued_before_routing_by_workspace(
    env: dict[str, str],
    hub: Api,
    tmp_path: Path,
    group: str,
    start_daemon: Callable[[Path, int], Proc],
) -> None:
    """A run queued as the old shared type (every daemon polled its queue) is moved by
    its own workspace's daemon: enqueued again as the workspace's type, the old job
    canceled. Another workspace's old run is left on the old queue."""
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    for path in (mine, theirs):
        path.mkdir()
        (path / "release").touch()

    def legacy(run_id: str, workspace: Path, **extra: Any) -> str:
        return hub.submit(
            type=LEGACY_RUN_TYPE,
            params={"run_id": run_id, "workspace": str(workspace)},
            pool=pool_name(workspace),
            cost_units=1,
            max_attempts=RUN_MAX_ATTEMPTS,
            **extra,
        )

    old = legacy("old-1", mine, group=group, priority=2)
    foreign = legacy("old-2", theirs)

    daemon = start_daemon(mine, 1)
    daemon.wait_for(f"moved_from={old}]", timeout=60)
    said = daemon.output()
    moved = re.search(rf"\[RF:QUEUE=JOB_ENQUEUED (\S+) run_id=old-1 moved_from={old}\]", said)
    assert moved, said
    new = moved.group(1)
    job = job_when(hub, new, status="completed")
    assert (job["type"], job["group"], job["priority"], job["params"]["run_id"]) == (
        run_type(pool_name(mine)),
        group,
        2,
        "old-1",
    )
    daemon.wait_for(f"[RF:QUEUE=JOB_DONE {new} run_id=old-1 status=succeeded]")
    assert design_state(hub, old) == "canceled"

    # An old client's run, enqueued while the daemon runs, is moved as well.
    late = legacy("old-3", mine, group=group)
    daemon.wait_for(f"run_id=old-3 moved_from={late}]", timeout=60)
    again = re.search(rf"JOB_ENQUEUED (\S+) run_id=old-3 moved_from={late}\]", daemon.output())
    assert again, daemon.output()
    job_when(hub, again.group(1), status="completed")
    line = f"group {group}: succeeded=2 canceled=2"
    status_when(env, mine, lambda s: has_line(s, line), line)

    left = hub.job(foreign)
    assert (left["status"], left["attempts"], left["type"]) == ("pending", 0, LEGACY_RUN_TYPE)
    assert not (theirs / "started-old-2").exists()
    assert hub.http.delete(f"/api/jobs/{foreign}").status_code == 204


def test_the_daemon_stops_gracefully_on_sigterm_letting_its_running_run_finish(
    env: dict[str, str],
    hub: Api,
    workspace: Path,
    start_daemon: Callable[[Path, int], Proc],
) -> None:
    daemon = start_daemon(workspace, 1)
    job_id = enqueued(ok(rf(env, "enqueue-run", "--run-id", "r-1", "--workspace", str(workspace))))[
        "r-1"
    ]
    wait_until(lambda: (workspace / "started-r-1").exists(), timeout=60, what="the run to start")
    daemon.wait_for(f"[RF:QUEUE=JOB_STARTED {job_id} run_id=r-1]")

    daemon.process.send_signal(signal.SIGTERM)

    def stopping_status() -> str | None:
        shown = ok(rf(env, "queue-status", "--workspace", str(workspace)))
        return shown if daemon_line(shown).startswith("daemon: stopping") else None

    status = wait_until(stopping_status, timeout=30, what="the daemon to be listed stopping")
    assert "(unhealthy)" in daemon_line(status)
    assert daemon.process.poll() is None  # its run holds it
    (workspace / "release").touch()

    assert daemon.process.wait(60) == 0
    out = daemon.output()
    assert f"[RF:QUEUE=JOB_DONE {job_id} run_id=r-1 status=succeeded]" in out
    assert out.rstrip().endswith(f"[RF:DAEMON=STOPPED pid={daemon.process.pid}]")
    assert hub.job(job_id)["status"] == "completed"
    line = daemon_line(ok(rf(env, "queue-status", "--workspace", str(workspace))))
    assert line.startswith(f"daemon: stopped pid={daemon.process.pid} ")
    assert line.endswith("(unhealthy)")
    # It gave the workspace's lock back: the next daemon starts at once (the lock's ttl,
    # 30 s, has not passed since its last renewal).
    start_daemon(workspace, 1)


def test_pausing_a_group_stops_new_starts_while_its_running_runs_finish(
    env: dict[str, str],
    hub: Api,
    workspace: Path,
    group: str,
    start_daemon: Callable[[Path, int], Proc],
) -> None:
    plan = workspace / "plan.json"
    runs = [f"run-{n}" for n in range(4)]
    plan.write_text(
        json.dumps(
            {"group_id": group, "workspace": str(workspace), "runs": [{"run_id": r} for r in runs]}
        )
    )
    start_daemon(workspace, 2)
    out = ok(rf(env, "sweep", "--plan", str(plan), "--enqueue"))
    assert out.splitlines()[-1] == f"[RF:GROUP=ENQUEUED {group} runs=4]"
    jobs = enqueued(out)
    assert sorted(jobs) == runs

    def two_started() -> list[str] | None:
        started = [r for r in runs if (workspace / f"started-{r}").exists()]
        return started if len(started) == 2 else None

    running = wait_until(two_started, timeout=60, what="two runs to start")
    assert ok(rf(env, "pause-group", "--group-id", group, "--workspace", str(workspace))) == (
        f"[RF:GROUP=PAUSED {group}]\n"
    )
    (workspace / "release").touch()
    for run_id in running:
        job_when(hub, jobs[run_id], status="completed")
    held = [r for r in runs if r not in running]
    for run_id in held:
        job_when(hub, jobs[run_id], status="pending", waiting_for="group_paused")
    line = f"group {group} paused: queued=2 succeeded=2"
    status_when(env, workspace, lambda s: has_line(s, line), line)
    assert not [r for r in held if (workspace / f"started-{r}").exists()]

    assert ok(rf(env, "resume-group", "--group-id", group, "--workspace", str(workspace))) == (
        f"[RF:GROUP=RESUMED {group}]\n"
    )
    for run_id in held:
        job_when(hub, jobs[run_id], status="completed")
    line = f"group {group}: succeeded=4"
    status_when(env, workspace, lambda s: has_line(s, line), line)


def enqueue_two_sweeps(env: dict[str, str], workspace: Path) -> dict[str, str]:
    """Sweeps A and B, four runs each, the whole of A first: job id → sweep letter."""
    sweeps = {f"grp_{uuid.uuid4().hex[:10]}_{name}": name for name in ("A", "B")}
    jobs: dict[str, str] = {}
    for group, name in sweeps.items():
        runs = [{"run_id": f"{name}-{n}"} for n in range(4)]
        plan = workspace / f"plan-{name}.json"
        plan.write_text(json.dumps({"group_id": group, "workspace": str(workspace), "runs": runs}))
        out = ok(rf(env, "sweep", "--plan", str(plan), "--enqueue"))
        jobs.update(dict.fromkeys(enqueued(out).values(), name))
    return jobs


def test_two_sweeps_in_one_workspace_take_turns_at_its_max_parallel(
    env: dict[str, str], hub: Api, workspace: Path, start_daemon: Callable[[Path, int], Proc]
) -> None:
    start_daemon(workspace, 1)
    jobs = enqueue_two_sweeps(env, workspace)
    # A's first run holds the one slot; the seven others wait for the workspace.
    first = wait_until(
        lambda: next((r for r in jobs if hub.job(r)["status"] == "running"), None),
        timeout=60,
        what="a run to start",
    )
    for job_id in jobs.keys() - {first}:
        job_when(hub, job_id, status="pending", waiting_for="pool_capacity")
    (workspace / "release").touch()
    done = [job_when(hub, job_id, status="completed") for job_id in jobs]
    order = [jobs[job["id"]] for job in sorted(done, key=lambda job: job["claimed_at"])]
    # First come, first served would run A's four, then B's.
    assert "".join(order) == "AABABABB"
    assert faultkit.share_problems(order[1:], {"A": 1, "B": 1}) == []


class PoolReader:
    """Reads the workspace's pool (capacity, in_use) over and over, in a thread, until
    stopped: what `queue-status` and the hub show meanwhile."""

    def __init__(self, hub: Api, pool: str) -> None:
        self.readings: list[tuple[int, int]] = []
        self._http = httpx.Client(base_url=hub.url, headers=hub.http.headers, timeout=30)
        self._pool = pool
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, name="pool reader", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            body = self._http.get(f"/api/pools/{self._pool}").json()
            self.readings.append((body["capacity"], body["in_use"]))
            self._stop.wait(0.05)

    def stop(self) -> list[tuple[int, int]]:
        self._stop.set()
        self._thread.join(30)
        self._http.close()
        return self.readings


@pytest.mark.parametrize("before", [None, 2], ids=["first-daemon", "daemon-restarted-smaller"])
def test_runs_enqueued_before_the_daemon_take_turns_one_at_a_time_at_its_max_parallel(
    env: dict[str, str],
    hub: Api,
    workspace: Path,
    start_daemon: Callable[[Path, int], Proc],
    before: int | None,
) -> None:
    """Runs enqueued while no daemon serves the workspace hold leases of its pool, as
    large as it was (100 before any daemon, else the last daemon's max_parallel). The
    daemon's max_parallel takes back those no worker claimed: from its start on, the
    pool never holds more, and the sweeps take turns."""
    pool = pool_name(workspace)
    if before is not None:  # an earlier daemon, with a larger max_parallel, stopped
        earlier = start_daemon(workspace, before)
        earlier.process.send_signal(signal.SIGTERM)
        assert earlier.process.wait(60) == 0
    jobs = enqueue_two_sweeps(env, workspace)
    leased = wait_until(
        lambda: hub.http.get(f"/api/pools/{pool}").json()["in_use"],
        timeout=30,
        what="runs holding leases with no daemon",
    )
    assert leased == min(8, before or 100)

    start_daemon(workspace, 1)

    reader = PoolReader(hub, pool)
    try:
        first = wait_until(
            lambda: next((r for r in jobs if hub.job(r)["status"] == "running"), None),
            timeout=60,
            what="a run to start",
        )
        for job_id in jobs.keys() - {first}:
            job_when(hub, job_id, status="pending", waiting_for="pool_capacity")
        (workspace / "release").touch()
        done = [job_when(hub, job_id, status="completed") for job_id in jobs]
    finally:
        readings = reader.stop()
    assert readings and all(cap == 1 and in_use <= 1 for cap, in_use in readings), readings
    ran = sorted(done, key=lambda job: job["claimed_at"])
    for earlier_run, later_run in itertools.pairwise(ran):  # one at a time
        assert later_run["claimed_at"] >= earlier_run["completed_at"]
    assert all(job["attempts"] == 1 for job in done)  # a lease taken back is no attempt
    order = "".join(jobs[job["id"]] for job in ran)
    # First come, first served would run A's four, then B's.
    assert order in ("ABABABAB", "BABABABA"), order


def test_retry_failed_enqueues_a_groups_failed_runs_again(
    env: dict[str, str],
    hub: Api,
    workspace: Path,
    group: str,
    start_daemon: Callable[[Path, int], Proc],
) -> None:
    (workspace / "release").touch()
    (workspace / "fail-bad").touch()
    plan = workspace / "plan.json"
    plan.write_text(
        json.dumps({"group_id": group, "runs": [{"run_id": "good"}, {"run_id": "bad"}]})
    )
    daemon = start_daemon(workspace, 2)
    out = ok(rf(env, "enqueue-sweep", "--plan", str(plan), "--workspace", str(workspace)))
    jobs = enqueued(out)
    job_when(hub, jobs["good"], status="completed")
    job_when(hub, jobs["bad"], status="quarantined")
    daemon.wait_for(f"[RF:QUEUE=JOB_DONE {jobs['bad']} run_id=bad status=failed]")
    line = f"group {group}: succeeded=1 failed=1"
    status = status_when(env, workspace, lambda s: has_line(s, line), line)
    assert run_lines(status)[jobs["bad"]]["state"] == "failed" == design_state(hub, jobs["bad"])
    # Each run's start and end times, and the failed one's error.
    for run_id, failed in (("good", False), ("bad", True)):
        job, row = hub.job(jobs[run_id]), run_lines(status)[jobs[run_id]]
        assert job["claimed_at"] and job["completed_at"], job
        assert (row["started_at"], row["finished_at"], row.get("error")) == (
            iso(job["claimed_at"]),
            iso(job["completed_at"]),
            job["fail_reason"] if failed else None,
        )
    assert run_lines(status)[jobs["bad"]]["error"] == "solver_exit: solver exited with code 1"

    (workspace / "fail-bad").unlink()
    out = ok(rf(env, "retry-failed", "--group-id", group, "--workspace", str(workspace)))
    assert out.splitlines() == [
        f"[RF:QUEUE=JOB_ENQUEUED {jobs['bad']} retry=true]",
        f"[RF:GROUP=ENQUEUED {group} runs=1]",
    ]
    job = job_when(hub, jobs["bad"], status="completed")
    assert job["attempts"] == 2
    line = f"group {group}: succeeded=2"
    status = status_when(env, workspace, lambda s: has_line(s, line), line)
    assert run_lines(status)[jobs["bad"]]["attempt"] == "2"


def test_cancel_group_cancels_its_queued_runs_and_exits_5(
    env: dict[str, str], hub: Api, workspace: Path, group: str
) -> None:
    # No daemon: the runs stay queued.
    ids = [
        enqueued(
            ok(rf(env, "enqueue-run", "--run-id", run_id, "--workspace", str(workspace),
                  "--group-id", group))
        )[run_id]
        for run_id in ("c-1", "c-2")
    ]  # fmt: skip

    done = rf(env, "cancel-group", "--group-id", group, "--workspace", str(workspace))

    assert ok(done, 5) == f"[RF:GROUP=CANCELED {group} runs=2]\n"
    line = f"group {group}: canceled=2"
    status = status_when(
        env, workspace, lambda s: has_line(s, line) and set(ids) <= set(run_lines(s)), line
    )
    for job_id in ids:
        row = run_lines(status)[job_id]
        assert row["state"] == "canceled" == design_state(hub, job_id)
        # Never started; ended by the cancel, its error the cancel.
        ended = hub.job(job_id)["transitions"][-1]["ts"]
        assert (row["started_at"], row["finished_at"], row["error"]) == (
            "-",
            iso(ended),
            "cancelled",
        )


@pytest.mark.parametrize(
    ("plan", "error"),
    [
        ("{not json", "not JSON: "),
        ('{"runs": [{"run_id": "a"}]}', "group_id: Field required"),
        ('{"group_id": "g", "runs": []}', "runs: List should have at least 1 item"),
        (
            '{"group_id": "g", "runs": [{"run_id": "a"}, {"run_id": "b", "gpu": 1}]}',
            "runs.1.gpu: Extra inputs are not permitted",
        ),
        (
            '{"group_id": "g", "runs": [{"run_id": "a"}, {"run_id": "a"}]}',
            "runs.1.run_id: 'a' appears twice",
        ),
        ('{"group_id": "g", "runs": [{"run_id": "a"}]}', "workspace: not in the plan"),
    ],
)
def test_an_invalid_plan_exits_6_with_its_first_error_and_enqueues_nothing(
    env: dict[str, str], hub: Api, tmp_path: Path, group: str, plan: str, error: str
) -> None:
    path = tmp_path / "plan.json"
    path.write_text(plan.replace('"g"', json.dumps(group)))

    line = one_error(rf(env, "sweep", "--plan", str(path), "--enqueue"), 6)

    assert line.startswith(f"error: invalid plan {path}: {error}"), line
    assert hub.http.get(f"/api/groups/{group}").status_code == 404


def test_the_console_script_exists_and_bad_input_is_one_error_line_and_exit_1(
    env: dict[str, str], tmp_path: Path, workspace: Path
) -> None:
    script = Path(sys.executable).with_name("runforge-cli")
    missing = subprocess.run(
        [str(script), "enqueue-sweep", "--plan", str(tmp_path / "none.json")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert one_error(missing, 6).startswith(f"error: invalid plan {tmp_path / 'none.json'}: ")

    bad_run = rf(env, "enqueue-run", "--run-id", "a b", "--workspace", str(workspace))
    assert one_error(bad_run, 1).startswith("error: --run-id: String should match pattern")
    assert one_error(rf(env, "enqueue-run", "--workspace", str(workspace)), 1) == (
        "error: Missing option '--run-id'."
    )
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"group_id": "g", "runs": [{"run_id": "a"}]}))
    assert "direct mode is not served" in one_error(rf(env, "sweep", "--plan", str(plan)), 1)
    unreachable = {**env, "HUB_URL": "http://127.0.0.1:9"}
    line = one_error(rf(unreachable, "queue-status", "--workspace", str(workspace)), 1)
    assert line.startswith("error: cannot reach http://127.0.0.1:9")
    no_command = {k: v for k, v in env.items() if k != "RUNFORGE_RUN_COMMAND"}
    assert one_error(rf(no_command, "daemon", "--workspace", str(workspace)), 1) == (
        "error: RUNFORGE_RUN_COMMAND is not set: the command each run starts"
    )
