"""003's files: the log its worker writes and the progress and result its container
writes, under `jobs/<id>/` on the shared storage (`VM_SHARED_DATA`) when it is set;
without it, a simulation's log is the core's log store (its workers' and agents')."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from fastapi import Depends
from pydantic import JsonValue

from api.deps import ConfigDep
from engine.log_store import LogStore
from workflows.models import Job


@dataclass(frozen=True)
class SharedFiles:
    """Where a simulation's files are: `shared` (None: no shared storage) and the core's
    log store."""

    shared: Path | None
    store: LogStore

    def job_dir(self, job_id: str) -> Path | None:
        """The job's directory on the shared storage, if there is one."""
        return None if self.shared is None else self.shared / "jobs" / job_id

    def read_json(self, job_id: str, *parts: str) -> JsonValue:
        """A JSON file under the job's directory; None if missing or not JSON."""
        directory = self.job_dir(job_id)
        if directory is None:
            return None
        try:
            found: JsonValue = json.loads(directory.joinpath(*parts).read_text())
        except (OSError, ValueError):
            return None
        return found

    async def read_log(self, job: Job, offset: int) -> tuple[str, int]:
        """The log from byte `offset` on, and the offset after it: the file the worker
        writes on the shared storage when there is one, else the core's log store (its
        own workers' and agents' output)."""
        directory = self.job_dir(job.id)
        if directory is not None:
            try:
                with (directory / "logs" / f"{job.id}.log").open("rb") as file:
                    file.seek(offset)
                    data = file.read()
            except OSError:
                return "", offset
            return data.decode("utf-8", errors="replace"), offset + len(data)
        attempt = job.attempt or next(iter((await self.store.attempts(job.id))[-1:]), None)
        if not attempt:
            return "", offset
        lines, after = await self.store.read(job.id, attempt, offset)
        return "".join(f"{line.text}\n" for line in lines), after

    async def remove(self, job_id: str) -> None:
        """Remove the job's logs, and its directory on the shared storage."""
        await self.store.remove(job_id)
        directory = self.job_dir(job_id)
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)


def shared_files(config: ConfigDep) -> SharedFiles:
    """The app's 003 files (`VM_SHARED_DATA`, the log store)."""
    shared = config.contracts.shared_data
    return SharedFiles(Path(shared) if shared else None, config.log_store)


SharedFilesDep = Annotated[SharedFiles, Depends(shared_files)]
