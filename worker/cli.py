"""`jobforge`: the one console script (dev stack, worker, API, setup, job client)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any, NoReturn

import httpx
import typer

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="jobforge: durable job dispatch on Temporal.",
)

DemoType = "demo"


def _exit(code: int) -> NoReturn:
    # Short-lived Temporal clients can crash at interpreter exit (sdk-python#300).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    _exit(code)


def _logging() -> None:
    logging.basicConfig(
        level=os.environ.get("LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


@app.command()
def worker() -> None:
    """Run a native Temporal worker (WORKER_*, SOLVER_*, NODE_ID, TEMPORAL_* env)."""
    from pydantic import ValidationError

    from api.temporal import TemporalSettings
    from worker.main import serve
    from worker.settings import SolverSettings, WorkerSettings

    _logging()
    try:
        settings = (TemporalSettings(), WorkerSettings(), SolverSettings())
    except ValidationError as err:
        _fail(f"bad worker setting: {err.errors()[0]['loc']}: {err.errors()[0]['msg']}", 2)
    asyncio.run(serve(*settings))
    _exit(0)


@app.command()
def agent() -> None:
    """Run an HTTP-only worker (HUB_URL, NODE_ID, FORGE_INGEST_SECRET, WORKER_* env)."""
    from pydantic import ValidationError

    from worker.agent import AgentSettings, serve
    from worker.settings import SolverSettings

    _logging()
    try:
        settings = (AgentSettings(), SolverSettings())
    except ValidationError as err:
        _fail(f"bad agent setting: {err.errors()[0]['loc']}: {err.errors()[0]['msg']}", 2)
    asyncio.run(serve(*settings))
    _exit(0)


@app.command()
def api(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
) -> None:
    """Run the REST API (FORGE_INGEST_SECRET, TEMPORAL_* env)."""
    import uvicorn

    from api.main import create_app

    _logging()
    # Event streams never end by themselves: without a bound, SIGTERM would wait for
    # every SSE client to leave. After 5 s the remaining requests are cancelled (an
    # agent's claim is handed back; SSE clients resume with Last-Event-ID).
    uvicorn.run(
        create_app(), host=host, port=port, log_level="warning", timeout_graceful_shutdown=5
    )
    _exit(0)


@app.command()
def setup() -> None:
    """Register jobforge's search attributes on a Temporal cluster (idempotent)."""
    from api.temporal import TemporalSettings
    from worker.setup import register_search_attributes

    try:
        added = asyncio.run(register_search_attributes(TemporalSettings()))
    except Exception as err:  # one clear line for the operator
        _fail(f"cannot register search attributes: {err}")
    typer.echo(f"search attributes ready ({', '.join(added) or 'all present already'})")
    _exit(0)


@app.command()
def dev(
    api_port: Annotated[int, typer.Option(help="REST API port.")] = 8000,
    temporal_port: Annotated[int, typer.Option(help="Temporal frontend port.")] = 7233,
    ui_port: Annotated[int, typer.Option(help="Temporal UI port.")] = 8233,
    data_dir: Annotated[Path, typer.Option(help="Where the SQLite file lives.")] = Path(
        ".jobforge"
    ),
) -> None:
    """Start the embedded stack: Temporal dev server, API and one worker."""
    from worker.devserver import DevServer, env_with, port_in_use, wait_for_port

    data_dir = data_dir.resolve()
    secret = os.environ.get("FORGE_INGEST_SECRET") or secrets.token_urlsafe(24)
    generated = not os.environ.get("FORGE_INGEST_SECRET")
    try:
        solvers: dict[str, Any] = json.loads(os.environ.get("WORKER_SOLVERS") or "{}")
    except ValueError as err:
        _fail(f"WORKER_SOLVERS is not JSON: {err}", 2)
    if not isinstance(solvers, dict):
        _fail("WORKER_SOLVERS must be a JSON object of type → command", 2)
    solvers.setdefault(DemoType, [sys.executable, "-m", "worker.demo_solver"])
    if port_in_use(api_port):
        _fail(f"API port {api_port} is already in use", 2)
    stopping = False

    def stop(*_: object) -> None:
        # The first Ctrl-C interrupts whatever dev is waiting for (the server start, the
        # API's port, the idle loop); the cleanup below then runs undisturbed.
        nonlocal stopping
        if not stopping:
            stopping = True
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    server = DevServer(data_dir, port=temporal_port, ui_port=ui_port)
    children: list[subprocess.Popen[bytes]] = []
    code = 0
    try:
        try:
            server.start()
        except (OSError, RuntimeError, TimeoutError) as err:
            raise _DevError(
                f"Temporal dev server did not start ({err}); see {data_dir / 'temporal.log'}"
            ) from err
        env = env_with(
            FORGE_INGEST_SECRET=secret,
            TEMPORAL_ADDRESS=server.address,
            TEMPORAL_UI_URL=f"http://127.0.0.1:{ui_port}",
            WORKER_SOLVERS=json.dumps(solvers),
            SOLVER_CACHE_DIR=os.environ.get("SOLVER_CACHE_DIR", str(data_dir / "solvers")),
        )
        jobforge = [sys.executable, "-m", "worker.cli"]
        children.append(subprocess.Popen([*jobforge, "api", "--port", str(api_port)], env=env))
        children.append(subprocess.Popen([*jobforge, "worker"], env=env))
        try:
            wait_for_port(api_port, 30, children[0])
        except (RuntimeError, TimeoutError) as err:
            raise _DevError(f"the API did not start: {err}") from err
        typer.echo(f"jobforge API     http://127.0.0.1:{api_port}")
        typer.echo(f"API docs         http://127.0.0.1:{api_port}/docs")
        typer.echo(f"Temporal UI      http://127.0.0.1:{ui_port}")
        typer.echo(f"Temporal gRPC    {server.address}")
        if generated:
            typer.echo(f"FORGE_INGEST_SECRET={secret}")
        typer.echo("Ctrl-C stops everything.")
        while all(child.poll() is None for child in children):
            if server.process is not None and server.process.poll() is not None:
                raise _DevError(f"the Temporal dev server exited ({server.process.returncode})")
            time.sleep(0.2)
        names = ("API", "worker")
        dead = [
            f"{name} ({child.returncode})"
            for name, child in zip(names, children, strict=True)
            if child.poll() is not None
        ]
        raise _DevError(f"{', '.join(dead) or 'a child'} exited; stopping everything")
    except KeyboardInterrupt:
        typer.echo("stopping…")
    except _DevError as err:
        typer.echo(f"error: {err}", err=True)
        code = 1
    finally:
        stopping = True  # a further Ctrl-C must not cut the cleanup short
        for child in children:
            if child.poll() is None:
                child.terminate()
        for child in children:
            try:
                child.wait(40)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        server.stop()
    _exit(code)


