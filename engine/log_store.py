"""Job logs: each attempt's stdout and stderr lines, labelled by stream, in a store every
API replica and native worker reaches. Native workers write their solver's output as it
comes; HTTP agents upload theirs (`POST /api/jobs/{id}/logs`, idempotent per byte
offset); the API reads and follows it (`GET /api/jobs/{id}/logs`).

An attempt's log is a sequence of bytes, one line per output line: `stdout <text>` or
`stderr <text>`. It is bounded (`LOG_MAX_BYTES`): past it one marker line says where it
was cut, and nothing more is kept. `LOG_STORE_URL` chooses where it lives
(docs/operations.md, "Job logs"):

- unset: files, `<LOG_DIR>/<job id>/<attempt>.log` (LOG_DIR a volume the replicas share);
- `s3://bucket/prefix`: an S3 bucket, one object per appended chunk (engine/log_s3.py).

The settings that choose one are engine/log_settings.py's.

Both keep the same promises: an append names the byte offset it starts at, a chunk
already stored changes nothing, one past the end or whose bytes below the end differ is
refused with the end (UploadConflictError), and readers resume at any line's end.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel

Stream = Literal["stdout", "stderr", "jobforge"]
CUT_MARKER = "jobforge log cut at {size} bytes (LOG_MAX_BYTES)"
# What a cut log ends with (the marker line as stored, up to its size).
CUT_PREFIX = b"jobforge jobforge log cut at "
# A single output line longer than this is split (a solver printing without newlines).
LINE_MAX = 16 * 1024
# A schedule's firings are named `<schedule id>-<time>`, a ':' among the characters.
JOB_ID = re.compile(r"^[A-Za-z0-9_:-]{1,64}$")
# How far back the last-lines view reads first; it doubles until enough lines are in.
TAIL_STEP = 64 * 1024


class LogLine(BaseModel):
    """One line of an attempt's output."""

    stream: Stream
    text: str


class UploadConflictError(ValueError):
    """An uploaded chunk the log cannot take at its offset: it starts past the end, or
    its bytes below the end are not the ones stored there. Its text is the offset to
    send from (the log's end)."""

    def __init__(self, expected_offset: int, reason: str) -> None:
        super().__init__(str(expected_offset))
        self.expected_offset = expected_offset
        self.reason = reason


def encode(lines: list[LogLine]) -> bytes:
    """Lines as stored."""
    return "".join(f"{line.stream} {line.text}\n" for line in lines).encode()


def cut_marker(max_bytes: int) -> bytes:
    """The line that ends a log cut at `max_bytes`."""
    return encode([LogLine(stream="jobforge", text=CUT_MARKER.format(size=max_bytes))])


def parse(data: bytes, offset: int) -> list[tuple[LogLine, int]]:
    """The complete lines of `data` (stored from byte `offset` on), each with the offset
    after it. Split on newlines only: a solver's `\\r` (progress bars) stays in its line."""
    found = []
    position = offset
    for raw in data.split(b"\n")[:-1]:
        position += len(raw) + 1
        stream, _, text = raw.decode("utf-8", errors="replace").partition(" ")
        known: Stream = (
            "stdout" if stream == "stdout" else "stderr" if stream == "stderr" else "jobforge"
        )
        found.append((LogLine(stream=known, text=text), position))
    return found


def check_overlap(data: bytes, stored: bytes, end: int) -> bytes:
    """What of a chunk lies past the log's end (`end`), given the bytes stored from its
    offset up to the end (`stored`): nothing if it ends within the log. Its bytes below
    the end must be the ones stored (they are whole lines, so what follows them starts a
    line), else UploadConflictError."""
    if data[: len(stored)] != stored:
        raise UploadConflictError(end, "the bytes at offset differ from the stored log")
    return data[len(stored) :]


def split_lines(partial: bytes, chunk: bytes) -> tuple[list[bytes], bytes]:
    """A stream's unterminated tail plus a new chunk: its complete lines (newline-split;
    a line longer than LINE_MAX is cut into pieces) and the new unterminated tail."""
    *complete, rest = (partial + chunk).split(b"\n")
    while len(rest) > LINE_MAX:
        complete.append(rest[:LINE_MAX])
        rest = rest[LINE_MAX:]
    return complete, rest


