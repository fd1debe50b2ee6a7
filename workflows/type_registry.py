"""JobTypeRegistry: the durable set of job types ever submitted.

Workers that serve every type (`WORKER_TYPES` empty) read it from the workflow's memo
(a describe call, no workflow task) to subscribe to task queues of new types.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.memo_mirror import mirror_into_memo
    from workflows.names import ADD_TYPE_SIGNAL, TYPE_REGISTRY_WORKFLOW, TYPES_MEMO, TYPES_QUERY


@workflow.defn(name=TYPE_REGISTRY_WORKFLOW)
class JobTypeRegistry:
    """Holds the set of job types; the memo mirrors it after every change."""

    @workflow.init
    def __init__(self, types: list[str]) -> None:
        self._types = set(types)
        self._dirty = True

    @workflow.run
    async def run(self, types: list[str]) -> None:  # noqa: ARG002 - read in __init__
        await mirror_into_memo(TYPES_MEMO, lambda: self._dirty, self._snapshot, self.types)

    def _snapshot(self) -> list[str]:
        self._dirty = False
        return self.types()

    @workflow.signal(name=ADD_TYPE_SIGNAL)
    def add_type(self, job_type: str) -> None:
        """Record a job type (idempotent)."""
        if job_type not in self._types:
            self._types.add(job_type)
            self._dirty = True

    @workflow.query(name=TYPES_QUERY)
    def types(self) -> list[str]:
        """Every job type known."""
        return sorted(self._types)
