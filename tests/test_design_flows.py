"""docs/contracts.md's "Under `make dev`": each design's flow (001 intents, 002
`runforge-cli`, 003 simulations, 004 targets), run as printed against one `jobforge dev`
as it ships, with its default worker, the way tests/test_readme.py runs the README.

Each design's `sh` blocks run in one bash session after the section's first block (the
exports); a `# …` line is what a command must print. Only what differs on a test machine
is swapped, in the commands and in what they print: the ports, the data dir and the
002 demo directory. 003 needs a worker of the design's own: `DesignWorker` below, written
from its §"Worker Responsibilities", runs the payload's command as a local process where
the design's worker would `docker run` the image with it.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT
from tests.test_dev_stack import DevStack, dev_env, launch_dev, wait_up
from tests.test_readme import Shell, Step, section, sh_steps

# Starts processes (tests/tiers.py): not in `make check`.
pytestmark = [pytest.mark.slow(90), pytest.mark.process]

DOC = ROOT / "docs" / "contracts.md"
HEADING = "Under `make dev`"
# As printed in the doc → what the test machine uses instead (see `swaps`).
API_URL = "http://127.0.0.1:8000"
DATA_DIR = ".jobforge/"
TEMPORAL = "127.0.0.1:7233"
RF_DIR = "/tmp/rf-demo"
# Reads may run before the state they print is reached (a user types slower): retried.
READ = re.compile(r"^(curl -s (?!-X)|\.venv/bin/runforge-cli queue-status)")
READ_RETRY_S = 60.0
WORKER_ID = "sim-host-1"


def design_steps(design: str) -> tuple[list[Step], list[Step]]:
    """The section's opening steps (the exports) and one design's steps."""
    text = section(DOC.read_text(), HEADING)
    parts = re.split(r"\n\*\*(\d{3})\.\*\*", text)
    by_design = dict(zip(parts[1::2], parts[2::2], strict=True))
    return sh_steps(parts[0]), sh_steps(by_design[design])


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStack]:
    """`jobforge dev` without FORGE_INGEST_SECRET (it generates one, as the doc reads)."""
    tmp = tmp_path_factory.mktemp("flows-dev")
    stack = launch_dev(tmp / "data", tmp / "dev.log", secret=None)
    try:
        yield wait_up(stack)
    finally:
        stack.force_stop()


def swaps(stack: DevStack, tmp: Path) -> dict[str, str]:
    """Doc text → the test machine's."""
    return {
        API_URL: stack.api_url,
        DATA_DIR: f"{stack.data_dir}/",
        TEMPORAL: f"127.0.0.1:{stack.temporal_port}",
        RF_DIR: str(tmp / "rf-demo"),
    }


def run_as_printed(stack: DevStack, tmp: Path, design: str) -> None:
    """Run the exports, then the design's steps, each until it prints what the doc says
    (a read retried for a while, anything else at once)."""
    opening, steps = design_steps(design)
    assert opening and steps and sum(len(step.expected) for step in steps) >= 5
    replace = swaps(stack, tmp)

    def swapped(text: str) -> str:
        for printed, here in replace.items():
            text = text.replace(printed, here)
        return text

    shell = Shell(dev_env(None))
    try:
        for step in [*opening, *steps]:
            here = Step(swapped(step.command), [swapped(line) for line in step.expected])
            deadline = time.monotonic() + READ_RETRY_S
            while True:
                code, output = shell.run(here.command)
                if code == 0 and here.printed_as_expected(output):
                    break
                assert READ.match(step.command) and time.monotonic() < deadline, (
                    f"{step.command}\nexited {code}, printed:\n{output}\n"
                    f"expected:\n" + "\n".join(here.expected)
                )
                time.sleep(0.5)  # a read, before the state got there: ask again
    finally:
        shell.close()


