"""A pinned job's wait for its host (`require_host`, `preferred_host`; docs/scheduling.md):
which queue its next attempt goes to, and for how long."""

from __future__ import annotations

from datetime import timedelta

from temporalio.exceptions import ActivityError

from workflows.attempt_outcomes import not_started_in_time
from workflows.models import Job, JobInput, WaitingFor


class HostWait:
    """Each wait for the host (from the first attempt, and again after a claimed attempt
    ended) lasts the host's wait at most; an attempt nobody claimed (a bridge's
    hand-back) does not restart it. `pinned` is set by the workflow's marker."""

    def __init__(self) -> None:
        self.pinned = False
        self.fell_back = False
        self._until: int | None = None

    def placement(
        self, job: Job, inp: JobInput, schedule_to_start: timedelta | None, now_ms: int
    ) -> tuple[str, timedelta | None, bool]:
        """The attempt's queue, how long it may wait there, and whether the host's wait
        ends before `schedule_to_start` (then the dispatch timeout does not apply)."""
        if self.fell_back:
            return inp.activity_task_queue, schedule_to_start, False
        spec = inp.spec
        if self._until is None:
            self._until = now_ms + (spec.require_host_wait_ms or spec.preferred_host_wait_ms or 0)
        job.waiting_for = WaitingFor.HOST
        left = timedelta(milliseconds=max(self._until - now_ms, 1))
        cut = schedule_to_start is not None and left < schedule_to_start
        if schedule_to_start is not None:
            left = min(left, schedule_to_start)
        return inp.preferred_task_queue or inp.activity_task_queue, left, cut

    def claimed(self, job: Job) -> None:
        """A worker took the attempt: a later attempt waits for its host afresh."""
        if self.pinned:
            job.waiting_for = None
            self._until = None
            self.fell_back = False

    def restart(self) -> None:
        """A stale claim went back: the next attempt waits for its host afresh."""
        if self.pinned:
            self._until = None

    def waited_out(self, err: ActivityError, time_to_deadline: timedelta | None) -> bool:
        """The attempt waited on the host's queue past the host's wait, not past
        deadline_at."""
        if not (self.pinned and not self.fell_back and not_started_in_time(err)):
            return False
        return time_to_deadline is None or time_to_deadline > timedelta(0)
