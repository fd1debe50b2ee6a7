"""Replay of committed workflow histories: today's workflow code must still accept them.

The histories under tests/histories/ come from real runs against the dev server. After
a deliberate, versioned change to a workflow, record them afresh (and commit them):

    JOBFORGE_RECORD_HISTORIES=1 .venv/bin/pytest tests/test_replay.py

Without that variable only the committed JSON files are replayed (no server needed).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from tests.changed_workflows import ChangedJobWorkflow, ChangedRegistry
from tests.conftest import Api, Solver, wait_until_async
from worker.devserver import DevServer
from worker.native import workflow_runner
from workflows.job_workflow import JobWorkflow
from workflows.names import ADD_TYPE_SIGNAL, TYPES_MEMO
from workflows.type_registry import JobTypeRegistry

HISTORIES = Path(__file__).resolve().parent / "histories"
RECORD = os.environ.get("JOBFORGE_RECORD_HISTORIES") == "1"

# history kind → (workflow type, how its execution ended)
KINDS = {
    "job-completed": ("JobWorkflow", "COMPLETED"),
    "job-failed-once-then-completed": ("JobWorkflow", "COMPLETED"),
    "job-quarantined": ("JobWorkflow", "FAILED"),
    "job-cancelled": ("JobWorkflow", "CANCELED"),
    "registry-two-types": ("JobTypeRegistry", "RUNNING"),
}
# One set of histories per shipped workflow version, never re-recorded: "" was recorded
# before the layering refactor (failure details as a positional tail and times), "-v2"
# after it (failure details as an AttemptFailureDetails model, the shared memo-mirror
# loop). A recording run writes the newest set only.
SETS = ("", "-v2")
NEWEST = SETS[-1]
EXPECTED = {f"{kind}{suffix}": outcome for kind, outcome in KINDS.items() for suffix in SETS}


def history_file(name: str) -> Path:
    """Where one recorded history lives."""
    return HISTORIES / f"{name}.json"


def load(name: str) -> WorkflowHistory:
    """A committed history; the file name serves as the workflow id."""
    return WorkflowHistory.from_json(name, history_file(name).read_text())


def events(name: str) -> list[dict[str, Any]]:
    """The raw events of a committed history."""
    parsed: list[dict[str, Any]] = json.loads(history_file(name).read_text())["events"]
    return parsed


def event_types(name: str) -> list[str]:
    """Event types, without the EVENT_TYPE_ prefix."""
    return [e["eventType"].removeprefix("EVENT_TYPE_") for e in events(name)]


def replayer(*workflows: type) -> Replayer:
    """A replayer configured like the worker (pydantic converter, the same sandbox)."""
    return Replayer(
        workflows=list(workflows) or [JobWorkflow, JobTypeRegistry],
        data_converter=pydantic_data_converter,
        workflow_runner=workflow_runner(),
    )


# -- recording (only with JOBFORGE_RECORD_HISTORIES=1) --------------------------------


async def save_when_closed(client: Client, workflow_id: str, name: str) -> None:
    """Wait for the execution to close, then write its history."""
    handle = client.get_workflow_handle(workflow_id)

    async def closed() -> bool:
        status = (await handle.describe()).status
        return status is not None and status != WorkflowExecutionStatus.RUNNING

    await wait_until_async(closed, timeout=60, what=f"{workflow_id} to close")
    history = await handle.fetch_history()
    HISTORIES.mkdir(exist_ok=True)
    history_file(name).write_text(history.to_json() + "\n")


@pytest.mark.skipif(not RECORD, reason="set JOBFORGE_RECORD_HISTORIES=1 to record histories")
@pytest.mark.usefixtures("session_worker")
async def test_recording_fresh_histories_from_real_runs(
    api: Api,
    start_api: Callable[..., Api],
    make_solver: Callable[[str], Solver],
    temporal: DevServer,
    tmp_path: Path,
) -> None:
    client = await Client.connect(temporal.address, data_converter=pydantic_data_converter)
    kind = f"replay-{uuid.uuid4().hex[:8]}"

    ok = make_solver('print(json.dumps({"doubled": params["x"] * 2}))\n')
    job_id = api.submit(**ok.spec(kind, params={"x": 21}))
    api.wait_status(job_id, "completed")
    await save_when_closed(client, job_id, "job-completed" + NEWEST)

    counter = tmp_path / "runs"
    flaky = make_solver(
        """
        path = params["counter"]
        runs = int(open(path).read()) + 1 if os.path.exists(path) else 1
        open(path, "w").write(str(runs))
        if runs < 2:
            sys.exit(7)
        print("ok")
        """
    )
    job_id = api.submit(**flaky.spec(kind, params={"counter": str(counter)}, max_attempts=3))
    assert api.wait_status(job_id, "completed")["attempts"] == 2
    await save_when_closed(client, job_id, "job-failed-once-then-completed" + NEWEST)

    broken = make_solver('sys.stderr.write("boom\\n"); sys.exit(1)\n')
    job_id = api.submit(**broken.spec(kind, max_attempts=2))
    api.wait_status(job_id, "quarantined")
    await save_when_closed(client, job_id, "job-quarantined" + NEWEST)

    quiet = start_api(TEMPORAL_ACTIVITY_QUEUE_PREFIX=f"unserved-{uuid.uuid4().hex[:8]}-")
    job_id = quiet.submit(type=kind)
    quiet.wait_status(job_id, "pending")
    assert quiet.http.delete(f"/api/jobs/{job_id}").status_code == 204
    await save_when_closed(client, job_id, "job-cancelled" + NEWEST)

    registry_id = f"replay-registry-{uuid.uuid4().hex[:8]}"
    handle = await client.start_workflow(
        "JobTypeRegistry",
        [],
        id=registry_id,
        task_queue="jobforge",
        start_signal=ADD_TYPE_SIGNAL,
        start_signal_args=["alpha"],
    )
    await handle.signal(ADD_TYPE_SIGNAL, "beta")

    async def memo_has_both() -> bool:
        memo = await (await handle.describe()).memo()
        return memo.get(TYPES_MEMO) == ["alpha", "beta"]

    await wait_until_async(memo_has_both, timeout=60, what="the registry memo to hold both types")
    history = await handle.fetch_history()
    history_file("registry-two-types" + NEWEST).write_text(history.to_json() + "\n")
    await handle.terminate("recorded")


# -- replay ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_expected_history_is_committed(name: str) -> None:
    assert history_file(name).is_file(), f"missing {history_file(name)}; record histories"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_history_is_of_the_workflow_and_outcome_it_is_named_for(name: str) -> None:
    workflow_type, outcome = EXPECTED[name]
    first = events(name)[0]
    types = event_types(name)

    started = first["workflowExecutionStartedEventAttributes"]
    assert started["workflowType"]["name"] == workflow_type
    if outcome == "RUNNING":
        assert not any(
            t.startswith("WORKFLOW_EXECUTION_") for t in types[1:] if "SIGNALED" not in t
        )
    else:
        assert types[-1] == f"WORKFLOW_EXECUTION_{outcome}"


@pytest.mark.parametrize("suffix", SETS)
def test_the_failed_once_history_has_exactly_one_failed_attempt_before_success(
    suffix: str,
) -> None:
    types = event_types(f"job-failed-once-then-completed{suffix}")

    assert types.count("ACTIVITY_TASK_SCHEDULED") == 2
    assert types.count("ACTIVITY_TASK_FAILED") == 1
    assert types.count("ACTIVITY_TASK_COMPLETED") == 1
    assert types.index("ACTIVITY_TASK_FAILED") < types.index("ACTIVITY_TASK_COMPLETED")


@pytest.mark.parametrize("suffix", SETS)
def test_the_cancelled_history_was_cancelled_through_the_update(suffix: str) -> None:
    types = event_types(f"job-cancelled{suffix}")

    assert "WORKFLOW_EXECUTION_UPDATE_COMPLETED" in types
    assert "WORKFLOW_EXECUTION_CANCEL_REQUESTED" in types


@pytest.mark.parametrize("suffix", SETS)
def test_the_registry_history_got_two_types(suffix: str) -> None:
    signals = [
        e
        for e in events(f"registry-two-types{suffix}")
        if e["eventType"] == "EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED"
    ]

    assert len(signals) == 2
    assert all(
        s["workflowExecutionSignaledEventAttributes"]["signalName"] == "add_type" for s in signals
    )


@pytest.mark.parametrize("name", sorted(EXPECTED))
async def test_todays_workflows_replay_each_committed_history(name: str) -> None:
    result = await replayer().replay_workflow(load(name))

    assert result.replay_failure is None


def test_the_newest_failure_details_are_the_model_the_oldest_the_positional_form() -> None:
    def details(name: str) -> list[dict[str, Any]]:
        failed = [e for e in events(name) if e["eventType"] == "EVENT_TYPE_ACTIVITY_TASK_FAILED"]
        attributes = failed[0]["activityTaskFailedEventAttributes"]
        payloads: list[dict[str, Any]] = attributes["failure"]["applicationFailureInfo"]["details"][
            "payloads"
        ]
        return payloads

    assert len(details("job-quarantined")) == 2  # (tail, times)
    assert len(details(f"job-quarantined{NEWEST}")) == 1  # one AttemptFailureDetails


@pytest.mark.parametrize("name", ["job-completed", "job-quarantined"])
async def test_a_workflow_that_schedules_a_different_activity_fails_to_replay(name: str) -> None:
    with pytest.raises(NondeterminismError, match="run_job"):
        await replayer(ChangedJobWorkflow, JobTypeRegistry).replay_workflow(load(name))


async def test_a_registry_that_stops_updating_its_memo_fails_to_replay() -> None:
    with pytest.raises(NondeterminismError):
        await replayer(JobWorkflow, ChangedRegistry).replay_workflow(load("registry-two-types"))
