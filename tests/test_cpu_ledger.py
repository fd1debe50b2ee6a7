"""The ledger's summary (tests/cpu_ledger.py): what each test process spent in tests, and
which tests waited rather than worked."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cpu_ledger import summary


def write(path: Path, *lines: dict[str, object]) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_the_summary_sums_each_test_process_and_names_the_tests_that_waited_most(
    tmp_path: Path,
) -> None:
    write(
        tmp_path / "gw0.jsonl",
        {"test": "tests/a.py::busy", "wall": 4.0, "cpu": {"temporal": 3.0, "test process": 1.0}},
        {"test": "tests/a.py::waits", "wall": 9.0, "cpu": {"temporal": 0.5}},
    )
    write(
        tmp_path / "gw1.jsonl",
        # A test during which a process was stopped can count its CPU below zero.
        {"test": "tests/b.py::stops", "wall": 2.0, "cpu": {"reaped": -1.0}},
    )

    text = summary(tmp_path, most=2)

    assert "tests' wall time 15 s in all; by test process: gw0 13, gw1 2" in text
    waited = text.split("the 2 tests that waited most (wall s less CPU s):\n")[1].splitlines()
    assert waited == ["       8.5  tests/a.py::waits", "       2.0  tests/b.py::stops"]
