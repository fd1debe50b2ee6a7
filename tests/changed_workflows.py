"""Deliberately changed workflows for tests/test_replay.py (their own module so the
sandbox can import them without the test module's imports)."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.models import AttemptResult, JobInput
    from workflows.names import ADD_TYPE_SIGNAL, attempt_activity_id


@workflow.defn(name="JobWorkflow")
class ChangedJobWorkflow:
    """JobWorkflow as a careless edit might leave it: it schedules another activity."""

    @workflow.run
    async def run(self, inp: JobInput) -> None:
        await workflow.execute_activity(
            "run_job_v2",
            inp.id,
            result_type=AttemptResult,
            task_queue=inp.activity_task_queue,
            activity_id=attempt_activity_id(1),  # same id as before, only the type differs
            start_to_close_timeout=timedelta(minutes=1),
        )


@workflow.defn(name="JobTypeRegistry")
class ChangedRegistry:
    """A registry that forgot to mirror its types into the memo."""

    def __init__(self) -> None:
        self._types: set[str] = set()

    @workflow.run
    async def run(self, types: list[str]) -> None:  # noqa: ARG002 - the old signature
        await workflow.wait_condition(lambda: False)

    @workflow.signal(name=ADD_TYPE_SIGNAL)
    def add_type(self, job_type: str) -> None:
        """Record a type, but never in the memo."""
        self._types.add(job_type)
