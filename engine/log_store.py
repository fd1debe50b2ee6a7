"""Job logs: each attempt's stdout and stderr lines, labelled by stream, in a directory
every API replica and native worker can read (`LOG_DIR`: a shared volume in
production). Native workers write their solver's output here as it comes; HTTP agents
upload theirs (`POST /api/jobs/{id}/logs`, idempotent per byte offset); the API reads
and follows it (`GET /api/jobs/{id}/logs`).

One file per attempt, `<LOG_DIR>/<job id>/<attempt>.log`, one line per output line:
`stdout <text>` or `stderr <text>`. A file is bounded (`LOG_MAX_BYTES`): past it one
marker line says where it was cut, and nothing more is kept.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

Stream = Literal["stdout", "stderr", "jobforge"]
CUT_MARKER = "jobforge log cut at {size} bytes (LOG_MAX_BYTES)"
# A single output line longer than this is split (a solver printing without newlines).
LINE_MAX = 16 * 1024
# A schedule's firings are named `<schedule id>-<time>`, a ':' among the characters.
JOB_ID = re.compile(r"^[A-Za-z0-9_:-]{1,64}$")


class LogSettings(BaseSettings):
    """Where logs live and how much of an attempt's output is kept."""

    model_config = SettingsConfigDict(extra="ignore")

    log_dir: Path = Field(default=Path("~/.jobforge/logs"), validation_alias="LOG_DIR")
    log_max_bytes: int = Field(
        default=1024 * 1024, ge=1024, le=1024**3, validation_alias="LOG_MAX_BYTES"
    )

    @property
    def root(self) -> Path:
        return self.log_dir.expanduser()


class LogLine(BaseModel):
    """One line of an attempt's output."""

    stream: Stream
    text: str


def attempt_path(root: Path, job_id: str, attempt: int) -> Path:
    """The file of one attempt's log."""
    if not JOB_ID.fullmatch(job_id) or attempt < 1:
        raise ValueError(f"no log path for job {job_id!r} attempt {attempt}")
    return root / job_id / f"{attempt}.log"


def attempts(root: Path, job_id: str) -> list[int]:
    """The attempts of a job that have a log, in order."""
    directory = root / job_id
    if not JOB_ID.fullmatch(job_id) or not directory.is_dir():
        return []
    return sorted(int(p.stem) for p in directory.glob("*.log") if p.stem.isdigit())


def encode(lines: list[LogLine]) -> bytes:
    """Lines as stored."""
    return "".join(f"{line.stream} {line.text}\n" for line in lines).encode()


def read(root: Path, job_id: str, attempt: int, offset: int = 0) -> tuple[list[LogLine], int]:
    """The complete lines from byte `offset` on, and the offset after them."""
    found = read_ends(root, job_id, attempt, offset)
    return [line for line, _ in found], found[-1][1] if found else offset


def read_ends(root: Path, job_id: str, attempt: int, offset: int = 0) -> list[tuple[LogLine, int]]:
    """The complete lines from byte `offset` on, each with the offset after it (where a
    reader that has it resumes)."""
    path = attempt_path(root, job_id, attempt)
    try:
        with path.open("rb") as log:
            log.seek(offset)
            data = log.read()
    except FileNotFoundError:
        return []
    found = []
    position = offset
    # Split on newlines only: a solver's `\r` (progress bars) stays in its line.
    for raw in data.split(b"\n")[:-1]:
        position += len(raw) + 1
        stream, _, text = raw.decode("utf-8", errors="replace").partition(" ")
        known: Stream = (
            "stdout" if stream == "stdout" else "stderr" if stream == "stderr" else "jobforge"
        )
        found.append((LogLine(stream=known, text=text), position))
    return found


def size(root: Path, job_id: str, attempt: int) -> int:
    try:
        return attempt_path(root, job_id, attempt).stat().st_size
    except FileNotFoundError:
        return 0


class UploadConflictError(ValueError):
    """An uploaded chunk the log cannot take at its offset: it starts past the end, or
    its bytes below the end are not the ones stored there. Its text is the offset to
    send from (the log's end)."""

    def __init__(self, expected_offset: int, reason: str) -> None:
        super().__init__(str(expected_offset))
        self.expected_offset = expected_offset
        self.reason = reason


