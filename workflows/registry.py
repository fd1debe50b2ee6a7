"""JobTypeRegistry: the durable set of job types ever submitted.

Workers that serve every type (`WORKER_TYPES` empty) read it from the workflow's memo
(a describe call, no workflow task) to subscribe to task queues of new types.
"""

from __future__ import annotations

from temporalio import workflow


def registry_workflow_id(task_queue: str) -> str:
    """The registry of the jobforge deployment whose JobWorkflows run on `task_queue`
    (the registry runs there too, so it lives and dies with that deployment)."""
    return f"jobforge-job-types-{task_queue}"


REGISTRY_WORKFLOW_ID = registry_workflow_id("jobforge")
ADD_TYPE_SIGNAL = "add_type"
TYPES_MEMO = "types"


@workflow.defn(name="JobTypeRegistry")
class JobTypeRegistry:
    """Holds the set of job types; the memo mirrors it after every change."""

    @workflow.init
    def __init__(self, types: list[str]) -> None:
        self._types = set(types)
        self._dirty = True

    @workflow.run
    async def run(self, types: list[str]) -> None:  # noqa: ARG002 - read in __init__
        while True:
            await workflow.wait_condition(
                lambda: self._dirty or workflow.info().is_continue_as_new_suggested()
            )
            if self._dirty:
                self._dirty = False
                workflow.upsert_memo({TYPES_MEMO: sorted(self._types)})
            if workflow.info().is_continue_as_new_suggested():
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(sorted(self._types))

    @workflow.signal(name=ADD_TYPE_SIGNAL)
    def add_type(self, job_type: str) -> None:
        """Record a job type (idempotent)."""
        if job_type not in self._types:
            self._types.add(job_type)
            self._dirty = True

    @workflow.query(name="types")
    def types(self) -> list[str]:
        """Every job type known."""
        return sorted(self._types)
