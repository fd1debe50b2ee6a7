"""The one harness every bench runs on.

- The processes it starts are the tests' (tests/procs.py: `Proc`, `spawn`, `jobforge`,
  `wait_until`); benches import those from there.
- `api_client`, `submit_job`: an authenticated HTTP client of the API, and a submit.
- `start_dev_server` and `connect_when_healthy`: a headless Temporal dev server on a
  free port, and a client once its frontend answers.
- `percentile`, `describe`: nearest-rank statistics of latency samples.
- `cpu_seconds`, `CpuMeter`: CPU used by processes, read from /proc.
- `code_version`: the commit measured, and whether the product code differs from it.
- `Bench`, `parse` and `run_bench`: one bench run (temp dir, dev server, jobforge
  children, the common options, the header lines, the error log tails, the clean-up)
  around a bench's own async body; `exit_now` leaves without the SDK's exit crash.

Benches are modules run from the repository root with the project's interpreter,
e.g. `.venv/bin/python -m bench.throughput --jobs 1000`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import httpx
from prometheus_client.parser import text_string_to_metric_families
from temporalio.client import Client

from tests.ports import free_port
from tests.procs import ROOT, Proc, jobforge, spawn
from worker.devserver import DevServer, wait_for_port
from worker.hub_client import pool_limits

PRODUCT_DIRS = ("workflows", "engine", "activities", "api", "worker")
SECRET = "bench-secret"
# A solver that does nothing; jobforge calls it as [*NOOP_SOLVER, "--params", json]: $0 $1.
NOOP_SOLVER = ["/bin/sh", "-c", "printf {}"]
WORKER_READY = "ready: workflows=True"


# -- the API ---------------------------------------------------------------------------


def api_client(port: int, *, timeout: float, connections: int | None = None) -> httpx.AsyncClient:
    """An authenticated client of the API on 127.0.0.1:`port` (keep-alive, the pool of
    our own clients); `connections` caps its pool (default: httpx's)."""
    return httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}",
        headers={"Authorization": f"Bearer {SECRET}"},
        timeout=timeout,
        limits=pool_limits(connections),
    )


async def submit_job(http: httpx.AsyncClient, job_type: str, params: dict[str, Any]) -> str:
    """POST /api/jobs; the new job's id."""
    response = await http.post("/api/jobs", json={"type": job_type, "params": params})
    if response.status_code != 201:
        raise RuntimeError(f"POST /api/jobs: {response.status_code} {response.text}")
    job_id: str = response.json()["id"]
    return job_id


# -- the dev server --------------------------------------------------------------------


def start_dev_server(data_dir: Path) -> DevServer:
    """A headless dev server on a free port with its data in `data_dir`, started."""
    server = DevServer(data_dir, port=free_port(), ui_port=None)
    server.start()
    return server


