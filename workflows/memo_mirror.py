"""The loop of a small entity workflow whose state is read from its memo.

Readers list or describe such a workflow (visibility, no workflow task) instead of
querying it; the loop mirrors the state into the memo after every change and continues
as new when Temporal suggests it, so its history stays short however long it lives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio import workflow


async def mirror_into_memo(
    memo_key: str,
    is_dirty: Callable[[], bool],
    snapshot: Callable[[], Any],
    continue_as_new_arg: Callable[[], Any],
) -> None:
    """Upsert `{memo_key: snapshot()}` whenever `is_dirty()`; continue as new with
    `continue_as_new_arg()` when suggested. The caller clears its dirty flag in
    `snapshot`. Never returns."""
    while True:
        await workflow.wait_condition(
            lambda: is_dirty() or workflow.info().is_continue_as_new_suggested()
        )
        if is_dirty():
            workflow.upsert_memo({memo_key: snapshot()})
        if workflow.info().is_continue_as_new_suggested():
            await workflow.wait_condition(workflow.all_handlers_finished)
            workflow.continue_as_new(continue_as_new_arg())
