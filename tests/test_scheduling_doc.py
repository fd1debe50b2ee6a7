"""docs/scheduling.md's worked examples: every `curl` runs as printed, with the API's
address and a token in the variables the page names ($HUB_URL, $FORGE_INGEST_SECRET),
against an API of this test's own. Each answer's status must be a success, or one the
page's comment names (the admission-only submit's 429)."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Iterator

import pytest

from tests.conftest import ROOT, SECRET, Api

DOC = ROOT / "docs" / "scheduling.md"
# Each curl of a block also prints its status on a line of its own (the block itself is
# run unchanged; only `curl` is wrapped).
STATUS_LINE = "__status__"
WRAPPER = f"curl() {{ command curl -w '\\n{STATUS_LINE} %{{http_code}}\\n' \"$@\"; }}\n"

pytestmark = pytest.mark.usefixtures("session_worker")


def curl_blocks() -> list[str]:
    """The page's `sh` blocks that call curl."""
    blocks = re.findall(r"```sh\n(.*?)```", DOC.read_text(), re.DOTALL)
    return [block for block in blocks if re.search(r"^curl ", block, re.MULTILINE)]


@pytest.fixture(scope="module")
def own_api(start_api: Callable[..., Api]) -> Iterator[Api]:
    api = start_api()
    yield api
    api.proc.stop(timeout=15)


def run_block(api: Api, block: str) -> tuple[list[int], str]:
    """Run one block in bash as a user would; the status of each curl, and the output."""
    env = {**os.environ, "HUB_URL": api.url, "FORGE_INGEST_SECRET": SECRET}
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", WRAPPER + block],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, (block, done.stdout, done.stderr)
    statuses = [int(code) for code in re.findall(rf"^{STATUS_LINE} (\d+)$", done.stdout, re.M)]
    return statuses, done.stdout


def test_every_curl_of_the_worked_examples_runs_as_printed(own_api: Api) -> None:
    blocks = curl_blocks()
    assert len(blocks) >= 2, "the worked examples have no curl blocks any more"
    created: list[str] = []
    try:
        for block in blocks:
            statuses, out = run_block(own_api, block)
            assert len(statuses) == len(re.findall(r"^curl ", block, re.M)), (block, out)
            allowed = {int(code) for code in re.findall(r"\b(4\d\d)\b", block)}
            for status in statuses:
                assert 200 <= status < 400 or status in allowed, (status, block, out)
            created += re.findall(r'"id":"([0-9a-f]{32})"', out)
            # Every call carries the token and, with a body, says it is JSON.
            for command in re.split(r"^(?=curl )", block, flags=re.M)[1:]:
                assert '-H "Authorization: Bearer $FORGE_INGEST_SECRET"' in command, command
                if " -d " in command:
                    assert "-H 'Content-Type: application/json'" in command, command
        assert created, "no job was submitted"
    finally:
        for job_id in created:
            own_api.http.delete(f"/api/jobs/{job_id}")
