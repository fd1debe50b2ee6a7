"""The in-process harness for workflow tests: a workflow worker on a fresh task queue
of the session's dev server, running the real workflows with a stand-in `run_job`
activity whose every attempt the test scripts. No API, worker or solver process runs
here; the process-level tests prove that wiring."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from engine.gates import Admitted, Gates
from tests.conftest import wait_until_async
from worker.native import workflow_runner
from workflows import search_attributes
from workflows.errors import AttemptFailureDetails
from workflows.gate_models import AdmitAnswer
from workflows.gate_workflow import GateWorkflow
from workflows.job_workflow import JobWorkflow
from workflows.models import (
    AttemptInput,
    AttemptReport,
    AttemptResult,
    Job,
    JobInput,
    JobSpec,
    JobStatus,
)
from workflows.names import RUN_JOB_ACTIVITY

WORKER_ID = "stand-in-1"
RESULT = {"answer": 42}

Phase = Literal["assigned", "running"]


class PoolRefusedError(Exception):
    """An admission-only pool refused the job: the API's 429, and nothing started."""

    def __init__(self, answer: AdmitAnswer) -> None:
        super().__init__(f"refused: {answer.reason}")
        self.answer = answer


Behaviour = Callable[[AttemptInput], Awaitable[AttemptResult]]
JobHandle = WorkflowHandle[JobWorkflow, Job]


def now_ms() -> int:
    """Wall-clock milliseconds, as a worker stamps its reports."""
    return int(datetime.now(UTC).timestamp() * 1000)


def statuses(job: Job) -> list[str]:
    """The job's recorded status sequence."""
    return [t.status.value for t in job.transitions]


# -- the stand-in run_job activity ----------------------------------------------------


class StandIn:
    """The run_job activity: each attempt plays the behaviour the test scripted for it
    (attempts without one play `default`)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.script: dict[int, Behaviour] = {}
        self.default: Behaviour = self.succeed()
        self.started: list[int] = []
        self.jobs: list[str] = []
        # The task queue each attempt ran from (a pinned job's host queue, or not).
        self.queues: list[str] = []
        self.cancelled: list[int] = []

    @activity.defn(name=RUN_JOB_ACTIVITY)
    async def run_job(self, inp: AttemptInput) -> AttemptResult:
        """Play the attempt's scripted behaviour; note a cancel reaching it."""
        self.started.append(inp.attempt)
        self.jobs.append(inp.job_id)
        self.queues.append(activity.info().task_queue)
        try:
            return await self.script.get(inp.attempt, self.default)(inp)
        except asyncio.CancelledError:
            self.cancelled.append(inp.attempt)
            raise

    async def report(self, inp: AttemptInput, phase: Phase, attempt: int | None = None) -> None:
        """Signal the job as a worker does when it claims the attempt or starts it."""
        handle = self.client.get_workflow_handle_for(JobWorkflow.run, inp.job_id)
        claimed = now_ms()
        report = AttemptReport(
            attempt=inp.attempt if attempt is None else attempt,
            worker_id=WORKER_ID,
            phase=phase,
            claimed_at=claimed,
            started_at=claimed if phase == "running" else None,
        )
        await handle.signal(JobWorkflow.attempt_report, report)

    async def send(self, inp: AttemptInput, phases: Iterable[Phase]) -> None:
        for phase in phases:
            await self.report(inp, phase)

    def succeed(self, phases: Iterable[Phase] = ("assigned", "running")) -> Behaviour:
        """Report `phases`, then return RESULT."""

        async def play(inp: AttemptInput) -> AttemptResult:
            await self.send(inp, phases)
            return AttemptResult(worker_id=WORKER_ID, result=RESULT, result_hash="hash-42")

        return play

    def fail(
        self,
        kind: str,
        message: str = "",
        *,
        phases: Iterable[Phase] = ("assigned", "running"),
        non_retryable: bool = False,
        details: AttemptFailureDetails | None = None,
    ) -> Behaviour:
        """Report `phases`, then fail with an ApplicationError of type `kind`."""

        async def play(inp: AttemptInput) -> AttemptResult:
            await self.send(inp, phases)
            extra = () if details is None else (details,)
            raise ApplicationError(message, *extra, type=kind, non_retryable=non_retryable)

        return play

    def hold(
        self, gate: asyncio.Event, phases: Iterable[Phase] = ("assigned", "running")
    ) -> Behaviour:
        """Report `phases`, then heartbeat until `gate` opens (or a cancel arrives);
        then succeed."""

        async def play(inp: AttemptInput) -> AttemptResult:
            await self.send(inp, phases)
            while not gate.is_set():
                activity.heartbeat()
                await asyncio.sleep(0.02)
            return AttemptResult(worker_id=WORKER_ID, result=RESULT, result_hash="hash-42")

        return play

    def linger(
        self, gone: asyncio.Event, phases: Iterable[Phase] = ("assigned", "running")
    ) -> Behaviour:
        """Report `phases`, heartbeat until cancelled, then stay until `gone` opens (a
        process that takes its time to die), still heartbeating; then end cancelled."""

        async def play(inp: AttemptInput) -> AttemptResult:
            await self.send(inp, phases)
            try:
                while True:
                    activity.heartbeat()
                    await asyncio.sleep(0.02)
            except asyncio.CancelledError:
                self.cancelled.append(inp.attempt)
                while not gone.is_set():
                    activity.heartbeat()
                    await asyncio.sleep(0.02)
                raise

        return play

    def fall_silent(self, phases: Iterable[Phase] = ("assigned",)) -> Behaviour:
        """Report `phases`, then never heartbeat nor finish (a frozen or dead worker)."""

        async def play(inp: AttemptInput) -> AttemptResult:
            await self.send(inp, phases)
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

        return play


