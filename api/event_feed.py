"""The job event stream, derived from Temporal visibility: no broker, no process state
that another API replica would not derive the same way.

Every job keeps its latest transitions in its memo, stamped with workflow time, and
`JobforgeUpdatedAt` holds the time of its latest one. One poller per API process lists
the jobs updated since its cursor and emits their transitions in the order of the key
(ts, job id, seq) once they are older than a settle window, so the stream is a single
ordered sequence and an event id is a position in it: resuming after id K means
"every transition whose key is greater than K".

A transition that visibility shows only after the stream passed its key (a lag beyond
the settle window) is still sent, at once: its id is the position it takes, after the
event it follows (`<key>+<n>`, the n-th such one since), never its own lower key, so a
client's ids only grow. A client resuming after it gets nothing it had; one resuming
from before it on the same process gets it again from the process's log of them
(the last `forget_ms`); another replica has its own log, so there such an event may
be missed or repeated (tests/test_event_feed_looks.py).

While at least one client is subscribed, the poller looks every EVENTS_POLL_MS, and
also at the moment a transition it holds (or one made through this process) comes out
of the settle window, but never sooner than EVENTS_POLL_GAP_MS after its last look: at
most 1000 / EVENTS_POLL_GAP_MS listings a second, one for all of the process's clients.
With no client, what it feeds (counters, the dashboard's minutes) needs every
transition but not within a second: it looks every EVENTS_IDLE_POLL_MS only, and a
client that connects wakes it (and the first one is let in after a look, so its live
events start where a busy feed's would). Each look re-reads the jobs updated in the
look-back (2 s), and a listed row costs the server about half a millisecond of CPU
(bench.feed_listing), so every 100 ms a short job's row would be listed some 20 times.

Progress (`job:progress`) is not in the jobs' histories: a running attempt's progress
travels in its activity heartbeat. While at least one client is connected, the process
reads the heartbeat of running jobs (one describe each) at most once per
PROGRESS_PUBLISH_MS, a bounded page of them per round, and sends a job's progress to a
client when it differs from what that client last got. These events are live only: they
have no id, take no place in the ordered sequence and are not replayed on resume.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from pydantic import Field, PrivateAttr, ValidationError
from temporalio.client import Client, WorkflowExecution
from temporalio.service import RPCError

from api import visibility_queries
from api.job_service import JobService
from workflows import search_attributes
from workflows.job_states import SOLVING, JobStatus, is_ended, ordered
from workflows.models import EventsMemo, JobIdentity, Progress, Transition
from workflows.names import EVENTS_MEMO, attempt_activity_id
from workflows.search_attributes import JOBS, job_filter

log = logging.getLogger("jobforge.events")

EVENT_NAMES = {
    JobStatus.ASSIGNED: "job:assigned",
    JobStatus.RUNNING: "job:running",
    JobStatus.COMPLETED: "job:completed",
    JobStatus.FAILED: "job:failed",
    JobStatus.QUARANTINED: "job:quarantined",
    JobStatus.STOP_REQUESTED: "job:stop_requested",
    JobStatus.STOPPED: "job:stopped",
}

PROGRESS_EVENT = "job:progress"
# Jobs whose attempt's solver runs (a stop_requested one runs until it is killed).
RUNNING_JOBS = job_filter(statuses=ordered(SOLVING)) + " AND ExecutionStatus = 'Running'"
# Heartbeats read at once in a progress round.
PROGRESS_READS_AT_ONCE = 16
DESCRIBE_TIMEOUT = timedelta(seconds=5)
# Transitions made through this process that the poller waits for at once (more: they
# are seen at the regular looks).
EXPECTED_MAX = 10_000
# Events sent to a client in one write, at most.
BATCH_MAX = 200


@dataclass(frozen=True, order=True)
class EventKey:
    """A position in the stream."""

    ts: int
    job_id: str
    seq: int

    def encode(self) -> str:
        """The SSE id."""
        return f"{self.ts}-{self.job_id}-{self.seq}"

    @classmethod
    def parse(cls, raw: str) -> EventKey | None:
        """An SSE id back to a key; None if it is not one of ours."""
        # A job id may hold '-' itself (a schedule's firings: `<id>-<time>`).
        ts, _, rest = raw.strip().partition("-")
        job_id, _, seq = rest.rpartition("-")
        if not ts.isdigit() or not job_id or not seq.isdigit():
            return None
        return cls(int(ts), job_id, int(seq))


@dataclass(frozen=True, order=True)
class Position:
    """Where an event is in the stream as sent: its key, or for a transition seen late,
    the key it was sent after and how many late ones were sent after that key."""

    key: EventKey
    late: int = 0

    def encode(self) -> str:
        """The SSE id."""
        return self.key.encode() + (f"+{self.late}" if self.late else "")

    @classmethod
    def parse(cls, raw: str) -> Position | None:
        """An SSE id back to a position; None if it is not one of ours."""
        head, plus, late = raw.strip().rpartition("+")
        if not plus:
            head, late = late, "0"
        key = EventKey.parse(head)
        if key is None or not late.isdigit():
            return None
        return cls(key, int(late))


class JobEvent(JobIdentity, Transition):
    """One transition of one job, as sent on the stream: the transition, the job's
    identity, its id and the event's name."""

    event: str
    id: str
    fail_reason: str | None = Field(
        default=None, description="Of a failed or quarantined job: why (`cancelled`, …)"
    )
    _wire: str | None = PrivateAttr(default=None)
    # Set on a transition sent after the stream passed its key.
    _late_at: Position | None = PrivateAttr(default=None)

    @property
    def position(self) -> Position:
        """Its place in the stream: its key, unless it was sent late."""
        return self._late_at or Position(EventKey(self.ts, self.id, self.seq))

    def wire(self) -> str:
        """Its JSON, made once however many clients it is sent to."""
        if self._wire is None:
            self._wire = self.model_dump_json()
        return self._wire