def checked_job_id(job_id: str, attempt: int) -> None:
    if not JOB_ID.fullmatch(job_id) or attempt < 1:
        raise ValueError(f"no log for job {job_id!r} attempt {attempt}")


class OutputSink(Protocol):
    """Where a runner sends a solver's output as it reads it."""

    def write(self, stream: Literal["stdout", "stderr"], chunk: bytes) -> None: ...


class LogStore(ABC):
    """Attempt logs: read from any offset, append at an offset, remove with the job."""

    # How often a follower (`follow=1`) looks for new lines.
    follow_poll_s = 0.2

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes

    @abstractmethod
    async def attempts(self, job_id: str) -> list[int]:
        """The attempts of a job that have a log, in order."""

    @abstractmethod
    async def size(self, job_id: str, attempt: int) -> int:
        """The bytes stored of an attempt's log."""

    @abstractmethod
    async def read_range(self, job_id: str, attempt: int, start: int, stop: int | None) -> bytes:
        """The bytes stored from `start` up to `stop` (None: the end)."""

    @abstractmethod
    async def append_bytes(
        self, job_id: str, attempt: int, offset: int, data: bytes, max_bytes: int
    ) -> int:
        """Store `data` (whole lines) at byte `offset`, as `append_at` does."""

    @abstractmethod
    async def remove(self, job_id: str) -> None:
        """A job's logs, gone (cleanup)."""

    @abstractmethod
    def writer(self, job_id: str, attempt: int) -> AttemptLog:
        """A native attempt's log, written as its solver prints."""

    async def read_ends(
        self, job_id: str, attempt: int, offset: int = 0
    ) -> list[tuple[LogLine, int]]:
        """The complete lines from byte `offset` on, each with the offset after it (where
        a reader that has it resumes)."""
        return parse(await self.read_range(job_id, attempt, offset, None), offset)

    async def read(self, job_id: str, attempt: int, offset: int = 0) -> tuple[list[LogLine], int]:
        """The complete lines from byte `offset` on, and the offset after them."""
        found = await self.read_ends(job_id, attempt, offset)
        return [line for line, _ in found], found[-1][1] if found else offset

    async def tail(
        self, job_id: str, attempt: int, count: int
    ) -> tuple[int, list[tuple[LogLine, int]]]:
        """The last `count` complete lines, each with the offset after it, and the offset
        they start at. Reads back from the end (64 KiB, then twice as much each time),
        so its cost follows the lines asked for, not the log's size."""
        if count < 1:
            raise ValueError("count must be at least 1")
        end = await self.size(job_id, attempt)
        start, data, step = end, b"", TAIL_STEP
        while start > 0 and data.count(b"\n") <= count:
            before = max(0, start - step)
            data = await self.read_range(job_id, attempt, before, start) + data
            start, step = before, step * 2
        if start > 0:  # the first line read may be a part: drop it
            cut = data.index(b"\n") + 1
            data, start = data[cut:], start + cut
        lines = parse(data, start)
        if len(lines) > count:
            start = lines[-count - 1][1]
        return start, lines[-count:]

    async def append_at(
        self,
        job_id: str,
        attempt: int,
        offset: int,
        lines: list[LogLine],
        max_bytes: int | None = None,
    ) -> int:
        """Append an uploaded chunk that starts at byte `offset`: a chunk already stored
        changes nothing; one that overlaps the end (an agent's batch resent with more
        lines after its answer was lost) adds only what follows the end. One past the
        end, or one whose bytes below the end differ from what is stored there, is
        refused (UploadConflictError, naming the end): nothing is dropped silently. Once
        the log was cut every chunk is answered with its size. The size after it."""
        limit = self.max_bytes if max_bytes is None else max_bytes
        return await self.append_bytes(job_id, attempt, offset, encode(lines), limit)


# -- files ------------------------------------------------------------------------------


def attempt_path(root: Path, job_id: str, attempt: int) -> Path:
    """The file of one attempt's log."""
    checked_job_id(job_id, attempt)
    return root / job_id / f"{attempt}.log"


