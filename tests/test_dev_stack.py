"""`jobforge dev`: the embedded stack (Temporal dev server, API, worker) as a user runs it."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.conftest import PYTHON, ROOT, needs_chromium, wait_until
from tests.ports import free_port
from worker.dev_stack import READY_LINE

# Starts processes (tests/tiers.py): not in `make check`.
pytestmark = pytest.mark.process

SECRET = "dev-stack-secret"
KEPT_SECRET = "the-kept-secret\n"
STARTUP_S = 90.0
SCRUBBED_PREFIXES = ("TEMPORAL_", "WORKER_", "SOLVER_", "API_", "JOB_", "HUB_URL", "NODE_ID")


def proc_alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def proc_table() -> dict[int, tuple[int, str]]:
    """pid → (parent pid, command line) for every process we can see."""
    table: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] == "Z":
            continue
        table[int(entry.name)] = (int(fields[1]), cmdline)
    return table


def session_of(pid: int) -> int | None:
    """The process's session id (None once it is gone)."""
    try:
        return os.getsid(pid)
    except OSError:
        return None


def stack_processes(root_pid: int, data_dir: Path) -> dict[int, str]:
    """The dev process's descendants, anything left in its session (dev leads one, so an
    orphaned API or worker stays in it), and anything whose command line names the data
    dir (the Temporal dev server, which gets a session of its own)."""
    table = proc_table()
    found = {
        pid: cmd
        for pid, (_, cmd) in table.items()
        if str(data_dir) in cmd or session_of(pid) == root_pid
    }
    frontier = [root_pid, *found]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, cmd) in table.items():
            if ppid == parent and pid not in found:
                found[pid] = cmd
                frontier.append(pid)
    if root_pid in table:
        found[root_pid] = table[root_pid][1]
    return found