async def connect_when_healthy(
    address: str, identity: str = "bench-driver", deadline_s: float = 60.0
) -> Client:
    """A client, once the dev server's frontend reports healthy (it listens earlier)."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            return await Client.connect(address, identity=identity)
        except RuntimeError:
            if time.monotonic() > end:
                raise
            await asyncio.sleep(0.2)


# -- statistics ------------------------------------------------------------------------


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (p99 of 200 samples = the 198th smallest)."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * pct // 100))  # ceil(n * pct / 100)
    return ordered[int(rank) - 1]


def p50_p99(label: str, values: Sequence[float]) -> str:
    """The summary line every latency bench prints: `<label> p50: N ms p99: N ms`."""
    return f"{label} p50: {percentile(values, 50):.0f} ms p99: {percentile(values, 99):.0f} ms"


def describe(values: Sequence[float], digits: int = 1) -> str:
    """One line of context: n, min, mean, p50, p90, p99, max (ms)."""
    if not values:
        return "n=0"
    return (
        f"n={len(values)} min {min(values):.{digits}f} "
        f"mean {statistics.fmean(values):.{digits}f} "
        f"p50 {percentile(values, 50):.{digits}f} p90 {percentile(values, 90):.{digits}f} "
        f"p99 {percentile(values, 99):.{digits}f} max {max(values):.{digits}f} ms"
    )


# -- CPU accounting --------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its reaped children (Linux /proc), in s."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    ticks = sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
    return ticks / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU seconds used by named processes between start() and stop()."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.before: dict[str, float] = {}

    def start(self) -> None:
        self.before = {name: cpu_seconds(pid) for name, pid in self.pids.items()}

    def stop(self) -> dict[str, float]:
        return {name: cpu_seconds(pid) - self.before[name] for name, pid in self.pids.items()}


# -- what a run prints about itself ----------------------------------------------------


def code_version() -> str:
    """The commit measured, and whether the product code differs from it."""
    git = ["git", "-C", str(ROOT)]
    try:
        sha = subprocess.run(
            [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        status = subprocess.run(
            [*git, "status", "--porcelain", "--", *PRODUCT_DIRS],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return f"{ROOT} (not a git checkout)"
    changed = [line[3:] for line in status.splitlines() if line.strip()]
    if not changed:
        return f"{ROOT} at {sha}, product code as committed"
    shown = ", ".join(changed[:5]) + (", …" if len(changed) > 5 else "")
    return f"{ROOT} at {sha} + {len(changed)} uncommitted change(s) in product dirs: {shown}"


def machine() -> str:
    """Cores, load, Python and SDK versions."""
    import temporalio

    load = os.getloadavg()
    return (
        f"machine: {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} "
        f"{load[2]:.2f} at start; Python {platform.python_version()}, "
        f"temporalio {temporalio.__version__}"
    )


def load_average() -> str:
    """The three load averages, as the benches print them."""
    load = os.getloadavg()
    return f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"


# -- one bench run ---------------------------------------------------------------------


@dataclass
class Bench:
    """Everything one run owns: the server, its children, the temp dir."""

    args: argparse.Namespace
    data: Path
    server: DevServer
    children: list[Proc] = field(default_factory=list)
    # Inherited variables with these prefixes are dropped from every child's environment.
    drop_env: tuple[str, ...] = ()

    def spawn(self, name: str, argv: Sequence[str], env: dict[str, str]) -> Proc:
        """Start a child in its own session, logging to <data>/<name>.log."""
        child = spawn(argv, self.data / f"{name}.log", env, new_session=True)
        self.children.append(child)
        return child

    def env(self, **extra: str) -> dict[str, str]:
        """Environment of a jobforge child."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(self.drop_env)}
        env.update(
            TEMPORAL_ADDRESS=self.server.address,
            FORGE_INGEST_SECRET=SECRET,
            SOLVER_CACHE_DIR=str(self.data / "solver-cache"),
            LOG_LEVEL="INFO",
            PYTHONUNBUFFERED="1",
        )
        env.update(extra)
        return env

    def start_api(self, name: str = "api", **env: str) -> tuple[Proc, int]:
        """The real API on a free port; returns once the port accepts."""
        port = free_port()
        api = self.spawn(name, jobforge("api", "--port", str(port)), self.env(**env))
        wait_for_port(port, 60, api.process)
        return api, port

    def start_worker(self, name: str = "worker", **env: str) -> Proc:
        """A native worker that also runs the workflows; returns once it is ready."""
        worker = self.spawn(name, jobforge("worker"), self.env(**env))
        worker.wait_for(WORKER_READY)
        return worker

    def start_noop_worker(
        self, job_type: str, node_id: str, name: str = "worker", **env: str
    ) -> Proc:
        """A native worker for the workflows and `job_type`, whose solver does nothing."""
        return self.start_worker(
            name,
            WORKER_TYPES=job_type,
            WORKER_SOLVERS=json.dumps({job_type: NOOP_SOLVER}),
            NODE_ID=node_id,
            **env,
        )

    def server_counts(self) -> Counter[str]:
        """The dev server's database operations (`db <service> <operation>`, its
        `persistence_requests` metric) and the requests its frontend answered (`rpc
        <operation>`, `service_requests`) so far."""
        assert self.server.metrics_port is not None
        url = f"http://127.0.0.1:{self.server.metrics_port}/metrics"
        found: Counter[str] = Counter()
        for family in text_string_to_metric_families(httpx.get(url, timeout=10).text):
            for sample in family.samples:
                labels, value = sample.labels, int(sample.value)
                service, operation = labels.get("service_name"), labels.get("operation")
                if family.name == "persistence_requests":
                    found[f"db {service} {operation}"] += value
                elif family.name == "service_requests" and service == "frontend":
                    found[f"rpc {operation}"] += value
        return found

    def server_pid(self) -> int:
        """The dev server's process id (it is running)."""
        assert self.server.process is not None
        return self.server.process.pid

    def meter(self, api: Proc, worker: Proc, bench_label: str = "bench") -> CpuMeter:
        """CPU of the dev server, the API, the worker and this process."""
        return CpuMeter(
            {
                "temporal": self.server_pid(),
                "api": api.process.pid,
                "worker": worker.process.pid,
                bench_label: os.getpid(),
            }
        )

    def stop_all(self) -> None:
        """Stop every child, newest first, then the server."""
        for child in reversed(self.children):
            with contextlib.suppress(Exception):
                child.stop(timeout=20)
        self.server.stop()


