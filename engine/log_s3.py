"""Job logs in an S3 bucket (`LOG_STORE_URL=s3://bucket/prefix`), through obstore.

S3 objects cannot be appended to, so an attempt's log is a chain of immutable objects,
one per appended chunk, each named by the byte offset it starts at:

    <prefix>/<job id>/<attempt>/<offset, 20 digits>

Names sort as offsets do, so one listing gives the chunks in order with their sizes, and
the log's end is the last chunk's offset plus its size. A chunk is written only at the
end, with `If-None-Match: *` (create, never overwrite): of two replicas storing at the
same end one wins and the other reads the chunk that won (the same bytes: nothing to do;
other bytes: UploadConflictError). Chunks thus never overlap nor leave a hole.

Each process keeps the chunk list of the attempts it touched (chunks never change), and
lists only the names after the last one it knows (`StartAfter`): a follower's poll is one
LIST that returns what is new. A read from an offset fetches the chunks that hold it
(ranged GETs, a few at a time); the last-lines view reads back from the end only.
Costs and layout: docs/operations.md, "Job logs".
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import functools
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

import obstore
from obstore.exceptions import AlreadyExistsError, BaseError, PreconditionError
from obstore.store import S3Store

from engine.log_store import (
    CUT_PREFIX,
    JOB_ID,
    AttemptLog,
    LogLine,
    LogStore,
    UploadConflictError,
    check_overlap,
    checked_job_id,
    cut_marker,
    parse,
)
from workflows.errors import LogStoreUnavailable

log = logging.getLogger("jobforge.logs")
T = TypeVar("T")

OFFSET_DIGITS = 20
# Attempts whose chunk lists a process keeps, the least recently read let go (about
# 120 bytes a chunk; one let go is listed from its start when next read).
INDEX_ATTEMPTS = 512
# Ranged GETs one read runs at once; requests a process runs at once.
READ_PARALLEL = 8
IO_THREADS = 16
# A chunk this small may be the cut marker: read it to know.
MARKER_MAX = len(cut_marker(1024**3))
# Stores at one offset lost to other writers before giving up (each loss means the log
# grew, so this bounds only a pathological race).
APPEND_TRIES = 64
# A native writer stores what its solver printed about once a second, or sooner once
# this much waits; its last store, at the attempt's end, waits at most FINAL_FLUSH_S.
FLUSH_S = 1.0
FLUSH_BYTES = 256 * 1024
FINAL_FLUSH_S = 10.0
CONNECT_TIMEOUT_S = 5
REQUEST_TIMEOUT_S = 30
RETRY_S = 10


@dataclass(frozen=True)
class S3Location:
    """A bucket, a prefix in it, and how to reach it. Credentials left None come from
    the environment as the AWS SDKs find them (the instance's or task's role)."""

    bucket: str
    prefix: str = ""
    endpoint: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None

    def store(self) -> S3Store:
        given = {
            "endpoint": self.endpoint,
            "region": self.region,
            "access_key_id": self.access_key_id,
            "secret_access_key": self.secret_access_key,
            "session_token": self.session_token,
        }
        config = {key: value for key, value in given.items() if value}
        plain_http = bool(self.endpoint and self.endpoint.startswith("http://"))
        return S3Store(
            self.bucket,
            prefix=self.prefix or None,
            config=config,  # type: ignore[arg-type]
            client_options={
                "allow_http": plain_http,
                "connect_timeout": timedelta(seconds=CONNECT_TIMEOUT_S),
                "timeout": timedelta(seconds=REQUEST_TIMEOUT_S),
            },
            # A store that is away answers a reader or an uploader within seconds (a
            # 503), not after the client's default of minutes of retries.
            retry_config={"max_retries": 2, "retry_timeout": timedelta(seconds=RETRY_S)},
        )


@dataclass
class _Chunks:
    """What a process knows of one attempt's chain: (offset, size) in order, and whether
    its last chunk was read and found not to be the cut marker."""

    chunks: list[tuple[int, int]] = field(default_factory=list)
    tail_checked: int = -1

    @property
    def end(self) -> int:
        return self.chunks[-1][0] + self.chunks[-1][1] if self.chunks else 0


def chunk_name(job_id: str, attempt: int, offset: int) -> str:
    return f"{job_id}/{attempt}/{offset:0{OFFSET_DIGITS}d}"


@contextlib.contextmanager
def _reached() -> Iterator[None]:
    """The store's own errors (no answer, refused credentials, no bucket) as
    LogStoreUnavailable: a 503 to the caller, not a 500."""
    try:
        yield
    except (AlreadyExistsError, PreconditionError):
        raise  # an answer, not an outage: another writer stored there first
    except BaseError as err:
        raise LogStoreUnavailable(str(err).splitlines()[0] if str(err) else repr(err)) from err


class S3LogStore(LogStore):
    """An attempt's log as a chain of chunk objects in a bucket."""

    follow_poll_s = 0.5

    def __init__(self, location: S3Location, max_bytes: int) -> None:
        super().__init__(max_bytes)
        self.location = location
        self._store = location.store()
        self._index: OrderedDict[tuple[str, int], _Chunks] = OrderedDict()
        # obstore's blocking calls, each on a thread of this pool. Its coroutines run on a
        # runtime whose threads may still hold Python objects when the interpreter exits,
        # which aborts the process (SIGABRT, in some exits: tests/test_log_store.py); a
        # blocking call keeps every Python object on the calling thread.
        self._pool = ThreadPoolExecutor(IO_THREADS, thread_name_prefix="jobforge-logs")

    async def _call(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A blocking obstore call, on the store's threads."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(call, *args, **kwargs))

    async def attempts(self, job_id: str) -> list[int]:
        if not JOB_ID.fullmatch(job_id):
            return []
        with _reached():
            found = await self._call(obstore.list_with_delimiter, self._store, f"{job_id}/")
        names = (prefix.rstrip("/").rsplit("/", 1)[-1] for prefix in found["common_prefixes"])
        return sorted(int(name) for name in names if name.isdigit())

    async def size(self, job_id: str, attempt: int) -> int:
        return (await self._chunks(job_id, attempt)).end

    async def read_range(self, job_id: str, attempt: int, start: int, stop: int | None) -> bytes:
        known = await self._chunks(job_id, attempt)
        return await self._read(job_id, attempt, known, start, known.end if stop is None else stop)

    async def tail(
        self, job_id: str, attempt: int, count: int
    ) -> tuple[int, list[tuple[LogLine, int]]]:
        """As the base class, by chunks: chunks hold whole lines, so it fetches the last
        ones, READ_PARALLEL at a time, until they hold `count` lines."""
        if count < 1:
            raise ValueError("count must be at least 1")
        known = await self._chunks(job_id, attempt)
        chunks = known.chunks
        first, stop, data = len(chunks), known.end, b""
        while first > 0 and data.count(b"\n") < count:
            first = max(0, first - READ_PARALLEL)
            data = await self._read(job_id, attempt, known, chunks[first][0], stop) + data
            stop = chunks[first][0]
        start = stop
        lines = parse(data, start)
        if len(lines) > count:
            start = lines[-count - 1][1]
        return start, lines[-count:]

    async def append_bytes(
        self, job_id: str, attempt: int, offset: int, data: bytes, max_bytes: int
    ) -> int:
        for _ in range(APPEND_TRIES):
            known = await self._chunks(job_id, attempt)
            end = known.end
            if offset > end:
                raise UploadConflictError(end, "offset is past the end of the stored log")
            if await self._is_cut(job_id, attempt, known):
                return end  # cut already: nothing more is kept
            rest = data
            if offset < end:
                below = await self._read(
                    job_id, attempt, known, offset, min(end, offset + len(data))
                )
                rest = check_overlap(data, below, end)
                if not rest:
                    return end
            if end + len(rest) > max_bytes:
                rest = cut_marker(max_bytes)
            try:
                with _reached():
                    name = chunk_name(job_id, attempt, end)
                    await self._call(obstore.put, self._store, name, rest, mode="create")
            except (AlreadyExistsError, PreconditionError):
                continue  # another writer stored at this end first: look again
            if known.end == end:  # nobody listed past it meanwhile
                known.chunks.append((end, len(rest)))
            return end + len(rest)
        raise RuntimeError(f"log of {job_id} attempt {attempt}: lost {APPEND_TRIES} races")

    async def remove(self, job_id: str) -> None:
        if not JOB_ID.fullmatch(job_id):
            return
        for key in [key for key in self._index if key[0] == job_id]:
            del self._index[key]

        def remove_all() -> None:
            for batch in obstore.list(self._store, f"{job_id}/", chunk_size=1000):
                obstore.delete(self._store, [meta["path"] for meta in batch])

        with _reached():
            await self._call(remove_all)

    def writer(self, job_id: str, attempt: int) -> AttemptLog:
        checked_job_id(job_id, attempt)
        return S3AttemptLog(job_id, attempt, self.max_bytes, store=self)

    async def _chunks(self, job_id: str, attempt: int) -> _Chunks:
        """The attempt's chain as listed now: what this process knew, plus the chunks
        named after its last one."""
        checked_job_id(job_id, attempt)
        key = (job_id, attempt)
        known = self._index.get(key)
        if known is None:
            known = self._index[key] = _Chunks()
            while len(self._index) > INDEX_ATTEMPTS:
                self._index.popitem(last=False)
        self._index.move_to_end(key)
        last = known.chunks[-1][0] if known.chunks else None
        after = chunk_name(job_id, attempt, last) if last is not None else None
        prefix = f"{job_id}/{attempt}/"

        def listed() -> list[tuple[int, int]]:
            found = []
            for batch in obstore.list(self._store, prefix, offset=after, chunk_size=1000):
                for meta in batch:
                    name = meta["path"].rsplit("/", 1)[-1]
                    if len(name) == OFFSET_DIGITS and name.isdigit():
                        found.append((int(name), meta["size"]))
            return found

        with _reached():
            found = await self._call(listed)
        # Another read of this attempt may have extended the list meanwhile.
        for offset, size in found:
            if offset == known.end:
                known.chunks.append((offset, size))
        return known

    async def _read(
        self, job_id: str, attempt: int, known: _Chunks, start: int, stop: int
    ) -> bytes:
        """Bytes [start, stop) of the chain: ranged GETs of the chunks that hold them."""
        chunks = known.chunks
        if start >= stop or not chunks:
            return b""
        first = max(0, bisect.bisect_right(chunks, start, key=lambda chunk: chunk[0]) - 1)
        wanted = []
        for offset, size in chunks[first:]:
            if offset >= stop:
                break
            low, high = max(start, offset) - offset, min(stop, offset + size) - offset
            if low < high:
                wanted.append((chunk_name(job_id, attempt, offset), low, high))
        gate = asyncio.Semaphore(READ_PARALLEL)

        async def fetch(name: str, low: int, high: int) -> bytes:
            async with gate:
                got = await self._call(obstore.get_range, self._store, name, start=low, end=high)
                return bytes(got)

        try:
            with _reached():
                parts = await asyncio.gather(*(fetch(*part) for part in wanted))
        except FileNotFoundError:
            # Removed meanwhile (the job was cleaned up): forget what was known.
            self._index.pop((job_id, attempt), None)
            return b""
        return b"".join(parts)

    async def _is_cut(self, job_id: str, attempt: int, known: _Chunks) -> bool:
        """Whether the chain ends with the cut marker (a chunk of its own)."""
        if not known.chunks:
            return False
        offset, size = known.chunks[-1]
        if size > MARKER_MAX or known.tail_checked == offset:
            return False
        data = await self._read(job_id, attempt, known, offset, offset + size)
        if data.startswith(CUT_PREFIX):
            return True
        known.tail_checked = offset
        return False


@dataclass
class S3AttemptLog(AttemptLog):
    """A native attempt's lines, stored as one chunk about once a second (a chunk per
    line would cost a PUT per line), and at the end by `close`. A store that fails is
    tried again at the next tick; logs never fail the job."""

    store: S3LogStore | None = None
    _pending: bytearray = field(default_factory=bytearray, init=False)
    _stored: int = field(default=0, init=False)
    _wake: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _pump: asyncio.Task[None] | None = field(default=None, init=False)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)

    def _keep(self, data: bytes) -> None:
        self._pending += data
        if self._pump is None:
            self._pump = asyncio.get_running_loop().create_task(self._run())
        if len(self._pending) >= FLUSH_BYTES:
            self._wake.set()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), FLUSH_S)
            self._wake.clear()
            await self._flush()

    async def _finish(self) -> None:
        if self._pump is not None:
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(FINAL_FLUSH_S):
                await self._flush()
                while self._pending:  # the store failed: again, a little later
                    await asyncio.sleep(FLUSH_S / 4)
                    await self._flush()
        if self._pending:
            log.warning(
                "%d bytes of the log of %s attempt %d were not stored",
                len(self._pending),
                self.job_id,
                self.attempt,
            )

    async def _flush(self) -> None:
        assert self.store is not None
        async with self._lock:
            if not self._pending:
                return
            data = bytes(self._pending)
            try:
                # The writer cut its output already (max_bytes): the store must not.
                after = await self.store.append_bytes(
                    self.job_id, self.attempt, self._stored, data, 1 << 62
                )
            except UploadConflictError as err:
                # Someone else wrote this attempt's log: go on after what they wrote.
                log.warning("log of %s attempt %d: %s", self.job_id, self.attempt, err.reason)
                self._stored = err.expected_offset
                return
            except Exception as err:  # logs are a convenience: never fail the job
                log.warning(
                    "log of %s attempt %d not stored yet: %s", self.job_id, self.attempt, err
                )
                return
            del self._pending[: len(data)]
            self._stored = after
