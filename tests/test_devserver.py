"""The dev server's command line (where its database lives), and a start that fails."""

from __future__ import annotations

import socket
import stat
import subprocess
from pathlib import Path

import pytest

from tests.ports import free_port
from worker import devserver
from worker.devserver import DevServer


def flags(cmd: list[str]) -> dict[str, list[str]]:
    """Each `--flag`'s values, in order."""
    found: dict[str, list[str]] = {}
    for flag, value in zip(cmd, [*cmd[1:], ""], strict=True):
        if flag.startswith("--"):
            found.setdefault(flag, []).append(value)
    return found


def test_a_dev_server_keeps_its_database_in_a_sqlite_file_in_its_data_dir(tmp_path: Path) -> None:
    cmd = flags(DevServer(tmp_path, port=7999, ui_port=None).command())
    assert cmd["--db-filename"] == [str(tmp_path / "temporal.sqlite")]
    assert "journal_mode=wal" in cmd["--sqlite-pragma"]


def test_an_in_memory_dev_server_names_no_file(tmp_path: Path) -> None:
    cmd = flags(DevServer(tmp_path, port=7999, ui_port=None, in_memory=True).command())
    assert "--db-filename" not in cmd and "--sqlite-pragma" not in cmd
    assert cmd["--port"] == ["7999"]


def test_the_test_sessions_server_writes_no_database_file(temporal: DevServer) -> None:
    assert temporal.in_memory and temporal.process is not None
    assert not list(temporal.data_dir.glob("*.sqlite*"))


def stand_in(tmp_path: Path, first_run: str) -> Path:
    """A `temporal` whose first run does `first_run` (shell) and every later run is the
    real binary's, counting its runs in `runs`."""
    script = tmp_path / "temporal"
    script.write_text(
        "#!/bin/sh\n"
        f"echo run >> {tmp_path / 'runs'}\n"
        f"if [ ! -e {tmp_path / 'ran'} ]; then touch {tmp_path / 'ran'}; {first_run}; fi\n"
        f'exec {devserver.temporal_binary()} "$@"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_a_start_that_crashes_on_a_port_race_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server picks its internal ports free and binds them later: another process
    can take one in between, and the server panics (exit 2). That start is retried."""
    crash = "echo 'panic: listen tcp 127.0.0.1:4: bind: address already in use'; exit 2"
    script = stand_in(tmp_path, crash)
    monkeypatch.setattr(devserver, "temporal_binary", lambda: str(script))
    server = DevServer(tmp_path / "data", port=free_port(), ui_port=None, in_memory=True)
    try:
        server.start()
        assert server.process is not None and server.process.poll() is None
    finally:
        server.stop()
    log = (tmp_path / "data" / "temporal.log").read_text()
    assert "address already in use" in log


def test_a_start_that_fails_otherwise_is_not_retried_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = stand_in(tmp_path, "echo 'Error: the database is read-only'; exit 1")
    monkeypatch.setattr(devserver, "temporal_binary", lambda: str(script))
    server = DevServer(tmp_path / "data", port=free_port(), ui_port=None, in_memory=True)

    with pytest.raises(RuntimeError, match="code 1 before listening: Error: the database"):
        server.start()

    assert (tmp_path / "runs").read_text().count("run") == 1


@pytest.mark.process
def test_the_api_is_awaited_by_its_answer_not_by_a_port_that_accepts() -> None:
    """Another listener on the API's port accepts connections; the API itself then dies
    of its bind. The wait ends with that death, not as if the API served."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", free_port()))
        other.listen()
        port = other.getsockname()[1]
        api = subprocess.Popen(["sleep", "1"])
        try:
            devserver.wait_for_port(port, 5, api)  # what dev waited for before
            with pytest.raises(devserver.EarlyExitError):
                devserver.wait_answering(f"http://127.0.0.1:{port}/healthz", 30, api)
        finally:
            api.kill()
            api.wait()
