"""The one table of job statuses (workflows/job_states.py): its sets are defined nowhere
else, its edges reach every status, its machine refuses what the table does not hold,
and docs/architecture.md shows the table as it is. Pure: no Temporal."""

from __future__ import annotations

import ast
import re
from collections import deque
from pathlib import Path
from typing import get_args

import pytest

import workflows
from workflows import job_states
from workflows.contract_states import (
    DESIGNS,
    Phase,
    names,
    phases_named,
    status_name,
    statuses_counted,
    statuses_named,
)
from workflows.job_machine import IllegalTransitionError, JobMachine
from workflows.job_states import (
    CANCELLED,
    COUNT_KINDS,
    EDGES,
    STATUS_ORDER,
    CountKind,
    JobStatus,
    count_kind,
    ended_kind,
    is_ended,
    is_legal,
    kinds_of,
)
from workflows.models import JobInput, JobSpec, pending_job
from workflows.search_attributes import kinds_clause

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("api", "worker", "engine", "workflows", "activities", "bench", "tests")
# The module that defines the sets, and this test (which names statuses to test them).
OWNERS = {ROOT / "workflows" / "job_states.py", Path(__file__).resolve()}
VALUES = {status.value for status in JobStatus}
COLLECTION_CALLS = {"frozenset", "set", "tuple", "list"}


def test_workflows_is_this_repos_package() -> None:
    assert Path(workflows.__file__).resolve().is_relative_to(ROOT)


# -- the sets are defined once ---------------------------------------------------------


def _names_a_status(node: ast.expr) -> bool:
    """`JobStatus.X`, `JobStatus.X.value`, or a string that is a status's value."""
    if isinstance(node, ast.Attribute) and node.attr == "value":
        node = node.value
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return node.value.id == "JobStatus" and node.attr in JobStatus.__members__
    return isinstance(node, ast.Constant) and node.value in VALUES


def _is_status_set(value: ast.expr) -> bool:
    """A tuple, list or set literal (or frozenset/set/tuple/list of one) holding two or
    more statuses."""
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id in COLLECTION_CALLS
        and len(value.args) == 1
    ):
        value = value.args[0]
    if not isinstance(value, ast.Tuple | ast.List | ast.Set):
        return False
    return sum(_names_a_status(element) for element in value.elts) >= 2


