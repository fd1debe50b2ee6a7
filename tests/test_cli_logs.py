"""`jobforge logs` and the progress line of `jobforge show`, as a user runs them: processes
against the session's API and worker (the log store itself is proven in test_logs)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import ROOT, SECRET, Api, Solver
from tests.procs import wait_until
from tests.test_cli import JOBFORGE, cli_env, jobforge, ok, one_error_line

pytestmark = pytest.mark.usefixtures("session_worker")

TALKER = """
print("hello out", flush=True)
print("hello err", file=sys.stderr, flush=True)
print("JOBFORGE_PROGRESS 0.42 meshing done", file=sys.stderr, flush=True)
gate = params.get("gate")
while gate and not os.path.exists(gate):
    time.sleep(0.02)
print("bye err", file=sys.stderr, flush=True)
print("  bye out  ")
"""
EXPECTED = [
    "stdout| hello out",
    "stderr| hello err",
    "stderr| JOBFORGE_PROGRESS 0.42 meshing done",
    "stderr| bye err",
    "stdout|   bye out  ",
]


def by_stream(out: str) -> dict[str, list[str]]:
    streams: dict[str, list[str]] = {}
    for line in out.splitlines():
        streams.setdefault(line.split("|", 1)[0], []).append(line)
    return streams


def test_logs_prints_each_line_labelled_by_stream_and_follow_ends_with_the_attempt(
    api: Api, job_type: str, make_solver: Callable[[str], Solver]
) -> None:
    job_id = api.submit(**make_solver(TALKER).spec(job_type, max_attempts=1))
    api.wait_status(job_id, "completed")

    plain = ok(jobforge(api.url, "logs", job_id))
    followed = jobforge(api.url, "logs", job_id, "--follow")
    first = ok(jobforge(api.url, "logs", job_id, "--attempt", "1"))

    # The two streams interleave as they came; each keeps its own order.
    assert sorted(plain.splitlines()) == sorted(EXPECTED)
    assert by_stream(plain) == by_stream("\n".join(EXPECTED))
    assert ok(followed) == plain  # a finished attempt: what it has, then the end
    assert followed.stderr.strip() == "attempt ended: completed"
    assert first == plain
    assert ok(jobforge(api.url, "logs", job_id, "--attempt", "2")) == ""


def test_follow_of_a_job_cancelled_before_it_ran_ends_with_it(
    start_api: Callable[..., Api],
) -> None:
    # No worker polls this API's queues: the job waits with its first attempt granted.
    hub = start_api(TEMPORAL_ACTIVITY_QUEUE_PREFIX="cli-logs-cancelled-")
    job_id = hub.submit(type="never-runs")
    wait_until(lambda: hub.job(job_id)["attempt"] == 1, timeout=30)
    ok(jobforge(hub.url, "cancel", job_id))
    hub.wait_status(job_id, "failed")

    followed = jobforge(hub.url, "logs", job_id, "--follow")

    assert ok(followed) == ""
    assert followed.stderr.strip() == "attempt ended: failed"


def test_logs_of_an_unknown_job_is_the_apis_404(api: Api) -> None:
    result = jobforge(api.url, "logs", "no-such-job")
    assert result.returncode == 1
    assert one_error_line(result).startswith("error: HTTP 404")
    assert jobforge(api.url, "logs", "x", "--attempt", "0").returncode == 2


def test_follow_streams_a_running_jobs_lines_and_show_prints_its_progress(
    api: Api, job_type: str, make_solver: Callable[[str], Solver], tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    job_id = api.submit(**make_solver(TALKER).spec(job_type, params={"gate": str(gate)}))
    api.wait_status(job_id, "running")

    def progress_line() -> str | None:
        shown = ok(jobforge(api.url, "show", job_id))
        found = re.search(r"^Progress\s+(.*)$", shown, re.MULTILINE)
        return found.group(1) if found else None

    line = wait_until(progress_line, timeout=30, what="show to print the progress")
    assert re.fullmatch(r"42%  meshing done  \(at \d{4}-\d\d-\d\d [\d:.]+\)", line), line

    out, err = tmp_path / "out", tmp_path / "err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        follower = subprocess.Popen(
            [str(JOBFORGE), "logs", job_id, "--follow"],
            cwd=ROOT,
            env=cli_env(api.url, SECRET),
            stdout=stdout,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
        )
    try:
        wait_until(
            lambda: "hello err" in out.read_text() or follower.poll() is not None,
            what="follow to print the first lines",
        )
        assert follower.poll() is None, err.read_text()
        gate.touch()  # the rest comes while it follows
        assert follower.wait(timeout=60) == 0, err.read_text()
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    assert sorted(out.read_text().splitlines()) == sorted(EXPECTED)
    assert err.read_text().strip() == "attempt ended: completed"
    assert progress_line() is None  # a closed job has no live progress
