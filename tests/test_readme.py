"""The README's walk-through, run as printed against a stack started by `make dev ARGS=…`.

Each command of the walk-through's `sh` blocks runs in one bash session, as a user
pastes them into a terminal; the `# …` lines after a command are what it must print
(`…` stands for anything, a run of spaces for any spacing). Only what differs on a test
machine is swapped: the ports, the data dir and the solver directory.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.ports import free_port
from tests.test_dev_stack import DevStack, dev_env, launch_dev, wait_up

README = ROOT / "README.md"
MAKEFILE = ROOT / "Makefile"
# As printed in the README → what the test machine uses instead (see `swaps`).
API_URL = "http://127.0.0.1:8000"
SECRET_FILE = ".jobforge/ingest-secret"
SOLVER_DIR = "/tmp/jobforge-solvers"
FILE_SERVER = ("127.0.0.1:8001", "http.server 8001")
# Reads may run before the job got there (a user types slower): retried until then.
READ = re.compile(r"^(\.venv/bin/jobforge (show|get|list)|curl -s \$HUB_URL/api/jobs/\$)")
READ_RETRY_S = 60.0
STEP_TIMEOUT_S = 60.0


@dataclass
class Step:
    """One command of the walk-through and the lines it must print."""

    command: str
    expected: list[str] = field(default_factory=list)

    def patterns(self) -> list[re.Pattern[str]]:
        """One pattern per expected line: `…` is anything, spaces are any spacing."""
        patterns = []
        for line in self.expected:
            parts = re.split(r"(…|\s+)", line)
            regex = "".join(
                ".*?" if part == "…" else r"\s+" if part.isspace() else re.escape(part)
                for part in parts
                if part
            )
            patterns.append(re.compile(regex))
        return patterns

    def printed_as_expected(self, output: str) -> bool:
        """Whether each expected line matches a whole output line, in order."""
        lines = iter(line.rstrip() for line in output.splitlines())
        return all(any(pattern.fullmatch(line) for line in lines) for pattern in self.patterns())


def walkthrough() -> list[Step]:
    """The commands of the `sh` blocks under "## Walk-through"."""
    return sh_steps(section(README.read_text(), "Walk-through"))


def section(text: str, heading: str) -> str:
    """The text of a markdown document's `## heading` section."""
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def sh_steps(text: str) -> list[Step]:
    """The commands of the `sh` blocks in `text`, with the lines each must print."""
    steps: list[Step] = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.DOTALL):
        lines = block.splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            i += 1
            if not line.strip():
                continue
            if line.startswith("#"):
                steps[-1].expected.append(line[1:].strip())
                continue
            command = [line]
            while command[-1].endswith("\\"):
                command.append(lines[i])
                i += 1
            heredoc = re.search(r"<<'(\w+)'", line)
            if heredoc:
                while command[-1] != heredoc.group(1):
                    command.append(lines[i])
                    i += 1
            steps.append(Step("\n".join(command)))
    return steps


class Shell:
    """One bash session fed a command at a time, as a terminal would be."""

    def __init__(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def run(self, command: str) -> tuple[int, str]:
        """Its exit status and everything it printed."""
        assert self.process.stdin is not None and self.process.stdout is not None
        marker = f"__done_{uuid.uuid4().hex}__"
        # The newline first: output that ends without one still ends before the marker.
        self.process.stdin.write(f"{command}\nprintf '\\n{marker} %s\\n' \"$?\"\n".encode())
        self.process.stdin.flush()
        out = self.process.stdout.fileno()
        deadline = time.monotonic() + STEP_TIMEOUT_S
        seen = b""
        while (found := re.search(rf"\n{marker} (\d+)\n".encode(), seen)) is None:
            left = deadline - time.monotonic()
            assert left > 0, f"{command!r} still runs after {STEP_TIMEOUT_S:g} s: {seen!r}"
            if select.select([out], [], [], left)[0]:
                chunk = os.read(out, 65536)
                assert chunk, f"bash exited during {command!r}: {seen!r}"
                seen += chunk
        return int(found.group(1)), seen[: found.start()].decode(errors="replace")

    def close(self) -> None:
        """Kill it and whatever it left in the background."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStack]:
    """`make dev ARGS='--data-dir … --api-port …'` without FORGE_INGEST_SECRET set."""
    tmp = tmp_path_factory.mktemp("readme-dev")
    stack = launch_dev(tmp / "data", tmp / "dev.log", secret=None, via_make=True)
    try:
        yield wait_up(stack)
    finally:
        stack.force_stop()


def swaps(stack: DevStack, solvers: Path) -> dict[str, str]:
    """README text → the test machine's, each of them present in the walk-through."""
    port = free_port()
    return {
        API_URL: stack.api_url,
        SECRET_FILE: str(stack.data_dir / "ingest-secret"),
        SOLVER_DIR: str(solvers),
        FILE_SERVER[0]: f"127.0.0.1:{port}",
        FILE_SERVER[1]: f"http.server {port}",
    }


@pytest.mark.process  # `make dev` (tests/tiers.py)
def test_make_dev_took_the_data_dir_and_ports_from_args(stack: DevStack) -> None:
    out = stack.output()

    assert f"jobforge API     {stack.api_url}\n" in out, out
    assert f"Temporal gRPC    127.0.0.1:{stack.temporal_port}\n" in out, out
    assert (stack.data_dir / "temporal.sqlite").exists()
    assert (stack.data_dir / "ingest-secret").stat().st_mode & 0o777 == 0o600


@pytest.mark.process  # `make dev` (tests/tiers.py)
def test_every_walkthrough_command_works_as_printed(stack: DevStack, tmp_path: Path) -> None:
    steps = walkthrough()
    text = "\n".join(step.command for step in steps)
    replace = swaps(stack, tmp_path / "solvers")
    for printed in replace:
        assert printed in text, f"the walk-through no longer says {printed!r}"
    assert sum(len(step.expected) for step in steps) >= 10
    shell = Shell(dev_env(None))
    try:
        for step in steps:
            command = step.command
            for printed, here in replace.items():
                command = command.replace(printed, here)
            deadline = time.monotonic() + READ_RETRY_S
            while True:
                code, output = shell.run(command)
                if code == 0 and step.printed_as_expected(output):
                    break
                assert READ.match(step.command) and time.monotonic() < deadline, (
                    f"{step.command}\nexited {code}, printed:\n{output}\n"
                    f"expected:\n" + "\n".join(step.expected)
                )
                time.sleep(0.5)  # a read, before the job got there: ask again
    finally:
        shell.close()


def test_every_make_target_the_docs_name_is_in_the_makefile() -> None:
    targets = set(re.findall(r"(?m)^([a-z][\w-]*):", MAKEFILE.read_text()))
    named = {
        target
        for doc in [README, *sorted((ROOT / "docs").glob("*.md"))]
        for target in re.findall(r"`make ([a-z][\w-]*)", doc.read_text())
    }
    assert {"check", "test", "faults", "dev"} <= named
    assert named - targets == set()
