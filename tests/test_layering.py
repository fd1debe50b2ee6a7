"""The layers import one way: workflows <- engine <- {activities, api} <- worker.

The native worker never loads the web stack, the API never loads activity or worker
code, and the workflow modules load nothing that does I/O.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import workflows

ROOT = Path(__file__).resolve().parent.parent

# package → the packages it may import (besides itself, the stdlib and third parties)
ALLOWED = {
    "workflows": set(),
    "engine": {"workflows"},
    "activities": {"workflows", "engine"},
    "api": {"workflows", "engine"},
    # The CLI starts the API by name (uvicorn's "api.main:create_app"), never by import.
    "worker": {"workflows", "engine", "activities"},
}
PACKAGES = set(ALLOWED)


def imports_of(path: Path) -> set[str]:
    """The top-level jobforge packages a module imports, anywhere in it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        else:
            continue
        found |= {name.split(".")[0] for name in names} & PACKAGES
    return found


def modules_imported(path: Path) -> set[str]:
    """Every module a module imports by absolute name, anywhere in it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def loaded_modules(module: str) -> set[str]:
    """Every module a fresh interpreter has loaded after importing `module`."""
    code = f"import sys, {module}; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return set(out.stdout.split())


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_the_layers_below_it(package: str) -> None:
    wrong = {
        f"{path.relative_to(ROOT)} imports {sorted(bad)}"
        for path in (ROOT / package).rglob("*.py")
        if (bad := imports_of(path) - ALLOWED[package] - {package})
    }
    assert not wrong


# Within the API, floors from the top: main.py, the designs' routes (api/contracts/), the
# API's own routes (api/routes/), then deps and services. Each imports only floors below it.
API_FLOORS = {
    "api/contracts": ("api.main",),
    "api/routes": ("api.main", "api.contracts"),
    "api": ("api.main", "api.contracts", "api.routes"),
}


@pytest.mark.parametrize("floor", sorted(API_FLOORS))
def test_an_api_module_imports_no_floor_above_its_own(floor: str) -> None:
    above = API_FLOORS[floor]
    wrong = {
        f"{path.relative_to(ROOT)} imports {name}"
        for path in (ROOT / floor).glob("*.py")
        if path.name != "main.py"
        for name in modules_imported(path)
        if name.startswith(above)
    }
    assert not wrong


def test_the_api_uses_only_names_of_the_job_workflow_not_its_module() -> None:
    offenders = [
        str(path.relative_to(ROOT))
        for package in ("api", "engine", "activities")
        for path in (ROOT / package).rglob("*.py")
        if "workflows.job_workflow" in path.read_text()
    ]
    assert not offenders


@pytest.mark.process  # a fresh interpreter (tests/tiers.py)
def test_importing_the_native_worker_does_not_load_fastapi() -> None:
    loaded = loaded_modules("worker.native")
    assert "temporalio.worker" in loaded
    assert not {m for m in loaded if m.split(".")[0] in ("fastapi", "starlette", "api")}


@pytest.mark.process  # a fresh interpreter (tests/tiers.py)
def test_importing_the_agent_does_not_load_fastapi_or_the_api() -> None:
    loaded = loaded_modules("worker.agent")
    assert not {m for m in loaded if m.split(".")[0] in ("fastapi", "starlette", "api")}


@pytest.mark.process  # a fresh interpreter (tests/tiers.py)
def test_workflow_definitions_load_no_io_module_of_jobforge() -> None:
    loaded = loaded_modules(
        "workflows.job_workflow, workflows.type_registry, workflows.worker_record, "
        "workflows.token_registry"
    )
    assert not {m for m in loaded if m.split(".")[0] in ("engine", "activities", "api", "worker")}
    assert "pydantic_settings" not in loaded


def test_workflows_is_this_repositorys_package_not_the_pypi_one() -> None:
    assert Path(workflows.__file__).resolve().is_relative_to(ROOT)


def test_a_module_stem_repeats_only_where_each_names_the_other_in_its_first_lines() -> None:
    stems: dict[str, list[Path]] = {}
    for package in ALLOWED:
        for path in (ROOT / package).rglob("*.py"):
            if path.stem != "__init__":
                stems.setdefault(path.stem, []).append(path)
    unexplained = []
    for paths in stems.values():
        for path in paths:
            head = "\n".join(path.read_text().splitlines()[:6])
            others = [str(p.relative_to(ROOT)) for p in paths if p != path]
            unexplained += [f"{path.relative_to(ROOT)} vs {o}" for o in others if o not in head]
    assert not unexplained


def test_the_tests_import_nothing_from_bench() -> None:
    # The benches reuse the tests' process helpers (tests/procs.py); never the reverse.
    offenders = {
        f"{path.relative_to(ROOT)} imports {name}"
        for path in (ROOT / "tests").rglob("*.py")
        for name in modules_imported(path)
        if name.split(".")[0] == "bench"
    }
    assert not offenders
