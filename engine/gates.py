"""Gates seen from the caller's side: queue a job at its gates before it starts, read a
gate, change it. The API and the tests use these; the gate itself is
workflows/gate_workflow.py."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from workflows.errors import TemporalCallFailed
from workflows.gate_models import (
    Admission,
    GateInput,
    GateKind,
    GatePatch,
    GateRef,
    GateRequest,
    GateSettings,
    GateView,
    TargetResume,
    job_gates,
)
from workflows.models import JobSpec
from workflows.names import (
    CONFIGURE_UPDATE,
    ENQUEUE_SIGNAL,
    GATE_QUERY,
    GATE_WORKFLOW,
    PAUSE_UPDATE,
    RESERVE_UPDATE,
    RESUME_UPDATE,
    gate_workflow_id,
)


class Gates:
    """The gates of one deployment (its JobWorkflow task queue)."""

    def __init__(self, client: Client, task_queue: str, defaults: GateSettings) -> None:
        self._client = client
        self._task_queue = task_queue
        self._defaults = defaults

    def of(self, spec: JobSpec) -> list[GateRef]:
        """The gates a job of this spec passes, in order."""
        return job_gates(self._task_queue, target=spec.target, group=spec.group, pool=spec.pool)

    def ref(self, kind: GateKind, key: str) -> GateRef:
        return GateRef(
            kind=kind, key=key, workflow_id=gate_workflow_id(self._task_queue, kind.value, key)
        )

    def _input(self, gate: GateRef) -> GateInput:
        return GateInput(kind=gate.kind, key=gate.key, settings=self._defaults.model_copy())

    async def enqueue(self, job_id: str, spec: JobSpec, created_at: int) -> None:
        """Fix the job's place at each of its gates, starting a gate that does not run
        yet (signal-with-start). Called right after the job starts and before the
        submission is answered, so each gate sees jobs in submission order."""
        request = GateRequest(
            job_id=job_id,
            cost=spec.cost_units,
            priority=spec.priority,
            created_at=created_at,
            deadline_at=spec.deadline_at,
        )
        await asyncio.gather(
            *(
                self._client.start_workflow(
                    GATE_WORKFLOW,
                    self._input(gate),
                    id=gate.workflow_id,
                    task_queue=self._task_queue,
                    start_signal=ENQUEUE_SIGNAL,
                    start_signal_args=[request],
                    static_summary=f"{gate.kind.value} {gate.key}",
                )
                for gate in self.of(spec)
            )
        )

    async def reserve(self, job_id: str, spec: JobSpec, created_at: int) -> Admission:
        """Ask the job's pool to take it now (admission-only mode): on yes its lease is
        reserved for the job about to start; on no, nothing is kept."""
        assert spec.pool is not None
        request = GateRequest(
            job_id=job_id,
            cost=spec.cost_units,
            priority=spec.priority,
            created_at=created_at,
            deadline_at=spec.deadline_at,
        )
        admission: Admission = await self._update(
            GateKind.POOL, spec.pool, RESERVE_UPDATE, request, result_type=Admission
        )
        return admission

    async def view(self, kind: GateKind, key: str) -> GateView | None:
        """The gate as it holds itself, or None if it never ran."""
        handle: WorkflowHandle[Any, Any] = self._client.get_workflow_handle(
            self.ref(kind, key).workflow_id
        )
        try:
            view: GateView = await handle.query(GATE_QUERY, result_type=GateView)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return None
            raise
        return view

    def default_view(self, kind: GateKind, key: str) -> GateView:
        """What a gate that never ran would hold."""
        return GateView(
            kind=kind,
            key=key,
            settings=self._defaults.model_copy(),
            in_use=0,
            holders=[],
            waiting=0,
            head=None,
        )

    async def configure(self, kind: GateKind, key: str, patch: GatePatch) -> GateView:
        """Change a gate's settings, starting it if it never ran."""
        view: GateView = await self._update(kind, key, CONFIGURE_UPDATE, patch)
        return view

    async def pause(self, kind: GateKind, key: str) -> GateView:
        """Pause a gate; answers once no job of it can be assigned any more."""
        view: GateView = await self._update(kind, key, PAUSE_UPDATE, None)
        return view

    async def resume(self, kind: GateKind, key: str, how: TargetResume) -> GateView:
        view: GateView = await self._update(kind, key, RESUME_UPDATE, how)
        return view

    async def _update(
        self,
        kind: GateKind,
        key: str,
        update: str,
        arg: object,
        result_type: type[Any] = GateView,
    ) -> Any:
        gate = self.ref(kind, key)
        start: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
            GATE_WORKFLOW,
            self._input(gate),
            id=gate.workflow_id,
            task_queue=self._task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            static_summary=f"{kind.value} {key}",
        )
        try:
            return await self._client.execute_update_with_start_workflow(
                update,
                args=[] if arg is None else [arg],
                start_workflow_operation=start,
                result_type=result_type,
            )
        except WorkflowUpdateFailedError as err:
            raise TemporalCallFailed(f"{update} of {kind.value} {key} failed: {err.cause}") from err
