"""Bare Temporal: the minimal workflows the benches compare jobforge with, and their worker.

A bench runs the worker as a subprocess of itself (`python -m bench.throughput
--bare-worker ...`, `python -m bench.claim_latency --bare-worker ...`), which calls
`serve`. The workflows live here rather than in the bench that is `__main__`, so the
workflow sandbox can pass this module through, as jobforge's worker passes its
`workflows` package: both pay the same sandbox cost per workflow.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

NOOP_ACTIVITY = "bare_noop"
STARTED_AT_ACTIVITY = "bare_started_at"


# -- throughput: one workflow, one no-op activity on the same task queue ---------------


@activity.defn(name=NOOP_ACTIVITY)
async def bare_noop(inp: dict[str, Any]) -> dict[str, Any]:
    """Does nothing; returns what the no-op solver prints."""
    del inp
    return {}


@workflow.defn(name="BareJob")
class BareJob:
    """A workflow that runs one no-op activity and returns its result."""

    @workflow.run
    async def run(self, inp: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = await workflow.execute_activity(
            NOOP_ACTIVITY,
            inp,
            result_type=dict,
            start_to_close_timeout=timedelta(minutes=5),
        )
        return result


# -- claim latency: one workflow, one activity that says when it started ---------------


@activity.defn(name=STARTED_AT_ACTIVITY)
async def bare_started_at(inp: dict[str, Any]) -> float:
    """The wall-clock time at which this activity began (epoch seconds)."""
    started = time.time()
    del inp
    return started


@workflow.defn(name="BareClaimJob")
class BareClaimJob:
    """A workflow that runs one activity and returns when that activity started."""

    @workflow.run
    async def run(self, inp: dict[str, Any]) -> float:
        started: float = await workflow.execute_activity(
            STARTED_AT_ACTIVITY,
            inp,
            result_type=float,
            start_to_close_timeout=timedelta(minutes=5),
        )
        return started


# -- the worker ------------------------------------------------------------------------


def new_worker(
    client: Client,
    *workflows: type,
    activities: Sequence[Callable[..., Any]],
    task_queue: str,
    max_concurrent_activities: int,
) -> Worker:
    """A worker with the knobs jobforge's native worker sets on its activity workers
    (worker/native.py), and the sandbox with this package passed through."""
    return Worker(
        client,
        task_queue=task_queue,
        workflows=list(workflows),
        activities=activities,
        max_concurrent_activities=max_concurrent_activities,
        max_concurrent_activity_task_polls=1,
        workflow_runner=SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules(
                __name__.split(".")[0]
            )
        ),
    )


async def serve(
    address: str,
    *workflows: type,
    activities: Sequence[Callable[..., Any]],
    task_queue: str,
    max_concurrent_activities: int,
    ready: str,
) -> None:
    """Serve `workflows` and `activities` until SIGINT or SIGTERM; print `ready` once
    the worker runs."""
    client = await Client.connect(address, identity=f"bare-worker-{os.getpid()}")
    worker = new_worker(
        client,
        *workflows,
        activities=activities,
        task_queue=task_queue,
        max_concurrent_activities=max_concurrent_activities,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    run = asyncio.create_task(worker.run())
    print(ready, flush=True)
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait([run, stopped], return_when=asyncio.FIRST_COMPLETED)
    await worker.shutdown()
    if run.done() and not run.cancelled() and (error := run.exception()) is not None:
        raise error
