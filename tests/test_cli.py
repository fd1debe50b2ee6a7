"""The `jobforge` job commands as a user runs them, against the session's API: in this
process (`jobforge`), and as the installed script where the process itself is the point
(`jobforge_process`: exit codes, signals, `watch`).

The process commands have theirs elsewhere: `api` and `worker` start every stack in
conftest, `dev` in test_dev_stack, `setup` in test_setup, `agent` in test_agents.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import traceback
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from tests.conftest import (
    PYTHON,
    REGISTERED_TYPE,
    ROOT,
    SECRET,
    Api,
    Proc,
    Solver,
    base_env,
    wait_until,
)
from tests.ports import free_port
from worker.cli import app as cli_app
from worker.devserver import DevServer, wait_for_port

JOBFORGE = Path(PYTHON).with_name("jobforge")  # the console script, as installed
HUB_ENV = ("HUB_URL", "FORGE_INGEST_SECRET")

pytestmark = pytest.mark.usefixtures("session_worker")


def cli_env(url: str, secret: str | None) -> dict[str, str]:
    """The environment of a user pointing the CLI at `url`."""
    env = {key: value for key, value in os.environ.items() if key not in HUB_ENV}
    env.update(HUB_URL=url, COLUMNS="200", PYTHONUNBUFFERED="1")
    if secret is not None:
        env["FORGE_INGEST_SECRET"] = secret
    return env


# Commands that run a Temporal client or worker, or serve: always their own process.
PROCESS_COMMANDS = frozenset({"api", "worker", "agent", "dev", "setup"})


def jobforge(
    url: str, *args: str, secret: str | None = SECRET, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run `jobforge ARGS` to completion, as a user pointing it at `url` would: in this
    process, the console script's own code over real HTTP (a process start costs about
    0.7 s of CPU, and the suite runs hundreds). The process commands run the installed
    script (`jobforge_process`), as do the tests of each exit code."""
    if args and args[0] in PROCESS_COMMANDS and "--help" not in args:
        return jobforge_process(url, *args, secret=secret, **env)
    environ: dict[str, str | None] = dict.fromkeys(HUB_ENV)
    environ.update(HUB_URL=url, COLUMNS="200", **env)
    if secret is not None:
        environ["FORGE_INGEST_SECRET"] = secret
    result = CliRunner().invoke(cli_app, list(args), env=environ, prog_name="jobforge")
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(result.exception))
    return subprocess.CompletedProcess(["jobforge", *args], result.exit_code, result.stdout, stderr)


