"""How long the API takes to answer while Temporal is down.

Run it from the repository root with the project's interpreter:

    .venv/bin/python -m bench.outage_answer --requests 10

One headless Temporal dev server (free port, fresh temp data dir) and one API process
(`python -m worker.cli api`) per setting of API_TEMPORAL_RETRY_MS (the shipped 2000,
and 10000, the Temporal SDK's own default). The API first answers a request with
Temporal up (so its connection is established, as in production), then the dev server
is stopped (SIGTERM) and the bench sends `--requests` of each kind, one at a time:
`GET /api/jobs`, `GET /api/jobs/{id}` and `POST /api/jobs`. It prints, per setting and
kind, the answers' statuses and the p50 and max time to answer.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from bench.harness import SECRET, code_version, start_dev_server
from tests.ports import free_port
from tests.procs import jobforge, spawn
from worker.devserver import env_with, wait_for_port


def measure(retry_ms: int, requests: int, workdir: Path) -> None:
    """One API with `API_TEMPORAL_RETRY_MS=retry_ms`: answer times once Temporal is gone."""
    server = start_dev_server(workdir / f"temporal-{retry_ms}")
    port = free_port()
    env = env_with(
        TEMPORAL_ADDRESS=server.address,
        FORGE_INGEST_SECRET=SECRET,
        API_TEMPORAL_RETRY_MS=str(retry_ms),
        LOG_LEVEL="ERROR",
    )
    api = spawn(jobforge("api", "--port", str(port)), workdir / f"api-{retry_ms}.log", env)
    try:
        wait_for_port(port, 30, api.process)
        with httpx.Client(
            base_url=f"http://127.0.0.1:{port}",
            headers={"Authorization": f"Bearer {SECRET}"},
            timeout=60,
        ) as http:
            submitted = http.post("/api/jobs", json={"type": "outage-bench"})
            submitted.raise_for_status()
            job_id = submitted.json()["id"]
            server.stop()
            kinds: dict[str, Callable[[], httpx.Response]] = {
                "GET /api/jobs": lambda: http.get("/api/jobs"),
                "GET /api/jobs/{id}": lambda: http.get(f"/api/jobs/{job_id}"),
                "POST /api/jobs": lambda: http.post("/api/jobs", json={"type": "outage-bench"}),
            }
            for kind, call in kinds.items():
                times: list[float] = []
                statuses: set[int] = set()
                for _ in range(requests):
                    start = time.perf_counter()
                    statuses.add(call().status_code)
                    times.append((time.perf_counter() - start) * 1000)
                print(
                    f"API_TEMPORAL_RETRY_MS={retry_ms:<6} {kind:<20} "
                    f"statuses={sorted(statuses)} p50={statistics.median(times):.0f} ms "
                    f"max={max(times):.0f} ms (n={requests})",
                    flush=True,
                )
    finally:
        api.stop(timeout=20)
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.outage_answer", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--requests", type=int, default=10, help="requests of each kind")
    args = parser.parse_args()
    print(f"code: {code_version()}")
    print(f"load average at start: {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="jobforge-outage-") as tmp:
        for retry_ms in (2000, 10_000):
            measure(retry_ms, args.requests, Path(tmp))


if __name__ == "__main__":
    main()
