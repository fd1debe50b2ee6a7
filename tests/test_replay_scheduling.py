"""Replay of committed histories of the scheduled path (JobWorkflow with gates, start
times and deadlines) and of GateWorkflow: today's code must still accept them.

They come from real runs of the real workflows in process, with the stand-in attempt
activity (tests/workflow_harness.py). Record them afresh only for a new, versioned set
(add a suffix, never overwrite a committed file):

    JOBFORGE_RECORD_HISTORIES=1 .venv/bin/pytest tests/test_replay_scheduling.py

Without that variable only the committed files are replayed (no server needed). Only
the newest set is recorded; earlier sets came from the recorder as it was when they were
committed (see git history).

- `-v1`: every lease asked for by the job and granted by signal (SCHEDULING_PATCH).
- `-v2`: leases granted at submit (GRANTED_AT_SUBMIT_PATCH): the job starts holding
  them, and gives them back or has them recalled as before.
- `-v3`: a job cancelled or stopped through its update waits a bounded time for the
  API's workflow cancel request (CANCEL_WAIT_PATCH): one that came, and one that
  never did.
- `-v4`: host pinning (HOST_PINNING_PATCH): a preferred host's job that fell back to
  the shared queue, and a required host's job whose host never came.
- `-v5`: a stop waits for the work to be gone (STOP_WAITS_FOR_WORK_PATCH): a job stopped
  once its attempt's work ended, one whose worker died during the stop (heartbeat
  timeout), and a re-queued ended job (`JobInput.resumed`) that then completed.
- `-v6`: the same three, with the behaviour chosen by the job's input
  (`JobInput.stop_waits_for_work`) instead of the patch: no marker, no upsert of
  TemporalChangeVersion on the job path.
- `-v7`: the dispatch timeout (`JobInput.dispatch_timeout_ms`): a pool job whose attempt
  nobody took gave its lease back, asked again and completed; and a pool job with
  `requeue_stale_claims` whose first claim went stale (back to pending, uncounted). Both
  were granted at submit (GRANTED_AT_SUBMIT_PATCH's marker).
- `-v8`: a pool gate granting two groups by fair shares (FAIR_SHARES_PATCH, one marker
  per gate run), up to its continue-as-new.
- `-v9`: `JobSpec.stop_claimed` and `claim_expired`: a target job stopped while assigned
  (assigned → stop_requested → stopped, its work gone); a pool job with
  `requeue_stale_claims` whose first claim the bridge ended `claim_expired` (back to
  pending, uncounted), then completed. Both granted at submit.
- `-v10`: a pool whose capacity was cut below what it had leased (POOL_RECALL_PATCH, in
  the gate's history beside FAIR_SHARES_PATCH) recalled the leases no worker had
  claimed, then granted them again by fair shares, up to its continue-as-new; and one
  of those jobs, granted at submit, recalled, granted again and completed.
- `-v11`: a group gate that recorded its operators' changes (GATE_AUDIT_PATCH): a pause
  and a resume by a caller, and a change of its max_parallel, kept in its memo and
  carried across its continue-as-new.
- `-v12`: plain jobs as the one-loop JobWorkflow runs them (no marker).
- `-v13`: an operator's re-queue of a pending job whose attempt nobody had claimed yet,
  from before OPS_REQUEUE_PENDING_KEPT_PATCH: the attempt was cancelled and a second one
  completed the job (no marker).
- `-v14`: the same re-queue with OPS_REQUEUE_PENDING_KEPT_PATCH: the job stayed pending,
  its attempt went on and completed it.
- `-v15`: an admission-only pool (REQUEUE_ADMIT_PATCH, beside FAIR_SHARES_PATCH) that
  admitted an operator's retry of a job it had released as a new submit, up to its
  continue-as-new.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from engine.gates import Gates
from tests.conftest import wait_until_async
from tests.workflow_harness import Harness, running_harness
from worker.devserver import DevServer
from worker.native import workflow_runner
from workflows.gate_models import GateKind, GatePatch, GateSettings, TargetResume
from workflows.gate_workflow import (
    FAIR_SHARES_PATCH,
    GATE_AUDIT_PATCH,
    POOL_RECALL_PATCH,
    REQUEUE_ADMIT_PATCH,
    GateWorkflow,
)
from workflows.job_patches import (
    CANCEL_WAIT_PATCH,
    GRANTED_AT_SUBMIT_PATCH,
    HOST_PINNING_PATCH,
    OPS_REQUEUE_PENDING_KEPT_PATCH,
    SCHEDULING_PATCH,
    STOP_WAITS_FOR_WORK_PATCH,
)
from workflows.job_states import JobStatus
from workflows.job_workflow import JobWorkflow
from workflows.models import Job, JobSpec
from workflows.names import GRANT_SIGNAL, OPS_REQUEUE_UPDATE, RECALL_SIGNAL

HISTORIES = Path(__file__).resolve().parent / "histories"
RECORD = os.environ.get("JOBFORGE_RECORD_HISTORIES") == "1"
SUFFIX = "-v11"  # the set the recorder writes

# set → history kind → (workflow type, how its run ended)
SETS = {
    "-v1": {
        "scheduled-group-pool-completed": ("JobWorkflow", "COMPLETED"),
        "scheduled-target-requeued-completed": ("JobWorkflow", "COMPLETED"),
        "scheduled-deadline-failed": ("JobWorkflow", "FAILED"),
        "scheduled-start-time-cancelled": ("JobWorkflow", "CANCELED"),
        "gate-group-continued-as-new": ("GateWorkflow", "CONTINUED_AS_NEW"),
    },
    "-v2": {
        "scheduled-granted-group-pool-completed": ("JobWorkflow", "COMPLETED"),
        "scheduled-granted-recalled-cancelled": ("JobWorkflow", "CANCELED"),
        "scheduled-granted-target-requeued-completed": ("JobWorkflow", "COMPLETED"),
        "gate-pool-admitted-continued-as-new": ("GateWorkflow", "CONTINUED_AS_NEW"),
    },
    "-v3": {
        "job-cancelled-cancel-request-came": ("JobWorkflow", "CANCELED"),
        "job-stopped-cancel-request-never-came": ("JobWorkflow", "FAILED"),
    },
    "-v4": {
        "job-preferred-host-fell-back-completed": ("JobWorkflow", "COMPLETED"),
        "job-required-host-unavailable": ("JobWorkflow", "FAILED"),
    },
    "-v5": {
        "job-stopped-after-its-work-was-gone": ("JobWorkflow", "CANCELED"),
        "job-stopped-worker-died-during-stop": ("JobWorkflow", "CANCELED"),
        "job-requeued-after-quarantine-completed": ("JobWorkflow", "COMPLETED"),
    },
    "-v6": {
        "job-stopped-after-its-work-was-gone": ("JobWorkflow", "CANCELED"),
        "job-stopped-worker-died-during-stop": ("JobWorkflow", "CANCELED"),
        "job-requeued-after-quarantine-completed": ("JobWorkflow", "COMPLETED"),
    },
    "-v7": {
        "scheduled-dispatch-timeout-completed": ("JobWorkflow", "COMPLETED"),
        "scheduled-stale-claim-requeued-completed": ("JobWorkflow", "COMPLETED"),
    },
    "-v8": {
        "gate-pool-fair-shares-continued-as-new": ("GateWorkflow", "CONTINUED_AS_NEW"),
    },
    "-v9": {
        "scheduled-target-stopped-while-assigned": ("JobWorkflow", "CANCELED"),
        "scheduled-claim-expired-requeued-completed": ("JobWorkflow", "COMPLETED"),
    },
    "-v10": {
        "gate-pool-capacity-recall-continued-as-new": ("GateWorkflow", "CONTINUED_AS_NEW"),
        "scheduled-granted-pool-recalled-completed": ("JobWorkflow", "COMPLETED"),
    },
    "-v11": {
        "gate-group-changes-audited-continued-as-new": ("GateWorkflow", "CONTINUED_AS_NEW"),
    },
    # JobWorkflow with one attempt loop (a plain job runs the scheduled loop, no gates).
    "-v12": {
        "job-one-loop-failed-once-then-completed": ("JobWorkflow", "COMPLETED"),
        "job-one-loop-quarantined": ("JobWorkflow", "FAILED"),
    },
    "-v13": {
        "job-pending-requeued-by-ops-completed": ("JobWorkflow", "COMPLETED"),
    },
    "-v14": {
        "job-pending-requeued-by-ops-completed": ("JobWorkflow", "COMPLETED"),
    },
    "-v15": {
        "gate-pool-retry-admitted-continued-as-new": ("GateWorkflow", "CONTINUED_AS_NEW"),
    },
}
PATCHES: dict[str, str | None] = {
    "-v1": SCHEDULING_PATCH,
    "-v2": GRANTED_AT_SUBMIT_PATCH,
    "-v3": CANCEL_WAIT_PATCH,
    "-v4": HOST_PINNING_PATCH,
    "-v5": STOP_WAITS_FOR_WORK_PATCH,
    "-v6": None,
    "-v7": GRANTED_AT_SUBMIT_PATCH,
    "-v8": FAIR_SHARES_PATCH,  # in the gate's history, not a job's
    "-v9": GRANTED_AT_SUBMIT_PATCH,
    "-v10": GRANTED_AT_SUBMIT_PATCH,  # the job's; the gate's are checked on their own
    "-v11": GATE_AUDIT_PATCH,  # in the gate's history
    "-v12": None,  # plain jobs: no marker
    "-v13": None,
    "-v14": OPS_REQUEUE_PENDING_KEPT_PATCH,
    "-v15": REQUEUE_ADMIT_PATCH,  # in the gate's history
}
NAMES = [f"{kind}{suffix}" for suffix, kinds in SETS.items() for kind in kinds]


def kind_of(name: str) -> tuple[str, str]:
    """A history's set and kind."""
    for suffix, kinds in SETS.items():
        kind = name.removesuffix(suffix)
        if kind in kinds:
            return suffix, kind
    raise KeyError(name)