def append_at(
    root: Path, job_id: str, attempt: int, offset: int, lines: list[LogLine], max_bytes: int
) -> int:
    """Append an uploaded chunk that starts at byte `offset`: a chunk already stored
    changes nothing; one that overlaps the end (an agent's batch resent with more lines
    after its answer was lost) adds only what follows the end. One past the end, or one
    whose bytes below the end differ from what is stored there, is refused
    (UploadConflictError, naming the end): nothing is dropped silently. Once the log was cut
    every chunk is answered with its size. The size after it."""
    path = attempt_path(root, job_id, attempt)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as log:
        # Replicas share the directory: one upload at a time per attempt, so that the size
        # read is not one a concurrent write is still growing, and a chunk sent to two
        # replicas at once is stored once. Released when the file closes.
        fcntl.flock(log.fileno(), fcntl.LOCK_EX)
        current = os.fstat(log.fileno()).st_size
        if offset > current:
            raise UploadConflictError(current, "offset is past the end of the stored log")
        if _cut(path, current):
            return current  # cut already: nothing more is kept
        data = encode(lines)
        if offset < current:
            data = _beyond(path, offset, current, data)
            if not data:
                return current
        if current + len(data) > max_bytes:
            data = encode([LogLine(stream="jobforge", text=CUT_MARKER.format(size=max_bytes))])
        log.write(data)
        log.flush()
        return current + len(data)


def _beyond(path: Path, offset: int, size: int, data: bytes) -> bytes:
    """What of a chunk stored from `offset` lies past the log's end (`size`): nothing if
    it ends within the log. Its bytes below the end must be the ones stored (they are
    whole lines, so what follows them starts a line), else UploadConflictError."""
    with path.open("rb") as log:
        log.seek(offset)
        stored = log.read(min(size, offset + len(data)) - offset)
    if data[: len(stored)] != stored:
        raise UploadConflictError(size, "the bytes at offset differ from the stored log")
    return data[len(stored) :]


def _cut(path: Path, size: int) -> bool:
    """Whether the log ends with the cut marker."""
    if size == 0:
        return False
    with path.open("rb") as log:
        log.seek(max(0, size - 200))
        return b"jobforge jobforge log cut at " in log.read()


def remove(root: Path, job_id: str) -> None:
    """A job's logs, gone (cleanup)."""
    if JOB_ID.fullmatch(job_id):
        shutil.rmtree(root / job_id, ignore_errors=True)


def split_lines(partial: bytes, chunk: bytes) -> tuple[list[bytes], bytes]:
    """A stream's unterminated tail plus a new chunk: its complete lines (newline-split;
    a line longer than LINE_MAX is cut into pieces) and the new unterminated tail."""
    *complete, rest = (partial + chunk).split(b"\n")
    while len(rest) > LINE_MAX:
        complete.append(rest[:LINE_MAX])
        rest = rest[LINE_MAX:]
    return complete, rest


@dataclass
class AttemptLog:
    """A native attempt's log as its solver writes: chunks of stdout and stderr cut into
    lines per stream, appended as they complete, bounded by `max_bytes`."""

    root: Path
    job_id: str
    attempt: int
    max_bytes: int
    _partial: dict[str, bytes] = field(default_factory=dict)
    _written: int = 0
    _cut: bool = False

    def write(self, stream: Literal["stdout", "stderr"], chunk: bytes) -> None:
        complete, self._partial[stream] = split_lines(self._partial.get(stream, b""), chunk)
        self._append(stream, complete)

    def close(self) -> None:
        """Write what is left of unterminated lines."""
        for stream, rest in list(self._partial.items()):
            if rest:
                self._append(stream, [rest])  # type: ignore[arg-type]
        self._partial.clear()

    def _append(self, stream: Literal["stdout", "stderr"], raw_lines: list[bytes]) -> None:
        if self._cut or not raw_lines:
            return
        text = encode(
            [
                LogLine(stream=stream, text=raw.decode("utf-8", errors="replace"))
                for raw in raw_lines
            ]
        )
        path = attempt_path(self.root, self.job_id, self.attempt)
        path.parent.mkdir(parents=True, exist_ok=True)
        if self._written + len(text) > self.max_bytes:
            self._cut = True
            text = encode([LogLine(stream="jobforge", text=CUT_MARKER.format(size=self.max_bytes))])
        with path.open("ab") as log:
            log.write(text)
        self._written += len(text)
