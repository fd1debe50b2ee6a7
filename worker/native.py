"""`jobforge worker`: Temporal workers for JobWorkflow and the per-type attempt queues."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from datetime import timedelta

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities.attempt import JobActivities, RunnerConfig
from activities.container import WORKER_LABEL
from activities.runner import watch_solvers_by_pidfd
from engine.clock import now_ms
from engine.connection import Route, TemporalSettings, connect, metrics_runtime
from engine.directory import follow_job_types, register_worker, worker_telemetry
from engine.hosts import HostSettings
from engine.log_settings import LogSettings
from engine.tracing import start_tracing
from worker.host_telemetry import HostSampler
from worker.node_identity import identified
from worker.settings import ContainerSettings, SolverSettings, WorkerSettings
from workflows.errors import HostNotAvailable
from workflows.gate_workflow import GateWorkflow
from workflows.job_workflow import JobWorkflow
from workflows.models import WorkerInfo
from workflows.token_registry import TokenRegistry
from workflows.type_registry import JobTypeRegistry
from workflows.worker_record import WorkerRecordWorkflow

log = logging.getLogger("jobforge.worker")


def workflow_runner() -> SandboxedWorkflowRunner:
    """The sandbox, with jobforge's pure model modules passed through, and OpenTelemetry
    as the SDK's own tracing plugin passes it: workflow code that imports it shares the
    process's context, not a copy per run. Temporal's TracingInterceptor works without
    it (engine/tracing.py); no workflow imports it today, so it costs nothing."""
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(
            "pydantic", "pydantic_core", "workflows", "opentelemetry"
        )
    )


def build_workflow_worker(client: Client, temporal: TemporalSettings) -> Worker:
    """The worker that runs JobWorkflow, the gates and the registries (job types,
    workers, API tokens)."""
    return Worker(
        client,
        task_queue=temporal.task_queue,
        workflows=[
            JobWorkflow,
            JobTypeRegistry,
            WorkerRecordWorkflow,
            GateWorkflow,
            TokenRegistry,
        ],
        workflow_runner=workflow_runner(),
    )


# How often a worker tells its record it is alive, with its host telemetry (each is a
# history event).
SEEN_EVERY_S = 15.0
# How long shutdown lets a presence or discovery call in flight finish.
STOP_CALLS_S = 5.0


class NativeWorker:
    """One process: a workflow worker plus one activity worker per job type."""

    def __init__(
        self,
        client: Client,
        temporal: TemporalSettings,
        settings: WorkerSettings,
        solver: SolverSettings,
        containers: ContainerSettings | None = None,
        hosts: HostSettings | None = None,
    ) -> None:
        # The host ids whose pinned jobs it runs too (docs/workers.md, "Host pinning").
        self._hosts = (hosts or HostSettings()).served(settings.node_id, settings.host)
        self._client = client
        self._temporal = temporal
        self._settings = settings
        self._containers = containers or ContainerSettings()
        config = RunnerConfig(
            worker_id=settings.node_id,
            source=solver.source(settings.solvers),
            limits=solver.limits,
            slots=asyncio.Semaphore(settings.cores),
            logs=LogSettings().open(),
            containers=self._containers.runtime_client(),
            host=settings.host,
        )
        self._runtime = config.containers
        self._activities = JobActivities(client, config)
        self._host = HostSampler(solver.cache_dir, lambda: self._activities.running)
        self._runs: dict[str, asyncio.Task[None]] = {}
        self._workers: dict[str, Worker] = {}
        # Set once shutdown begins: no queue is polled from then on.
        self._stopping = False

    def serve_type(self, job_type: str) -> None:
        """Start polling the queues of one job type's jobs this worker can run, each
        with its host queues (idempotent; docs/architecture.md, "Routing"): those that
        name a solver_url; those that do not, only with the type's solver registered
        (WORKER_SOLVERS); with a container runtime, container jobs (unless
        WORKER_CONTAINER_TYPES names the types to take them of)."""
        if self._runtime and not self._settings.container_types:
            self._serve_containers(job_type)
        url = self._serve_queues(job_type, Route.URL)
        if job_type in self._settings.solvers and self._serve_queues(job_type, Route.PLAIN):
            log.info("serving job type %s: solver_url jobs and its registered solver", job_type)
        elif url:
            log.info("serving job type %s: solver_url jobs", job_type)

    def _serve_containers(self, job_type: str) -> None:
        if self._serve_queues(job_type, Route.CONTAINER):
            log.info("serving container jobs of type %s", job_type)

    def _serve_queues(self, job_type: str, route: Route) -> bool:
        """Poll one type's shared queue of one route and its host queues; False if this
        worker already does."""
        tenant = self._settings.tenant
        shared = self._temporal.activity_queue(job_type, route, tenant)
        if shared in self._workers:
            return False
        self._add(shared, self._activity_worker(shared))
        for host in self._hosts:
            queue = self._temporal.host_queue(job_type, host, route, tenant)
            self._add(queue, self._activity_worker(queue))
        return True

    def _activity_worker(self, task_queue: str) -> Worker:
        """A worker running attempts from one task queue (all share the WORKER_CORES
        slots of the runner)."""
        return Worker(
            self._client,
            task_queue=task_queue,
            activities=[self._activities.run_job],
            max_concurrent_activities=self._settings.cores,
            max_concurrent_activity_task_polls=1,
            graceful_shutdown_timeout=timedelta(seconds=self._settings.shutdown_grace_s),
            # A heartbeat (the 10 s beat, or a solver's progress) reaches Temporal
            # within PROGRESS_PUBLISH_MS, at most once per it; so do cancellations.
            max_heartbeat_throttle_interval=timedelta(
                milliseconds=self._settings.progress_publish_ms
            ),
            identity=self._settings.node_id,
        )

    def _add(self, key: str, worker: Worker) -> None:
        if self._stopping:
            return
        self._workers[key] = worker
        self._runs[key] = asyncio.create_task(worker.run(), name=f"worker {key}")

    async def run(self, stop: asyncio.Event) -> None:
        """Run until `stop` is set (a queue's worker that fails sets it), then shut down
        gracefully: every task it started has ended when this returns."""
        if self._settings.run_workflows:
            self._add("<workflows>", build_workflow_worker(self._client, self._temporal))
        if self._runtime:
            # What this worker left when it was killed, before a container job starts.
            await self._runtime.remove_labelled(WORKER_LABEL, self._settings.node_id)
            for job_type in self._settings.container_types:
                self._serve_containers(job_type)
        # Every type it serves; with WORKER_TYPES empty, those it has a solver for at
        # once, and the others as the type registry names them (`_discover_types`).
        for job_type in self._settings.types or self._settings.solvers:
            self.serve_type(job_type)
        log.info(
            "worker %s ready: workflows=%s types=%s cores=%d tenant=%s",
            self._settings.node_id,
            self._settings.run_workflows,
            ",".join(self._settings.types) or "<all>",
            self._settings.cores,
            self._settings.tenant or "<none>",
        )
        presence = asyncio.create_task(self._announce(stop))
        discovery = None
        if not self._settings.types:
            discovery = asyncio.create_task(self._discover_types(stop))
        stopped = asyncio.create_task(stop.wait())
        await asyncio.wait([stopped, *self._runs.values()], return_when=asyncio.FIRST_COMPLETED)
        # One line for the process (the SDK's line per queue is filtered: serve()).
        log.info(
            "shutting down: no new claims, %.0f s for running jobs", self._settings.shutdown_grace_s
        )
        self._stopping = True
        stop.set()  # a queue's worker that failed stops the others too
        # Presence and discovery see `stop` and end after the call they are in (not
        # cancelled inside one, unless it outlasts STOP_CALLS_S); discovery adds no
        # queue from now on.
        helpers = [stopped, presence, *([discovery] if discovery else [])]
        _, late = await asyncio.wait(helpers, timeout=STOP_CALLS_S)
        for task in late:
            task.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
        await asyncio.gather(
            *(w.shutdown() for w in self._workers.values()), return_exceptions=True
        )
        ended = await asyncio.gather(*self._runs.values(), return_exceptions=True)
        for outcome in ended:
            if isinstance(outcome, Exception):
                raise outcome

    async def _announce(self, stop: asyncio.Event) -> None:
        """Register this worker, then heartbeat its record with the host's telemetry
        every so often (the first at once, so the fleet shows it from the start)."""
        settings = self._settings
        info = WorkerInfo(
            worker_id=settings.node_id,
            name=settings.node_id,
            cores=settings.cores,
            ram_gb=settings.ram_gb,
            tags=settings.tags,
            kind="native",
            container_runtime=self._containers.runtime,
            container_types=settings.container_types if self._containers.runtime else [],
            host=settings.host,
            solver_types=settings.solver_types(),
            tenant=settings.tenant,
        )
        registered = False
        while not stop.is_set():
            try:
                if not registered:
                    await register_worker(self._client, self._temporal, info)
                    registered = True
                await worker_telemetry(
                    self._client, settings.node_id, now_ms(), self._host.sample()
                )
            except RPCError as err:
                # The record ended (terminated, say): register again next time round.
                registered = registered and err.status != RPCStatusCode.NOT_FOUND
                log.warning("could not update this worker's record: %s", err.message)
            except Exception:  # presence is best effort; jobs do not depend on it
                log.warning("could not update this worker's record", exc_info=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), SEEN_EVERY_S)

    async def _discover_types(self, stop: asyncio.Event) -> None:
        """Follow the type registry until `stop`, so types first submitted later are
        served too, as soon as the registry records them."""
        following = asyncio.create_task(self._follow_types(), name="type registry")
        try:
            await stop.wait()
        finally:
            following.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await following

    async def _follow_types(self) -> None:
        retry_s = self._settings.type_poll_ms / 1000
        while True:
            try:
                async for types in follow_job_types(
                    self._client, self._temporal.task_queue, retry_s
                ):
                    for job_type in types:
                        self.serve_type(job_type)
            except Exception as err:  # a registry hiccup must not stop the worker
                log.warning("reading the job type registry failed: %s", err)
            await asyncio.sleep(retry_s)


class OneLineFailures(logging.Filter):
    """A failed attempt is an expected outcome, not a crash: one log line naming the
    error, and its traceback only when the log level is DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Fold the exception into the message unless DEBUG is on."""
        if record.exc_info and not log.isEnabledFor(logging.DEBUG):
            err = record.exc_info[1]
            if err is not None:
                record.msg = f"{record.msg}: {type(err).__name__}: {err}"
            record.exc_info = None
            record.exc_text = None
        return True


class OneShutdownLine(logging.Filter):
    """The SDK logs "Beginning worker shutdown" for each of a process's task queues (one
    Worker object each); the process says it once itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Beginning worker shutdown")


