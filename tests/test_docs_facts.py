"""Facts the docs state that code or the Makefile decides: each checked against its
source, so the two cannot drift apart."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from api.contracts.admission_001 import IntentIn
from tests.conftest import ROOT
from tests.test_readme import section, sh_steps
from workflows import search_attributes
from workflows.models import EVENTS_MEMO_KEEP

README = (ROOT / "README.md").read_text()
NUMBERS = {"five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11}


def test_the_quickstart_is_two_commands() -> None:
    steps = sh_steps(section(README, "Quickstart"))

    assert [step.command.split("#")[0].strip() for step in steps] == ["make dev", "make test"]


def test_the_readme_names_every_debian_package_make_test_installs_as_root() -> None:
    makefile = (ROOT / "Makefile").read_text()
    tools = re.search(r"^DEBIAN_TOOLS := (.+)$", makefile, re.MULTILINE)
    assert tools, "DEBIAN_TOOLS is gone from the Makefile"
    packages = [pair.split(":")[0] for pair in tools.group(1).split()]
    quickstart = section(README, "Quickstart")

    assert "as root" in quickstart
    for package in packages:
        assert f"`{package}`" in quickstart, package


def test_the_readme_names_the_contract_adapters_and_runforge_cli() -> None:
    assert "](docs/contracts.md)" in README
    assert "`runforge-cli`" in README
    for adapter in ("admission_001.py", "containers_003.py", "targets_004.py"):
        assert f"api/contracts/{adapter}" in README, adapter
        assert (ROOT / "api" / "contracts" / adapter).exists()


def test_operations_counts_the_search_attributes_setup_registers() -> None:
    text = (ROOT / "docs" / "operations.md").read_text()
    said = re.search(r"it passes when all (\w+) are present", text)
    assert said, "operations.md no longer says how many search attributes setup needs"

    assert NUMBERS[said.group(1)] == len(search_attributes.ALL)
    for key in search_attributes.ALL:
        assert f"`{key.name}`" in text, key.name


def test_001s_cost_units_is_required_in_the_adapter_and_marked_so_in_contracts_md() -> None:
    text = (ROOT / "docs" / "contracts.md").read_text()
    row = re.search(r"^\| `cost_units` \| (.+)$", text, re.MULTILINE)
    assert row and "**required**" in row.group(1)
    with pytest.raises(ValidationError) as refused:
        IntentIn.model_validate({"addon_id": "visuals", "job_type": "indexing"})

    assert [error["loc"] for error in refused.value.errors()] == [("cost_units",)]


def test_the_audit_docs_state_the_limits_the_code_uses() -> None:
    api_doc = (ROOT / "docs" / "api.md").read_text()
    operations = (ROOT / "docs" / "operations.md").read_text()
    console = (ROOT / "api" / "static" / "console.js").read_text()
    limit = re.search(r"^const AUDIT_LIMIT = (\d+);$", console, re.MULTILINE)
    assert limit, "AUDIT_LIMIT is gone from console.js"

    assert f"each job's last {EVENTS_MEMO_KEEP} transitions" in api_doc
    assert f"memos of the {limit.group(1)} most recently closed jobs" in operations
