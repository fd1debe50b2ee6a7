"""001's reads that need more than one job: the audit events (§9) and the addon's
dispatchable intents, listed in pages (§10).

- `events`: every DENIED the intent met, each with the reason it waited then
  (`Job.waits`: `group_limit`, `group_paused`, `pool_capacity`), in order with its
  transitions; the wait it is in now is sharpened by its group's state (paused).
- `dispatchable`: the intents that hold a lease of both their addon's group and the
  pool are the admitted or claimed ones; those still pending and admitted are listed.
  Every intent the pool admits holds at least one of its cost units, so the ids read
  are at most the pool's capacity, whatever the backlog; a page reads at most `limit`
  jobs at a time, in submission order (job ids are UUIDv7), after the page's cursor.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable

from pydantic import BaseModel, Field
from temporalio.client import Client

from api.contracts.units import iso
from engine.gates import Gates
from workflows.contract_states import Phase, phase
from workflows.errors import ErrorType, InvalidField, JobNotFound
from workflows.gate_models import GateKind, GateSettings
from workflows.job_states import DISPATCH_TIMEOUT, JobStatus
from workflows.models import Job, Wait, WaitingFor

# Attempt failures the design calls TIMEOUT.
TIMEOUTS = (
    ErrorType.HEARTBEAT_TIMEOUT.value,
    ErrorType.DEADLINE_EXCEEDED.value,
    "max_runtime_exceeded",
    "timeout",
)
# A job waits for these at a gate (Job.waits records each such wait).
GATE_WAITS = (WaitingFor.GROUP_LIMIT, WaitingFor.GROUP_PAUSED, WaitingFor.POOL_CAPACITY)
# A cursor is the last job id of the page before.
CURSOR_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"


class IntentEvent(BaseModel):
    """One audit event (§9), derived from the job's transitions and waits."""

    event: str
    at: str | None = Field(description="When (ISO 8601); null where jobforge keeps no time")
    reason: str | None = None
    lease_id: str | None = None
    worker_id: str | None = None


def events(job: Job, waiting_now: WaitingFor | None = None) -> list[IntentEvent]:
    """The audit trail in the design's names (§9). `waiting_now`: the wait the job is
    in, as its gate tells it (a paused group), if the caller asked."""
    out: list[IntentEvent] = []
    waits = list(job.waits)
    previous: JobStatus | None = None

    def denied_before(ts: int | None) -> None:
        while waits and (ts is None or waits[0].at < ts):
            wait: Wait = waits.pop(0)
            out.append(IntentEvent(event="DENIED", at=iso(wait.at), reason=wait.reason.value))

    for transition in job.transitions:
        denied_before(transition.ts)
        at = iso(transition.ts)
        match transition.status:
            case JobStatus.PENDING:
                name = "SUBMITTED" if transition.seq == 1 else "QUEUED"
                if transition.reason == DISPATCH_TIMEOUT and previous == JobStatus.PENDING:
                    # Admitted and dispatched (no change of status in jobforge's record),
                    # then not started in time: DISPATCHING → QUEUED (§5).
                    out.append(IntentEvent(event="ADMITTED", at=None, reason="admitted"))
                    out.append(IntentEvent(event="DISPATCHING", at=None, reason="dispatchable"))
                out.append(IntentEvent(event=name, at=at, reason=transition.reason))
            case JobStatus.ASSIGNED:
                out.append(IntentEvent(event="ADMITTED", at=None, reason="admitted"))
                out.append(IntentEvent(event="DISPATCHING", at=at, worker_id=transition.worker_id))
            case JobStatus.RUNNING:
                lease = f"{job.id}:{transition.attempt}:{transition.worker_id}"
                out.append(
                    IntentEvent(
                        event="RUNNING", at=at, lease_id=lease, worker_id=transition.worker_id
                    )
                )
            case JobStatus.COMPLETED:
                out.append(IntentEvent(event="DONE", at=at))
            case JobStatus.FAILED | JobStatus.QUARANTINED | JobStatus.STOPPED:
                reason = transition.reason
                name = (
                    "TIMEOUT"
                    if reason in TIMEOUTS
                    else "CANCELED"
                    if reason == ErrorType.CANCELLED or transition.status == JobStatus.STOPPED
                    else "FAILED"
                )
                out.append(IntentEvent(event=name, at=at, reason=reason))
        previous = transition.status
    recorded = bool(waits)
    denied_before(None)
    current = phase(job)
    now = waiting_now or job.waiting_for
    if current == Phase.WAITING and now is not None:
        last = out[-1] if out else None
        if recorded and job.waiting_for in GATE_WAITS and last is not None:
            # The wait it is in now is the last one recorded: as its gate tells it now.
            last.reason = now.value
        elif not (job.waits and job.waiting_for in GATE_WAITS):
            # A start time, a host, or a job from before waits were recorded.
            out.append(IntentEvent(event="DENIED", at=None, reason=now.value))
    elif current == Phase.ADMITTED:
        out.append(IntentEvent(event="ADMITTED", at=None, reason="admitted"))
        out.append(IntentEvent(event="DISPATCHING", at=None, reason="dispatchable"))
    return out


def check_cursor(after: str | None) -> None:
    """A 422 naming `page_token` for a cursor that is no job id."""
    if after is not None and not re.fullmatch(CURSOR_PATTERN, after):
        raise InvalidField("page_token", "not a Next-Page-Token of /dispatchable")


class Dispatchable:
    """The addon's admitted intents, in pages (see the module's text)."""

    def __init__(self, client: Client, task_queue: str, pool: str) -> None:
        self._gates = Gates(client, task_queue, GateSettings())
        self._pool = pool

    async def _holders(self, kind: GateKind, key: str) -> set[str]:
        view = await self._gates.view(kind, key)
        return set(view.holders) if view is not None else set()

    async def page(
        self, get: Callable[[str], Awaitable[Job]], addon: str, limit: int, after: str | None
    ) -> tuple[list[Job], str | None]:
        """Up to `limit` admitted intents after `after`, and the cursor of the next page
        (None: this was the last)."""
        check_cursor(after)
        group, pool = await asyncio.gather(
            self._holders(GateKind.GROUP, addon), self._holders(GateKind.POOL, self._pool)
        )
        ids = sorted(job_id for job_id in group & pool if after is None or job_id > after)

        async def read(job_id: str) -> Job | None:
            try:
                return await get(job_id)
            except JobNotFound:
                return None

        found: list[Job] = []
        last = after
        while ids and len(found) < limit:
            chunk, ids = ids[: limit - len(found)], ids[limit - len(found) :]
            jobs = await asyncio.gather(*(read(job_id) for job_id in chunk))
            found += [
                job
                for job in jobs
                if job is not None
                and job.group == addon
                and job.pool == self._pool
                and phase(job) == Phase.ADMITTED
            ]
            last = chunk[-1]
        more = bool(ids) and len(found) >= limit
        return found, (last if more else None)
