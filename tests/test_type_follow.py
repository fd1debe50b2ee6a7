"""An every-type worker learns of new job types by following the type registry's history
(engine.directory.follow_job_types): at once, and through a change of run."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from engine.connection import TemporalSettings
from engine.directory import follow_job_types, known_job_types, register_job_type
from tests.conftest import wait_until_async
from workflows.names import registry_workflow_id
from workflows.type_registry import JobTypeRegistry

# Longer than any answer here takes: a set seen within it came from the followed
# history, not from a timed look (the followers here look again after an hour).
SEEN_WITHIN_S = 5.0


@pytest.fixture
async def registry_queue(client: Client) -> AsyncIterator[str]:
    """A task queue of its own with the registry workflow served on it."""
    queue = f"types-{uuid.uuid4().hex[:10]}"
    async with Worker(client, task_queue=queue, workflows=[JobTypeRegistry]):
        yield queue


async def next_set(sets: AsyncIterator[list[str]], wanted: set[str]) -> list[str]:
    """The first set the follower yields that holds every `wanted` type."""

    async def holding() -> list[str]:
        async for types in sets:
            if wanted <= set(types):
                return types
        raise AssertionError("the follower ended")

    return await asyncio.wait_for(holding(), SEEN_WITHIN_S)


async def test_a_follower_yields_each_new_type_as_the_registry_records_it(
    client: Client, registry_queue: str
) -> None:
    settings = TemporalSettings(task_queue=registry_queue)
    before = follow_job_types(client, registry_queue, absent_s=3600)
    # No registry yet: an empty set (and its next look would be an hour away).
    assert await anext(before) == []
    await before.aclose()
    await register_job_type(client, settings, "a")
    await wait_until_async(
        lambda: known_job_types(client, registry_queue), what="the registry to hold a"
    )
    sets = follow_job_types(client, registry_queue, absent_s=3600)
    assert await anext(sets) == ["a"]

    # The long poll is waiting now: each type added is yielded as soon as it is recorded.
    for added in ("b", "c"):
        await register_job_type(client, settings, added)
        assert set(await next_set(sets, {added})) <= {"a", "b", "c"}
    await sets.aclose()


async def test_a_follower_moves_to_the_registrys_next_run_when_its_run_ends(
    client: Client, registry_queue: str
) -> None:
    settings = TemporalSettings(task_queue=registry_queue)
    await register_job_type(client, settings, "old")
    sets = follow_job_types(client, registry_queue, absent_s=0.1)
    await next_set(sets, {"old"})

    # The run ends (as it does when it continues as new); a new run holds a new type.
    await client.get_workflow_handle(registry_workflow_id(registry_queue)).terminate()
    await register_job_type(client, settings, "new")

    assert await next_set(sets, {"new"}) == ["new"]
    await sets.aclose()
