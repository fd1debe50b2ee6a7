"""Job logs (engine/log_store.py): read or follow an attempt's stdout and stderr, and
the HTTP agents' upload of theirs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from api.deps import Authorized, ConfigDep, JobsDep, ScopeDep
from engine.log_store import LogLine, LogStore, UploadConflictError
from workflows.errors import InvalidField, JobConflict
from workflows.job_states import HELD, is_ended
from workflows.models import WORKER_ID_PATTERN, Job

router = APIRouter(prefix="/api/jobs", tags=["logs"], dependencies=[Authorized])

JobId = Annotated[str, Path(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="Job id")]
# How often a follower re-reads the job to learn that the attempt is over.
FOLLOW_STATUS_S = 1.0
UPLOAD_LINES_MAX = 2000
LAST_MAX = 10_000


class JobLog(BaseModel):
    """An attempt's log from `offset` on."""

    job_id: str
    attempt: int | None
    lines: list[LogLine]
    next_offset: int = Field(description="Pass as `offset` to read only what follows")


def _utf8(text: str) -> str:
    try:
        text.encode()
    except UnicodeEncodeError:
        raise ValueError("is not valid UTF-8 (a lone surrogate?)") from None
    return text


class UploadedLine(LogLine):
    """A line as an agent sends it: text the log file can hold (UTF-8)."""

    text: Annotated[str, AfterValidator(_utf8)]


class LogUpload(BaseModel):
    """`POST /api/jobs/{id}/logs`: a chunk of an agent's attempt output."""

    model_config = ConfigDict(extra="forbid")

    worker_id: Annotated[str, Field(pattern=WORKER_ID_PATTERN)]
    attempt: Annotated[int, Field(strict=True, ge=1)]
    offset: Annotated[int, Field(strict=True, ge=0, description="Bytes stored before it")]
    lines: Annotated[list[UploadedLine], Field(max_length=UPLOAD_LINES_MAX)]


class Uploaded(BaseModel):
    next_offset: int


async def _attempt_of(job: Job, asked: int | None, store: LogStore) -> int | None:
    if asked is not None:
        return asked
    if job.attempt:
        return job.attempt
    found = await store.attempts(job.id)
    return found[-1] if found else None


def _over(job: Job, attempt: int) -> bool:
    """Whether an attempt has ended: a later one began, it was claimed and the job is no
    longer assigned or running, or the job has ended (an attempt granted but never
    claimed, as for a job cancelled before it ran, will not come). An attempt not
    claimed yet of an open job is still to come."""
    return (
        job.attempt != attempt
        or (job.status not in HELD and job.attempts >= attempt)
        or is_ended(job.status, job.fail_reason)
    )


def _sse(event: str, data: object, event_id: int | None = None) -> bytes:
    head = f"event: {event}\n" + (f"id: {event_id}\n" if event_id is not None else "")
    return f"{head}data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


@router.get(
    "/{job_id:job_id}/logs",
    response_model=JobLog,
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def get_logs(
    job_id: JobId,
    request: Request,
    jobs: JobsDep,
    config: ConfigDep,
    scope: ScopeDep,
    attempt: Annotated[int | None, Query(ge=1, description="Default: the current or last")] = None,
    offset: Annotated[int, Query(ge=0)] = 0,
    last: Annotated[
        int | None,
        Query(ge=1, le=LAST_MAX, description="Only the last N lines (then follow from there)"),
    ] = None,
    follow: bool = False,
) -> Response | JobLog:
    """The attempt's stdout and stderr lines, labelled by stream; with `last=N` only the
    last N (read back from the end: its cost follows N, not the log's size). With
    `follow=1` or `Accept: text/event-stream`: a stream of `log` events (one per line,
    its id the byte offset after it; `Last-Event-ID` resumes there) while the attempt
    runs, then an `end` event. Another tenant's job is a 404."""
    if last is not None and offset:
        raise InvalidField("last", "cannot be combined with offset (it reads from the end)")
    job = await jobs.get(job_id, scope)
    store = config.log_store
    number = await _attempt_of(job, attempt, store)
    streaming = follow or "text/event-stream" in request.headers.get("accept", "")
    if not streaming:
        if number is None:
            return JobLog(job_id=job_id, attempt=None, lines=[], next_offset=0)
        if last is not None:
            _, found = await store.tail(job_id, number, last)
            after = found[-1][1] if found else await store.size(job_id, number)
            lines = [line for line, _ in found]
        else:
            lines, after = await store.read(job_id, number, offset)
        return JobLog(job_id=job_id, attempt=number, lines=lines, next_offset=after)
    if number is None:
        if is_ended(job.status, job.fail_reason):
            # Ended before any attempt began (cancelled while pending): none will come.
            return StreamingResponse(
                iter([_sse("end", {"status": job.status.value})]), media_type="text/event-stream"
            )
        raise InvalidField("attempt", "the job has not started an attempt yet")

    # Each line's event id is the byte offset after it: a reconnect that sends it back
    # as Last-Event-ID resumes with the next line.
    resumed = request.headers.get("last-event-id", "")
    if resumed.isdigit():
        start = int(resumed)
    elif last is not None:
        start, _ = await store.tail(job_id, number, last)
    else:
        start = offset

    async def events() -> AsyncIterator[bytes]:
        position = start
        current = job
        checked = asyncio.get_running_loop().time()
        while True:
            found = await store.read_ends(job_id, number, position)
            for line, after in found:
                yield _sse("log", line.model_dump(), after)
                position = after
            if await request.is_disconnected():
                return
            now = asyncio.get_running_loop().time()
            if now - checked >= FOLLOW_STATUS_S:
                checked = now
                current = await jobs.get(job_id, scope)
            if _over(current, number) and not found:
                # One last read: what the worker wrote just before the end.
                for line, after in await store.read_ends(job_id, number, position):
                    yield _sse("log", line.model_dump(), after)
                yield _sse("end", {"status": current.status.value})
                return
            await asyncio.sleep(store.follow_poll_s)

    return StreamingResponse(events(), media_type="text/event-stream")


@router.post("/{job_id:job_id}/logs", response_model=Uploaded)
async def upload_logs(
    job_id: JobId, body: LogUpload, jobs: JobsDep, config: ConfigDep, scope: ScopeDep
) -> Uploaded:
    """An agent's chunk of output, stored at byte `offset` of its attempt's log: a chunk
    already stored changes nothing, one that overlaps the end adds only its lines past
    it. One past the end, or one whose bytes below the end differ from those stored, is
    a 409 with `expected_offset` (the end: send from there). Bounded by LOG_MAX_BYTES
    per attempt."""
    job = await jobs.get(job_id, scope)
    held_by_other = body.attempt == job.attempt and job.worker_id not in (None, body.worker_id)
    if body.attempt > job.attempt or held_by_other:
        raise JobConflict(
            f"attempt {body.attempt} of job {job_id} is not held by {body.worker_id}",
            id=job_id,
        )
    lines: list[LogLine] = list(body.lines)
    try:
        after = await config.log_store.append_at(job_id, body.attempt, body.offset, lines)
    except UploadConflictError as err:
        raise JobConflict(err.reason, id=job_id, expected_offset=err.expected_offset) from err
    return Uploaded(next_offset=after)