def history_file(name: str) -> Path:
    return HISTORIES / f"{name}.json"


def raw(name: str) -> dict[str, object]:
    parsed: dict[str, object] = json.loads(history_file(name).read_text())
    return parsed


# -- recording (only with JOBFORGE_RECORD_HISTORIES=1) --------------------------------


@pytest.fixture
async def harness(temporal: DevServer) -> AsyncIterator[Harness]:
    client = await Client.connect(temporal.address, data_converter=pydantic_data_converter)
    async with running_harness(client) as harness:
        yield harness


async def save(client: Client, workflow_id: str, name: str, run_id: str | None = None) -> None:
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)

    async def closed() -> bool:
        status = (await handle.describe()).status
        return status is not None and status != WorkflowExecutionStatus.RUNNING

    await wait_until_async(closed, timeout=60, what=f"{workflow_id} to close")
    history = await handle.fetch_history()
    history_file(name).write_text(history.to_json() + "\n")


@pytest.mark.skipif(not RECORD, reason="records only with JOBFORGE_RECORD_HISTORIES=1")
async def test_recording_scheduled_histories_from_real_runs(harness: Harness) -> None:
    names = [f"{kind}{SUFFIX}" for kind in SETS[SUFFIX]]
    for name in names:
        assert not history_file(name).exists(), f"{name} is committed: add a new suffix"
    client = harness.client
    harness.stand_in.default = harness.stand_in.succeed()
    # A group gate continuing as new soon: paused and resumed by a caller, its
    # max_parallel changed by another; then jobs pass it until it continues as new.
    gates = Gates(client, harness.task_queue, GateSettings(history_limit=100))
    group = f"audited-{uuid.uuid4().hex[:8]}"
    first = await harness.submit(spec=JobSpec(type="in-process", group=group), gates=gates)
    await harness.wait_status(first, JobStatus.COMPLETED)
    await gates.pause(GateKind.GROUP, group, by="ops-a")
    await gates.resume(GateKind.GROUP, group, TargetResume(by="ops-a"))
    await gates.configure(GateKind.GROUP, group, GatePatch(max_parallel=3, by="ops-b"))
    gate_id = gates.ref(GateKind.GROUP, group).workflow_id

    async def continued_runs() -> list[str]:
        """The gate's runs that continued as new, oldest first (one more job each time
        none has yet)."""
        runs = [e async for e in client.list_workflows(f"WorkflowId = '{gate_id}'")]
        found = sorted(
            (e for e in runs if e.status == WorkflowExecutionStatus.CONTINUED_AS_NEW),
            key=lambda e: e.start_time,
        )
        if not found:
            job = await harness.submit(spec=JobSpec(type="in-process", group=group), gates=gates)
            await harness.wait_status(job, JobStatus.COMPLETED)
        return [run.run_id for run in found]

    for run_id in await wait_until_async(continued_runs, timeout=120, what="a continue-as-new"):
        history = await client.get_workflow_handle(gate_id, run_id=run_id).fetch_history()
        if GATE_AUDIT_PATCH in patch_ids(json.loads(history.to_json())["events"]):
            name = f"gate-group-changes-audited-continued-as-new{SUFFIX}"
            await save(client, gate_id, name, run_id)
            return
    raise AssertionError("no run of the gate that continued as new kept its changes")