class FileLogStore(LogStore):
    """One file per attempt under `root` (LOG_DIR)."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        super().__init__(max_bytes)
        self.root = root

    async def attempts(self, job_id: str) -> list[int]:
        directory = self.root / job_id
        if not JOB_ID.fullmatch(job_id) or not directory.is_dir():
            return []
        return sorted(int(p.stem) for p in directory.glob("*.log") if p.stem.isdigit())

    async def size(self, job_id: str, attempt: int) -> int:
        try:
            return attempt_path(self.root, job_id, attempt).stat().st_size
        except FileNotFoundError:
            return 0

    async def read_range(self, job_id: str, attempt: int, start: int, stop: int | None) -> bytes:
        try:
            with attempt_path(self.root, job_id, attempt).open("rb") as log:
                log.seek(start)
                return log.read() if stop is None else log.read(max(0, stop - start))
        except FileNotFoundError:
            return b""

    async def append_bytes(
        self, job_id: str, attempt: int, offset: int, data: bytes, max_bytes: int
    ) -> int:
        path = attempt_path(self.root, job_id, attempt)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("ab") as log:
            # Replicas share the directory: one upload at a time per attempt, so that the
            # size read is not one a concurrent write is still growing, and a chunk sent to
            # two replicas at once is stored once. Released when the file closes.
            fcntl.flock(log.fileno(), fcntl.LOCK_EX)
            current = os.fstat(log.fileno()).st_size
            if offset > current:
                raise UploadConflictError(current, "offset is past the end of the stored log")
            if _file_cut(path, current):
                return current  # cut already: nothing more is kept
            if offset < current:
                with path.open("rb") as stored:
                    stored.seek(offset)
                    below = stored.read(min(current, offset + len(data)) - offset)
                data = check_overlap(data, below, current)
                if not data:
                    return current
            if current + len(data) > max_bytes:
                data = cut_marker(max_bytes)
            log.write(data)
            log.flush()
            return current + len(data)

    async def remove(self, job_id: str) -> None:
        if JOB_ID.fullmatch(job_id):
            shutil.rmtree(self.root / job_id, ignore_errors=True)

    def writer(self, job_id: str, attempt: int) -> AttemptLog:
        return FileAttemptLog(
            job_id, attempt, self.max_bytes, attempt_path(self.root, job_id, attempt)
        )


def _file_cut(path: Path, size: int) -> bool:
    """Whether the log ends with the cut marker."""
    if size == 0:
        return False
    with path.open("rb") as log:
        log.seek(max(0, size - 200))
        return CUT_PREFIX in log.read()


# -- a native attempt's writer ------------------------------------------------------------


@dataclass
class AttemptLog(ABC):
    """A native attempt's log as its solver writes: chunks of stdout and stderr cut into
    lines per stream, kept as they complete, bounded by `max_bytes`."""

    job_id: str
    attempt: int
    max_bytes: int
    _partial: dict[str, bytes] = field(default_factory=dict, init=False)
    _written: int = field(default=0, init=False)
    _cut: bool = field(default=False, init=False)

    def write(self, stream: Literal["stdout", "stderr"], chunk: bytes) -> None:
        complete, self._partial[stream] = split_lines(self._partial.get(stream, b""), chunk)
        self._append(stream, complete)

    async def close(self) -> None:
        """Keep what is left of unterminated lines, and all that waits to be stored."""
        for stream, rest in list(self._partial.items()):
            if rest:
                self._append(stream, [rest])  # type: ignore[arg-type]
        self._partial.clear()
        await self._finish()

    def _append(self, stream: Literal["stdout", "stderr"], raw_lines: list[bytes]) -> None:
        if self._cut or not raw_lines:
            return
        text = encode(
            [
                LogLine(stream=stream, text=raw.decode("utf-8", errors="replace"))
                for raw in raw_lines
            ]
        )
        if self._written + len(text) > self.max_bytes:
            self._cut = True
            text = cut_marker(self.max_bytes)
        self._keep(text)
        self._written += len(text)

    @abstractmethod
    def _keep(self, data: bytes) -> None:
        """Store (or queue) whole encoded lines, in order."""

    @abstractmethod
    async def _finish(self) -> None:
        """Store what is queued."""


@dataclass
class FileAttemptLog(AttemptLog):
    """Appended to the attempt's file as each line completes."""

    path: Path = Path()

    def _keep(self, data: bytes) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("ab") as log:
            log.write(data)

    async def _finish(self) -> None:
        pass  # each line was written as it came
