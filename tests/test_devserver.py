"""The dev server's command line: where its database lives."""

from __future__ import annotations

from pathlib import Path

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
