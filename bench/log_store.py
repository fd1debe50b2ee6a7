"""What the S3 log store costs in requests, against a local S3-compatible server.

Run it from the repository root with the project's interpreter (moto is a dev extra):

    .venv/bin/python -m bench.log_store --chunks 1000 --chunk-bytes 1024

It starts `python -m moto.server` on a free port, stores one attempt's log as `--chunks`
appends of about `--chunk-bytes` each (an agent's upload once a second, or a native
worker's flush), then counts the HTTP requests each kind of access makes, from the
server's access log: an append by a replica that knows the chain, an append by one
that never read it, a follower's poll with nothing new, a read of the whole log, and
the last-lines view (`last=100`). The same accesses are timed on the file store, for
scale (a loaded machine makes the times noisy; the request counts are exact).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from engine.log_settings import LogSettings
from engine.log_store import LogLine, LogStore, encode
from tests.ports import free_port
from worker.devserver import wait_for_port

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench-secret",
    "AWS_REGION": "us-east-1",
}


class Requests:
    """Requests the server logged, counted from its access log."""

    def __init__(self, log: Path) -> None:
        self.log = log

    def count(self) -> int:
        return sum(" HTTP/1.1" in line for line in self.log.read_text().splitlines())


async def measure(
    label: str, action: Callable[[], Awaitable[object]], requests: Requests | None
) -> None:
    before = requests.count() if requests else 0
    started = time.perf_counter()
    await action()
    took = (time.perf_counter() - started) * 1000
    # The server writes its access line after each answer: count once the log is still.
    counted = requests.count() - before if requests else 0
    still_since = time.monotonic()
    while requests and time.monotonic() - still_since < 0.5:
        await asyncio.sleep(0.05)
        now = requests.count() - before
        if now != counted:
            counted, still_since = now, time.monotonic()
    shown = f"{counted:>6} requests" if requests else " " * 15
    print(f"  {label:<46} {shown} {took:>9.1f} ms")


async def run_store(
    store: LogStore,
    fresh: Callable[[], LogStore],
    args: argparse.Namespace,
    requests: Requests | None,
) -> None:
    line = LogLine(stream="stdout", text="x" * max(1, args.chunk_bytes - 8))
    end = 0
    for _ in range(args.chunks):
        end = await store.append_at("j1", 1, end, [line])
    more = [LogLine(stream="stderr", text="one more")]
    await measure(
        "append (the replica knows the chain)",
        lambda: store.append_at("j1", 1, end, more),
        requests,
    )
    end += len(encode(more))
    await measure(
        "append (a replica that never read it)",
        lambda: fresh().append_at("j1", 1, end, more),
        requests,
    )
    end += len(encode(more))
    await measure("follower's poll, nothing new", lambda: store.read_ends("j1", 1, end), requests)
    await measure("read of the whole log (a new replica)", lambda: fresh().read("j1", 1), requests)
    await measure("last 100 lines (a new replica)", lambda: fresh().tail("j1", 1, 100), requests)
    await measure("last 100 lines (the chain known)", lambda: store.tail("j1", 1, 100), requests)


def start_server(port: int, log: Path) -> subprocess.Popen[bytes]:
    """moto's server, its access log (unbuffered) to `log`."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )


def make_bucket(url: str) -> None:
    httpx.put(f"{url}/bench-logs", timeout=30).raise_for_status()


async def main(args: argparse.Namespace) -> None:
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"one log of {args.chunks} chunks of {args.chunk_bytes} bytes")
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        log = Path(tmp) / "moto.log"
        server = start_server(port, log)
        try:
            wait_for_port(port, 60, server)
            url = f"http://127.0.0.1:{port}"
            make_bucket(url)
            store_url = f"s3://bench-logs/logs?endpoint={url}"

            def s3() -> LogStore:
                return LogSettings(LOG_STORE_URL=store_url, **CREDENTIALS).open()  # type: ignore[arg-type]

            print("S3 (moto server):")
            await run_store(s3(), s3, args, Requests(log))

            def files() -> LogStore:
                return LogSettings(LOG_DIR=Path(tmp) / "files").open()

            print("files:")
            await run_store(files(), files, args, None)
        finally:
            server.terminate()
            server.wait(10)


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=1000)
    parser.add_argument("--chunk-bytes", type=int, default=1024)
    asyncio.run(main(parser.parse_args()))


if __name__ == "__main__":
    cli()