class JobProgress(JobEvent):
    """`job:progress`: a running job's latest transition, as its other events carry
    it, and its attempt's last progress."""

    progress: Progress

    @property
    def mark(self) -> tuple[int, float, str | None]:
        """What makes it news: attempt, fraction and message. Not `at`, which an agent's
        progress gets anew on every heartbeat."""
        return (self.attempt, self.progress.fraction, self.progress.message)


def event_name(transition: Transition) -> str:
    """`job:created`, `job:failed`, … for a transition. A cancel is the spec's
    `job:failed`, told apart by its `fail_reason` (`cancelled`): a client that listens
    to the spec's five names sees every job end."""
    if transition.status == JobStatus.PENDING:
        return "job:created" if transition.seq == 1 else "job:pending"
    return EVENT_NAMES[transition.status]


def make_event(job_id: str, memo: EventsMemo, transition: Transition) -> JobEvent:
    """The stream's view of one transition."""
    ended_badly = transition.status in (JobStatus.FAILED, JobStatus.QUARANTINED)
    return JobEvent(
        **memo.model_dump(exclude={"transitions"}),
        **transition.model_dump(),
        event=event_name(transition),
        id=job_id,
        fail_reason=transition.reason if ended_badly else None,
    )


def key_of(event: JobEvent) -> EventKey:
    """An event's position."""
    return EventKey(event.ts, event.id, event.seq)