@pytest.mark.skipif(not RECORD, reason="records only with JOBFORGE_RECORD_HISTORIES=1")
async def test_recording_one_loop_job_histories_from_real_runs(harness: Harness) -> None:
    """Set -v12: plain jobs as the one-loop JobWorkflow runs them."""
    suffix = "-v12"
    for kind in SETS[suffix]:
        assert not history_file(f"{kind}{suffix}").exists(), f"{kind}{suffix} is committed"
    stand_in = harness.stand_in
    retried = await harness.submit(max_attempts=3)
    stand_in.script[1] = stand_in.fail("solver_exit", "exit 1")
    stand_in.default = stand_in.succeed()
    await harness.wait_status(retried, JobStatus.COMPLETED)
    await save(harness.client, retried.id, f"job-one-loop-failed-once-then-completed{suffix}")
    stand_in.default = stand_in.fail("solver_exit", "exit 2", non_retryable=True)
    quarantined = await harness.submit(max_attempts=3)
    await harness.wait_status(quarantined, JobStatus.QUARANTINED)
    await save(harness.client, quarantined.id, f"job-one-loop-quarantined{suffix}")


# The set test_recording_a_pending_jobs_ops_requeue writes.
OPS_REQUEUE_SUFFIX = "-v14"


@pytest.mark.skipif(not RECORD, reason="records only with JOBFORGE_RECORD_HISTORIES=1")
async def test_recording_a_pending_jobs_ops_requeue(harness: Harness) -> None:
    """An operator re-queues a job whose attempt a worker runs but has not reported (a
    native worker's first 0.5 s, say): the job still reads `pending`."""
    name = f"job-pending-requeued-by-ops-completed{OPS_REQUEUE_SUFFIX}"
    assert not history_file(name).exists(), f"{name} is committed: add a new suffix"
    stand_in, release = harness.stand_in, asyncio.Event()
    stand_in.script[1] = stand_in.hold(release, phases=())
    stand_in.default = stand_in.succeed()
    handle = await harness.submit(max_attempts=3)

    async def started() -> bool:
        return 1 in stand_in.started

    await wait_until_async(started, timeout=30, what="attempt 1 to start")
    job = await handle.execute_update(OPS_REQUEUE_UPDATE, "ops-a", result_type=Job)
    assert job.status == JobStatus.PENDING
    release.set()
    done = await harness.wait_status(handle, JobStatus.COMPLETED)
    assert (stand_in.started, stand_in.cancelled, done.attempts) == ([1], [], 1)
    await save(harness.client, handle.id, name)