def quiet_sdk_shutdown() -> None:
    """Install `OneShutdownLine` on the SDK's worker logger (idempotent)."""
    sdk_worker_log = logging.getLogger("temporalio.worker._worker")
    if not any(isinstance(f, OneShutdownLine) for f in sdk_worker_log.filters):
        sdk_worker_log.addFilter(OneShutdownLine())


def quiet_attempt_failures() -> None:
    """Install `OneLineFailures` on the SDK's activity logger (idempotent)."""
    sdk_activity_log = logging.getLogger("temporalio.activity")
    if not any(isinstance(f, OneLineFailures) for f in sdk_activity_log.filters):
        sdk_activity_log.addFilter(OneLineFailures())


def install_stop_handlers(stop: asyncio.Event) -> None:
    """SIGINT/SIGTERM set `stop` (a second signal is ignored; the grace period runs)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)


async def serve(
    temporal: TemporalSettings,
    settings: WorkerSettings,
    solver: SolverSettings,
    containers: ContainerSettings | None = None,
) -> None:
    """Entry point of `jobforge worker`."""
    stop = asyncio.Event()
    install_stop_handlers(stop)
    watch_solvers_by_pidfd()
    quiet_attempt_failures()
    quiet_sdk_shutdown()
    runtime = metrics_runtime(settings.metrics_port) if settings.metrics_port else None
    start_tracing("jobforge-worker")
    hosts = HostSettings()
    with identified(settings, solver.cache_dir) as settings:
        if not hosts.allows_worker(settings.node_id, settings.host):
            raise SystemExit(HostNotAvailable(settings.node_id, settings.host).message)
        client = await connect(temporal, identity=settings.node_id, runtime=runtime)
        await NativeWorker(client, temporal, settings, solver, containers, hosts).run(stop)