@dataclass(eq=False)
class Subscriber:
    """One connected client: a bounded queue and its filters."""

    queue: asyncio.Queue[JobEvent | None]
    accepts: Callable[[JobEvent], bool]
    overflowed: bool = False
    # job id → the progress mark it was last offered.
    progress: dict[str, tuple[int, float, str | None]] = field(default_factory=dict)

    def offer(self, event: JobEvent) -> None:
        """Queue an event; a client that falls too far behind is cut off (it resumes)."""
        if self.overflowed or not self.accepts(event):
            return
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self.overflowed = True
            with contextlib.suppress(asyncio.QueueEmpty):
                self.queue.get_nowait()
            self.queue.put_nowait(None)

    def offer_progress(self, event: JobProgress) -> None:
        """Queue a job's progress if it changed since this client last got it."""
        if self.progress.get(event.id) == event.mark:
            return
        self.progress[event.id] = event.mark
        self.offer(event)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _iso(ms: int) -> str:
    return (
        datetime.fromtimestamp(ms / 1000, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


@dataclass
class FeedSettings:
    """Timing of the poller."""

    # EVENTS_POLL_MS: a look at visibility at least this often while a client is
    # subscribed; EVENTS_IDLE_POLL_MS (at least as long): while none is.
    poll_ms: int = 100
    idle_poll_ms: int = 1000
    # EVENTS_POLL_GAP_MS: looks are at least this far apart, even when transitions come
    # out of the settle window sooner (a bound on the listings a second).
    min_gap_ms: int = 25
    # A transition is emitted once it is this old (at least), so the ones visibility
    # shows late still come out in key order; it grows with the lag actually seen, to
    # lag_margin_ms above it.
    settle_ms: int = 100
    settle_max_ms: int = 5000
    lag_margin_ms: int = 50
    # Jobs updated this long before the cursor are re-read, to catch late visibility.
    lookback_ms: int = 2000
    lookback_max_ms: int = 30_000
    # A finished job is forgotten this long after its last transition.
    forget_ms: int = 60_000
    queue_max: int = 10_000


@dataclass(frozen=True)
class ProgressSettings:
    """How running jobs' progress is read while a client is connected."""

    # PROGRESS_PUBLISH_MS: a round starts at most this often, and reads each job once.
    every_ms: int = 1000
    # EVENTS_PROGRESS_MAX_JOBS: running jobs read per round; more are read in turns.
    max_jobs: int = 100


async def attempt_progress(client: Client, job_id: str, attempt: int) -> Progress | None:
    """The progress in the last heartbeat of a job's attempt, if it is still pending
    and the heartbeat carries one in jobforge's shape. One describe call."""
    try:
        desc = await client.get_workflow_handle(job_id).describe(rpc_timeout=DESCRIBE_TIMEOUT)
    except RPCError as err:
        log.debug("cannot read the attempt of %s: %s", job_id, err)
        return None
    activity_id = attempt_activity_id(attempt)
    for pending in desc.raw_description.pending_activities:
        if pending.activity_id != activity_id or not pending.heartbeat_details.payloads:
            continue
        details = await client.data_converter.decode(pending.heartbeat_details.payloads)
        try:
            return Progress.model_validate(details[0])
        except ValidationError:
            return None
    return None


@dataclass
class EventFeed:
    """The process's poller and its subscribers."""

    client: Client
    jobs: JobService
    settings: FeedSettings = field(default_factory=FeedSettings)
    on_event: Callable[[JobEvent], None] | None = None
    progress: ProgressSettings = field(default_factory=ProgressSettings)
    on_poll: Callable[[], None] | None = None
    # The longest visibility lag shown lately (decaying): how long after its time a
    # transition was still missing from a look.
    lag_ms: float = 0.0
    _cursor: EventKey | None = None
    # When the last look started (epoch ms).
    _last_look: int | None = None
    # Times of transitions made through this process and not yet out of the settle
    # window: the poller looks when they come out.
    _expected: list[int] = field(default_factory=list)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    # One look at a time: the poller's, or the one a client coming to an idle feed makes.
    _looking: asyncio.Lock = field(default_factory=asyncio.Lock)
    _start: EventKey | None = None
    # job id → (last seq emitted, its ts, finished)
    _sent: dict[str, tuple[int, int, bool]] = field(default_factory=dict)
    # Transitions seen but not yet settled.
    _waiting: set[EventKey] = field(default_factory=set)
    # Transitions sent late since the cursor last moved, and those of the last
    # `forget_ms` (for a client that resumes from before one of them).
    _late: int = 0
    _late_log: deque[JobEvent] = field(default_factory=deque)
    _subscribers: set[Subscriber] = field(default_factory=set)
    _task: asyncio.Task[None] | None = None
    # Progress rounds run only while someone is subscribed.
    _progress_task: asyncio.Task[None] | None = None
    # Where the next round lists running jobs from (None: the first page).
    _progress_token: bytes | None = None
    # Jobs read since the listing last started over; marks of any other are dropped then.
    _progress_seen: set[str] = field(default_factory=set)

    @property
    def cursor(self) -> EventKey:
        """The last position emitted (or where the feed started)."""
        if self._cursor is None:
            self._cursor = EventKey(int(time.time() * 1000) - self.settings.settle_ms, "", 0)
            self._start = self._cursor
        return self._cursor

    @property
    def began_ms(self) -> int:
        """When the feed began: it emits no transition from before (epoch ms)."""
        cursor = self.cursor
        return (self._start or cursor).ts

    def start(self) -> None:
        """Run the poller (idempotent)."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="event feed")

    async def stop(self) -> None:
        """Stop the poller."""
        for task in (self._task, self._progress_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def expect(self, ts: int) -> None:
        """A transition at `ts` (epoch ms) was made through this process: look when it
        comes out of the settle window rather than at the next regular look, if a
        client is there to get it sooner (without one, the regular look sees it)."""
        if self._subscribers and len(self._expected) < EXPECTED_MAX:
            heapq.heappush(self._expected, ts)
            self._wake.set()

    @property
    def settle_ms(self) -> float:
        """How old a transition must be to be emitted, now."""
        cfg = self.settings
        return min(max(cfg.settle_ms, self.lag_ms + cfg.lag_margin_ms), cfg.settle_max_ms)

    def next_look(self, last: int) -> int:
        """When to look next (epoch ms) after a look that started at `last`. While a
        client is subscribed: `poll_ms` after it, or sooner when the first held or
        expected transition comes out of the settle window; never sooner than
        `min_gap_ms` after `last`. While none is: `idle_poll_ms` after it."""
        cfg = self.settings
        settle = self.settle_ms
        while self._expected and self._expected[0] + settle < last:
            heapq.heappop(self._expected)  # the look at `last` saw it settled
        if not self._subscribers:
            return last + max(cfg.poll_ms, cfg.idle_poll_ms, cfg.min_gap_ms)
        due = last + cfg.poll_ms
        if self._waiting:
            due = min(due, min(key.ts for key in self._waiting) + int(settle) + 1)
        if self._expected:
            due = min(due, self._expected[0] + int(settle) + 1)
        return max(due, last + cfg.min_gap_ms)

    async def _run(self) -> None:
        while True:
            started = _now_ms()
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as err:  # Temporal unavailable: keep trying
                log.warning("event poll failed: %s", err)
                await asyncio.sleep(1.0)
            await self._sleep_until_next_look(started)

    async def _sleep_until_next_look(self, last: int) -> None:
        """Sleep until `next_look`, which a transition made meanwhile may bring closer."""
        while (delay := self.next_look(last) - _now_ms()) > 0:
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay / 1000)

    async def tick(self) -> None:
        """One look at visibility: emit every settled transition not emitted yet."""
        async with self._looking:
            await self._look()

    async def _look(self) -> None:
        cursor = self.cursor
        start = self._start or cursor
        cfg = self.settings
        now = _now_ms()
        # A transition the last look did not show was this old then, at least.
        previous = self._last_look
        settle = self.settle_ms
        settled = now - settle
        if self.on_poll is not None:
            self.on_poll()
        lookback = min(max(cfg.lookback_ms, 3 * self.lag_ms), cfg.lookback_max_ms)
        since = cursor.ts - int(lookback)
        fresh: list[JobEvent] = []
        late: list[JobEvent] = []
        lag = 0
        waiting: set[EventKey] = set()
        async for job_id, memo in self._changed_since(since):
            last_seq = self._sent.get(job_id, (0, 0, False))[0]
            held = False
            for transition in memo.transitions:
                if transition.seq <= last_seq:
                    continue
                key = EventKey(transition.ts, job_id, transition.seq)
                if key <= start:
                    # Before the feed began: never sent, and no measure of the lag (its
                    # age would grow the settle window and the look-back each tick).
                    continue
                if key not in self._waiting and previous is not None:
                    # Neither sent nor held: the last look did not show it. Its age
                    # then is visibility lag actually seen.
                    lag = max(lag, previous - transition.ts)
                # Once one waits to settle, the job's later ones wait too (its order).
                held = held or transition.ts >= settled
                if held:
                    waiting.add(key)
                    continue
                event = make_event(job_id, memo, transition)
                if key > cursor:
                    fresh.append(event)
                elif key > start:
                    late.append(event)  # seen after the cursor passed it: still sent
        # The estimate decays by 5 % per 100 ms, so one slow look does not pin the
        # settle window.
        decay = 0.95 ** ((now - previous) / 100) if previous is not None else 1.0
        self.lag_ms = max(float(min(lag, cfg.settle_max_ms)), self.lag_ms * decay)
        # A held transition is in every look until it is sent (it is younger than the
        # cursor): what this look holds is all that waits.
        self._waiting = waiting
        self._last_look = now
        fresh.sort(key=key_of)
        late.sort(key=key_of)
        for event in late:
            self._late += 1
            event._late_at = Position(cursor, self._late)
            self._late_log.append(event)
        for event in [*late, *fresh]:
            self._emit(event)
        if fresh:
            self._cursor = key_of(fresh[-1])
            self._late = 0
        self._forget(cursor.ts - cfg.forget_ms)

    # -- progress ----------------------------------------------------------------------

    def _watch_progress(self) -> None:
        """Start the progress rounds (idempotent)."""
        if self._progress_task is None or self._progress_task.done():
            self._progress_task = asyncio.create_task(self._progress_rounds(), name="progress")

    def _unwatch_progress(self) -> None:
        """Stop them once the last client has gone: no client, no read."""
        if not self._subscribers and self._progress_task is not None:
            self._progress_task.cancel()
            self._progress_task = None

    async def _progress_rounds(self) -> None:
        while self._subscribers:
            started = time.monotonic()
            try:
                await self.progress_round()
            except asyncio.CancelledError:
                raise
            except Exception as err:  # Temporal unavailable: keep trying
                log.warning("progress poll failed: %s", err)
            elapsed = time.monotonic() - started
            await asyncio.sleep(max(self.progress.every_ms / 1000 - elapsed, 0.01))

    async def progress_round(self) -> None:
        """Read the progress of one page of running jobs and offer it to every client.

        Each round lists the page after the last one, so with more than `max_jobs`
        running every job is read in turn (once per ceil(running / max_jobs) rounds).
        A job is read only once the stream has sent the transition that made it
        running, so its progress never comes before its `job:running`."""
        token, self._progress_token = self._progress_token, None
        page, next_token = await self._running_page(token)
        if not page and token is not None:
            page, next_token = await self._running_page(None)  # past the end: start over
        running: list[tuple[str, EventsMemo]] = []
        for execution in page:
            memo = await visibility_queries.events_memo(execution)
            if memo is None:
                continue
            if memo.transitions and self._shown(execution.id, memo.transitions[-1]):
                running.append((execution.id, memo))
        gate = asyncio.Semaphore(PROGRESS_READS_AT_ONCE)

        async def read(job_id: str, memo: EventsMemo) -> JobProgress | None:
            last = memo.transitions[-1]
            async with gate:
                progress = await attempt_progress(self.client, job_id, last.attempt)
            if progress is None:
                return None
            return JobProgress(
                **memo.model_dump(exclude={"transitions"}),
                **last.model_dump(),
                event=PROGRESS_EVENT,
                id=job_id,
                progress=progress,
            )

        read_now = await asyncio.gather(*(read(job_id, memo) for job_id, memo in running))
        for event in read_now:
            # Checked again: the stream may have sent the job's end during the reads.
            if event is not None and self._shown(event.id, event):
                for subscriber in list(self._subscribers):
                    subscriber.offer_progress(event)
        self._progress_token = next_token
        self._progress_seen.update(job_id for job_id, _ in running)
        if self._progress_token is None:
            # Every running job was listed once: forget the marks of the others.
            for subscriber in self._subscribers:
                for job_id in subscriber.progress.keys() - self._progress_seen:
                    del subscriber.progress[job_id]
            self._progress_seen.clear()

    async def _running_page(
        self, token: bytes | None
    ) -> tuple[Sequence[WorkflowExecution], bytes | None]:
        """One page of running jobs from `token`, and the token of the next."""
        listing = self.client.list_workflows(
            RUNNING_JOBS, page_size=self.progress.max_jobs, next_page_token=token
        )
        await listing.fetch_next_page()
        return listing.current_page or [], listing.next_page_token

    def _shown(self, job_id: str, transition: Transition) -> bool:
        """Whether the stream has sent `transition` as the job's latest (or began after
        it): not when visibility shows it early, nor when the stream is past it."""
        sent = self._sent.get(job_id)
        if sent is not None:
            return sent[0] == transition.seq
        return EventKey(transition.ts, job_id, transition.seq) <= (self._start or self.cursor)

    def _emit(self, event: JobEvent) -> None:
        finished = is_ended(event.status, event.reason)
        self._sent[event.id] = (event.seq, event.ts, finished)
        if self.on_event is not None:
            self.on_event(event)
        for subscriber in list(self._subscribers):
            subscriber.offer(event)

    def _forget(self, before: int) -> None:
        """Drop finished jobs last seen before `before`: they change no more, and they
        are out of the window that is re-read."""
        stale = [j for j, (_, ts, finished) in self._sent.items() if finished and ts < before]
        for job_id in stale:
            del self._sent[job_id]
        log = self._late_log
        while log and (log[0].position.key.ts < before or len(log) > self.settings.queue_max):
            log.popleft()

    @property
    def position(self) -> Position:
        """Where the stream is: the position of the last event sent."""
        return Position(self.cursor, self._late)

    def late_between(self, after: Position, until: Position) -> list[JobEvent]:
        """The transitions this process sent late at a position in (after, until] whose
        key is not past `after`'s: a client at `after` missed them, and a replay by key
        would not bring them."""
        return [
            event
            for event in self._late_log
            if after < event.position <= until and key_of(event) <= after.key
        ]

    async def _changed_since(self, since_ms: int) -> AsyncIterator[tuple[str, EventsMemo]]:
        query = f"{JOBS} AND {search_attributes.UPDATED_AT.name} >= '{_iso(since_ms)}'"
        # Ids and memos only: decoding each row's search attributes too would be most
        # of a look's CPU.
        for job_id, memo in await visibility_queries.every_memo(
            self.client, query, EVENTS_MEMO, EventsMemo
        ):
            yield job_id, memo

    async def _full_memo(self, job_id: str, memo: EventsMemo) -> EventsMemo:
        """The memo, with every transition when older ones were cut from it."""
        if not memo.transitions or memo.transitions[0].seq == 1:
            return memo
        job = await self.jobs.get(job_id)
        return memo.model_copy(update={"transitions": job.transitions})

    async def catch_up(self, after: EventKey, until: EventKey) -> list[JobEvent]:
        """Every transition with after < key <= until, in order (a resuming client)."""
        events: list[JobEvent] = []
        async for job_id, memo in self._changed_since(after.ts - self.settings.lookback_ms):
            first = memo.transitions[0] if memo.transitions else None
            if first is not None and first.seq > 1 and first.ts > after.ts:
                memo = await self._full_memo(job_id, memo)
            for transition in memo.transitions:
                event = make_event(job_id, memo, transition)
                if after < key_of(event) <= until:
                    events.append(event)
        events.sort(key=key_of)
        return events

    async def subscribe(
        self,
        accepts: Callable[[JobEvent], bool],
        last_event_id: str | None,
        progress: ProgressSettings | None = None,
        idle_s: float | None = None,
        since_ms: int | None = None,
    ) -> AsyncGenerator[list[JobEvent], None]:
        """Events for one client, in batches (what came at once, sent at once): what it
        missed (after Last-Event-ID; without one, after `since_ms` if given), then live
        ones, with running jobs' progress (`JobProgress`, read as `progress` says) among
        them. An empty batch after `idle_s` without one (a keep-alive's turn)."""
        if progress is not None:
            self.progress = progress
        self.start()
        subscriber = Subscriber(asyncio.Queue(self.settings.queue_max), accepts)
        if not self._subscribers:
            # The idle looks are up to EVENTS_IDLE_POLL_MS behind: one look first, so the
            # client's live events start where a busy feed's would (settled, not older).
            try:
                await self.tick()
            except Exception as err:  # Temporal unavailable: the poller keeps trying
                log.warning("event poll failed: %s", err)
        self._subscribers.add(subscriber)
        self._wake.set()  # an idle poller's next look is closer now
        self._watch_progress()
        try:
            resume = Position.parse(last_event_id) if last_event_id else None
            if resume is None and since_ms is not None:
                # Before every transition at since_ms.
                resume = Position(EventKey(since_ms, "", 0))
            caught: set[EventKey] = set()
            now = self.position
            if resume is not None and resume < now:
                late = self.late_between(resume, now)
                missed = await self.catch_up(resume.key, now.key)
                missed = sorted([*missed, *late], key=lambda event: event.position)
                caught.update(key_of(event) for event in missed)
                accepted = [event for event in missed if accepts(event)]
                for at in range(0, len(accepted), BATCH_MAX):
                    yield accepted[at : at + BATCH_MAX]
            while True:
                try:
                    live = await asyncio.wait_for(subscriber.queue.get(), idle_s)
                except TimeoutError:
                    yield []
                    continue
                batch: list[JobEvent] = []
                while live is not None:
                    if isinstance(live, JobProgress):
                        batch.append(live)  # no place in the ordered stream: no skip
                    elif resume is None or (live.position > resume and key_of(live) not in caught):
                        batch.append(live)  # (else the client has it already)
                    if len(batch) >= BATCH_MAX or subscriber.queue.empty():
                        break
                    live = subscriber.queue.get_nowait()
                if batch:
                    yield batch
                if live is None:
                    return  # overflowed: the client reconnects with its Last-Event-ID
        finally:
            self._subscribers.discard(subscriber)
            self._unwatch_progress()