@dataclass
class DevStack:
    """A running `jobforge dev` and what it printed."""

    process: subprocess.Popen[bytes]
    log: Path
    data_dir: Path
    api_port: int
    temporal_port: int
    ui_port: int
    pids: dict[int, str] = field(default_factory=dict)

    @property
    def api_url(self) -> str:
        """The API's base URL."""
        return f"http://127.0.0.1:{self.api_port}"

    def output(self) -> str:
        """Everything dev and its children printed so far."""
        return self.log.read_text(errors="replace")

    def http(self, token: str = SECRET) -> httpx.Client:
        """A client for the API with this bearer token."""
        return httpx.Client(
            base_url=self.api_url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        )

    def record_processes(self) -> dict[int, str]:
        """Remember every process of the stack (to check later that none is left)."""
        self.pids.update(stack_processes(self.process.pid, self.data_dir))
        return self.pids

    def interrupt(self, timeout: float = 90.0) -> int:
        """Ctrl-C in the terminal: SIGINT to dev's whole process group; wait for dev."""
        os.killpg(self.process.pid, signal.SIGINT)
        return self.process.wait(timeout)

    def leftovers(self) -> dict[int, str]:
        """Recorded or data-dir processes that are still alive."""
        alive = dict(self.pids)
        alive.update(stack_processes(self.process.pid, self.data_dir))
        return {pid: cmd for pid, cmd in alive.items() if proc_alive(pid)}

    def force_stop(self) -> None:
        """Kill whatever is left (test teardown only)."""
        self.record_processes()
        for pid in self.pids:
            if proc_alive(pid):
                os.kill(pid, signal.SIGKILL)
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def dev_env(secret: str | None, **extra: str) -> dict[str, str]:
    """The test's environment without any jobforge setting, plus the secret if given."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(SCRUBBED_PREFIXES) and key != "FORGE_INGEST_SECRET"
    }
    env["PYTHONUNBUFFERED"] = "1"
    env["WORKER_TYPE_POLL_MS"] = "200"
    if secret is not None:
        env["FORGE_INGEST_SECRET"] = secret
    env.update(extra)
    return env


def launch_dev(
    data_dir: Path,
    log: Path,
    *,
    secret: str | None = SECRET,
    api_port: int | None = None,
    temporal_port: int | None = None,
    ui_port: int | None = None,
    env: dict[str, str] | None = None,
    via_make: bool = False,
) -> DevStack:
    """Start `python -m worker.cli dev` (or `make dev ARGS=…`) on free ports, in a session
    of its own (as a terminal would); not waiting for it."""
    ports = [api_port or free_port(), temporal_port or free_port(), ui_port or free_port()]
    args = [
        *("--api-port", str(ports[0]), "--temporal-port", str(ports[1])),
        *("--ui-port", str(ports[2]), "--data-dir", str(data_dir)),
    ]
    # `-o` keeps make from reinstalling the venv when pyproject.toml is newer than it.
    command = (
        ["make", "--no-print-directory", "-o", ".venv/.installed", "dev", f"ARGS={' '.join(args)}"]
        if via_make
        else [PYTHON, "-m", "worker.cli", "dev", *args]
    )
    with log.open("wb") as out:
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=dev_env(secret, **(env or {})),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return DevStack(process, log, data_dir.resolve(), ports[0], ports[1], ports[2])


def wait_up(stack: DevStack) -> DevStack:
    """Wait until dev says it is up (the API answers by then); record its processes."""
    wait_until(
        lambda: READY_LINE in stack.output() or stack.process.poll() is not None,
        timeout=STARTUP_S,
        what="jobforge dev to come up",
    )
    assert stack.process.poll() is None, stack.output()
    stack.record_processes()
    return stack


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Callable[..., DevStack]]:
    """Factory: `launch_dev` (not waiting); all are killed at the end."""
    stacks: list[DevStack] = []

    def start(data_dir: Path, **kwargs: Any) -> DevStack:
        stack = launch_dev(data_dir, tmp_path / f"dev-{len(stacks)}.log", **kwargs)
        stacks.append(stack)
        return stack

    yield start
    for stack in stacks:
        stack.force_stop()


@pytest.fixture
def start_dev(launch: Callable[..., DevStack]) -> Callable[..., DevStack]:
    """Factory: `launch`, then wait until dev says it is up and the API answers."""

    def start(data_dir: Path, **kwargs: Any) -> DevStack:
        return wait_up(launch(data_dir, **kwargs))

    return start


@pytest.fixture(scope="module")
def shared_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStack]:
    """One stack for the tests that only read and submit, with dev's default worker (no
    WORKER_TYPES): it has a solver for `demo` only, so a job of another type that names
    no solver_url stays pending (docs/architecture.md, "Routing")."""
    tmp = tmp_path_factory.mktemp("shared-dev")
    # A secret kept from an earlier run without FORGE_INGEST_SECRET: the env's must win.
    (tmp / "data").mkdir()
    (tmp / "data" / "ingest-secret").write_text(KEPT_SECRET)
    stack = launch_dev(tmp / "data", tmp / "dev.log")
    try:
        yield wait_up(stack)
    finally:
        stack.force_stop()


def submit_demo(http: httpx.Client, n: int) -> str:
    """POST a demo job; its id."""
    response = http.post("/api/jobs", json={"type": "demo", "params": {"n": n}})
    assert response.status_code == 201, response.text
    job_id: str = response.json()["id"]
    return job_id


def wait_completed(http: httpx.Client, job_id: str) -> dict[str, Any]:
    """Poll the job until it completed (failing early if it is quarantined)."""

    def done() -> dict[str, Any] | None:
        job: dict[str, Any] = http.get(f"/api/jobs/{job_id}").json()
        assert job["status"] != "quarantined", job
        return job if job["status"] == "completed" else None

    result: dict[str, Any] = wait_until(done, timeout=60, what=f"demo job {job_id} to complete")
    return result


def answers(url: str) -> bool:
    """Whether a GET of `url` answers 200."""
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def test_dev_prints_the_api_docs_and_temporal_ui_urls_and_each_of_them_answers(
    shared_stack: DevStack,
) -> None:
    stack = shared_stack
    out = stack.output()

    assert re.search(rf"jobforge API\s+http://127\.0\.0\.1:{stack.api_port}\n", out), out
    assert re.search(rf"API docs\s+http://127\.0\.0\.1:{stack.api_port}/docs\n", out), out
    assert re.search(rf"Temporal UI\s+http://127\.0\.0\.1:{stack.ui_port}\n", out), out
    assert "Token            FORGE_INGEST_SECRET from the environment\n" in out
    assert answers(f"{stack.api_url}/healthz")
    assert answers(f"{stack.api_url}/docs")
    wait_until(lambda: answers(f"http://127.0.0.1:{stack.ui_port}/"), what="the Temporal UI")


def test_dev_prints_a_dashboard_link_with_the_token_in_its_fragment(
    shared_stack: DevStack,
) -> None:
    link = re.search(r"^Dashboard\s+(\S+)$", shared_stack.output(), re.MULTILINE)

    assert link, shared_stack.output()
    assert link.group(1) == f"{shared_stack.api_url}/#token={SECRET}"


def test_a_demo_job_on_the_dev_stack_completes_with_the_sum_of_squares(
    shared_stack: DevStack,
) -> None:
    stack = shared_stack

    with stack.http() as http:
        job = wait_completed(http, submit_demo(http, 5))

    assert job["result"] == {"n": 5, "sum_of_squares": 55}
    assert job["attempts"] == 1
    assert [t["status"] for t in job["transitions"]] == [
        "pending",
        "assigned",
        "running",
        "completed",
    ]


def test_dev_default_worker_takes_no_job_of_another_designs_type(shared_stack: DevStack) -> None:
    """A 001 intent, a 002 run and a type nobody serves wait, uncounted, while a demo job
    submitted after them completes: the catch-all worker never burns them."""
    suffix = os.urandom(3).hex()
    foreign = [f"addon{suffix}.bake", "runforge.run", f"unknown-{suffix}"]
    with shared_stack.http() as http:
        ids = {}
        for job_type in foreign:
            response = http.post("/api/jobs", json={"type": job_type, "params": {}})
            assert response.status_code == 201, response.text
            ids[job_type] = response.json()["id"]
        for job_type in foreign:
            # The worker has learnt of the type (it serves its solver_url jobs only).
            logged = re.compile(rf"serving job type {re.escape(job_type)}: solver_url jobs$", re.M)
            wait_until(lambda t=logged: t.search(shared_stack.output()), what=f"{job_type} seen")
        wait_completed(http, submit_demo(http, 3))
        for job_type, job_id in ids.items():
            job = http.get(f"/api/jobs/{job_id}").json()
            seen = (job["status"], job["waiting_for"], job["attempts"], job["fail_history"])
            assert seen == ("pending", "no_worker", 0, []), (job_type, job)


def test_ctrl_c_stops_the_temporal_server_the_api_and_the_worker(
    start_dev: Callable[..., DevStack], tmp_path: Path
) -> None:
    stack = start_dev(tmp_path / "data")
    with stack.http() as http:
        wait_completed(http, submit_demo(http, 2))  # the worker is really up
    commands = list(stack.record_processes().values())
    assert any("server start-dev" in cmd and str(stack.data_dir) in cmd for cmd in commands)
    assert any("worker.cli api" in cmd for cmd in commands)
    assert any("worker.cli worker" in cmd for cmd in commands)

    code = stack.interrupt()

    assert code == 0, stack.output()
    # No process of the stack is left, so none holds its ports or its SQLite file. (The
    # ports themselves are not checked: under parallel tests another test may take one.)
    wait_until(lambda: not stack.leftovers(), timeout=30, what="no leftover processes")


def test_sigterm_to_dev_alone_stops_everything_too(
    start_dev: Callable[..., DevStack], tmp_path: Path
) -> None:
    stack = start_dev(tmp_path / "data")
    assert len(stack.pids) >= 4, stack.pids

    stack.process.terminate()

    assert stack.process.wait(90) == 0, stack.output()
    wait_until(lambda: not stack.leftovers(), timeout=30, what="no leftover processes")


def generated_secret(stack: DevStack) -> str:
    """The secret dev generated: kept in the data dir, owner-only, named by the banner
    and carried by the dashboard link."""
    path = stack.data_dir / "ingest-secret"
    assert path.stat().st_mode & 0o777 == 0o600
    secret = path.read_text().strip()
    out = stack.output()
    assert f"Token            export FORGE_INGEST_SECRET=$(cat {path})\n" in out, out
    assert f"Dashboard        {stack.api_url}/#token={secret}\n" in out, out
    return secret


def test_without_a_secret_dev_generates_one_that_a_restart_keeps_with_every_job(
    start_dev: Callable[..., DevStack], tmp_path: Path
) -> None:
    data = tmp_path / "data"
    first = start_dev(data, secret=None)
    token = generated_secret(first)
    with first.http(token) as http:
        job_id = submit_demo(http, 5)
        before = wait_completed(http, job_id)
    assert first.interrupt() == 0, first.output()
    wait_until(lambda: not first.leftovers(), timeout=30, what="the first stack to stop")

    second = start_dev(
        data,
        secret=None,
        api_port=first.api_port,
        temporal_port=first.temporal_port,
        ui_port=first.ui_port,
    )
    assert generated_secret(second) == token
    assert len(token) >= 24
    with second.http(token) as http:
        response = http.get(f"/api/jobs/{job_id}")
        listed = http.get("/api/jobs", params={"type": "demo"})
    with second.http("not-the-secret") as http:
        assert http.get("/api/jobs").status_code == 401
    with second.http(SECRET) as http:
        assert http.get("/api/jobs").status_code == 401

    assert response.status_code == 200, response.text
    assert response.json() == before
    assert response.json()["result"] == {"n": 5, "sum_of_squares": 55}
    assert [job["id"] for job in listed.json()] == [job_id]


def test_a_secret_in_the_environment_wins_over_the_one_kept_in_the_data_dir(
    shared_stack: DevStack,
) -> None:
    with shared_stack.http(SECRET) as http:
        assert http.get("/api/jobs").status_code == 200
    with shared_stack.http(KEPT_SECRET.strip()) as http:
        assert http.get("/api/jobs").status_code == 401
    assert (shared_stack.data_dir / "ingest-secret").read_text() == KEPT_SECRET


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port something else listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_dev_refuses_an_api_port_that_is_taken_and_starts_nothing(
    launch: Callable[..., DevStack], tmp_path: Path, taken_port: int
) -> None:
    stack = launch(tmp_path / "data", api_port=taken_port)

    code = stack.process.wait(STARTUP_S)

    assert code != 0
    assert f"API port {taken_port} is already in use" in stack.output()
    assert not stack.leftovers()


def test_dev_refuses_a_temporal_port_that_is_taken_and_leaves_nothing_running(
    launch: Callable[..., DevStack], tmp_path: Path, taken_port: int
) -> None:
    stack = launch(tmp_path / "data", temporal_port=taken_port)

    code = stack.process.wait(STARTUP_S)

    assert code != 0
    assert "Temporal dev server did not start" in stack.output()
    assert f"port {taken_port} is already in use" in stack.output()
    assert not stack.leftovers()


def test_dev_refuses_a_port_named_twice_and_starts_nothing(
    launch: Callable[..., DevStack], tmp_path: Path
) -> None:
    """With one port for the API and Temporal, dev used to start Temporal on it, take
    the API's failed bind for a listening API, and print a dashboard URL that was
    Temporal's gRPC port."""
    port = free_port()
    stack = launch(tmp_path / "data", api_port=port, temporal_port=port)

    code = stack.process.wait(STARTUP_S)

    assert code == 2, stack.output()
    assert f"error: --api-port {port} is also given as --temporal-port" in stack.output()
    assert not stack.leftovers()


