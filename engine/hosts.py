"""Host ids and the AVAILABLE_HOSTS allow-list, for the API and the native worker.

A worker serves under two host ids: its worker id (`NODE_ID`) and its node name
(`WORKER_HOST`, default the machine's hostname). A job's `require_host` or
`preferred_host` may name either (docs/workers.md, "Host pinning").
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from workflows.container_models import split_list


def host_ids(worker_id: str, host: str | None) -> list[str]:
    """The host ids a worker serves under: its worker id, then its node name."""
    return [worker_id] if host in (None, worker_id) else [worker_id, host]


class HostSettings(BaseSettings):
    """`AVAILABLE_HOSTS`: an optional allow-list of host ids (JSON array or comma list).
    Unset or empty: any host."""

    model_config = SettingsConfigDict(extra="ignore")

    available_hosts: Annotated[frozenset[str] | None, NoDecode] = Field(
        default=None, validation_alias="AVAILABLE_HOSTS"
    )

    @field_validator("available_hosts", mode="before")
    @classmethod
    def _list(cls, value: Any) -> Any:
        return split_list(value) or None

    def allows(self, host: str) -> bool:
        """Whether a job may be pinned to `host`."""
        return self.available_hosts is None or host in self.available_hosts

    def allows_worker(self, worker_id: str, host: str | None) -> bool:
        """Whether a worker may register or claim: one of its host ids is listed (a
        job can only be pinned to a listed one, so an unlisted id's queue stays
        empty)."""
        return any(self.allows(name) for name in host_ids(worker_id, host))

    def served(self, worker_id: str, host: str | None) -> list[str]:
        """The worker's host ids whose queues can hold jobs."""
        return [name for name in host_ids(worker_id, host) if self.allows(name)]
