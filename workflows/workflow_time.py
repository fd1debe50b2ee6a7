"""Time in workflow code: the workflow's own clock (`workflow.now()`: the time of the
task being run, the same on every replay), never the wall clock, which is
engine/clock.py's, for code outside workflows."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow


def workflow_now_ms() -> int:
    """The workflow's time, in milliseconds since the epoch (the spec's unit)."""
    return int(workflow.now().timestamp() * 1000)


async def waited(condition: Callable[[], bool], limit: timedelta | None) -> bool:
    """Wait for `condition`; False if `limit` passed first."""
    try:
        await workflow.wait_condition(condition, timeout=limit)
    except asyncio.TimeoutError:  # noqa: UP041 - `TimeoutError` here is Temporal's
        return False
    return True
