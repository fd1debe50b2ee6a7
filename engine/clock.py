"""Wall-clock time in the spec's unit. Outside workflows only: workflow code takes its
time from `workflow.now()`."""

from __future__ import annotations

import time


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch."""
    return int(time.time() * 1000)