@dataclass
class DesignWorker:
    """003's worker (§"Worker Responsibilities"): heartbeat, `next-job`, run the job,
    stream its output to `<shared>/jobs/<id>/logs/<id>.log`, `running` updates, a stop
    seen on `GET /status/<id>`, then `finished`, `failed` or `stopped`."""

    url: str
    token: str
    shared: Path
    every_s: float = 0.3
    error: BaseException | None = None
    # Each job's hosts mounted at `/data`, in the order they came.
    mounts: list[list[str]] = field(default_factory=list)
    _done: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> DesignWorker:
        self._thread = threading.Thread(target=self._guarded, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _guarded(self) -> None:
        try:
            self._loop()
        except BaseException as err:  # surfaced by the test
            self.error = err

    def _loop(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        with httpx.Client(base_url=self.url, headers=headers, timeout=30) as http:
            while not self._done.is_set():
                beat = {"worker_id": WORKER_ID, "info": {"load": 0.1}}
                http.post("/api/agent/heartbeat", json=beat).raise_for_status()
                got = http.post("/api/agent/next-job", json={"worker_id": WORKER_ID})
                if got.status_code == 204:
                    self._done.wait(self.every_s)
                    continue
                got.raise_for_status()
                self._run(http, got.json())

    def _report(self, http: httpx.Client, job_id: str, status: str, **extra: Any) -> None:
        body = {"job_id": job_id, "status": status, "worker_id": WORKER_ID, **extra}
        answer = http.post("/api/agent/job-status", json=body)
        # A `running` update after a stop is a 409; the stop is read from /status.
        assert answer.status_code == 200 or (status, answer.status_code) == ("running", 409), (
            status,
            answer.text,
        )

    def _run(self, http: httpx.Client, job: dict[str, Any]) -> None:
        job_id = job["job_id"]
        # `/data` is the shared storage, mounted here at the server's path (§ Startup).
        data = [v["host"] for v in job["volumes"] if v["container"] == "/data"]
        self.mounts.append(data)
        if any(Path(host).resolve() != self.shared.resolve() for host in data):
            self._report(http, job_id, "failed", error=f"/data is not the shared storage: {data}")
            return
        if not (self.shared / job["config_path"]).is_file():
            self._report(http, job_id, "failed", error=f"no config {job['config_path']}")
            return
        logs = self.shared / "jobs" / job_id / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with (logs / f"{job_id}.log").open("ab") as log:
            process = subprocess.Popen(
                shlex.split(job["command"]),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._report(http, job_id, "running", container_name=job["container_name"])
        stopped = False
        while process.poll() is None:
            try:
                process.wait(self.every_s)
                break
            except subprocess.TimeoutExpired:
                pass
            self._report(http, job_id, "running")
            seen = http.get(f"/status/{job_id}").json()
            if seen["status"] == "stop_requested" or seen.get("stop_requested"):
                os.killpg(process.pid, signal.SIGTERM)
                process.wait()
                stopped = True
        code = process.returncode
        if stopped:
            self._report(http, job_id, "stopped", exit_code=code)
        elif code == 0:
            self._report(http, job_id, "finished", exit_code=0)
        else:
            self._report(http, job_id, "failed", exit_code=code, error="command failed")


def test_001_an_intent_is_submitted_dispatchable_claimed_and_done(
    stack: DevStack, tmp_path: Path
) -> None:
    run_as_printed(stack, tmp_path, "001")


def test_002_a_sweep_is_enqueued_paused_run_by_its_daemon_retried_and_canceled(
    stack: DevStack, tmp_path: Path
) -> None:
    run_as_printed(stack, tmp_path, "002")


def test_003_a_simulation_runs_on_the_designs_worker_with_its_log_and_another_stops(
    stack: DevStack, tmp_path: Path
) -> None:
    token = (stack.data_dir / "ingest-secret").read_text().strip()
    worker = DesignWorker(stack.api_url, token, stack.data_dir / "shared").start()
    try:
        run_as_printed(stack, tmp_path, "003")
    finally:
        worker.close()
    assert worker.error is None, worker.error
    # The first simulation mounted the shared storage at /data, as the design's do.
    assert worker.mounts[0] == [str(stack.data_dir / "shared")], worker.mounts


def test_004_a_target_job_is_created_listed_cancelled_and_resumed(
    stack: DevStack, tmp_path: Path
) -> None:
    run_as_printed(stack, tmp_path, "004")
