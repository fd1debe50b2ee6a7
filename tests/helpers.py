"""Helpers shared by the tests that run stacks of their own (`start_stack`)."""

from __future__ import annotations

from typing import Any


def statuses(job: dict[str, Any]) -> list[str]:
    """The job's recorded status sequence."""
    return [t["status"] for t in job["transitions"]]