# -- harness --------------------------------------------------------------------------


@dataclass
class Harness:
    """A workflow worker with the stand-in on one fresh task queue, and its jobs."""

    client: Client
    task_queue: str
    stand_in: StandIn
    handles: list[JobHandle] = field(default_factory=list)

    async def submit(
        self,
        *,
        max_attempts: int = 3,
        max_runtime_ms: int = 60_000,
        heartbeat_timeout_ms: int = 60_000,
        activity_task_queue: str | None = None,
        spec: JobSpec | None = None,
        requeue_hold_ms: int = 0,
        gates: Gates | None = None,
        enqueue: bool = True,
        admit: bool = True,
        cancel_wait_ms: int = 0,
        preferred_task_queue: str | None = None,
        stop_waits_for_work: bool = True,
        dispatch_timeout_ms: int | None = None,
        resumed: Job | None = None,
    ) -> JobHandle:
        """Start a job as the API does: the leases its gates grant at once, its input
        and initial search attributes, then its place at the gates that queued it.
        `admit=False` queues it at every gate after it starts instead (a job submitted
        before leases were granted at submit, or one whose grants all came late).
        `resumed`: an operator's retry of that ended job, a new run under its id."""
        if spec is None:
            spec = JobSpec(
                type="in-process", max_attempts=max_attempts, max_runtime_ms=max_runtime_ms
            )
        created = now_ms() if resumed is None else resumed.created_at
        job_id = f"job-{uuid.uuid4().hex}" if resumed is None else resumed.id
        start_later = spec.earliest_start_at is not None and spec.earliest_start_at > created
        admitted = Admitted(later=gates.of(spec) if gates is not None and not start_later else [])
        if gates is not None and enqueue and admit and not start_later:
            admitted = await gates.admit(job_id, spec, created, requeue=resumed is not None)
            if admitted.refused is not None:
                raise PoolRefusedError(admitted.refused)
        inp = JobInput(
            id=job_id,
            spec=spec,
            created_at=created,
            priority_key=3,
            activity_task_queue=activity_task_queue or self.task_queue,
            heartbeat_timeout_ms=heartbeat_timeout_ms,
            requeue_hold_ms=requeue_hold_ms,
            gates=gates.of(spec) if gates is not None else [],
            granted=admitted.granted,
            gate_weight=admitted.weight,
            cancel_wait_ms=cancel_wait_ms,
            preferred_task_queue=preferred_task_queue,
            stop_waits_for_work=stop_waits_for_work,
            dispatch_timeout_ms=dispatch_timeout_ms,
            resumed=resumed,
        )
        handle = await self.client.start_workflow(
            JobWorkflow.run,
            inp,
            id=inp.id,
            task_queue=self.task_queue,
            search_attributes=search_attributes.at_submit(spec.type, spec.priority, created),
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        )
        if gates is not None and enqueue and admitted.later:
            await gates.enqueue(inp.id, spec, created, admitted.later)
        self.handles.append(handle)
        return handle

    async def job(self, handle: JobHandle) -> Job:
        """The job as the API reads it: the `job` query."""
        return await handle.query(JobWorkflow.job)

    async def wait_for(self, handle: JobHandle, check: Callable[[Job], bool], what: str) -> Job:
        """Poll the job until `check` holds."""

        async def read() -> Job | None:
            job = await self.job(handle)
            return job if check(job) else None

        # Deadlines are generous: a loaded box runs workflow tasks late, never wrongly.
        found: Job = await wait_until_async(read, timeout=30, what=what)
        return found

    async def wait_status(self, handle: JobHandle, status: JobStatus) -> Job:
        """Poll the job until it has `status`."""
        return await self.wait_for(handle, lambda j: j.status == status, f"status {status}")

    async def wait_cancelled(self, *attempts: int) -> None:
        """Wait until the stand-in has seen the cancel of exactly these attempts."""

        async def seen() -> bool:
            return self.stand_in.cancelled == list(attempts)

        await wait_until_async(seen, timeout=10, what=f"attempts {attempts} cancelled")

    async def closed(self, handle: JobHandle) -> WorkflowExecutionStatus:
        """Wait for the execution to close; its Temporal status."""

        async def status() -> WorkflowExecutionStatus | None:
            found = (await handle.describe()).status
            return None if found == WorkflowExecutionStatus.RUNNING else found

        closed: WorkflowExecutionStatus = await wait_until_async(
            status, timeout=30, what="the execution to close"
        )
        return closed


@asynccontextmanager
async def running_harness(client: Client, identity: str | None = None) -> AsyncIterator[Harness]:
    """A worker running JobWorkflow and the stand-in; leftover jobs are terminated."""
    harness = Harness(client, f"job-workflow-{uuid.uuid4().hex[:12]}", StandIn(client))
    async with Worker(
        client,
        task_queue=harness.task_queue,
        workflows=[JobWorkflow, GateWorkflow],
        activities=[harness.stand_in.run_job],
        workflow_runner=workflow_runner(),
        identity=identity,
        # Heartbeats go out at once, so a cancel reaches a held attempt quickly.
        max_heartbeat_throttle_interval=timedelta(milliseconds=100),
    ):
        try:
            yield harness
        finally:
            for handle in harness.handles:
                if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                    try:
                        await handle.terminate("test over")
                    except RPCError as err:  # closed meanwhile
                        if err.status != RPCStatusCode.NOT_FOUND:
                            raise
