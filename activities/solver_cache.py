"""Content-addressed solver cache: `<root>/<sha256>`, one download per hash.

A solver is streamed to a temp file while hashed, under size and time limits, then
fsynced and renamed into place only if its sha256 matches. A cached file is hashed
again before every run, so nothing unverified ever executes.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import httpx
from temporalio.exceptions import ApplicationError

from engine.solver_urls import SolverUrlRefused, check_host
from workflows.errors import ErrorType
from workflows.url_policy import url_shape_problem

CHUNK = 256 * 1024
MAX_REDIRECTS = 5


@dataclass(frozen=True)
class FetchLimits:
    """Bounds on one solver download and the URLs it may touch."""

    max_bytes: int
    timeout_s: float
    schemes: frozenset[str]
    allow_private: bool


def _fetch_failed(message: str) -> ApplicationError:
    return ApplicationError(message, type=ErrorType.SOLVER_FETCH_FAILED)


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's contents."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _cached_copy_ok(path: Path, checksum: str) -> bool:
    """Whether `path` holds the solver; a corrupt copy is removed for a fresh fetch."""
    if not path.is_file():
        return False
    if sha256_file(path) == checksum:
        return True
    _discard(path)
    return False


def _install(tmp: Path, path: Path) -> None:
    """Make a verified temp file the cached solver, durably."""
    tmp.chmod(0o555)
    tmp.replace(path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _discard(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


class SolverCache:
    """Downloads, verifies and caches solvers by checksum."""

    def __init__(self, root: Path, limits: FetchLimits) -> None:
        self.root = root
        self.limits = limits
        self._locks: dict[str, asyncio.Lock] = {}
        root.mkdir(parents=True, exist_ok=True)

    def path_for(self, checksum: str) -> Path:
        """Where the solver with this sha256 lives once cached."""
        return self.root / checksum

    async def get(
        self,
        url: str,
        checksum: str,
        on_download: Callable[[], Awaitable[None]] | None = None,
    ) -> Path:
        """A verified local copy of the solver; downloads it at most once per hash.

        `on_download` runs before a download starts (the worker reports the claim
        then, since a download can take a while).
        """
        path = self.path_for(checksum)
        lock = self._locks.setdefault(checksum, asyncio.Lock())
        async with lock:
            if await self._verified(path, checksum):
                return path
            async with self._host_lock(checksum):
                # Another process sharing this cache may have fetched it meanwhile.
                if await self._verified(path, checksum):
                    return path
                # Temp files of this hash left by a process that died mid-download: only
                # the holder of this lock writes them, so none is in use now.
                await asyncio.to_thread(self._sweep_parts, checksum)
                if on_download is not None:
                    await on_download()
                await self._download(url, checksum, path)
            return path

    async def verify(self, checksum: str) -> Path:
        """Re-hash a cached solver right before it runs."""
        path = self.path_for(checksum)
        if not await self._verified(path, checksum):
            raise ApplicationError(
                f"cached solver {checksum} no longer matches its checksum",
                type=ErrorType.SOLVER_CHECKSUM_MISMATCH,
                non_retryable=True,
            )
        return path

    async def _verified(self, path: Path, checksum: str) -> bool:
        return await asyncio.to_thread(_cached_copy_ok, path, checksum)

    @contextlib.asynccontextmanager
    async def _host_lock(self, checksum: str) -> AsyncIterator[None]:
        """An flock shared with other worker processes using the same cache dir."""
        fd = os.open(self.root / f".{checksum}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _sweep_parts(self, checksum: str) -> None:
        for stale in self.root.glob(f".part-{checksum}-*"):
            _discard(stale)

    async def _download(self, url: str, checksum: str, path: Path) -> None:
        fd, tmp_name = tempfile.mkstemp(dir=self.root, prefix=f".part-{checksum}-")
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as out:
                digest = hashlib.sha256()
                try:
                    async with asyncio.timeout(self.limits.timeout_s):
                        async for chunk in self._stream(url):
                            digest.update(chunk)
                            out.write(chunk)
                except TimeoutError as err:
                    raise _fetch_failed(
                        f"solver download exceeded {self.limits.timeout_s:g} s"
                    ) from err
                except httpx.HTTPError as err:  # refused, reset, truncated body, ...
                    raise _fetch_failed(
                        f"solver download failed: {type(err).__name__}: {err}"
                    ) from err
                out.flush()
                os.fsync(out.fileno())
            actual = digest.hexdigest()
            if actual != checksum:
                raise ApplicationError(
                    f"expected sha256 {checksum}, downloaded {actual}",
                    type=ErrorType.SOLVER_CHECKSUM_MISMATCH,
                    non_retryable=True,
                )
            await asyncio.to_thread(_install, tmp, path)
        finally:
            await asyncio.to_thread(_discard, tmp)

    async def _stream(self, url: str) -> AsyncIterator[bytes]:
        """The solver's bytes, following redirects only to URLs the policy allows."""
        total = 0
        for _ in range(MAX_REDIRECTS + 1):
            await self._check_url(url)
            if urlsplit(url).scheme.lower() == "file":
                async for chunk in self._read_file(url):
                    total += len(chunk)
                    self._check_size(total)
                    yield chunk
                return
            async with (
                httpx.AsyncClient(timeout=self.limits.timeout_s) as http,
                http.stream("GET", url) as response,
            ):
                if response.is_redirect:
                    url = urljoin(url, response.headers.get("location", ""))
                    continue
                if response.status_code != 200:
                    raise _fetch_failed(f"solver download got HTTP {response.status_code}")
                declared = response.headers.get("content-length")
                if declared and declared.isdigit():
                    self._check_size(int(declared))
                async for chunk in response.aiter_bytes(CHUNK):
                    total += len(chunk)
                    self._check_size(total)
                    yield chunk
                return
        raise _fetch_failed(f"solver download redirected more than {MAX_REDIRECTS} times")

    def _check_size(self, size: int) -> None:
        if size > self.limits.max_bytes:
            raise _fetch_failed(f"solver is larger than {self.limits.max_bytes} bytes")

    async def _read_file(self, url: str) -> AsyncIterator[bytes]:
        local = Path(unquote(urlsplit(url).path))
        try:
            handle = await asyncio.to_thread(local.open, "rb")
        except OSError as err:
            raise _fetch_failed(f"cannot read {local}: {err.strerror}") from err
        with handle:
            while chunk := await asyncio.to_thread(handle.read, CHUNK):
                yield chunk

    async def _check_url(self, url: str) -> None:
        problem = url_shape_problem(url, self.limits.schemes)
        if problem is not None:
            raise ApplicationError(problem, type=ErrorType.SOLVER_FETCH_FAILED, non_retryable=True)
        try:
            await check_host(url, self.limits.allow_private)
        except SolverUrlRefused as err:
            raise ApplicationError(
                err.message, type=ErrorType.SOLVER_FETCH_FAILED, non_retryable=not err.transient
            ) from err
