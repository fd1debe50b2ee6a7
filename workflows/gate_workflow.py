"""GateWorkflow: one per group, pool or serial target; it grants leases to jobs.

Temporal has no concurrency cap, cost accounting or serial order across workers
(docs/scheduling.md), so each gate key is a small entity workflow that holds that state:
a queue of requests and the leases it granted. The API asks for a job about to start
(`admit` update, batched): a lease that is free is granted in the answer, and the job
starts holding it. Otherwise the job asks by signal once it runs and is answered by a
`gate_grant` signal. It gives its lease back by signal when it ends, whatever ends it.
A holder that vanished (its workflow terminated) is found by a periodic ping whose
signal fails, so no fault keeps capacity held for good.

A pool grants by weighted fair shares between groups, each group's jobs by priority then
arrival, jobs near their deadline first (`_grant_fair`); one that ran before that change
kept its first-come order with aging until it continues as new (FAIR_SHARES_PATCH).
A pool whose capacity is lowered below what it has leased recalls the leases no worker
has claimed yet, as a group's pause does (POOL_RECALL_PATCH): they are granted again in
the pool's order as room frees up, so its capacity holds from the change on, whoever got
a lease while it was larger (002: runs enqueued before their workspace's daemon).

A gate also holds a lock, one owner at a time (`lock`/`unlock` updates): a workspace's
single daemon (002) holds its pool's. Its owner renews it; one not renewed within its
ttl, by workflow time, can be taken over.

The gate mirrors its view into its memo (lists read visibility, not the workflow) and
continues as new when its history grows. It keeps its latest operator changes (pause,
resume, configure, lock taken or given back: who, when, what) and writes them into its
memo with the next view after one happens (GATE_AUDIT_PATCH), for the audit view.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import FailureError

with workflow.unsafe.imports_passed_through():
    from workflows.fair_shares import UNGROUPED, FairShares
    from workflows.gate_models import (
        GATE_CHANGES_KEEP,
        RETRY_AFTER_DEFAULT_S,
        Admission,
        AdmitAnswer,
        AdmitRequest,
        GateActor,
        GateChange,
        GateGrant,
        GateInput,
        GateKind,
        GateLock,
        GatePatch,
        GateRelease,
        GateRequest,
        GateView,
        Holder,
        LockAnswer,
        LockRequest,
        TargetResume,
        Waiter,
    )
    from workflows.names import (
        ACQUIRE_SIGNAL,
        ADMIT_UPDATE,
        CONFIGURE_UPDATE,
        ENQUEUE_SIGNAL,
        GATE_CHANGES_MEMO,
        GATE_JOBS_QUERY,
        GATE_MEMO,
        GATE_QUERY,
        GATE_WORKFLOW,
        GRANT_SIGNAL,
        LOCK_UPDATE,
        PAUSE_UPDATE,
        PING_SIGNAL,
        RECALL_SIGNAL,
        RELEASE_SIGNAL,
        RESERVE_UPDATE,
        RESUME_UPDATE,
        UNLOCK_UPDATE,
    )
    from workflows.workflow_time import workflow_now_ms

# A request the API queued for a job that has not asked itself after this long (it
# waits at an earlier gate, or it is gone) is pinged; a failed ping drops it.
UNREADY_TTL_MS = 60_000
# Jobs that gave their lease back lately: a repeated submission (same Idempotency-Key)
# queues them again, which is ignored.
RELEASED_KEEP = 500
# How long a pause waits for the jobs it recalled to answer.
RECALL_WAIT = timedelta(seconds=30)
# A pool run that records this marker grants by fair shares between groups and exact
# priority (aging only when its settings ask for it); one without it replays the older
# order: priority plus aging, then arrival, across all its jobs.
FAIR_SHARES_PATCH = "pool-fair-shares"
# A pool run that records this marker (once, at its first capacity change below what it
# has leased) recalls the leases no worker has claimed yet; one without it (a run from
# before) keeps them and only stops granting until enough are given back.
POOL_RECALL_PATCH = "pool-capacity-recall"
# A run that records this marker (at its first operator change) keeps its changes and
# writes them into its memo; one without it (a run from before) records none, so its
# memo upserts replay as they were.
GATE_AUDIT_PATCH = "gate-audit"
# A run that records this marker (at the first operator's retry of a job it released)
# admits that job anew, as a submit; one without it answered every admission of a
# released job as a repeated submit's (not granted, no reason), so an admission-only
# job's retry was refused for good.
REQUEUE_ADMIT_PATCH = "gate-requeue-admitted-anew"


@workflow.defn(name=GATE_WORKFLOW)
class GateWorkflow:
    """A group (pause, max_parallel, weight), a pool (capacity in cost units, fair
    shares between groups, deadline urgency) or a target (one job at a time, in order,
    halts on a failure)."""

    @workflow.init
    def __init__(self, inp: GateInput) -> None:
        self._kind = inp.kind
        self._key = inp.key
        self._settings = inp.settings
        self._waiters: dict[str, Waiter] = {w.request.job_id: w for w in inp.waiters}
        self._holders: dict[str, Holder] = {h.request.job_id: h for h in inp.holders}
        self._seq = inp.seq
        self._released = list(inp.released)
        self._lease_ms = inp.lease_ms
        self._fair = inp.kind == GateKind.POOL and workflow.patched(FAIR_SHARES_PATCH)
        self._shares = inp.shares or FairShares()
        if self._fair and inp.shares is None:
            # A pool from before fair shares: its aging step was every pool's default,
            # and a pool now ages only when it is set for it.
            self._settings.aging_step_s = None
        self._lock = inp.lock
        self._changes = list(inp.changes or [])
        # Written into the memo with the next view (a new run: its carried changes).
        self._changes_unwritten = bool(self._changes)
        self._dirty = True
        self._unanswered: set[str] = set()
        self._sending: set[asyncio.Task[None]] = set()

    @workflow.run
    async def run(self, inp: GateInput) -> None:  # noqa: ARG002 - read in __init__
        while True:
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(
                    lambda: self._dirty or self._should_continue(), timeout=self._next_wake()
                )
            self._dirty = False
            now = workflow_now_ms()
            self._grant(now)
            self._ping(now)
            memo: dict[str, object] = {GATE_MEMO: self.gate().model_dump(mode="json")}
            if self._changes_unwritten:
                memo[GATE_CHANGES_MEMO] = [c.model_dump(mode="json") for c in self._changes]
                self._changes_unwritten = False
            workflow.upsert_memo(memo)
            if self._should_continue():
                await workflow.wait_condition(
                    lambda: workflow.all_handlers_finished() and not self._sending
                )
                workflow.continue_as_new(self._carry())

    # -- what jobs send ------------------------------------------------------------

    @workflow.signal(name=ENQUEUE_SIGNAL)
    def enqueue(self, request: GateRequest) -> None:
        """The API fixes a job's place in submission order right after starting it (the
        job's own request may come first; either keeps the place)."""
        if request.job_id not in self._released:
            self._add(request)

    @workflow.signal(name=ACQUIRE_SIGNAL)
    def acquire(self, request: GateRequest) -> None:
        """A running job asks for its lease (again, after a recall or a re-queue)."""
        job_id = request.job_id
        holder = self._holders.get(job_id)
        if holder is not None:  # granted already, or reserved by an admission-only submit
            holder.seen_at = workflow_now_ms()
            self._send(job_id, GRANT_SIGNAL, self._grant_for())
            return
        front = self._kind == GateKind.TARGET and self._settings.halted_by == job_id
        if front:
            # The job that halted this target was re-queued: it goes first.
            self._settings.halted = False
            self._settings.halted_by = None
        self._add(request.model_copy(update={"ready": True}), front=front)

    @workflow.signal(name=RELEASE_SIGNAL)
    def release(self, release: GateRelease) -> None:
        """A job gives its lease back or withdraws its request (or answers a recall)."""
        job_id = release.job_id
        self._unanswered.discard(job_id)
        if release.outcome == "kept":
            return
        holder = self._holders.pop(job_id, None)
        if holder is not None and release.outcome == "completed":
            held = workflow_now_ms() - holder.granted_at
            self._lease_ms = held if self._lease_ms is None else 0.8 * self._lease_ms + 0.2 * held
        if release.outcome != "recalled":
            self._released = [*self._released[-(RELEASED_KEEP - 1) :], job_id]
        if release.outcome == "recalled" and holder is not None:
            self._waiters[job_id] = Waiter(
                request=holder.request, seq=holder.seq, enqueued_at=holder.enqueued_at
            )
        else:
            self._waiters.pop(job_id, None)
        if (
            self._kind == GateKind.TARGET
            and holder is not None
            and release.outcome in ("quarantined", "failed", "stopped")
        ):
            self._settings.halted = True
            self._settings.halted_by = job_id
        self._dirty = True

    # -- what operators send -------------------------------------------------------

    @workflow.update(name=CONFIGURE_UPDATE)
    async def configure(self, patch: GatePatch) -> GateView:
        """Change max_parallel or weight (groups) or capacity (pools), at once. A pool's
        capacity lowered below what it has leased recalls the leases no worker has
        claimed; the answer comes once every holder has answered (as a pause's)."""
        fields = patch.applied()
        if "max_parallel" in fields:
            self._settings.max_parallel = patch.max_parallel
        if "weight" in fields and patch.weight is not None:
            self._settings.weight = patch.weight
        if "capacity" in fields and patch.capacity is not None:
            self._settings.capacity = patch.capacity
        if "aging_step_s" in fields:
            self._settings.aging_step_s = patch.aging_step_s
        changed = sorted(fields & {"max_parallel", "weight", "capacity", "aging_step_s"})
        detail = ", ".join(f"{name}={getattr(self._settings, name)}" for name in changed)
        self._record("configure", patch.by, detail or None)
        self._dirty = True
        if (
            self._kind == GateKind.POOL
            and self._in_use() > self._settings.capacity
            and workflow.patched(POOL_RECALL_PATCH)
        ):
            await self._recall("capacity")
        return self.gate()

    @workflow.update(name=RESERVE_UPDATE)
    def reserve(self, request: GateRequest) -> Admission:
        """A pool's answer to an admission-only job, now: its lease is reserved if it
        fits and no job queues ahead of it, else when to come back."""
        job_id = request.job_id
        if job_id in self._holders:
            return Admission(admitted=True)
        capacity = self._settings.capacity
        free = capacity - self._in_use()
        if request.cost <= free and not any(w.request.ready for w in self._waiters.values()):
            now = workflow_now_ms()
            self._seq += 1
            self._holders[job_id] = Holder(
                request=request, seq=self._seq, enqueued_at=now, granted_at=now
            )
            self._shares.learn(_group(request), request.weight)
            self._shares.charge(_group(request))
            self._dirty = True
            return Admission(admitted=True)
        return self._refusal(request)

    @workflow.update(name=ADMIT_UPDATE)
    def admit(self, batch: list[AdmitRequest]) -> list[AdmitAnswer]:
        """Jobs about to start, in submission order (the API sends what reaches it at
        once as one batch). Each is granted now if this gate would grant it as its
        newest ready request, and the job starts holding the lease: no request or grant
        signal. Otherwise it is queued unready (the job asks when it runs) or, with
        `reject`, refused."""
        now = workflow_now_ms()
        return [self._admit(item, now) for item in batch]

    def _admit(self, item: AdmitRequest, now: int) -> AdmitAnswer:
        job_id = item.request.job_id
        if job_id in self._holders:  # a repeated submit of a job holding its lease
            return AdmitAnswer(granted=True, weight=self._grant_for().weight)
        if job_id in self._waiters:
            return AdmitAnswer(granted=False, queued=True)
        retried = False
        if job_id in self._released:
            if not (item.requeue and workflow.patched(REQUEUE_ADMIT_PATCH)):
                return AdmitAnswer(granted=False)  # a repeated submit of a job that ended
            # An operator's retry of a job that ended: its new run passes as a submit.
            self._released = [released for released in self._released if released != job_id]
            retried = True
        self._add(item.request.model_copy(update={"ready": True}))
        self._grant(now, quiet=job_id)
        if job_id in self._holders:
            return AdmitAnswer(granted=True, weight=self._grant_for().weight)
        waiter = self._waiters[job_id]
        if not item.reject:
            waiter.request = waiter.request.model_copy(update={"ready": False})
            return AdmitAnswer(granted=False, queued=True)
        del self._waiters[job_id]
        if retried:
            self._released.append(job_id)  # refused: it stays the job that ended
        refusal = self._refusal(item.request)
        return AdmitAnswer(
            granted=False, reason=refusal.reason, retry_after_s=refusal.retry_after_s
        )

    def _refusal(self, request: GateRequest) -> Admission:
        reason = "pool_full" if request.cost <= self._settings.capacity else "cost_above_capacity"
        held_s = (self._lease_ms or RETRY_AFTER_DEFAULT_S * 1000) / 1000
        return Admission(
            admitted=False, reason=reason, retry_after_s=max(1, min(3600, round(held_s)))
        )

    @workflow.update(name=PAUSE_UPDATE)
    async def pause(self, who: GateActor | None = None) -> GateView:
        """Grant nothing until resumed. Leases granted but not yet claimed are recalled;
        the answer comes once every holder has answered, so no job of this gate is
        assigned after it. `who`: the caller (a pause sent before it existed: none)."""
        self._settings.paused = True
        self._record("pause", who.by if who else None)
        self._dirty = True
        await self._recall("pause")
        return self.gate()

    async def _recall(self, why: str) -> None:
        """Recall every lease (a holder not asked yet): each holder answers `recalled`
        (no worker had claimed it: it is queued again in its place) or `kept`. Returns
        once every holder asked has answered, or after RECALL_WAIT."""
        recalled = set(self._holders) - self._unanswered
        self._unanswered |= recalled
        for job_id in sorted(recalled):
            self._send(job_id, RECALL_SIGNAL, workflow.info().workflow_id)
        try:
            await workflow.wait_condition(
                lambda: not (self._unanswered & set(self._holders)), timeout=RECALL_WAIT
            )
        except TimeoutError:
            workflow.logger.warning("%s: %d holder(s) did not answer", why, len(self._unanswered))

    @workflow.update(name=RESUME_UPDATE)
    def resume(self, how: TargetResume) -> GateView:
        """Resume a paused group, or a halted target (`skip`: leave its halting job as it
        is; a `retry` re-queues that job, whose own request then lifts the halt)."""
        self._settings.paused = False
        detail = f"job={how.job}" if self._kind == GateKind.TARGET else None
        self._record("resume", how.by, detail)
        if how.job == "skip":
            self._settings.halted = False
            self._settings.halted_by = None
        self._dirty = True
        return self.gate()

    @workflow.update(name=LOCK_UPDATE)
    def lock(self, ask: LockRequest) -> LockAnswer:
        """Take the gate's lock, or renew it (its owner asking again). A lock another
        owner holds is refused, with who holds it, unless that owner let it expire
        (no renewal within its ttl, by workflow time): then it is taken over."""
        now = workflow_now_ms()
        held = self._lock
        if held is not None and held.owner != ask.owner and not held.expired(now):
            return LockAnswer(held=False, lock=held)
        renewal = held is not None and held.owner == ask.owner
        since = held.since if held is not None and renewal else now
        if not renewal:  # a renewal is no change: a daemon renews its lock often
            self._record("lock", ask.by, f"owner={ask.owner}")
        ttl_ms = max(1, round(ask.ttl_s * 1000))
        self._lock = GateLock(owner=ask.owner, since=since, renewed_at=now, ttl_ms=ttl_ms)
        return LockAnswer(held=True, lock=self._lock)

    @lock.validator
    def _valid_lock(self, ask: LockRequest) -> None:
        if not ask.owner or ask.ttl_s <= 0:
            raise ValueError("a lock needs an owner and a positive ttl_s")

    @workflow.update(name=UNLOCK_UPDATE)
    def unlock(self, ask: LockRequest) -> LockAnswer:
        """Give the lock back; a lock the asker does not hold stays as it is."""
        if self._lock is not None and self._lock.owner == ask.owner:
            self._lock = None
            self._record("unlock", ask.by, f"owner={ask.owner}")
        return LockAnswer(held=False, lock=self._lock)

    @workflow.query(name=GATE_JOBS_QUERY)
    def jobs(self, limit: int) -> list[str]:
        """The jobs it holds a lease for, then the ones it queues, at most `limit`: every
        job of the gate that has not ended, from the moment its submit was answered."""
        return [*self._holders, *self._waiters][:limit]

    @workflow.query(name=GATE_QUERY)
    def gate(self) -> GateView:
        """The gate as read."""
        now = workflow_now_ms()
        if self._fair:
            # Read on a copy: a query changes nothing.
            queues = self._pool_queues(now, every=True)
            first = self._next_fair(*queues, self._shares.model_copy(deep=True), free=None)
        else:
            order = self._order(now)
            first = order[0] if order else None
        return GateView(
            kind=self._kind,
            key=self._key,
            settings=self._settings,
            in_use=self._in_use(),
            holders=sorted(self._holders),
            waiting=len(self._waiters),
            head=first.request.job_id if first else None,
        )

    def _record(self, action: str, by: str | None, detail: str | None = None) -> None:
        """Keep an operator change among the latest GATE_CHANGES_KEEP, for the memo's
        next write (a run from before GATE_AUDIT_PATCH keeps none)."""
        if not workflow.patched(GATE_AUDIT_PATCH):
            return
        change = GateChange(ts=workflow_now_ms(), by=by, action=action, detail=detail)
        self._changes = [*self._changes[-(GATE_CHANGES_KEEP - 1) :], change]
        self._changes_unwritten = True
        self._dirty = True

    # -- the decisions -------------------------------------------------------------

    def _add(self, request: GateRequest, front: bool = False) -> None:
        job_id = request.job_id
        if job_id in self._holders:
            return
        self._shares.learn(_group(request), request.weight)
        waiting = self._waiters.get(job_id)
        if waiting is not None:
            if request.ready and not waiting.request.ready:
                waiting.request = request
            if front:
                waiting.seq = self._front_seq()
        else:
            self._seq += 1
            seq = self._front_seq() if front else self._seq
            self._waiters[job_id] = Waiter(request=request, seq=seq, enqueued_at=workflow_now_ms())
        self._dirty = True

    def _front_seq(self) -> int:
        return min((w.seq for w in self._waiters.values()), default=self._seq) - 1

    def _in_use(self) -> int:
        if self._kind == GateKind.POOL:
            return sum(h.request.cost for h in self._holders.values())
        return len(self._holders)

    def _order(self, now: int) -> list[Waiter]:
        """The waiters in the order this gate grants them (a pool without fair shares:
        near deadlines first, then priority plus aging, then arrival)."""
        waiters = list(self._waiters.values())
        if self._kind == GateKind.TARGET:
            return sorted(waiters, key=lambda w: w.seq)
        if self._kind == GateKind.GROUP:
            return sorted(waiters, key=lambda w: (-w.request.priority, w.seq))
        urgency_ms = self._settings.deadline_urgency_s * 1000

        def rank(w: Waiter) -> tuple[int, int, int, int]:
            deadline = w.request.deadline_at
            urgent = deadline is not None and deadline - now <= urgency_ms
            return (
                0 if urgent else 1,
                (deadline or 0) if urgent else 0,
                -self._rank(w, now),
                w.seq,
            )

        return sorted(waiters, key=rank)

    def _rank(self, waiter: Waiter, now: int) -> int:
        """A pool's waiter's priority, plus a point per aging step waited if it ages."""
        step_s = self._settings.aging_step_s
        if step_s is None:
            return waiter.request.priority
        step_ms = max(1.0, step_s * 1000)
        return waiter.request.priority + int((now - waiter.enqueued_at) // step_ms)

    def _pool_queues(
        self, now: int, *, every: bool = False
    ) -> tuple[list[Waiter], dict[str, list[Waiter]]]:
        """A pool's waiters that can fit at its capacity (`every`: all of them): those
        whose deadline is near, soonest first; the others per group, by priority then
        arrival."""
        capacity = self._settings.capacity
        urgency_ms = self._settings.deadline_urgency_s * 1000
        urgent: list[Waiter] = []
        groups: dict[str, list[Waiter]] = {}
        for waiter in self._waiters.values():
            request = waiter.request
            if request.cost > capacity and not every:
                continue  # can never fit at this capacity: it reserves nothing
            deadline = request.deadline_at
            if deadline is not None and deadline - now <= urgency_ms:
                urgent.append(waiter)
            else:
                groups.setdefault(_group(request), []).append(waiter)
        urgent.sort(key=lambda w: (w.request.deadline_at or 0, w.seq))
        for queue in groups.values():
            queue.sort(key=lambda w: (-self._rank(w, now), w.seq))
        return urgent, groups

    def _next_fair(
        self,
        urgent: list[Waiter],
        groups: dict[str, list[Waiter]],
        shares: FairShares,
        free: int | None,
    ) -> Waiter | None:
        """The waiter a pool grants next, or reserves what frees up for (one that does
        not fit in `free` units: nothing is granted past it, so small jobs cannot starve
        it). A request whose job has not asked yet is passed over while it fits
        (`free` None: by order alone, as the view's head). Near deadlines first; then
        the group whose fair share is due (`shares`, updated to the groups waiting), and
        that group's first."""

        def candidate(waiter: Waiter) -> bool:
            request = waiter.request
            return free is None or request.ready or request.cost > free

        for waiter in urgent:
            if candidate(waiter):
                return waiter
        heads: dict[str, Waiter] = {}
        for group, queue in groups.items():
            head = next((w for w in queue if candidate(w)), None)
            if head is not None:
                heads[group] = head
        if not heads:
            return None
        shares.waiting(heads)
        return heads[shares.pick({group: head.seq for group, head in heads.items()})]

    def _grant_fair(self, now: int, quiet: str | None) -> None:
        """A pool's grants: what fits, in the order `_next_fair` gives."""
        urgent, groups = self._pool_queues(now)
        while True:
            free = self._settings.capacity - self._in_use()
            waiter = self._next_fair(urgent, groups, self._shares, free)
            if waiter is None or waiter.request.cost > free:
                return
            request = waiter.request
            for queue in (urgent, groups.get(_group(request), [])):
                queue[:] = [w for w in queue if w is not waiter]
            self._lease(waiter, now, quiet)
            self._shares.charge(_group(request))

    def _grant(self, now: int, quiet: str | None = None) -> None:
        """Grant what fits, in order; each grant is signalled to its job, except to
        `quiet` (a job being admitted, which learns it from the answer)."""
        settings = self._settings
        if settings.paused or settings.halted:
            return
        if self._fair:
            self._grant_fair(now, quiet)
            return
        for waiter in self._order(now):
            request = waiter.request
            if self._kind == GateKind.TARGET:
                if self._holders or not request.ready:
                    return  # strictly in order: the head waits for its job to ask
            elif self._kind == GateKind.GROUP:
                limit = settings.max_parallel
                if limit is not None and len(self._holders) >= limit:
                    return
                if not request.ready:
                    continue
            else:
                if request.cost > settings.capacity:
                    continue  # can never fit at this capacity: it reserves nothing
                if request.cost > settings.capacity - self._in_use():
                    return  # the head reserves what frees up: small jobs don't starve it
                if not request.ready:
                    continue
            self._lease(waiter, now, quiet)

    def _lease(self, waiter: Waiter, now: int, quiet: str | None) -> None:
        job_id = waiter.request.job_id
        del self._waiters[job_id]
        self._holders[job_id] = Holder(
            **waiter.model_dump(exclude={"seen_at"}), granted_at=now, seen_at=now
        )
        if job_id != quiet:
            self._send(job_id, GRANT_SIGNAL, self._grant_for())
        self._dirty = True

    def _grant_for(self) -> GateGrant:
        weight = self._settings.weight if self._kind == GateKind.GROUP else None
        return GateGrant(workflow_id=workflow.info().workflow_id, weight=weight)

    def _checked(self) -> list[Waiter]:
        """Holders, and requests whose job has not asked itself: each is pinged now and
        then, and a job that no longer runs loses its lease or its place."""
        unready = [w for w in self._waiters.values() if not w.request.ready]
        return [*self._holders.values(), *unready]

    def _ping_due(self, waiter: Waiter) -> int:
        if waiter.seen_at is None:
            return waiter.enqueued_at + UNREADY_TTL_MS
        return waiter.seen_at + self._ping_after_ms()

    def _ping(self, now: int) -> None:
        for waiter in self._checked():
            if now >= self._ping_due(waiter):
                waiter.seen_at = now
                self._send(waiter.request.job_id, PING_SIGNAL, None)

    def _next_wake(self) -> timedelta | None:
        times = [self._ping_due(waiter) for waiter in self._checked()]
        if not times:
            return None
        return timedelta(milliseconds=max(1000, min(times) - workflow_now_ms()))

    def _should_continue(self) -> bool:
        info = workflow.info()
        limit = self._settings.history_limit
        return info.is_continue_as_new_suggested() or info.get_current_history_length() > limit

    def _ping_after_ms(self) -> int:
        return int(self._settings.ping_after_s * 1000)

    def _carry(self) -> GateInput:
        if self._fair:
            jobs = [*self._waiters.values(), *self._holders.values()]
            self._shares.keep_weights({_group(w.request) for w in jobs})
        return GateInput(
            kind=self._kind,
            key=self._key,
            settings=self._settings,
            waiters=list(self._waiters.values()),
            holders=list(self._holders.values()),
            seq=self._seq,
            released=self._released,
            lease_ms=self._lease_ms,
            shares=self._shares if self._fair else None,
            lock=self._lock,
            changes=self._changes or None,
        )

    # -- signals out ---------------------------------------------------------------

    def _send(self, job_id: str, signal: str, arg: object) -> None:
        """Signal a job without blocking the decision; a job that no longer runs loses
        its lease or its place."""
        task = asyncio.create_task(self._signal(job_id, signal, arg))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _signal(self, job_id: str, signal: str, arg: object) -> None:
        handle = workflow.get_external_workflow_handle(job_id)
        try:
            if arg is None:
                await handle.signal(signal)
            else:
                await handle.signal(signal, arg)
        except FailureError as err:
            workflow.logger.info("job %s is gone (%s): its lease is dropped", job_id, err)
            self._holders.pop(job_id, None)
            self._waiters.pop(job_id, None)
            self._unanswered.discard(job_id)
            self._dirty = True


def _group(request: GateRequest) -> str:
    """The class a pool shares its grants by: the job's group, or the ungrouped one."""
    return request.group if request.group is not None else UNGROUPED
