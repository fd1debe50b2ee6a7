"""Worker and solver settings (native worker and HTTP agent), under the spec's
environment variable names: the same concept as api/settings.py, for the other kind of
process."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from activities.container import ContainerRuntime
from activities.solver import SolverLimits, SolverSource, split_command
from activities.solver_cache import FetchLimits, SolverCache
from engine.solver_urls import SolverUrlSettings
from workflows.container_models import split_list
from workflows.models import HOST_PATTERN, TENANT_PATTERN, TYPE_PATTERN


def _physical_ram_gb() -> float:
    return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)


class SolverSettings(SolverUrlSettings):
    """Solver downloads, cache and limits (env `SOLVER_*`; shared by the native worker
    and the agent). The URL policy part is the API's too (`SolverUrlSettings`)."""

    model_config = SettingsConfigDict(env_prefix="SOLVER_", extra="ignore")

    cache_dir: Path = Field(default=Path("~/.jobforge/solvers"))
    max_bytes: int = 256 * 1024 * 1024
    fetch_timeout_s: float = 300.0
    max_output_bytes: int = 1024 * 1024
    log_tail_bytes: int = 16 * 1024
    # Address-space limit (RLIMIT_AS) of each solver process; 0 means none.
    max_memory_mb: int = Field(default=4096, ge=0)
    stop_grace_s: float = Field(default=10.0, ge=0, le=3600, validation_alias="STOP_GRACE_S")

    @field_validator("cache_dir")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser()

    @property
    def max_memory_bytes(self) -> int | None:
        """Each solver's RLIMIT_AS, or None for no limit."""
        return self.max_memory_mb * 1024 * 1024 or None

    @property
    def limits(self) -> SolverLimits:
        """The bounds on each solver process."""
        return SolverLimits(
            max_output_bytes=self.max_output_bytes,
            log_tail_bytes=self.log_tail_bytes,
            max_memory_bytes=self.max_memory_bytes,
            stop_grace_s=self.stop_grace_s,
        )

    def source(self, registered: dict[str, str | list[str]]) -> SolverSource:
        """Solvers from this cache, or from `registered` commands (WORKER_SOLVERS)."""
        return SolverSource(
            self.cache(), {name: split_command(cmd) for name, cmd in registered.items()}
        )

    def cache(self) -> SolverCache:
        """The solver cache in `cache_dir`, downloading under these limits."""
        return SolverCache(
            self.cache_dir,
            FetchLimits(
                max_bytes=self.max_bytes,
                timeout_s=self.fetch_timeout_s,
                schemes=self.schemes,
                allow_private=self.allow_private_networks,
            ),
        )


class WorkerSettings(BaseSettings):
    """`jobforge worker`: which types to serve, how many at once, who it is."""

    model_config = SettingsConfigDict(env_prefix="WORKER_", extra="ignore")

    types: Annotated[list[str], NoDecode] = Field(default_factory=list)
    tags: Annotated[list[str], NoDecode] = Field(default_factory=list)
    cores: int = Field(default=1, ge=1, le=1024)
    ram_gb: float = Field(default_factory=_physical_ram_gb, ge=0)
    solvers: dict[str, str | list[str]] = Field(default_factory=dict)
    run_workflows: bool = True
    # False: register (so the fleet shows it), run no jobs.
    enabled: bool = True
    shutdown_grace_s: float = 30.0
    # With WORKER_TYPES empty: how often to look for the type registry while there is
    # none, and again after an error (otherwise its history is followed by long poll).
    type_poll_ms: int = Field(default=1000, ge=50)
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    # A solver's progress reaches Temporal (and readers) at most this often per job.
    progress_publish_ms: int = Field(
        default=1000, ge=100, le=60_000, validation_alias="PROGRESS_PUBLISH_MS"
    )
    # NODE_ID. Unset: `<WORKER_HOST>-<hash of SOLVER_CACHE_DIR>`, the same on every
    # restart, with `-2`, `-3`… for more processes at once (worker/node_identity.py).
    node_id: str = Field(default="", validation_alias="NODE_ID")
    # With CONTAINER_RUNTIME set: the types whose container jobs it runs (empty: every
    # type it serves).
    container_types: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # WORKER_HOST: its node name, the second host id it serves under (docs/workers.md).
    host: str = Field(default_factory=socket.gethostname, pattern=HOST_PATTERN)
    # WORKER_TENANT: it runs this tenant's jobs only (their own task queues); without
    # it, the jobs without a tenant only (docs/architecture.md, "Tenants").
    tenant: str | None = Field(default=None, pattern=TENANT_PATTERN)

    def solver_types(self) -> list[str]:
        """The types whose jobs without a solver_url it runs: those of WORKER_SOLVERS
        that it serves (every one when WORKER_TYPES is empty)."""
        return sorted(t for t in self.solvers if not self.types or t in self.types)

    def serves_containers_of(self, job_type: str) -> bool:
        """Whether this worker takes container jobs of `job_type` (given a runtime)."""
        return not self.container_types or job_type in self.container_types

    @field_validator("types", "tags", "container_types", mode="before")
    @classmethod
    def _lists(cls, value: Any) -> Any:
        return split_list(value)

    @field_validator("solvers")
    @classmethod
    def _solver_types(cls, value: dict[str, str | list[str]]) -> dict[str, str | list[str]]:
        # A key names a job type (and a queue): one no job can have is a mistake.
        wrong = [t for t in value if not re.fullmatch(TYPE_PATTERN, t)]
        if wrong:
            raise ValueError(f"not a job type: {', '.join(map(repr, wrong))}")
        return value


class ContainerSettings(BaseSettings):
    """Container jobs on this worker (env `CONTAINER_*`, docs/workers.md). Without
    CONTAINER_RUNTIME the worker takes no container jobs."""

    model_config = SettingsConfigDict(env_prefix="CONTAINER_", extra="ignore")

    runtime: Literal["docker", "podman"] | None = None
    # Global options of every runtime call, as a shell would split them (`--runtime runc`).
    runtime_args: str = ""
    # A volume's source must lie under one of these (none: no volumes); the API checks
    # the same at submit with its own setting of this name.
    volume_prefixes: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Globs an image must match (none: any image).
    image_allow: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # A job's limits when it names none (`container.memory_mb`, `container.cpus`); 0: none.
    memory_mb: int = Field(default=4096, ge=0)
    cpus: float = Field(default=0.0, ge=0)

    @field_validator("runtime", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("volume_prefixes", "image_allow", mode="before")
    @classmethod
    def _lists(cls, value: Any) -> Any:
        return split_list(value)

    def runtime_client(self) -> ContainerRuntime | None:
        """The runtime container jobs run with, or None when none is configured."""
        if self.runtime is None:
            return None
        if shutil.which(self.runtime) is None:
            raise SystemExit(f"CONTAINER_RUNTIME={self.runtime}, but {self.runtime} is not on PATH")
        return ContainerRuntime(
            program=self.runtime,
            global_args=tuple(shlex.split(self.runtime_args)),
            volume_prefixes=tuple(self.volume_prefixes),
            image_allow=tuple(self.image_allow),
            memory_mb=self.memory_mb or None,
            cpus=self.cpus or None,
        )