def jobforge_process(
    url: str, *args: str, secret: str | None = SECRET, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run the installed `jobforge ARGS` script to completion, in a process of its own."""
    return subprocess.run(
        [str(JOBFORGE), *args],
        cwd=ROOT,
        env={**cli_env(url, secret), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    """Its standard output, once it exited 0."""
    assert result.returncode == 0, (result.stdout, result.stderr)
    return result.stdout


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single line it printed on stderr, once it exited non-zero."""
    assert result.returncode != 0, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines
    return lines[0]


@pytest.fixture
def lonely(quiet_api: Api) -> Api:
    """An API whose activity queues nobody polls: its jobs stay pending."""
    return quiet_api


def test_submit_prints_the_id_of_a_job_that_then_runs_with_those_params(api: Api) -> None:
    # The installed script exits 0 (its 2 and 1: the tests of bad params, a wrong secret).
    out = ok(jobforge_process(api.url, "submit", REGISTERED_TYPE, "--params", '{"n": 3}'))

    job = api.wait_status(out.strip(), "completed")
    assert job["params"] == {"n": 3}
    assert job["result"]["registered"] is True


def test_submit_with_an_idempotency_key_twice_prints_the_same_id(api: Api) -> None:
    key = uuid.uuid4().hex
    args = ("submit", REGISTERED_TYPE, "--idempotency-key", key, "--priority", "4")

    first = ok(jobforge(api.url, *args)).strip()
    second = ok(jobforge(api.url, *args)).strip()

    assert first == second
    assert api.job(first)["priority"] == 4


def test_submit_with_a_solver_url_and_checksum_runs_that_solver(
    api: Api, job_type: str, make_solver: Callable[[str], Solver]
) -> None:
    solver = make_solver('print(json.dumps({"doubled": params["x"] * 2}))\n')

    out = ok(
        jobforge(
            api.url,
            *("submit", job_type, "--params", '{"x": 21}', "--max-attempts", "1"),
            *("--solver-url", solver.url, "--solver-checksum", solver.checksum),
        )
    )

    job = api.wait_status(out.strip(), "completed")
    assert job["result"] == {"doubled": 42}
    assert job["max_attempts"] == 1


def test_submit_refuses_params_that_are_not_json(api: Api) -> None:
    result = jobforge_process(api.url, "submit", "demo", "--params", "{n: 3}")

    assert result.returncode == 2
    assert one_error_line(result).startswith("error: --params is not JSON")


@pytest.mark.parametrize(
    "args",
    [["submit", "demo"], ["get", "abc"], ["list"], ["cancel", "abc"], ["show", "abc"]],
    ids=lambda args: args[0],
)
def test_without_forge_ingest_secret_a_job_command_names_the_missing_setting(
    api: Api, args: list[str]
) -> None:
    line = one_error_line(jobforge(api.url, *args, secret=None))

    assert "FORGE_INGEST_SECRET is not set" in line
    assert "cannot reach" not in line


def test_an_api_nobody_listens_on_is_reported_as_unreachable() -> None:
    url = f"http://127.0.0.1:{free_port()}"

    line = one_error_line(jobforge(url, "list"))

    assert line.startswith(f"error: cannot reach {url}: ")


def test_a_wrong_secret_is_reported_as_the_apis_401(api: Api) -> None:
    result = jobforge_process(api.url, "list", secret="not-the-secret")

    assert result.returncode == 1
    assert one_error_line(result).startswith("error: HTTP 401: ")


def test_get_prints_the_job_as_json(api: Api) -> None:
    job_id = api.submit(type=REGISTERED_TYPE, params={"k": "v"})
    api.wait_status(job_id, "completed")

    printed = json.loads(ok(jobforge(api.url, "get", job_id)))

    assert printed == api.job(job_id)


def test_get_of_an_unknown_job_is_the_apis_404(api: Api) -> None:
    line = one_error_line(jobforge(api.url, "get", "no-such-job"))

    assert line.startswith("error: HTTP 404: ")


def test_list_prints_a_line_per_job_filtered_by_type_and_status(
    api: Api, job_type: str, make_solver: Callable[[str], Solver]
) -> None:
    good = make_solver('print("{}")\n')
    bad = make_solver("sys.exit(3)\n")
    done = api.submit(**good.spec(job_type, priority=2))
    broken = api.submit(**bad.spec(job_type, max_attempts=1))
    api.wait_status(done, "completed")
    api.wait_status(broken, "quarantined")

    def listed(*args: str) -> list[str]:
        return ok(jobforge(api.url, "list", "--type", job_type, *args)).splitlines()

    both = wait_until(
        lambda: len(lines := listed("--order", "priority")) == 2 and lines, what="both listed"
    )
    assert [line.split()[:3] for line in both] == [
        [done, "completed", job_type],
        [broken, "quarantined", job_type],
    ]
    assert both[0].endswith("p=2 attempts=1")
    # The status filter reads visibility, which shows a job's end a moment after it.
    wait_until(
        lambda: [line.split()[0] for line in listed("--status", "completed")] == [done],
        timeout=30,
        what="the completed job alone",
    )
    assert [line.split()[0] for line in listed("--order", "priority", "--limit", "1")] == [done]
    assert sorted(line.split()[0] for line in listed()) == sorted([done, broken])


def test_cancel_cancels_a_pending_job_and_list_and_show_say_cancelled(
    lonely: Api, job_type: str
) -> None:
    job_id = ok(jobforge(lonely.url, "submit", job_type)).strip()
    other = ok(jobforge(lonely.url, "submit", job_type)).strip()

    assert ok(jobforge(lonely.url, "cancel", job_id)) == f"cancelled {job_id}\n"

    job = lonely.job(job_id)
    assert (job["status"], job["fail_reason"]) == ("failed", "cancelled")

    def statuses(*args: str) -> dict[str, str]:
        lines = ok(jobforge(lonely.url, "list", "--type", job_type, *args)).splitlines()
        return {line.split()[0]: line.split()[1] for line in lines}

    wait_until(
        lambda: statuses() == {job_id: "cancelled", other: "pending"},
        what="the cancelled job listed as cancelled",
    )
    # Filtered by the API: the job is `cancelled` once its execution has closed Canceled.
    wait_until(
        lambda: (
            statuses("--status", "cancelled") == {job_id: "cancelled"}
            and statuses("--status", "failed") == {}
        ),
        what="the cancelled job listed under cancelled only",
    )
    shown = ok(jobforge(lonely.url, "show", job_id))
    assert re.search(r"^Status\s+cancelled$", shown, re.MULTILINE), shown


def test_cancel_of_a_completed_job_fails_with_the_apis_409(api: Api) -> None:
    job_id = api.submit(type=REGISTERED_TYPE)
    api.wait_status(job_id, "completed")

    line = one_error_line(jobforge(api.url, "cancel", job_id))

    assert line.startswith("error: HTTP 409: ")
    assert "completed" in line


def test_show_prints_the_detail_the_transitions_and_the_fail_history(
    api: Api, job_type: str, make_solver: Callable[[str], Solver], tmp_path: Path
) -> None:
    # Fails its first attempt, then succeeds.
    solver = make_solver(
        'if not os.path.exists(params["marker"]):\n'
        '    open(params["marker"], "w").close()\n'
        '    print("first try fails", file=sys.stderr)\n'
        "    sys.exit(3)\n"
        'print(json.dumps({"second": "try"}))\n'
    )
    job_id = api.submit(**solver.spec(job_type, params={"marker": str(tmp_path / "m")}))
    api.wait_status(job_id, "completed")

    shown = ok(jobforge(api.url, "show", job_id))

    for pattern in (
        rf"^Job\s+{job_id}$",
        rf"^Type\s+{job_type}$",
        r"^Status\s+completed$",
        r"^Attempts\s+2 / 3$",
        r"^Worker\s+session-worker$",
        r'^Result\s+\{"second": "try"\}$',
    ):
        assert re.search(pattern, shown, re.MULTILINE), (pattern, shown)
    transitions = shown[shown.index("Transitions") : shown.index("Fail history")]
    statuses = re.findall(r"│\s*\d+\s*│[^│]*│\s*(\w+)\s*│", transitions)
    assert statuses[:3] == ["pending", "assigned", "running"]
    assert statuses[-1] == "completed"
    assert statuses.count("running") == 2
    failures = shown[shown.index("Fail history") :]
    assert len(re.findall(r"│.*session-worker.*│", failures)) == 1, failures


def test_show_of_a_job_no_solver_was_found_for_says_there_was_none(
    start_api: Callable[..., Api],
) -> None:
    # An agent takes the job and reports that it has no solver for its type.
    hub = start_api(TEMPORAL_ACTIVITY_QUEUE_PREFIX="cli-no-solver-")
    job_id = hub.submit(type="no-solver", max_attempts=1)
    claim = hub.http.post(
        "/api/jobs/claim", json={"worker_id": "agent-ns", "types": ["no-solver"], "wait": 10}
    )
    assert claim.status_code == 200, claim.text
    reason = "solver_not_found: no solver_url and no solver registered for type 'no-solver'"
    failed = hub.http.post(
        f"/api/jobs/{job_id}/fail", json={"worker_id": "agent-ns", "reason": reason}
    )
    assert failed.status_code == 200, failed.text
    hub.wait_status(job_id, "quarantined")

    shown = ok(jobforge(hub.url, "show", job_id))

    assert re.search(r"^Fail reason\s+solver_not_found: ", shown, re.MULTILINE), shown
    solver = re.search(r"^Solver\s+(.*)$", shown, re.MULTILINE)
    assert solver is not None, shown
    assert solver[1] == "none: no solver_url, and none registered for the type on its worker"


@pytest.fixture
def watcher(api: Api, tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Factory: a running `jobforge watch ARGS` (output in tmp_path); stopped at the end."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> subprocess.Popen[bytes]:
        with (tmp_path / "out").open("wb") as out, (tmp_path / "err").open("wb") as err:
            process = subprocess.Popen(
                [str(JOBFORGE), "watch", *args],
                cwd=ROOT,
                # A watch that hangs dumps its threads' stacks on SIGABRT (`stopped`).
                env={**cli_env(api.url, SECRET), "PYTHONFAULTHANDLER": "1"},
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
            )
        started.append(process)
        wait_until(
            lambda: "watching" in (tmp_path / "err").read_text() or process.poll() is not None,
            what="watch to connect",
        )
        assert process.poll() is None, (tmp_path / "err").read_text()
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def stopped(process: subprocess.Popen[bytes], err: Path) -> int:
    """The exit status of a watch that was sent SIGINT; one still running after 10 s
    fails the test with where its threads were (its fault handler's dump)."""
    try:
        return process.wait(10)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)
        process.wait(10)
        pytest.fail(f"watch did not stop on SIGINT within 10 s:\n{err.read_text()}")


def test_watch_follows_events_live_filtered_and_stops_cleanly_on_ctrl_c(
    api: Api,
    job_type: str,
    make_solver: Callable[[str], Solver],
    watcher: Callable[..., subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    process = watcher("--type", job_type, "--status", "running", "--status", "completed")
    solver = make_solver('print("{}")\n')
    job_id = api.submit(**solver.spec(job_type))
    elsewhere = api.submit(type=REGISTERED_TYPE)
    api.wait_status(elsewhere, "completed")

    def lines() -> list[str]:
        return (tmp_path / "out").read_text().splitlines()

    wait_until(lambda: any("job:completed" in line for line in lines()), what="job:completed")
    process.send_signal(signal.SIGINT)

    assert stopped(process, tmp_path / "err") == 0
    assert "Traceback" not in (tmp_path / "err").read_text()
    events = [line.split()[2:6] for line in lines()]
    assert events == [
        ["job:running", job_id, job_type, "running"],
        ["job:completed", job_id, job_type, "completed"],
    ]


@pytest.mark.parametrize("command", ["", "submit", "list", "show", "watch", "dev", "api"])
def test_help_names_values_by_metavar_not_by_python_type(command: str) -> None:
    out = ok(jobforge("http://unused", *([command] if command else []), "--help"))

    assert not re.search(r"<\w+>|\{\w+\}", out), out
    if command == "submit":
        # TYPE, or --from-file instead of it.
        assert re.search(r"Usage: jobforge submit \[OPTIONS\] \[TYPE\]\s", out), out
        assert re.search(r"--from-file\s+PATH\s", out), out
        assert re.search(r"--params\s+JSON\s", out), out
        assert re.search(r"--solver-checksum\s+SHA256\s", out), out
    if command == "dev":
        assert re.search(r"--data-dir\s+DIR\s", out), out


def test_a_bad_worker_setting_is_one_line_naming_it() -> None:
    result = jobforge("http://unused", "worker", WORKER_CORES="0")

    assert result.returncode == 2
    assert one_error_line(result).startswith("error: bad worker setting: cores: ")


def test_watch_prints_a_progress_event_with_its_fraction_and_message() -> None:
    from worker.cli import _event_line

    event = {
        "id": "j1",
        "type": "t",
        "status": "running",
        "attempts": 1,
        "worker_id": "w1",
        "ts": 0,
        "progress": {"fraction": 0.25, "message": "step 2 of 8", "at": 0},
    }
    line = _event_line("job:progress", event).plain
    assert "job:progress" in line and line.endswith("25% step 2 of 8")
    assert not _event_line("job:running", {**event, "progress": None}).plain.endswith("%")


def test_jobforge_api_listens_on_the_port_a_paas_sets_in_port(
    temporal: DevServer, spawn: Callable[..., Proc]
) -> None:
    port = free_port()
    proc = spawn(["api"], base_env(temporal, PORT=str(port)))
    wait_for_port(port, 30, proc.process)
    try:
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code == 200
    finally:
        proc.stop(timeout=15)

    result = jobforge("http://unused", "api", PORT="eighty")
    assert result.returncode == 2
    assert "PORT" in one_error_line(result)


# A blocking read that a SIGINT does not interrupt: the signal lands on another thread
# (the main one blocks it), as one that lands just before the read's system call is seen
# only when the read returns (CPython checks for signals between bytecodes). Read
# directly (`next(stream())`), this one never returns.
MISSED_INTERRUPT = """
import signal, socket, threading
from worker.cli_common import interruptible

quiet, _ = socket.socketpair()

def stream():
    print("reading", flush=True)  # by now the main thread waits inside the try below
    yield quiet.recv(1)  # nothing ever comes

threading.Thread(target=threading.Event().wait, daemon=True).start()  # takes the signal
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
try:
    next(interruptible(stream()))
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


@pytest.mark.process
def test_a_stream_read_through_interruptible_ends_on_a_sigint_the_read_missed() -> None:
    reader = subprocess.Popen(
        [PYTHON, "-c", MISSED_INTERRUPT],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert reader.stdout is not None
    assert reader.stdout.readline() == "reading\n"
    reader.send_signal(signal.SIGINT)
    try:
        out, _ = reader.communicate(timeout=10)
    finally:
        reader.kill()
    assert out == "interrupted\n"