def test_dev_exits_non_zero_and_stops_everything_when_the_api_dies(
    start_dev: Callable[..., DevStack], tmp_path: Path
) -> None:
    stack = start_dev(tmp_path / "data")
    api = [pid for pid, cmd in stack.pids.items() if "worker.cli api" in cmd]
    assert len(api) == 1, stack.pids

    os.kill(api[0], signal.SIGKILL)

    assert stack.process.wait(90) != 0
    assert "API (-9) exited" in stack.output()
    wait_until(lambda: not stack.leftovers(), timeout=30, what="no leftover processes")


def test_a_sigkilled_dev_takes_the_temporal_server_the_api_and_the_worker_with_it(
    start_dev: Callable[..., DevStack], tmp_path: Path
) -> None:
    stack = start_dev(tmp_path / "data")
    commands = list(stack.pids.values())
    assert any("server start-dev" in cmd for cmd in commands), commands

    stack.process.kill()  # no chance to clean up: an OOM kill, a closed terminal
    stack.process.wait()

    # No process of the stack is left, so none holds its ports or its SQLite file. (The
    # ports themselves are not checked: under parallel tests another test may take one.)
    wait_until(lambda: not stack.leftovers(), timeout=30, what="no leftover processes")


# A solver that ignores SIGTERM: the worker's shutdown would wait its whole grace for it.
STUBBORN_SOLVER = [
    PYTHON,
    "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)",
]


