"""Connecting to Temporal: settings shared by the API, the workers and the CLI."""

from __future__ import annotations

import socket

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.service import RetryConfig


class TemporalSettings(BaseSettings):
    """Where Temporal is and which queues jobforge uses there (env `TEMPORAL_*`)."""

    model_config = SettingsConfigDict(env_prefix="TEMPORAL_", extra="ignore")

    address: str = "localhost:7233"
    namespace: str = "default"
    api_key: str | None = None
    tls: bool = False
    task_queue: str = Field(default="jobforge", description="JobWorkflow's task queue")
    activity_queue_prefix: str = Field(
        default="jobforge-", description="Prefix of the per-type activity task queues"
    )
    ui_url: str = "http://localhost:8233"

    def activity_queue(self, job_type: str) -> str:
        """The task queue one job type's attempts run on."""
        return f"{self.activity_queue_prefix}{job_type}"


async def connect(
    settings: TemporalSettings,
    *,
    identity: str | None = None,
    lazy: bool = False,
    runtime: Runtime | None = None,
    retry_ms: int | None = None,
) -> Client:
    """A client with the pydantic data converter jobforge's models need.

    `retry_ms` bounds how long a call retries an unreachable server (the SDK's default
    is about 10 s).
    """
    retry = RetryConfig() if retry_ms is None else RetryConfig(max_elapsed_time_millis=retry_ms)
    return await Client.connect(
        settings.address,
        namespace=settings.namespace,
        api_key=settings.api_key,
        tls=settings.tls or bool(settings.api_key),
        data_converter=pydantic_data_converter,
        identity=identity or f"jobforge@{socket.gethostname()}",
        lazy=lazy,
        runtime=runtime,
        retry_config=retry,
    )


def metrics_runtime(port: int) -> Runtime:
    """A Temporal runtime exporting the SDK's own metrics on :port/metrics."""
    return Runtime(
        telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=f"0.0.0.0:{port}"))
    )