# The set test_recording_a_pools_admitted_retry writes.
RETRY_ADMIT_SUFFIX = "-v15"


async def continued_runs_of(
    harness: Harness, gates: Gates, gate_id: str, spec: JobSpec
) -> list[str]:
    """The runs of a gate that continued as new, oldest first, once there is one (a
    job of `spec` passes the gate each time there is none yet)."""
    client = harness.client

    async def continued() -> list[str]:
        runs = [e async for e in client.list_workflows(f"WorkflowId = '{gate_id}'")]
        found = sorted(
            (e for e in runs if e.status == WorkflowExecutionStatus.CONTINUED_AS_NEW),
            key=lambda e: e.start_time,
        )
        if not found:
            job = await harness.submit(spec=spec, gates=gates)
            await harness.wait_status(job, JobStatus.COMPLETED)
        return [run.run_id for run in found]

    runs: list[str] = await wait_until_async(continued, timeout=120, what="a continue-as-new")
    return runs


@pytest.mark.skipif(not RECORD, reason="records only with JOBFORGE_RECORD_HISTORIES=1")
async def test_recording_a_pools_admitted_retry(harness: Harness) -> None:
    """An admission-only job completes, and an operator's retry of it (a new run under
    its id) is admitted by its pool as a submit is."""
    name = f"gate-pool-retry-admitted-continued-as-new{RETRY_ADMIT_SUFFIX}"
    assert not history_file(name).exists(), f"{name} is committed: add a new suffix"
    harness.stand_in.default = harness.stand_in.succeed()
    gates = Gates(harness.client, harness.task_queue, GateSettings(history_limit=100))
    pool = f"retried-{uuid.uuid4().hex[:8]}"
    spec = JobSpec(type="in-process", pool=pool, admission="reject")
    ended = await harness.wait_status(
        await harness.submit(spec=spec, gates=gates), JobStatus.COMPLETED
    )
    gate_id = gates.ref(GateKind.POOL, pool).workflow_id

    async def released() -> bool:
        view = await gates.view(GateKind.POOL, pool)
        return view is not None and view.in_use == 0

    await wait_until_async(released, timeout=30, what="the lease back")
    retried = await harness.submit(spec=spec, gates=gates, resumed=ended)
    assert (await harness.wait_status(retried, JobStatus.COMPLETED)).attempts == 2
    for run_id in await continued_runs_of(harness, gates, gate_id, spec):
        history = await harness.client.get_workflow_handle(gate_id, run_id=run_id).fetch_history()
        if REQUEUE_ADMIT_PATCH in patch_ids(json.loads(history.to_json())["events"]):
            await save(harness.client, gate_id, name, run_id)
            return
    raise AssertionError("no run of the pool that continued as new admitted the retry")


