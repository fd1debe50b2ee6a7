"""What the gates (groups, pools, serial targets) and the jobs passing them exchange.

Stdlib and pydantic only, as workflows/models.py: the workflow sandbox, the API and the
workers all import it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, Field

from workflows.fair_shares import FairShares
from workflows.names import gate_workflow_id


class GateKind(StrEnum):
    """The three kinds of gate. A job passes its gates in this order."""

    TARGET = "target"
    GROUP = "group"
    POOL = "pool"


class GateRef(BaseModel):
    """One gate a job passes: its kind, its key and its workflow id."""

    kind: GateKind
    key: str
    workflow_id: str


class GateRequest(BaseModel):
    """A job asking a gate for a lease.

    The API sends one (`ready=False`) before it starts the job, which fixes the job's
    place in submission order; the job sends its own (`ready=True`) once it runs, which
    proves it exists. Only a ready request is granted.
    """

    job_id: str
    cost: int = 1
    priority: int = 0
    created_at: int
    deadline_at: int | None = None
    ready: bool = False
    # A pool shares its grants between groups by weight: the job's group (None: the
    # ungrouped class), and that group's weight when the job was granted its group
    # lease (None: not known yet; the pool keeps the weight it last heard).
    group: str | None = None
    weight: float | None = None


ReleaseOutcome = Literal[
    "completed", "failed", "quarantined", "stopped", "cancelled", "recalled", "kept"
]


class GateRelease(BaseModel):
    """A job giving its lease back (or withdrawing its request), and how it ended.
    `kept` answers a recall: the job was already assigned, it keeps its lease."""

    job_id: str
    outcome: ReleaseOutcome


class GateGrant(BaseModel):
    """A gate's lease, sent to the job (`gate_grant` signal)."""

    workflow_id: str
    # A group's fairness weight at the time of the grant (dispatch by weight).
    weight: float | None = None


class Admission(BaseModel):
    """A pool's answer to an admission-only job: taken now (its lease reserved), or
    not, with why and when to try again."""

    admitted: bool
    reason: str | None = None
    retry_after_s: int = 0


class AdmitRequest(BaseModel):
    """The API asking a gate, at submit and before the job starts, to grant its lease
    now if it fits (the job then starts holding it: no request or grant signal). One
    that does not fit is queued unready, or refused when `reject` (a pool in
    admission-only mode)."""

    request: GateRequest
    reject: bool = False
    # An operator's retry of a job that ended (a new run under its id): admitted as a
    # submit is, not answered as a repeated submit of the ended job.
    requeue: bool = False


class AdmitAnswer(BaseModel):
    """A gate's answer to one AdmitRequest."""

    granted: bool
    # Not granted: queued (the job asks for it when it runs), or refused (`reject`, with
    # why and when to try again), or neither (the job ended already: a repeated submit).
    queued: bool = False
    reason: str | None = None
    retry_after_s: int = 0
    # A group's fairness weight, as a grant carries it.
    weight: float | None = None


class GateSettings(BaseModel):
    """A gate's settings, changed at runtime by the `configure` update."""

    # group
    paused: bool = False
    max_parallel: int | None = None
    weight: float = 1.0
    # pool
    capacity: int = 100
    # A waiting job gains a priority point per step (None: priority is exact).
    aging_step_s: float | None = None
    deadline_urgency_s: float = 60.0
    # target
    halted: bool = False
    halted_by: str | None = None
    # every kind: a holder not heard from for this long is pinged (a terminated job's
    # lease is dropped then); the history length that continues the gate as new
    ping_after_s: float = 300.0
    history_limit: int = 2_000


class GatePatch(BaseModel):
    """A change of settings: only the fields set are applied (`max_parallel: null`
    lifts a group's limit, `aging_step_s: null` ends a pool's aging)."""

    max_parallel: int | None = None
    weight: float | None = None
    capacity: int | None = None
    aging_step_s: float | None = None
    # The fields to apply, named: a patch reaches the gate with every field written out
    # (null or not), so which were set does not travel otherwise. None: every field
    # written out (a patch sent before this field existed).
    fields: list[str] | None = None
    # The caller who changes it, for the gate's recent changes (None: not named).
    by: str | None = None

    def applied(self) -> set[str]:
        """The fields this patch changes."""
        return set(self.fields) if self.fields is not None else set(self.model_fields_set)


