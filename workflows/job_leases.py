"""A job's leases at its gates (group, pool, target; docs/scheduling.md), as JobWorkflow
holds them: asked in order, held, recalled, given back. Every method issues the same
signals, in the same order, as the workflow did when this code lived in it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import FailureError

from workflows.gate_models import (
    GateGrant,
    GateInput,
    GateKind,
    GateRef,
    GateRelease,
    GateRequest,
    GateSettings,
    ReleaseOutcome,
)
from workflows.job_patches import CANCEL_MEETS_END_PATCH, RECALL_ANSWERED_PATCH
from workflows.job_states import JobStatus
from workflows.models import WAITING_AT, Job, Wait, WaitingFor, gate_deadline
from workflows.names import ACQUIRE_SIGNAL, GATE_WORKFLOW, RELEASE_SIGNAL
from workflows.workflow_time import waited, workflow_now_ms


class GateLeases:
    """The gates a job passes, what it asked of each and the leases it holds.

    `active` is False for a job on the plain path (no gates, no clocks, or recorded
    before they existed): it holds nothing, and `release_surely` returns at once,
    without the task switch a job on the scheduled path has always made there.
    """

    def __init__(
        self,
        job: Job,
        gates: list[GateRef],
        defaults: GateSettings | None,
        interrupted: Callable[[], bool],
    ) -> None:
        self.job = job
        self.gates = gates
        self.active = True
        self._defaults = defaults
        self._interrupted = interrupted
        self.asked: set[str] = set()
        self.held: set[str] = set()
        self.weight: float | None = None
        # Recalls that came before their grant (signals between workflows may pass).
        self._recalled_early: set[str] = set()
        # The gate the job's last recorded wait is at (Job.waits), and whether a pause
        # of its group recalled its lease since it last held it.
        self._waiting_at: str | None = None
        self._recalled_by_pause = False

    def granted_at_submit(self, granted: list[str], weight: float | None) -> None:
        """Leases the API granted at submit: held from the job's first task."""
        self.asked.update(granted)
        self.held.update(granted)
        self.weight = weight

    def plain(self) -> None:
        """The job takes the plain path: no gates, nothing to hold."""
        self.gates = []
        self.active = False

    async def hold(self, deadline: Callable[[], timedelta | None]) -> bool | None:
        """Hold a lease of every gate, asked in order: True once held; False when the
        deadline passes first; None when the job was interrupted meanwhile."""
        job = self.job
        while True:
            missing = [gate for gate in self.gates if gate.workflow_id not in self.held]
            if not missing:
                job.waiting_for = None
                self._waiting_at = None
                self._recalled_by_pause = False
                return True
            gate = missing[0]
            if gate.workflow_id not in self.asked:
                self.asked.add(gate.workflow_id)
                await self.signal(gate, ACQUIRE_SIGNAL, self.request())
            job.waiting_for = WAITING_AT[gate.kind]
            self._record_wait(gate)
            left = deadline()
            if left is not None and left <= timedelta(0):
                return False
            if not await waited(functools.partial(self._holds_or_interrupted, gate), left):
                return False
            if self._interrupted():
                return None

    def _holds_or_interrupted(self, gate: GateRef) -> bool:
        return gate.workflow_id in self.held or self._interrupted()

    def _record_wait(self, gate: GateRef) -> None:
        """Keep each wait at a gate (Job.waits), once per wait: no command, no event."""
        if self._waiting_at == gate.workflow_id:
            return
        self._waiting_at = gate.workflow_id
        reason = WAITING_AT[gate.kind]
        if gate.kind == GateKind.GROUP and self._recalled_by_pause:
            reason = WaitingFor.GROUP_PAUSED
        self.job.waits.append(Wait(reason=reason, at=workflow_now_ms()))

    def request(self) -> GateRequest:
        job = self.job
        return GateRequest(
            job_id=job.id,
            cost=job.cost_units,
            priority=job.priority,
            created_at=job.created_at,
            deadline_at=gate_deadline(job.deadline_at, job.urgent_at),
            ready=True,
            group=job.group,
            weight=self.weight,
        )

    async def wait_again(self) -> None:
        """An attempt nobody took (or whose claim went stale) while the job held its
        leases: they go back. A target keeps the job's place (its order is strict); at a
        group or a pool it asks afresh, so the gate grants the others first."""
        kept_place = GateRelease(job_id=self.job.id, outcome="recalled")
        afresh = GateRelease(job_id=self.job.id, outcome="cancelled")
        releases = []
        for gate in self.gates:
            if gate.workflow_id not in self.held:
                continue
            self.held.discard(gate.workflow_id)
            if gate.kind == GateKind.TARGET:
                release = kept_place
            else:
                self.asked.discard(gate.workflow_id)
                release = afresh
            releases.append(self.signal(gate, RELEASE_SIGNAL, release, start=False))
        await asyncio.gather(*releases)

    async def requeue_at_group(self) -> None:
        """A retry passes its group again (a pause since the last attempt holds it): the
        group lease goes back, and the gate queues the job in its old place. Target and
        pool leases are kept across retries."""
        release = GateRelease(job_id=self.job.id, outcome="recalled")
        for gate in self.gates:
            if gate.kind == GateKind.GROUP and gate.workflow_id in self.held:
                self.held.discard(gate.workflow_id)
                await self.signal(gate, RELEASE_SIGNAL, release, start=False)

    async def release_surely(self, outcome: ReleaseOutcome) -> None:
        """Give the leases back even if a workflow cancel arrives meanwhile: the release
        runs to its end (the cancel is spent). Before CANCEL_MEETS_END_PATCH the cancel
        stopped the release."""
        if not self.active:
            return
        release = asyncio.ensure_future(self.release(outcome))
        while True:
            try:
                await asyncio.shield(release)
                return
            except asyncio.CancelledError:
                if not workflow.patched(CANCEL_MEETS_END_PATCH):
                    release.cancel()
                    raise

    async def release(self, outcome: ReleaseOutcome) -> None:
        """Give back every lease and withdraw every request: at each gate the job asked,
        and at each gate the API queued it at (all of them, unless it had a start time
        still to come at submit)."""
        job = self.job
        start = job.earliest_start_at
        queued_by_api = start is None or start <= job.created_at
        asked = self.asked
        self.asked = set()
        self.held.clear()
        release = GateRelease(job_id=job.id, outcome=outcome)
        await asyncio.gather(
            *(
                self.signal(gate, RELEASE_SIGNAL, release, start=False)
                for gate in self.gates
                if queued_by_api or gate.workflow_id in asked
            )
        )

    async def signal(self, gate: GateRef, signal: str, arg: object, *, start: bool = True) -> None:
        """Signal a gate; one that does not run (never started, or terminated by hand)
        is started first, with default settings (`start`; a release to a gate that does
        not run has nothing to give back)."""
        handle = workflow.get_external_workflow_handle(gate.workflow_id)
        try:
            await handle.signal(signal, arg)
            return
        except FailureError:
            if not start:
                return
            workflow.logger.warning("gate %s does not run: starting it", gate.workflow_id)
        with contextlib.suppress(FailureError):  # started meanwhile by someone else
            await workflow.start_child_workflow(
                GATE_WORKFLOW,
                GateInput(kind=gate.kind, key=gate.key, settings=self._defaults or GateSettings()),
                id=gate.workflow_id,
                parent_close_policy=workflow.ParentClosePolicy.ABANDON,
            )
        await handle.signal(signal, arg)

    async def on_grant(self, grant: GateGrant) -> None:
        """A gate granted its lease; one this job no longer asks for goes back."""
        if grant.workflow_id not in self.asked:
            release = GateRelease(job_id=self.job.id, outcome="cancelled")
            await _signal(grant.workflow_id, release)
            return
        if grant.workflow_id in self._recalled_early:
            # Its recall came first: the gate has queued this job again already.
            self._recalled_early.discard(grant.workflow_id)
            return
        self.held.add(grant.workflow_id)
        if grant.weight is not None:
            self.weight = grant.weight

    async def on_recall(self, gate_workflow_id: str, recall: Callable[[], None]) -> None:
        """A gate takes back the lease of a job no worker has claimed yet: its group's
        pause, or its pool's capacity lowered. `recall` gives the pending attempt up."""
        job = self.job
        if gate_workflow_id not in self.held:
            if gate_workflow_id in self.asked and job.status == JobStatus.PENDING:
                # The grant it recalls has not arrived yet: give it back now.
                self._recalled_early.add(gate_workflow_id)
                self._recalled_by_pause = True
                if self._waiting_at == gate_workflow_id:
                    job.waits.append(Wait(reason=WaitingFor.GROUP_PAUSED, at=workflow_now_ms()))
                await _signal(gate_workflow_id, GateRelease(job_id=job.id, outcome="recalled"))
            elif workflow.patched(RECALL_ANSWERED_PATCH):
                # Not asked: the gate's record is stray, and goes (a grant on its way is
                # given back when it lands). Asked but past pending: the grant lands
                # and is given back with the job's others.
                unasked = gate_workflow_id not in self.asked
                outcome: ReleaseOutcome = "cancelled" if unasked else "kept"
                await _signal(gate_workflow_id, GateRelease(job_id=job.id, outcome=outcome))
            return
        kept: ReleaseOutcome = "kept"
        if job.status == JobStatus.PENDING:
            kept = "recalled"
            self.held.discard(gate_workflow_id)
            self._recalled_by_pause = True
            recall()
        await _signal(gate_workflow_id, GateRelease(job_id=job.id, outcome=kept))


# The gates' signal handlers (grant, recall) may await the delivery of a lease given
# back, which a job that ends meanwhile need not wait for: the signal was sent with the
# handler's command and reaches the gate after the job closes. ABANDON tells the SDK so
# (it would warn of a running handler at the end); it changes no command.
HANDLER_POLICY = workflow.HandlerUnfinishedPolicy.ABANDON


async def _signal(gate_workflow_id: str, release: GateRelease) -> None:
    await workflow.get_external_workflow_handle(gate_workflow_id).signal(RELEASE_SIGNAL, release)