class _DevError(Exception):
    """`jobforge dev` cannot go on; the message says why."""


# -- job client over REST ----------------------------------------------------------


def _hub() -> tuple[str, dict[str, str]]:
    url = os.environ.get("HUB_URL", "http://127.0.0.1:8000").rstrip("/")
    token = os.environ.get("FORGE_INGEST_SECRET", "")
    return url, {"Authorization": f"Bearer {token}"}


def _call(method: str, path: str, **kwargs: Any) -> httpx.Response:
    url, headers = _hub()
    try:
        response = httpx.request(method, url + path, headers=headers, timeout=30, **kwargs)
    except httpx.HTTPError as err:
        _fail(f"cannot reach {url}: {err}")
    if response.status_code >= 400:
        try:
            message = response.json().get("error", response.text)
        except ValueError:
            message = response.text
        _fail(f"HTTP {response.status_code}: {message}")
    return response


@app.command()
def submit(
    job_type: Annotated[str, typer.Argument(metavar="TYPE", help="Job type.")],
    params: Annotated[str, typer.Option(help="Params as a JSON object.")] = "{}",
    priority: Annotated[int, typer.Option(help="Higher runs first.")] = 0,
    max_attempts: Annotated[int, typer.Option()] = 3,
    max_runtime_ms: Annotated[int, typer.Option()] = 300_000,
    solver_url: Annotated[str | None, typer.Option()] = None,
    solver_checksum: Annotated[str | None, typer.Option()] = None,
    idempotency_key: Annotated[str | None, typer.Option()] = None,
) -> None:
    """Submit a job (HUB_URL, FORGE_INGEST_SECRET env); prints its id."""
    try:
        parsed = json.loads(params)
    except ValueError as err:
        _fail(f"--params is not JSON: {err}", 2)
    body: dict[str, Any] = {
        "type": job_type,
        "params": parsed,
        "priority": priority,
        "max_attempts": max_attempts,
        "max_runtime_ms": max_runtime_ms,
    }
    if solver_url:
        body["solver_url"] = solver_url
        body["solver_checksum"] = solver_checksum
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    response = _call("POST", "/api/jobs", json=body, headers=headers)
    typer.echo(response.json()["id"])
    _exit(0)


@app.command()
def get(job_id: str) -> None:
    """Print one job as JSON."""
    typer.echo(json.dumps(_call("GET", f"/api/jobs/{job_id}").json(), indent=2))
    _exit(0)


@app.command(name="list")
def list_jobs(
    status: Annotated[str | None, typer.Option()] = None,
    job_type: Annotated[str | None, typer.Option("--type")] = None,
    limit: Annotated[int, typer.Option()] = 50,
) -> None:
    """List jobs: id, status, type, priority, attempts."""
    query: dict[str, Any] = {"limit": limit}
    if status:
        query["status"] = status
    if job_type:
        query["type"] = job_type
    for job in _call("GET", "/api/jobs", params=query).json():
        typer.echo(
            f"{job['id']}  {job['status']:<11} {job['type']:<16} "
            f"p={job['priority']} attempts={job['attempts']}"
        )
    _exit(0)


@app.command()
def cancel(job_id: str) -> None:
    """Cancel a pending or assigned job."""
    _call("DELETE", f"/api/jobs/{job_id}")
    typer.echo(f"cancelled {job_id}")
    _exit(0)


def main() -> None:
    """Console script entry point."""
    app()


if __name__ == "__main__":
    main()