def test_a_second_ctrl_c_kills_everything_at_once(
    start_dev: Callable[..., DevStack], tmp_path: Path
) -> None:
    stack = start_dev(
        tmp_path / "data",
        env={
            "WORKER_SOLVERS": json.dumps({"stubborn": STUBBORN_SOLVER}),
            "WORKER_SHUTDOWN_GRACE_S": "120",
        },
    )
    with stack.http() as http:
        response = http.post("/api/jobs", json={"type": "stubborn"})
        assert response.status_code == 201, response.text
        job_id = response.json()["id"]
        wait_until(
            lambda: http.get(f"/api/jobs/{job_id}").json()["status"] == "running",
            timeout=60,
            what="the stubborn job to run",
        )
    wait_until(
        lambda: any("SIG_IGN" in cmd for cmd in stack.record_processes().values()),
        what="the solver process",
    )
    os.killpg(stack.process.pid, signal.SIGINT)
    wait_until(lambda: "stopping…" in stack.output(), what="dev to start stopping")
    stopped_at = time.monotonic()

    os.killpg(stack.process.pid, signal.SIGINT)

    stack.process.wait(20)  # far less than the worker's 120 s shutdown grace
    wait_until(lambda: not stack.leftovers(), timeout=20, what="no leftover processes")
    assert time.monotonic() - stopped_at < 20