def status_sets(path: Path) -> list[str]:
    """Module- and class-level assignments of a status set in one file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    bodies = [tree.body] + [node.body for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    found = []
    for body in bodies:
        for node in body:
            assigned = isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None
            if assigned and _is_status_set(node.value):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)[:100]}")
    return found


def test_the_detector_finds_a_status_set_in_each_form_it_takes() -> None:
    forms = [
        "HELD = (JobStatus.ASSIGNED, JobStatus.RUNNING)",
        "OPEN = frozenset({JobStatus.PENDING.value, JobStatus.RUNNING.value})",
        "ENDED: list[str] = ['completed', 'quarantined']",
        "class A:\n    LIVE = {'pending', JobStatus.RUNNING}",
    ]
    for source in forms:
        tree = ast.parse(source)
        node = tree.body[0]
        if isinstance(node, ast.ClassDef):
            node = node.body[0]
        assert isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None
        assert _is_status_set(node.value), source
    for source in ("ONE = (JobStatus.PENDING,)", "NAMES = ('queued', 'canceled')"):
        node = ast.parse(source).body[0]
        assert isinstance(node, ast.Assign) and not _is_status_set(node.value), source


def test_no_module_defines_a_status_set_of_its_own() -> None:
    offenders = [
        found
        for package in SCANNED
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.resolve() not in OWNERS
        for found in status_sets(path)
    ]
    assert offenders == [], "import these from workflows.job_states:\n" + "\n".join(offenders)


# -- the edges ---------------------------------------------------------------------------


def test_the_table_holds_the_spec_path_and_refuses_what_it_does_not_name() -> None:
    assert is_legal("pending", "assigned")
    assert is_legal("assigned", "running")
    assert is_legal("running", "completed")
    assert is_legal("running", "stop_requested")
    assert is_legal("stop_requested", "stopped")
    assert not is_legal("completed", "running")
    assert not is_legal("stopped", "running")
    assert not is_legal("pending", "stopped")


def test_an_edge_with_reasons_takes_only_those() -> None:
    assert is_legal("pending", "failed", "cancelled")
    assert is_legal("pending", "failed", "deadline_exceeded")
    assert not is_legal("pending", "failed", "solver_exit")
    assert not is_legal("pending", "failed")
    assert is_legal("completed", "pending", "requeued")
    assert not is_legal("completed", "pending")
    assert is_legal("running", "failed", "solver_exit")  # any reason


def test_every_status_is_reachable_from_pending() -> None:
    reached = {JobStatus.PENDING}
    todo = deque(reached)
    while todo:
        source = todo.popleft()
        for edge in EDGES:
            if edge.source == source and edge.target not in reached:
                reached.add(edge.target)
                todo.append(edge.target)
    assert reached == set(JobStatus)


def test_only_final_reasons_end_a_failed_job() -> None:
    assert is_ended("completed") and is_ended("quarantined") and is_ended("stopped")
    assert is_ended("failed", "cancelled")
    assert is_ended("failed", "host_unavailable")
    assert not is_ended("failed", "solver_exit")
    assert not is_ended("running")
    assert not is_ended("stop_requested")


def test_a_stopped_job_is_counted_as_stopped_and_a_cancelled_one_as_cancelled() -> None:
    assert ended_kind("stopped", "stopped") == "stopped"
    assert ended_kind("failed", "cancelled") == CANCELLED
    assert ended_kind("failed", "deadline_exceeded") == "failed"
    assert ended_kind("running") is None
    assert count_kind("failed", "solver_exit") == "failed"  # an attempt's, for now
    assert count_kind("running") == "running"


def test_the_count_vocabulary_is_every_status_and_cancelled_once() -> None:
    assert sorted(COUNT_KINDS) == sorted([*VALUES, CANCELLED])
    assert [k for k in COUNT_KINDS if k != CANCELLED] == [s.value for s in STATUS_ORDER]
    assert kinds_of([JobStatus.STOPPED, JobStatus.FAILED]) == ("failed", "cancelled", "stopped")
    assert get_args(CountKind) == COUNT_KINDS  # the type the API checks a filter with


def test_a_filter_on_failed_leaves_cancelled_jobs_to_their_own_kind() -> None:
    failed, cancelled = kinds_clause(["failed"]), kinds_clause(["cancelled"])
    assert "ExecutionStatus != 'Canceled'" in failed
    assert "ExecutionStatus = 'Canceled'" in cancelled
    assert kinds_clause(["failed", "cancelled"]) == "JobforgeStatus = 'failed'"
    assert kinds_clause(["running", "stop_requested"]) == (
        "JobforgeStatus IN ('running', 'stop_requested')"
    )


# -- the machine -------------------------------------------------------------------------


def a_pending_job() -> JobMachine:
    inp = JobInput(
        id="j",
        spec=JobSpec(type="t"),
        created_at=1,
        priority_key=3,
        activity_task_queue="q",
        heartbeat_timeout_ms=60_000,
    )
    return JobMachine(pending_job(inp))


def test_the_machine_moves_along_an_edge_and_records_it() -> None:
    machine = a_pending_job()
    machine.claim("w1", ts=5, host="h", now_ms=6)
    machine.started(at=7, now_ms=8)

    assert machine.status == JobStatus.RUNNING
    assert [t.status for t in machine.job.transitions] == ["pending", "assigned", "running"]
    assert [t.seq for t in machine.job.transitions] == [1, 2, 3]
    assert machine.changed


def test_the_machine_refuses_a_change_the_table_does_not_hold() -> None:
    machine = a_pending_job()
    with pytest.raises(IllegalTransitionError, match="pending -> completed"):
        machine.move(JobStatus.COMPLETED, now_ms=2)
    with pytest.raises(IllegalTransitionError, match="solver_exit"):
        machine.end(JobStatus.FAILED, now_ms=2, reason="solver_exit")
    assert machine.status == JobStatus.PENDING
    assert len(machine.job.transitions) == 1


# -- the designs' names, both ways ------------------------------------------------------


@pytest.mark.parametrize("design", DESIGNS)
def test_each_designs_state_names_lead_back_to_the_statuses_named_so(design: str) -> None:
    for status in JobStatus:
        for admitted in (False, True):
            name = status_name(status, design, admitted=admitted)
            assert status in statuses_named(design, name)
    counted = [statuses_counted(design, name) for name in names(design)]
    every = [status for statuses in counted for status in statuses]
    assert sorted(every) == sorted(JobStatus)  # each status counted under one name


def test_001s_dispatching_is_an_admitted_pending_job_or_an_assigned_one() -> None:
    assert statuses_named("001", "DISPATCHING") == {JobStatus.PENDING, JobStatus.ASSIGNED}
    assert statuses_counted("001", "DISPATCHING") == {JobStatus.ASSIGNED}
    assert phases_named("001", "DISPATCHING") == (Phase.ADMITTED, Phase.ASSIGNED)


# -- the diagram in the docs -------------------------------------------------------------


def test_the_architecture_doc_shows_the_table_as_it_is() -> None:
    expected = f"```mermaid\n{job_states.mermaid()}\n```"
    doc = (ROOT / "docs" / "architecture.md").read_text()
    blocks = re.findall(r"```mermaid\n.*?\n```", doc, flags=re.S)
    assert expected in blocks, (
        "docs/architecture.md, under '### State machine', should hold this block "
        f"(paste it over the old one):\n\n{expected}\n"
    )
