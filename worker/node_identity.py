"""A worker's default id (NODE_ID unset): the same across restarts of one worker on one
host with one data dir, and never the same for two workers running at once.

The id is `<host>-<8 hex digits of the sha256 of the data dir's resolved path>` (the data
dir is the solver cache, SOLVER_CACHE_DIR). A second process started on the same host and
data dir while the first runs gets `…-2`, a third `…-3`, and so on: each id is held by an
exclusive lock on `<data dir>/.node-id-<n>.lock` for as long as its process runs (the
kernel drops the lock when the process dies, however it dies), and a starting process
takes the lowest free one. So a restarted worker comes back under its own id, and the
fleet keeps one entry for it (docs/workers.md, "Worker ids").
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

from worker.settings import WorkerSettings

# More processes than this on one host and data dir is a mistake, not a fleet.
MAX_SLOTS = 64
LOCK_NAME = ".node-id-{slot}.lock"


def base_node_id(host: str, data_dir: Path) -> str:
    """The id of the first worker on `host` with `data_dir`."""
    digest = hashlib.sha256(str(data_dir.expanduser().resolve()).encode()).hexdigest()
    return f"{host}-{digest[:8]}"


def slot_id(base: str, slot: int) -> str:
    """The id of the `slot`-th worker (from 1) running at once: `base`, `base-2`, …"""
    return base if slot == 1 else f"{base}-{slot}"


@contextlib.contextmanager
def held_node_id(host: str, data_dir: Path) -> Iterator[str]:
    """The lowest id of `host` and `data_dir` no running process holds, held until the
    block ends (or the process dies)."""
    data_dir = data_dir.expanduser()
    data_dir.mkdir(parents=True, exist_ok=True)
    base = base_node_id(host, data_dir)
    for slot in range(1, MAX_SLOTS + 1):
        fd = os.open(data_dir / LOCK_NAME.format(slot=slot), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())  # who holds it, for a person looking
            yield slot_id(base, slot)
        finally:
            os.close(fd)  # closing releases the lock
        return
    raise SystemExit(
        f"{MAX_SLOTS} workers already run on {host} with data dir {data_dir}: "
        "set NODE_ID, or give this one a SOLVER_CACHE_DIR of its own"
    )


@contextlib.contextmanager
def identified(settings: WorkerSettings, data_dir: Path) -> Iterator[WorkerSettings]:
    """`settings` with its NODE_ID, or, when that is unset, with the id held for its
    host (WORKER_HOST) and `data_dir` while the block runs."""
    if settings.node_id:
        yield settings
        return
    with held_node_id(settings.host, data_dir) as node_id:
        yield settings.model_copy(update={"node_id": node_id})
