"""Gates seen from the caller's side: queue a job at its gates before it starts, read a
gate, change it. The API and the tests use these; the gate itself is
workflows/gate_workflow.py."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
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
from workflows.fair_shares import FairShares
from workflows.gate_models import (
    AdmitAnswer,
    AdmitRequest,
    GateActor,
    GateInput,
    GateKind,
    GatePatch,
    GateRef,
    GateRequest,
    GateSettings,
    GateView,
    LockAnswer,
    LockRequest,
    TargetResume,
    job_gates,
)
from workflows.models import JobSpec, gate_deadline
from workflows.names import (
    ADMIT_UPDATE,
    CONFIGURE_UPDATE,
    ENQUEUE_SIGNAL,
    GATE_JOBS_QUERY,
    GATE_QUERY,
    GATE_WORKFLOW,
    LOCK_UPDATE,
    PAUSE_UPDATE,
    RESUME_UPDATE,
    UNLOCK_UPDATE,
    gate_workflow_id,
)

# Admissions sent to one gate in one update at most (what arrived while the previous
# batch was in flight).
ADMIT_BATCH_MAX = 200
# A gate update that reached the gate as it continued as new is sent again, this many
# times, after 0.05 s, 0.1 s, ...
UPDATE_RETRIES = 5
UPDATE_RETRY_S = 0.05


@dataclass
class _AdmitQueue:
    """Admissions waiting for one gate; one update is in flight per gate at a time."""

    waiting: list[tuple[AdmitRequest, asyncio.Future[AdmitAnswer]]] = field(default_factory=list)
    sending: bool = False


@dataclass
class Admitted:
    """What a job's gates answered at submit: the leases it starts holding, the gates
    still to queue it at, and a refusal (`admission: reject`)."""

    granted: list[str] = field(default_factory=list)
    weight: float | None = None
    refused: AdmitAnswer | None = None
    later: list[GateRef] = field(default_factory=list)


class Gates:
    """The gates of one deployment (its JobWorkflow task queue)."""

    def __init__(self, client: Client, task_queue: str, defaults: GateSettings) -> None:
        self._client = client
        self._task_queue = task_queue
        self._defaults = defaults
        self._admitting: dict[str, _AdmitQueue] = {}
        self._flushes: set[asyncio.Task[None]] = set()

    def of(self, spec: JobSpec) -> list[GateRef]:
        """The gates a job of this spec passes, in order."""
        return job_gates(self._task_queue, target=spec.target, group=spec.group, pool=spec.pool)

    def ref(self, kind: GateKind, key: str) -> GateRef:
        return GateRef(
            kind=kind, key=key, workflow_id=gate_workflow_id(self._task_queue, kind.value, key)
        )

    def _input(self, gate: GateRef) -> GateInput:
        shares = FairShares() if gate.kind == GateKind.POOL else None
        return GateInput(
            kind=gate.kind, key=gate.key, settings=self._defaults.model_copy(), shares=shares
        )

    async def admit(
        self,
        job_id: str,
        spec: JobSpec,
        created_at: int,
        *,
        pool_only: bool = False,
        requeue: bool = False,
    ) -> Admitted:
        """Ask the job's gates, before it starts, for the leases that are free now: it
        then starts holding them, and no grant signal reaches it (docs/scheduling.md).
        A pool in admission-only mode is asked first and may refuse; the others are
        asked in order until one queues the job; the gates after that one are left to
        `enqueue` once the job runs. `pool_only`: a job with a start time still to come
        asks only its admission-only pool now. `requeue`: an operator's retry of a job
        that ended, which its gates admit anew."""
        request = _request(job_id, spec, created_at)
        admitted = Admitted()
        gates = self.of(spec)
        if spec.admission == "reject" and spec.pool is not None:
            pool = gates[-1]
            answer = await self._admit(
                pool, AdmitRequest(request=request, reject=True, requeue=requeue)
            )
            if not answer.granted:
                admitted.refused = answer
                return admitted
            admitted.granted.append(pool.workflow_id)
        if pool_only:
            return admitted
        for position, gate in enumerate(gates):
            if gate.workflow_id in admitted.granted:
                continue
            answer = await self._admit(gate, AdmitRequest(request=request, requeue=requeue))
            if not answer.granted:
                admitted.later = [
                    g for g in gates[position + 1 :] if g.workflow_id not in admitted.granted
                ]
                break
            admitted.granted.append(gate.workflow_id)
            if answer.weight is not None:
                # The group's weight, which the pool after it shares its grants by.
                admitted.weight = answer.weight
                request = request.model_copy(update={"weight": answer.weight})
        return admitted

    async def _admit(self, gate: GateRef, item: AdmitRequest) -> AdmitAnswer:
        """One admission, sent with whatever else reached this gate meanwhile."""
        queue = self._admitting.setdefault(gate.workflow_id, _AdmitQueue())
        answer: asyncio.Future[AdmitAnswer] = asyncio.get_running_loop().create_future()
        queue.waiting.append((item, answer))
        if not queue.sending:
            queue.sending = True
            task = asyncio.create_task(self._flush(gate, queue))
            self._flushes.add(task)
            task.add_done_callback(self._flushes.discard)
        return await answer

    async def _flush(self, gate: GateRef, queue: _AdmitQueue) -> None:
        try:
            while queue.waiting:
                batch = queue.waiting[:ADMIT_BATCH_MAX]
                del queue.waiting[:ADMIT_BATCH_MAX]
                try:
                    answers: list[AdmitAnswer] = await self._update(
                        gate.kind,
                        gate.key,
                        ADMIT_UPDATE,
                        [item for item, _ in batch],
                        result_type=list[AdmitAnswer],
                    )
                except Exception as err:  # every caller of the batch gets the error
                    for _, answer in batch:
                        if not answer.done():
                            answer.set_exception(err)
                    continue
                for (_, answer), got in zip(batch, answers, strict=True):
                    if not answer.done():
                        answer.set_result(got)
        finally:
            queue.sending = False

    async def enqueue(
        self, job_id: str, spec: JobSpec, created_at: int, gates: list[GateRef] | None = None
    ) -> None:
        """Fix the job's place at each of its gates (or at `gates`), starting a gate
        that does not run yet (signal-with-start). Called right after the job starts and
        before the submission is answered, so each gate sees jobs in submission order."""
        request = _request(job_id, spec, created_at)
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
                for gate in (self.of(spec) if gates is None else gates)
            )
        )

    async def view(self, kind: GateKind, key: str) -> GateView | None:
        """The gate as it holds itself, or None if it never ran."""
        view: GateView | None = await self._query(kind, key, GATE_QUERY, GateView)
        return view

    async def jobs(self, kind: GateKind, key: str, limit: int) -> list[str]:
        """The jobs the gate holds or queues (none if it never ran): the gate has each
        one from before its submit was answered, which a visibility list may not yet."""
        found: list[str] | None = await self._query(kind, key, GATE_JOBS_QUERY, list[str], limit)
        return found or []

    async def _query(
        self, kind: GateKind, key: str, query: str, result_type: Any, *args: object
    ) -> Any:
        """A query of the gate; None if it never ran."""
        handle: WorkflowHandle[Any, Any] = self._client.get_workflow_handle(
            self.ref(kind, key).workflow_id
        )
        try:
            return await handle.query(query, *args, result_type=result_type)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return None
            raise

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
        """Change a gate's settings (the fields set in `patch`), starting it if it never
        ran."""
        fields = sorted(patch.model_fields_set - {"by", "fields"})
        named = patch.model_copy(update={"fields": fields})
        view: GateView = await self._update(kind, key, CONFIGURE_UPDATE, named)
        return view

    async def pause(self, kind: GateKind, key: str, by: str | None = None) -> GateView:
        """Pause a gate; answers once no job of it can be assigned any more. `by`, the
        caller, is kept among the gate's changes (None: the update as it always was)."""
        who = None if by is None else GateActor(by=by)
        view: GateView = await self._update(kind, key, PAUSE_UPDATE, who)
        return view

    async def resume(self, kind: GateKind, key: str, how: TargetResume) -> GateView:
        view: GateView = await self._update(kind, key, RESUME_UPDATE, how)
        return view

    async def lock(self, kind: GateKind, key: str, ask: LockRequest) -> LockAnswer:
        """Take or renew a gate's lock for `ask.owner`; the answer says who holds it."""
        answer: LockAnswer = await self._update(kind, key, LOCK_UPDATE, ask, LockAnswer)
        return answer

    async def unlock(self, kind: GateKind, key: str, ask: LockRequest) -> LockAnswer:
        """Give a gate's lock back if `ask.owner` holds it."""
        answer: LockAnswer = await self._update(kind, key, UNLOCK_UPDATE, ask, LockAnswer)
        return answer

    async def _update(
        self,
        kind: GateKind,
        key: str,
        update: str,
        arg: object,
        result_type: type[Any] = GateView,
    ) -> Any:
        """Run a gate update, starting the gate if it does not run. Every gate update is
        idempotent, so one that reached the gate as it continued as new (Temporal
        answers WorkflowNotReady, FAILED_PRECONDITION) is sent again."""
        gate = self.ref(kind, key)
        for retry in range(UPDATE_RETRIES + 1):
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
                raise TemporalCallFailed(
                    f"{update} of {kind.value} {key} failed: {err.cause}"
                ) from err
            except RPCError as err:
                # The start's own outcome carries the same error: read it, so that it is
                # not reported as never retrieved.
                with contextlib.suppress(Exception):
                    await start.workflow_handle()
                if err.status != RPCStatusCode.FAILED_PRECONDITION or retry == UPDATE_RETRIES:
                    raise
                await asyncio.sleep(UPDATE_RETRY_S * 2**retry)
        raise AssertionError("unreachable")


def _request(job_id: str, spec: JobSpec, created_at: int) -> GateRequest:
    return GateRequest(
        job_id=job_id,
        cost=spec.cost_units,
        priority=spec.priority,
        created_at=created_at,
        deadline_at=gate_deadline(spec.deadline_at, spec.urgent_at),
        group=spec.group,
    )
