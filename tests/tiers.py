"""The suite's two tiers, as a pytest plugin (tests/conftest.py loads it).

`make check` runs the tests that start no process but the Temporal dev server (unit
tests, in-process workflow tests, replays): `-m "not process"`. The `process` mark is
given here, from the fixtures a test uses (even through other fixtures): those that
start an API, a worker, a browser or another server. A module or test that starts
processes itself says so with `pytest.mark.process`.

It is checked: a test without the mark that starts a process (subprocess.Popen, so
subprocess.run and asyncio's too) other than the `temporal` dev server fails at its
teardown, naming the command, in `make check` and `make test` alike.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from tests import procs

# Fixtures that start processes: tests/conftest.py's, and test modules' own.
PROCESS_FIXTURES = frozenset(
    {
        "spawn",
        "start_api",
        "start_worker",
        "start_stack",
        "browser",
        "s3_server",
        "pki",  # tests/test_temporal_tls.py: certificates made with the openssl CLI
    }
)
# The one program a test of either tier may start: the Temporal dev server (its CLI).
ALLOWED_PROGRAM = "temporal"

_current: list[str] = [""]
_started: dict[str, list[str]] = {}


def is_process_test(item: pytest.Item) -> bool:
    """Whether a test starts processes, by the fixtures it uses. (A parameter that starts
    one carries the mark itself: tests/log_stores.py's BACKENDS.)"""
    return bool(PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())))


def pytest_itemcollected(item: pytest.Item) -> None:
    """Mark the tests of the process tier."""
    if is_process_test(item):
        item.add_marker(pytest.mark.process)


def pytest_configure() -> None:
    """Note every process a test starts (with its node id), to check its tier."""
    popen_init = subprocess.Popen.__init__

    def noted(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        note(args)
        popen_init(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = noted  # type: ignore[method-assign]
    procs.ON_FORK.append(note)  # forked from the zygote (tests/zygote.py): no Popen


def note(args: Any) -> None:
    """Note a process started now, by the test that runs."""
    one = isinstance(args, (str, bytes, os.PathLike))
    command = os.fsdecode(args) if one else " ".join(map(os.fsdecode, args))
    program = Path(command.split()[0]).name if command.split() else ""
    if _current[0] and program != ALLOWED_PROGRAM:
        _started.setdefault(_current[0], []).append(command[:200])


def pytest_runtest_logstart(nodeid: str) -> None:
    _current[0] = nodeid


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """At teardown, fail a test without the `process` mark that started a process."""
    report = yield
    if call.when != "teardown":
        return report
    _current[0] = ""
    started = _started.pop(item.nodeid, [])
    if started and item.get_closest_marker("process") is None and report.passed:
        report.outcome = "failed"
        report.longrepr = (
            "started a process without the `process` mark (tests/tiers.py), so it would "
            "run in `make check`: mark it `pytest.mark.process`, or use a fixture that "
            "starts it. Started:\n  " + "\n  ".join(started)
        )
    return report