# -- replay (always) --------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_each_scheduled_history_is_committed_and_of_its_kind(name: str) -> None:
    assert history_file(name).exists(), f"record {name} (see the module docstring)"
    suffix, kind = kind_of(name)
    workflow_type, outcome = SETS[suffix][kind]
    events = raw(name)["events"]
    assert isinstance(events, list)
    started = events[0]["workflowExecutionStartedEventAttributes"]
    assert started["workflowType"]["name"] == workflow_type
    assert events[-1]["eventType"].removeprefix("EVENT_TYPE_WORKFLOW_EXECUTION_") == outcome


@pytest.mark.parametrize("name", [n for n in NAMES if n.startswith(("scheduled", "job-"))])
def test_each_scheduled_job_history_took_the_patched_path(name: str) -> None:
    events = raw(name)["events"]
    assert isinstance(events, list)
    markers = [e for e in events if e["eventType"] == "EVENT_TYPE_MARKER_RECORDED"]
    suffix, _ = kind_of(name)
    if PATCHES[suffix] is None:
        assert markers == []
        return
    assert len(markers) == 1
    payload = markers[0]["markerRecordedEventAttributes"]["details"]["patch-data"]["payloads"][0]
    assert json.loads(base64.b64decode(payload["data"]))["id"] == PATCHES[suffix]


def patch_ids(events: list[dict[str, Any]]) -> list[str]:
    """The patches whose markers a history (as JSON) recorded, in order."""
    ids = []
    for event in events:
        if event["eventType"] == "EVENT_TYPE_MARKER_RECORDED":
            payload = event["markerRecordedEventAttributes"]["details"]["patch-data"]
            ids.append(json.loads(base64.b64decode(payload["payloads"][0]["data"]))["id"])
    return ids


