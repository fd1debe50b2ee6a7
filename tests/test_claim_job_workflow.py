"""The HTTP bridge's claim (JobWorkflow's `claim_job` update), in process: it answers
with the job as the claim left it, refuses an attempt the job no longer wants, and a
claim the bridge gave up on and handed back counts no attempt."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import UpdateWorkflowExecutionLifecycleStage
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.update.v1 import UpdateRef, WaitPolicy
from temporalio.api.workflowservice.v1 import (
    PollActivityTaskQueueRequest,
    PollWorkflowExecutionUpdateRequest,
)
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from temporalio.worker import Worker

from tests.conftest import wait_until_async
from tests.workflow_harness import WORKER_ID, Behaviour, Harness, StandIn, now_ms, statuses
from worker.native import workflow_runner
from workflows.errors import ErrorType
from workflows.job_states import JobStatus
from workflows.job_workflow import JobWorkflow
from workflows.models import AttemptInput, AttemptReport, AttemptResult, Job


def report(attempt: int) -> AttemptReport:
    """A bridge's claim of `attempt` for WORKER_ID."""
    return AttemptReport(
        attempt=attempt, worker_id=WORKER_ID, phase="assigned", claimed_at=now_ms(), host="h1"
    )


def claiming(harness: Harness, answers: list[Job | None], gate: asyncio.Event) -> Behaviour:
    """An attempt that claims itself as the bridge does, keeps the answer, and holds
    until `gate` opens."""

    async def play(inp: AttemptInput) -> AttemptResult:
        handle = harness.client.get_workflow_handle_for(JobWorkflow.run, inp.job_id)
        answers.append(await handle.execute_update(JobWorkflow.claim_job, report(inp.attempt)))
        await gate.wait()
        return AttemptResult(worker_id=WORKER_ID, result={}, result_hash="h")

    return play


async def test_a_bridge_claim_answers_the_job_as_the_claim_left_it(harness: Harness) -> None:
    answers: list[Job | None] = []
    gate = asyncio.Event()
    harness.stand_in.default = claiming(harness, answers, gate)
    handle = await harness.submit()

    async def answered() -> bool:
        return bool(answers)

    await wait_until_async(answered, timeout=30, what="the claim's answer")
    read = await harness.job(handle)
    gate.set()
    await handle.result()
    (answer,) = answers
    assert answer is not None
    assert answer.status == JobStatus.ASSIGNED
    assert answer.worker_id == WORKER_ID
    assert answer.host == "h1"
    assert answer.attempts == 1
    assert statuses(answer) == ["pending", "assigned"]
    assert answer == read


async def test_a_bridge_claim_of_a_cancelled_job_is_refused(harness: Harness) -> None:
    answers: list[Job | None] = []
    handle = await harness.submit(activity_task_queue=f"unserved-{uuid.uuid4().hex[:12]}")
    await harness.wait_for(handle, lambda j: j.attempt == 1, "attempt 1 scheduled")
    await handle.execute_update(JobWorkflow.cancel)
    answers.append(await handle.execute_update(JobWorkflow.claim_job, report(1)))
    assert answers == [None]
    job = await harness.job(handle)
    assert job.attempts == 0
    assert job.worker_id is None


async def test_a_claim_the_bridge_gave_up_on_and_handed_back_is_not_an_attempt(
    client: Client,
) -> None:
    """The bridge gave up waiting for its claim's answer (no workflow worker) and handed
    the task back; the claim and the hand-back reach the job when its worker is back
    (the claim first). The job goes back to pending with no attempt counted."""
    workflow_queue = f"claim-wf-{uuid.uuid4().hex[:12]}"
    activity_queue = f"claim-act-{uuid.uuid4().hex[:12]}"
    harness = Harness(client, workflow_queue, StandIn(client))  # its submit and reads only

    def workflow_worker() -> Worker:
        return Worker(
            client,
            task_queue=workflow_queue,
            workflows=[JobWorkflow],
            workflow_runner=workflow_runner(),
        )

    async with workflow_worker():
        handle = await harness.submit(activity_task_queue=activity_queue, max_attempts=1)
        await harness.wait_for(handle, lambda j: j.attempt == 1, "attempt 1 scheduled")
    # No workflow worker now. The bridge's poll takes the attempt's task.
    task = await client.workflow_service.poll_activity_task_queue(
        PollActivityTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=activity_queue),
            identity="jobforge-bridge@test",
        ),
        retry=True,
        timeout=timedelta(seconds=30),
    )
    assert task.task_token
    update_id = f"claim-{uuid.uuid4().hex}"
    claim = asyncio.create_task(
        handle.execute_update(JobWorkflow.claim_job, report(1), id=update_id)
    )

    async def admitted() -> bool:
        try:
            await client.workflow_service.poll_workflow_execution_update(
                PollWorkflowExecutionUpdateRequest(
                    namespace=client.namespace,
                    update_ref=UpdateRef(
                        workflow_execution=WorkflowExecution(workflow_id=handle.id),
                        update_id=update_id,
                    ),
                    wait_policy=WaitPolicy(
                        lifecycle_stage=UpdateWorkflowExecutionLifecycleStage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ADMITTED
                    ),
                ),
                timeout=timedelta(seconds=2),
            )
        except RPCError:
            return False  # not there yet
        return True

    await wait_until_async(admitted, timeout=30, what="the claim to reach the server")
    await client.get_async_activity_handle(task_token=task.task_token).fail(
        ApplicationError("no claimer took the task", type=ErrorType.CLAIM_ABANDONED)
    )
    async with workflow_worker():
        await asyncio.wait_for(claim, 30)  # applied or refused: either way not counted
        job = await harness.wait_for(handle, lambda j: j.attempt == 2, "attempt 2 scheduled")
    assert job.status == JobStatus.PENDING
    assert job.attempts == 0
    assert job.fail_history == []
    await handle.terminate("test over")