# -- the dashboard, as `make dev` leads to it ---------------------------------------


def dashboard_link(stack: DevStack) -> str:
    """The link dev printed."""
    found = re.search(r"^Dashboard\s+(\S+)$", stack.output(), re.MULTILINE)
    assert found, stack.output()
    return found.group(1)


@needs_chromium
def test_the_printed_dashboard_link_signs_in_and_takes_the_token_out_of_the_address_bar(
    shared_stack: DevStack, page: Page
) -> None:
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))

    page.goto(dashboard_link(shared_stack))

    expect(page.locator("#login-form")).to_be_hidden()
    expect(page.locator("#stream-status")).to_have_text("live")
    expect(page.locator('#status-chips [data-count="all"]')).to_have_text(re.compile(r"^\d+$"))
    assert page.url == f"{shared_stack.api_url}/"
    assert page.evaluate("sessionStorage.getItem('jobforge.token')") == SECRET
    assert requested
    assert not [url for url in requested if SECRET in url]
    worker = page.locator("#fleet-list .worker")
    expect(worker).to_have_count(1)
    expect(worker).to_contain_text("native · 1 core · ")

    page.reload()  # kept like a typed token
    expect(page.locator("#stream-status")).to_have_text("live")


@needs_chromium
def test_the_status_dot_tells_signed_out_from_offline(shared_stack: DevStack, page: Page) -> None:
    page.goto(shared_stack.api_url)
    expect(page.locator("#login-form")).to_be_visible()
    expect(page.locator("#stream-status")).to_have_text("signed out")
    expect(page.locator("#stream-status")).to_have_attribute("data-state", "signed-out")

    page.route("**/api/config", lambda route: route.abort())  # the API is gone
    page.locator("#token-input").fill(SECRET)
    page.locator("#login-button").click()

    expect(page.locator("#stream-status")).to_have_text("offline")
    expect(page.locator("#login-error")).to_contain_text("Cannot reach the API")


@needs_chromium
def test_a_cancelled_job_is_counted_as_cancelled_not_failed(
    shared_stack: DevStack, page: Page
) -> None:
    job_type = f"idle-{os.urandom(4).hex()}"  # no worker serves it: it stays pending
    with shared_stack.http() as http:
        response = http.post("/api/jobs", json={"type": job_type})
        assert response.status_code == 201, response.text
        job_id = response.json()["id"]
        assert http.delete(f"/api/jobs/{job_id}").status_code == 204
        wait_until(
            lambda: http.get("/api/jobs/counts", params={"type": job_type}).json().get("cancelled"),
            what="the cancelled count",
        )

    page.goto(dashboard_link(shared_stack))
    page.locator("#type-filter").fill(job_type)
    expect(page.locator("#jobs-body")).to_have_attribute("data-filter-type", job_type)

    row = page.locator(f'#jobs-body tr[data-job-id="{job_id}"]')
    expect(row.locator('[data-field="status"]')).to_have_text("cancelled")
    expect(page.locator('#status-chips [data-count="cancelled"]')).to_have_text("1")
    expect(page.locator('#status-chips [data-count="failed"]')).to_have_text("0")
    expect(page.locator('#status-chips [data-count="all"]')).to_have_text("1")
    page.locator('#status-chips .chip[data-status="failed"]').click()
    expect(row).to_have_count(0)
    page.locator('#status-chips .chip[data-status="cancelled"]').click()
    expect(row).to_have_count(1)