def activity_events(name: str) -> list[str]:
    """A history's activity events, in order, without their prefix."""
    events = raw(name)["events"]
    assert isinstance(events, list)
    kinds = [e["eventType"].removeprefix("EVENT_TYPE_") for e in events]
    return [kind for kind in kinds if kind.startswith("ACTIVITY_TASK_")]


def test_a_pending_jobs_ops_requeue_cancelled_its_attempt_before_the_patch_and_not_since() -> None:
    name = "job-pending-requeued-by-ops-completed"
    scheduled, cancel = "ACTIVITY_TASK_SCHEDULED", "ACTIVITY_TASK_CANCEL_REQUESTED"
    before, since = activity_events(f"{name}-v13"), activity_events(f"{name}-v14")
    assert (before.count(scheduled), before.count(cancel)) == (2, 1)
    assert (since.count(scheduled), since.count(cancel)) == (1, 0)


def test_the_capacity_recall_pool_history_took_the_patched_path() -> None:
    events = raw("gate-pool-capacity-recall-continued-as-new-v10")["events"]
    assert isinstance(events, list)
    assert patch_ids(events) == [FAIR_SHARES_PATCH, POOL_RECALL_PATCH]
    signals = [
        e["signalExternalWorkflowExecutionInitiatedEventAttributes"]["signalName"]
        for e in events
        if e["eventType"] == "EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED"
    ]
    assert signals.count(RECALL_SIGNAL) == 5  # every holder, the claimed one too
    assert GRANT_SIGNAL in signals[signals.index(RECALL_SIGNAL) :]  # granted again


def test_the_audited_group_history_took_the_patched_path() -> None:
    events = raw("gate-group-changes-audited-continued-as-new-v11")["events"]
    assert isinstance(events, list)
    assert GATE_AUDIT_PATCH in patch_ids(events)
    text = json.dumps(events)
    # The changes went into the gate's memo, and on into its next run's input.
    assert "gate_changes" in text
    assert events[-1]["eventType"] == "EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW"


def test_the_retried_pool_history_admitted_the_retry_under_its_patch() -> None:
    events = raw("gate-pool-retry-admitted-continued-as-new-v15")["events"]
    assert isinstance(events, list)
    assert patch_ids(events) == [FAIR_SHARES_PATCH, REQUEUE_ADMIT_PATCH]
    admitted = [
        (item["request"]["job_id"], item["requeue"])
        for e in events
        if e["eventType"] == "EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED"
        for payload in e["workflowExecutionUpdateAcceptedEventAttributes"]["acceptedRequest"][
            "input"
        ]["args"]["payloads"]
        for item in json.loads(base64.b64decode(payload["data"]))
    ]
    # One job admitted twice: at its submit, then at its retry.
    retried = [job_id for job_id, requeue in admitted if requeue]
    assert len(retried) == 1
    assert admitted.count((retried[0], False)) == 1


def test_the_fair_shares_pool_history_took_the_patched_path() -> None:
    events = raw("gate-pool-fair-shares-continued-as-new-v8")["events"]
    assert isinstance(events, list)
    markers = [e for e in events if e["eventType"] == "EVENT_TYPE_MARKER_RECORDED"]
    assert len(markers) == 1
    payload = markers[0]["markerRecordedEventAttributes"]["details"]["patch-data"]["payloads"][0]
    assert json.loads(base64.b64decode(payload["data"]))["id"] == FAIR_SHARES_PATCH
    signals = [
        e["signalExternalWorkflowExecutionInitiatedEventAttributes"]["signalName"]
        for e in events
        if e["eventType"] == "EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED"
    ]
    assert signals.count(GRANT_SIGNAL) >= 2  # it granted by fair shares before continuing


@pytest.mark.parametrize("name", NAMES)
async def test_todays_workflows_replay_each_scheduled_history(name: str) -> None:
    history = WorkflowHistory.from_json(name, history_file(name).read_text())
    replayer = Replayer(
        workflows=[JobWorkflow, GateWorkflow],
        data_converter=pydantic_data_converter,
        workflow_runner=workflow_runner(),
    )
    await replayer.replay_workflow(history)
