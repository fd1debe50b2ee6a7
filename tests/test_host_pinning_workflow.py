"""Host pinning, in process: JobWorkflow with a required or preferred host's queue.

The stand-in `run_job` (tests/workflow_harness.py) serves the harness's queue, the
shared one; a host's queue is served only when a test starts a worker on it. The
process-level tests (tests/test_host_pinning.py) prove the API's and workers' side.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus
from temporalio.worker import Worker

from engine.gates import Gates
from tests.conftest import wait_until_async
from tests.workflow_harness import Harness, JobHandle, now_ms, statuses
from workflows.errors import ErrorType
from workflows.gate_models import GateKind, GateSettings
from workflows.job_patches import HOST_PINNING_PATCH
from workflows.models import JobSpec, JobStatus, WaitingFor

WAIT_MS = 600


@asynccontextmanager
async def host_worker(harness: Harness, queue: str) -> AsyncIterator[None]:
    """A worker of the stand-in on a host's queue."""
    async with Worker(harness.client, task_queue=queue, activities=[harness.stand_in.run_job]):
        yield


def host_queue(harness: Harness, host: str) -> str:
    return f"{harness.task_queue}@{host}"


async def markers(handle: JobHandle) -> list[str]:
    history = await handle.fetch_history()
    return [
        event.marker_recorded_event_attributes.details["patch-data"].payloads[0].data.decode()
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
    ]


async def test_a_preferred_host_job_goes_to_the_shared_queue_after_its_wait(
    harness: Harness,
) -> None:
    spec = JobSpec(type="in-process", preferred_host="host-b", preferred_host_wait_ms=WAIT_MS)
    handle = await harness.submit(spec=spec, preferred_task_queue=host_queue(harness, "host-b"))
    waiting = await harness.job(handle)
    assert waiting.status == JobStatus.PENDING
    job = await harness.wait_status(handle, JobStatus.COMPLETED)
    assert statuses(job) == ["pending", "pending", "assigned", "running", "completed"]
    fallback = job.transitions[1]
    assert fallback.reason == ErrorType.PREFERRED_HOST_TIMEOUT
    assert fallback.ts - job.transitions[0].ts >= WAIT_MS
    # The attempt on the host's queue was never claimed: one attempt counted, number 2.
    assert (job.attempts, job.attempt, job.waiting_for) == (1, 2, None)
    assert harness.stand_in.queues == [harness.task_queue]
    assert [HOST_PINNING_PATCH in marker for marker in await markers(handle)] == [True]


async def test_a_preferred_host_that_takes_the_job_within_its_wait_runs_it(
    harness: Harness,
) -> None:
    queue = host_queue(harness, "host-b")
    spec = JobSpec(type="in-process", preferred_host="host-b", preferred_host_wait_ms=30_000)
    async with host_worker(harness, queue):
        handle = await harness.submit(spec=spec, preferred_task_queue=queue)
        job = await harness.wait_status(handle, JobStatus.COMPLETED)
    assert statuses(job) == ["pending", "assigned", "running", "completed"]
    assert harness.stand_in.queues == [queue]


async def test_a_required_host_that_never_comes_fails_the_job_host_unavailable(
    harness: Harness,
) -> None:
    spec = JobSpec(type="in-process", require_host="host-z", require_host_wait_ms=WAIT_MS)
    handle = await harness.submit(spec=spec, activity_task_queue=host_queue(harness, "host-z"))
    waiting = await harness.wait_for(
        handle, lambda j: j.waiting_for == WaitingFor.HOST, "waiting_for host"
    )
    assert waiting.status == JobStatus.PENDING
    assert await harness.closed(handle) == WorkflowExecutionStatus.FAILED
    job = await harness.job(handle)
    assert statuses(job) == ["pending", "failed"]
    assert job.fail_reason == ErrorType.HOST_UNAVAILABLE
    assert job.transitions[1].ts - job.transitions[0].ts >= WAIT_MS
    assert (job.attempts, job.waiting_for, job.fail_history) == (0, None, [])
    assert harness.stand_in.started == []


async def test_a_required_host_job_retries_on_its_host_queue_only(harness: Harness) -> None:
    queue = host_queue(harness, f"host-{uuid.uuid4().hex[:6]}")
    harness.stand_in.script[1] = harness.stand_in.fail("solver_exit", "boom")
    spec = JobSpec(type="in-process", require_host="host-b", require_host_wait_ms=WAIT_MS)
    async with host_worker(harness, queue):
        handle = await harness.submit(spec=spec, activity_task_queue=queue)
        job = await harness.wait_status(handle, JobStatus.COMPLETED)
    assert statuses(job) == [
        "pending", "assigned", "running", "failed", "pending", "assigned", "running", "completed"
    ]  # fmt: skip
    assert harness.stand_in.queues == [queue, queue]


async def test_a_grouped_job_whose_required_host_never_comes_gives_its_lease_back(
    harness: Harness,
) -> None:
    gates = Gates(harness.client, harness.task_queue, GateSettings(max_parallel=1))
    group = f"g-{uuid.uuid4().hex[:6]}"
    spec = JobSpec(
        type="in-process", group=group, require_host="host-z", require_host_wait_ms=WAIT_MS
    )
    pinned = await harness.submit(
        spec=spec, gates=gates, activity_task_queue=host_queue(harness, "host-z")
    )
    after = await harness.submit(spec=JobSpec(type="in-process", group=group), gates=gates)
    assert await harness.closed(pinned) == WorkflowExecutionStatus.FAILED
    assert (await harness.job(pinned)).fail_reason == ErrorType.HOST_UNAVAILABLE
    await harness.wait_status(after, JobStatus.COMPLETED)

    async def free() -> bool:
        view = await gates.view(GateKind.GROUP, group)
        return view is not None and view.in_use == 0

    await wait_until_async(free, timeout=10, what="the group's lease back")


async def test_a_deadline_before_the_preferred_hosts_wait_ends_fails_the_job_deadline(
    harness: Harness,
) -> None:
    spec = JobSpec(
        type="in-process",
        preferred_host="host-b",
        preferred_host_wait_ms=60_000,
        deadline_at=now_ms() + 1500,
    )
    handle = await harness.submit(spec=spec, preferred_task_queue=host_queue(harness, "host-b"))
    assert await harness.closed(handle) == WorkflowExecutionStatus.FAILED
    job = await harness.job(handle)
    assert (job.fail_reason, statuses(job)) == (ErrorType.DEADLINE_EXCEEDED, ["pending", "failed"])
    assert harness.stand_in.started == []


async def test_an_unpinned_job_records_no_host_marker(harness: Harness) -> None:
    handle = await harness.submit()
    await harness.wait_status(handle, JobStatus.COMPLETED)
    assert await markers(handle) == []
