"""tests/tiers.py: the `process` mark comes from the fixtures a test uses, and a test
without it that starts a process fails. Run on a small suite of its own, by pytest."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.procs import ROOT

# It runs pytest.
pytestmark = pytest.mark.process

SUITE = """
import subprocess

import pytest


@pytest.fixture
def spawn():
    return None


def test_plain():
    pass


def test_with_a_process_fixture(spawn):
    pass


def test_starts_true_unmarked():
    subprocess.run(["true"], check=True)


@pytest.mark.process
def test_starts_true_marked():
    subprocess.run(["true"], check=True)
"""


def run_suite(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["tests.tiers"]\n')
    (tmp_path / "test_suite.py").write_text(textwrap.dedent(SUITE))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_check_tier_leaves_out_the_tests_of_process_fixtures_and_marks(
    tmp_path: Path,
) -> None:
    run = run_suite(tmp_path, "-m", "not process", "--collect-only")
    assert "test_plain" in run.stdout
    assert "test_starts_true_unmarked" in run.stdout
    assert "test_with_a_process_fixture" not in run.stdout
    assert "test_starts_true_marked" not in run.stdout


def test_a_test_that_starts_a_process_without_the_mark_fails_naming_it(tmp_path: Path) -> None:
    run = run_suite(tmp_path)
    assert "ERROR test_suite.py::test_starts_true_unmarked" in run.stdout, run.stdout
    assert "Started:\n  true" in run.stdout, run.stdout
    assert "PASSED test_suite.py::test_starts_true_marked" in run.stdout
    assert "PASSED test_suite.py::test_plain" in run.stdout
    assert run.stdout.count("ERROR test_suite.py") == 1
