"""Connecting to Temporal: settings shared by the API, the workers and the CLI."""

from __future__ import annotations

import socket
from enum import StrEnum
from pathlib import Path
from typing import Self

from pydantic import AliasChoices, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from temporalio.client import Client
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.converter import CompositePayloadConverter, DataConverter
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.service import RetryConfig, TLSConfig

from engine.tracing import client_interceptors


class SharedPydanticConverter(CompositePayloadConverter):
    """Temporal's pydantic payload converter (the same encodings, the same JSON), built
    once per process. The SDK builds a payload converter for every workflow activation
    and every activity (each with its own, empty cache of pydantic type adapters):
    constructing this one only reuses `_CONVERTERS`, whose cache every workflow and
    activity shares. Thread-safe: the converters keep no state but that cache."""

    def __init__(self) -> None:  # nullary: the SDK builds it from the class
        super().__init__(*_CONVERTERS)


_CONVERTERS = tuple(PydanticPayloadConverter().converters.values())
# The data converter of every client jobforge makes (API, workers, CLI).
DATA_CONVERTER = DataConverter(payload_converter_class=SharedPydanticConverter)


def _env(name: str, standard: str) -> AliasChoices:
    """`TEMPORAL_<name>`, or the name Temporal's own CLI and SDK env config read."""
    return AliasChoices(f"TEMPORAL_{name}", f"TEMPORAL_{standard}")


CONTAINER_QUEUE_SUFFIX = "#container"
URL_QUEUE_SUFFIX = "#url"
# Before a tenant's name in its own queues (docs/architecture.md, "Tenants"): no type,
# host id or tenant holds it, so `…@<host>~<tenant>#url` reads one way only.
TENANT_QUEUE_MARK = "~"


class Route(StrEnum):
    """Which of its type's queues a job waits on, by what a worker needs to run it
    (docs/architecture.md, "Routing"); the value is the queue name's suffix."""

    # No solver_url: a worker with the type's solver registered (WORKER_SOLVERS), or
    # the type's own workers claiming through the API (an adapter's, an agent's).
    PLAIN = ""
    # A solver_url: any worker of the type can fetch it.
    URL = URL_QUEUE_SUFFIX
    # A container: a worker with a container runtime.
    CONTAINER = CONTAINER_QUEUE_SUFFIX

    @classmethod
    def of(cls, *, solver_url: str | None, container: object) -> Route:
        """The route of a job (a spec or a read job) from its solver_url and container."""
        if container is not None:
            return cls.CONTAINER
        return cls.PLAIN if solver_url is None else cls.URL


class TemporalSettings(BaseSettings):
    """Where Temporal is and which queues jobforge uses there (env `TEMPORAL_*`)."""

    # populate_by_name: code passes `tls_cert=...`; the environment uses the aliases.
    model_config = SettingsConfigDict(env_prefix="TEMPORAL_", extra="ignore", populate_by_name=True)

    address: str = "localhost:7233"
    namespace: str = "default"
    # Temporal Cloud's API key (sent as a bearer token; turns TLS on).
    api_key: str | None = None
    # TLS with the system's roots; any of the TLS files or a server name turns it on too.
    tls: bool = False
    # mTLS: the client certificate and its key, PEM files (Temporal Cloud's mTLS auth).
    tls_cert: Path | None = Field(
        default=None, validation_alias=_env("TLS_CERT", "TLS_CLIENT_CERT_PATH")
    )
    tls_key: Path | None = Field(
        default=None, validation_alias=_env("TLS_KEY", "TLS_CLIENT_KEY_PATH")
    )
    # The CA that signed the server's certificate, for a cluster with a private CA.
    tls_ca: Path | None = Field(
        default=None, validation_alias=_env("TLS_CA", "TLS_SERVER_CA_CERT_PATH")
    )
    # The name the server's certificate carries, when it is not the address's host
    # (also sent as SNI).
    tls_server_name: str | None = None
    task_queue: str = Field(default="jobforge", description="JobWorkflow's task queue")
    activity_queue_prefix: str = Field(
        default="jobforge-", description="Prefix of the per-type activity task queues"
    )
    ui_url: str = "http://localhost:8233"

    @model_validator(mode="after")
    def _cert_with_key(self) -> Self:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("TEMPORAL_TLS_CERT and TEMPORAL_TLS_KEY go together (mTLS)")
        return self

    def activity_queue(
        self, job_type: str, route: Route = Route.PLAIN, tenant: str | None = None
    ) -> str:
        """The task queue one job type's attempts of one route run on:
        `jobforge-<type>`, `jobforge-<type>#url` or `jobforge-<type>#container`; a
        tenant's jobs on its own, `jobforge-<type>~<tenant>` and the route's suffix."""
        return f"{self.activity_queue_prefix}{job_type}{_tenant_part(tenant)}{route.value}"

    def host_queue(
        self, job_type: str, host: str, route: Route = Route.PLAIN, tenant: str | None = None
    ) -> str:
        """The task queue of one job type's attempts of one route pinned to one host,
        `jobforge-<type>@<host>` and the route's suffix (a type never holds `@` or `#`,
        a host id never `#`: the names are unambiguous); a tenant's, with `~<tenant>`
        before the suffix."""
        return f"{self.activity_queue_prefix}{job_type}@{host}{_tenant_part(tenant)}{route.value}"

    def tls_config(self) -> TLSConfig | bool:
        """What the client's `tls` option gets: a TLSConfig built from the files (read
        now), True for TLS with the system's roots, or False for plaintext."""
        if not (self.tls_cert or self.tls_ca or self.tls_server_name):
            return self.tls or bool(self.api_key)
        return TLSConfig(
            server_root_ca_cert=_read(self.tls_ca),
            domain=self.tls_server_name,
            client_cert=_read(self.tls_cert),
            client_private_key=_read(self.tls_key),
        )


def _tenant_part(tenant: str | None) -> str:
    return "" if tenant is None else f"{TENANT_QUEUE_MARK}{tenant}"


def _read(path: Path | None) -> bytes | None:
    return None if path is None else path.expanduser().read_bytes()


async def connect(
    settings: TemporalSettings,
    *,
    identity: str | None = None,
    lazy: bool = False,
    runtime: Runtime | None = None,
    retry_ms: int | None = None,
) -> Client:
    """A client with the pydantic data converter jobforge's models need, over TLS or
    with an API key when the settings say so (`TemporalSettings.tls_config`).

    `retry_ms` bounds how long a call retries an unreachable server (the SDK's default
    is about 10 s). An unreadable TLS file raises OSError naming it. With
    `OTEL_EXPORTER_OTLP_ENDPOINT` set, the client (and every worker built from it)
    traces through Temporal's `TracingInterceptor` (engine/tracing.py).
    """
    retry = RetryConfig() if retry_ms is None else RetryConfig(max_elapsed_time_millis=retry_ms)
    return await Client.connect(
        settings.address,
        namespace=settings.namespace,
        api_key=settings.api_key,
        tls=settings.tls_config(),
        data_converter=DATA_CONVERTER,
        identity=identity or f"jobforge@{socket.gethostname()}",
        lazy=lazy,
        runtime=runtime,
        retry_config=retry,
        interceptors=client_interceptors(),
    )


def metrics_runtime(port: int) -> Runtime:
    """A Temporal runtime exporting the SDK's own metrics on :port/metrics."""
    return Runtime(
        telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=f"0.0.0.0:{port}"))
    )