class TargetResume(BaseModel):
    """Resume a halted target: re-queue the halting job first, or skip it."""

    job: Literal["retry", "skip"] = "retry"
    # The caller who resumes it, for the gate's recent changes (None: not named).
    by: str | None = None


class GateActor(BaseModel):
    """Who pauses a gate (`pause` update's optional argument)."""

    by: str | None = None


# How many of its latest operator changes a gate keeps (state and memo).
GATE_CHANGES_KEEP = 20


class GateChange(BaseModel):
    """One operator change of a gate: when (workflow time, epoch ms), who, what."""

    ts: int
    by: str | None = None
    action: str = Field(description="pause, resume, configure, lock or unlock")
    detail: str | None = Field(default=None, description="e.g. `capacity=5`, `owner=d1`")


class Waiter(BaseModel):
    """A queued request and when it reached the gate (workflow time, ms)."""

    request: GateRequest
    seq: int
    enqueued_at: int
    # Workflow time of the last proof of life (grant, or an answered ping).
    seen_at: int | None = None


class Holder(Waiter):
    """A granted lease (its request and queue place kept: a recall puts it back)."""

    granted_at: int


class LockRequest(BaseModel):
    """An owner taking or renewing a gate's lock (`lock` update), or giving it back
    (`unlock`). `ttl_s`: how long the lock stays its own without a renewal."""

    owner: str
    ttl_s: float = 30.0
    # The caller who takes or gives it back, for the gate's recent changes.
    by: str | None = None


class GateLock(BaseModel):
    """Who holds a gate's lock: taken at `since`, last renewed at `renewed_at`
    (workflow time, ms); free to be taken over from `renewed_at + ttl_ms` on."""

    owner: str
    since: int
    renewed_at: int
    ttl_ms: int

    def expired(self, now: int) -> bool:
        return now >= self.renewed_at + self.ttl_ms


class LockAnswer(BaseModel):
    """A gate's answer to a lock or unlock: whether the asker holds it now, and who
    does (None: nobody)."""

    held: bool
    lock: GateLock | None = None


# How long an admission-only job waits when the pool knows no lease time yet.
RETRY_AFTER_DEFAULT_S = 5


class GateInput(BaseModel):
    """GateWorkflow's input, and what it carries across continue-as-new."""

    kind: GateKind
    key: str
    settings: GateSettings = Field(default_factory=GateSettings)
    waiters: list[Waiter] = Field(default_factory=list)
    holders: list[Holder] = Field(default_factory=list)
    seq: int = 0
    released: list[str] = Field(default_factory=list)
    # Mean time a lease was held (ms), for an admission-only job's retry_after.
    lease_ms: float | None = None
    # A pool's fair shares between groups; None in a gate started before them (its
    # settings then carry the aging every pool had, which is dropped).
    shares: FairShares | None = None
    # The gate's lock (`lock` update); None when nobody ever took it.
    lock: GateLock | None = None
    # Its latest operator changes, oldest first (None: none yet, or a run from before).
    changes: list[GateChange] | None = None


class GateView(BaseModel):
    """A gate as read: its settings, its leases and its queue (`gate` query and memo)."""

    kind: GateKind
    key: str
    settings: GateSettings
    in_use: int = Field(description="Cost units (pools) or jobs (groups, targets) leased")
    holders: list[str]
    waiting: int
    head: str | None = Field(description="The job to be granted next")


def job_gates(
    task_queue: str, *, target: str | None, group: str | None, pool: str | None
) -> list[GateRef]:
    """The gates a job passes, in the order it acquires them (target, group, pool:
    one order everywhere, so two jobs never wait on each other's leases)."""
    keys = ((GateKind.TARGET, target), (GateKind.GROUP, group), (GateKind.POOL, pool))
    return [
        GateRef(kind=kind, key=key, workflow_id=gate_workflow_id(task_queue, kind.value, key))
        for kind, key in keys
        if key is not None
    ]