def parse(
    parser: argparse.ArgumentParser, argv: list[str], *, bare_worker: bool = False
) -> argparse.Namespace:
    """Add the options every bench has (`--keep`; with `bare_worker`, the hidden worker
    mode a bench starts itself in), then parse `argv`."""
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, SQLite)")
    if bare_worker:
        parser.add_argument("--bare-worker", action="store_true", help=argparse.SUPPRESS)
        parser.add_argument("--address", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def run_bench(
    args: argparse.Namespace,
    body: Callable[[Bench], Coroutine[Any, Any, None]],
    *,
    settings: Callable[[Bench], str],
    data_prefix: str,
    drop_env: tuple[str, ...] = (),
    keep_data: Path | None = None,
) -> int:
    """Run `body` on a dev server; the exit code (0 when it finished).

    Prints the machine, the run's `settings` (and where its server and files are) and the
    code measured first. On an error, prints the tail of every child's log; on any exit
    (Ctrl-C and SIGTERM included) stops every process it started. The server's data is a
    temp dir, removed after a successful run unless `args.keep`, or `keep_data`, which
    is reused and always kept.
    """
    # SIGTERM cleans up like Ctrl-C does.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if keep_data is None:
        data = Path(tempfile.mkdtemp(prefix=data_prefix))
    else:
        data = keep_data.resolve()
        data.mkdir(parents=True, exist_ok=True)
    server = DevServer(data / "temporal", port=free_port(), ui_port=None, metrics_port=free_port())
    bench = Bench(args, data, server, drop_env=drop_env)
    ok = False
    try:
        print(machine())
        print(f"{settings(bench)}; dev server at {server.address}, data in {data}")
        print(f"code: {code_version()}")
        sys.stdout.flush()
        server.start()
        asyncio.run(body(bench))
        ok = True
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
    except Exception as err:
        print(f"error: {err!r}", file=sys.stderr)
        for child in bench.children:
            print(f"--- {child.name} log tail ({child.log}):", file=sys.stderr)
            print(child.output()[-2000:], file=sys.stderr)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        bench.stop_all()
        if ok and not args.keep and keep_data is None:
            shutil.rmtree(data, ignore_errors=True)
        else:
            print(f"kept {data}", file=sys.stderr)
    return 0 if ok else 1


def exit_now(code: int) -> NoReturn:
    """Flush and leave at once: Temporal's client can crash at interpreter exit
    (sdk-python#300)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
