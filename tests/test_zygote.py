"""The zygote the tests fork their `jobforge` processes from (tests/zygote.py): a forked
process is its command, with its own argv, environment, log, pid, signals and exit
status, as a fresh interpreter's would be. Each test runs the command both ways."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests import procs, zygote
from tests.conftest import SECRET, base_env
from tests.ports import free_port
from worker.devserver import DevServer, wait_answering

pytestmark = pytest.mark.process


@pytest.fixture(params=["forked", "fresh"])
def how(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if not zygote.wanted():
        pytest.skip("JOBFORGE_TEST_FRESH_PROCESSES is set")
    monkeypatch.setattr(procs, "FORK_JOBFORGE", request.param == "forked")
    yield request.param


def untimed(log: str) -> str:
    """A log without its timestamps."""
    return re.sub(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ", "", log, flags=re.MULTILINE)


def test_an_api_serves_with_its_own_env_and_ends_on_sigterm_after_its_shutdown(
    how: str, temporal: DevServer, tmp_path: Path
) -> None:
    port = free_port()
    env = base_env(temporal, METRICS_CACHE_MS="1234")
    api = procs.spawn(procs.jobforge("api", "--port", str(port)), tmp_path / "api.log", env)
    try:
        assert isinstance(api.process, zygote.Forked) == (how == "forked")
        wait_answering(f"http://127.0.0.1:{port}/healthz", 60, api.process)
        config = httpx.get(
            f"http://127.0.0.1:{port}/api/config",
            headers={"Authorization": f"Bearer {SECRET}"},
        ).json()
        assert config["counts_cache_ms"] == 1234  # its own env, not the zygote's
        if how == "forked":  # named by its command (tests/cpu_ledger.py reads it)
            assert Path(f"/proc/{api.process.pid}/comm").read_text().strip() == "jf-api"
    finally:
        code = api.stop(signal.SIGTERM, timeout=30)
    # uvicorn shuts down, then ends by the signal it caught, as a fresh process does.
    assert code == -signal.SIGTERM, api.output()
    assert "Beginning worker shutdown" in api.output()


def test_a_command_that_fails_on_its_arguments_exits_2_and_says_why(
    how: str, tmp_path: Path
) -> None:
    proc = procs.spawn(
        procs.jobforge("api", "--port", "not-a-port"), tmp_path / "bad.log", dict(os.environ)
    )
    assert proc.process.wait(30) == 2
    assert "Invalid value for '--port'" in untimed(proc.output()), proc.output()
    assert "RuntimeWarning" not in proc.output()


def test_a_sigkilled_worker_reports_its_signal(
    how: str, temporal: DevServer, tmp_path: Path
) -> None:
    worker = procs.spawn(procs.jobforge("worker"), tmp_path / "w.log", base_env(temporal))
    assert worker.process.poll() is None
    worker.kill()
    assert worker.process.wait(10) == -signal.SIGKILL
