"""The two log stores under test: files in a directory, and an S3 bucket on a local
S3-compatible server (moto's, one request at a time, from the dev extras: a real
subprocess on a free port, spoken to over HTTP with signed requests as a real bucket
is)."""

from __future__ import annotations

import asyncio
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.log_settings import LogSettings
from engine.log_store import LogLine, LogStore, encode
from tests.ports import free_port
from tests.procs import Proc, spawn
from worker.devserver import wait_for_port

# The S3 store runs against a moto server process: that case is in the process tier.
BACKENDS = ["files", pytest.param("s3", marks=pytest.mark.process)]
# moto takes any key pair; these are what the stores under test sign with.
S3_ENV = {
    "AWS_ACCESS_KEY_ID": "jobforge-test",
    "AWS_SECRET_ACCESS_KEY": "jobforge-test-secret",
    "AWS_REGION": "us-east-1",
}


@dataclass
class S3Server:
    """A moto server: a fresh bucket per test keeps tests apart."""

    proc: Proc
    url: str

    def bucket(self) -> str:
        """A new, empty bucket's name."""
        name = f"logs-{uuid.uuid4().hex[:12]}"
        created = httpx.put(f"{self.url}/{name}", timeout=30)
        assert created.status_code == 200, created.text
        return name

    def store_url(self, bucket: str, prefix: str = "jobforge/logs") -> str:
        """LOG_STORE_URL for a bucket on this server."""
        return f"s3://{bucket}/{prefix}?endpoint={self.url}"

    def env(self, bucket: str) -> dict[str, str]:
        """What a jobforge process needs to keep its logs in `bucket`."""
        return {**S3_ENV, "LOG_STORE_URL": self.store_url(bucket)}

    def keys(self, bucket: str) -> list[str]:
        """The names of the objects in a bucket (unsigned: moto does not check)."""
        listed = httpx.get(f"{self.url}/{bucket}", params={"list-type": "2"}, timeout=30)
        assert listed.status_code == 200, listed.text
        text = listed.text
        return [part.split("</Key>")[0] for part in text.split("<Key>")[1:]]

    def stop(self) -> None:
        self.proc.stop(timeout=10)


def start_s3_server(log: Path) -> S3Server:
    """moto's S3 server, one request at a time (tests/moto_serial.py), on a free port,
    once it accepts connections."""
    port = free_port()
    argv = [sys.executable, "-m", "tests.moto_serial", "127.0.0.1", str(port)]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(log.parent)}
    proc = spawn(argv, log, env)
    wait_for_port(port, 60, proc.process)
    return S3Server(proc, f"http://127.0.0.1:{port}")


def open_store(backend: str, tmp_path: Path, s3: S3Server | None, **settings: Any) -> LogStore:
    """A log store of `backend` with nothing in it."""
    if backend == "files":
        return LogSettings(LOG_DIR=tmp_path / "logs", **settings).open()
    assert s3 is not None
    return LogSettings(LOG_STORE_URL=s3.store_url(s3.bucket()), **S3_ENV, **settings).open()


def append_repeatedly(
    settings: dict[str, Any], barrier: Any, chunk: list[LogLine], times: int, racer: int
) -> None:
    """A replica's part in a race of four (run in a child process or thread): each time
    all racers are at the barrier, the chunk due at offset 0, size, twice size and on,
    racer `k` (0 to 3) sending all but its last 3 - k lines, as an agent's batch resent
    grown after a lost answer: whoever stores first, the log must end up the chunk
    `times` over. Each racer opens its own store, as each replica does."""
    store = LogSettings(**settings).open()
    size = len(encode(chunk))
    batch = chunk[: len(chunk) - 3 + racer]

    async def run() -> None:
        for i in range(times):
            barrier.wait()
            await store.append_at("j1", 1, i * size, batch, 1 << 30)

    asyncio.run(run())
