"""`jobforge submit --from-file`: job specs from a JSON Lines file (or stdin), one per
line, sent in batches to `POST /api/jobs/batch` (docs/cli.md, "Many jobs at once").

Each line is the body `POST /api/jobs` takes, optionally with an `id` (its idempotency
key). A line without one is given `<run>-<line number>`, so the CLI's own retries of a
batch make nothing twice. A bad line is reported with its number and field and the
others are still sent; the ids of the jobs go to stdout in line order.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from worker.hub_client import HubClient, HubError, HubUnreachableError

# The API's largest batch (api/job_batch.py BATCH_MAX).
BATCH_MAX = 1000
# How long one batch may take to be answered: a thousand starts on a busy server take
# tens of seconds.
BATCH_TIMEOUT_S = 300.0
# A batch the API did not answer, or answered 5xx as a whole, is sent again (its items'
# ids make that safe) this many times, after 1, 2, 4 … s.
RETRIES = 3
_ITEM = re.compile(r"^jobs\[\d+\]\.?")


@dataclass
class Tally:
    """What a run did so far."""

    lines: int = 0
    created: int = 0
    existing: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """The closing line."""
        done = f"{self.created + self.existing} jobs submitted ({self.created} new, "
        done += f"{self.existing} already there)"
        if self.failed:
            done += f"; {self.failed} of {self.lines} failed"
        return done


def _items(lines: Iterable[str], run: str, tally: Tally) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, item) of each good line; a bad one is counted and reported."""
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text:
            continue
        tally.lines += 1
        try:
            item = json.loads(text)
        except ValueError as err:
            _refuse(tally, f"line {number}: not JSON: {err}")
            continue
        if not isinstance(item, dict):
            _refuse(tally, f"line {number}: not a JSON object (a job spec)")
            continue
        item.setdefault("id", f"{run}-{number}")
        yield number, item


def _refuse(tally: Tally, message: str) -> None:
    tally.failed += 1
    typer.echo(f"error: {message}", err=True)


def _batches(
    items: Iterator[tuple[int, dict[str, Any]]], size: int
) -> Iterator[list[tuple[int, dict[str, Any]]]]:
    batch: list[tuple[int, dict[str, Any]]] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _send(api: HubClient, jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """One batch's answer, sent again after an unreachable API or a 5xx."""
    for attempt in range(RETRIES + 1):
        try:
            return api.submit_batch(jobs, BATCH_TIMEOUT_S)
        except HubError as err:
            transient = isinstance(err, HubUnreachableError) or (err.status or 0) >= 500
            if not transient or attempt == RETRIES:
                if err.status == 413:
                    raise HubError(f"{err} (send fewer lines a batch: --batch-size)") from err
                raise
            time.sleep(2**attempt)
    raise AssertionError("unreachable")


def submit_lines(api: HubClient, lines: Iterable[str], size: int, total: int | None) -> Tally:
    """Send every good line, `size` a batch, with a progress bar on stderr (when it is a
    terminal); print each job's id on stdout, each failure on stderr."""
    tally = Tally()
    run = uuid.uuid4().hex[:12]
    console = Console(stderr=True)
    progress = Progress(
        TextColumn("submitting"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not console.is_terminal,
    )
    with progress:
        task = progress.add_task("submit", total=total)
        for batch in _batches(_items(lines, run, tally), size):
            answer = _send(api, [item for _, item in batch])
            for result in answer["results"]:
                number = batch[result["index"]][0]
                if "code" in result:
                    where = _ITEM.sub("", str(result.get("error", "")))
                    message = f"line {number}: {where} (HTTP {result['code']})"
                    _refuse(tally, message)
                    continue
                if result.get("created"):
                    tally.created += 1
                else:
                    tally.existing += 1
                typer.echo(result["id"])
            progress.update(task, completed=tally.lines)
    return tally
