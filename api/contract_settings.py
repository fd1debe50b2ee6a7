"""The settings of the designs' routes (api/contracts/): which are served, where, behind
what, and each design's own knobs (docs/contracts.md). Read by api/contracts/mounting.py
at startup and by the designs' routes through `Config.contracts` (api/deps.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from workflows.contract_states import DESIGNS
from workflows.models import GATE_KEY_PATTERN

PREFIX_PATTERN = r"^(/[A-Za-z0-9._~-]+)*$"

Auth = Literal["token", "none"]


class ContractSettings(BaseSettings):
    """`JOBFORGE_CONTRACTS` (a comma list, default all), and per design that has routes
    (001, 003, 004) `CONTRACT_AUTH_<NNN>` (`token` or `none`) and
    `CONTRACT_PREFIX_<NNN>` (a path prefix such as `/legacy`, default none)."""

    model_config = SettingsConfigDict(extra="ignore")

    contracts: str = Field(default=",".join(DESIGNS), validation_alias="JOBFORGE_CONTRACTS")
    auth_001: Auth = Field(default="token", validation_alias="CONTRACT_AUTH_001")
    auth_003: Auth = Field(default="token", validation_alias="CONTRACT_AUTH_003")
    auth_004: Auth = Field(default="token", validation_alias="CONTRACT_AUTH_004")
    prefix_001: str = Field(
        default="", pattern=PREFIX_PATTERN, validation_alias="CONTRACT_PREFIX_001"
    )
    prefix_003: str = Field(
        default="", pattern=PREFIX_PATTERN, validation_alias="CONTRACT_PREFIX_003"
    )
    # 001: the pool whose capacity the intents' cost units count against.
    scheduler_pool: str = Field(
        default="system", pattern=GATE_KEY_PATTERN, validation_alias="SCHEDULER_POOL"
    )
    prefix_004: str = Field(
        default="", pattern=PREFIX_PATTERN, validation_alias="CONTRACT_PREFIX_004"
    )
    # 003: its shared storage root (logs, progress and results its containers write),
    # and how long a simulation may go without a status update before it is stale.
    shared_data: str | None = Field(default=None, validation_alias="VM_SHARED_DATA")
    job_status_ttl: float | None = Field(
        default=None, ge=1, le=3600, validation_alias="JOB_STATUS_TTL"
    )
    # 003's other staleness settings (docs/contracts.md maps each onto jobforge's).
    queue_claim_ttl: float | None = Field(
        default=None, ge=1, le=3600, validation_alias="QUEUE_CLAIM_TTL"
    )
    host_heartbeat_ttl: float | None = Field(
        default=None, ge=1, le=3600, validation_alias="HOST_HEARTBEAT_TTL"
    )
    worker_stale_grace_seconds: float | None = Field(
        default=None, ge=0, le=3600, validation_alias="WORKER_STALE_GRACE_SECONDS"
    )

    @field_validator("contracts")
    @classmethod
    def _known(cls, value: str) -> str:
        named = [part.strip() for part in value.split(",") if part.strip()]
        unknown = [part for part in named if part not in DESIGNS]
        if unknown:
            raise ValueError(f"unknown design {unknown[0]!r}; known: {', '.join(DESIGNS)}")
        return ",".join(named)

    @property
    def enabled(self) -> set[str]:
        """The designs whose routes are served."""
        return set(self.contracts.split(",")) if self.contracts else set()

    def open(self, design: str) -> bool:
        """Whether the design's routes are served without the bearer token."""
        auth: str = getattr(self, f"auth_{design}")
        return auth == "none"

    def prefix(self, design: str) -> str:
        """The design's path prefix ("" for its own paths)."""
        prefix: str = getattr(self, f"prefix_{design}")
        return prefix
