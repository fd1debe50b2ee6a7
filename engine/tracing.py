"""Tracing: OpenTelemetry spans to OTLP, on only when `OTEL_EXPORTER_OTLP_ENDPOINT` is set.

On, one tracer provider per process batches spans to the OTLP endpoint over
http/protobuf, and Temporal's own `TracingInterceptor` on the client (`connect`) carries
the trace from the API's request through the workflow to the attempt; workers built from
that client inherit it. Off, nothing below is imported or installed, so a job costs
exactly what it does without tracing (the SDK and exporter are imported lazily for that).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from temporalio.client import Interceptor


class TracingSettings(BaseSettings):
    """The OpenTelemetry variables that decide whether jobforge traces. The exporter
    reads the rest itself (`OTEL_EXPORTER_OTLP_HEADERS`, `…_TIMEOUT`, …)."""

    model_config = SettingsConfigDict(env_prefix="OTEL_", extra="ignore")

    exporter_otlp_endpoint: str = ""
    exporter_otlp_traces_endpoint: str = ""
    sdk_disabled: bool = False

    @property
    def enabled(self) -> bool:
        """Whether spans have somewhere to go."""
        endpoint = self.exporter_otlp_endpoint or self.exporter_otlp_traces_endpoint
        return bool(endpoint) and not self.sdk_disabled


def start_tracing(service: str, settings: TracingSettings | None = None) -> bool:
    """Send this process's spans to OTLP, once; False, with nothing done, when tracing
    is off. `service` names the process unless `OTEL_SERVICE_NAME` (or
    `OTEL_RESOURCE_ATTRIBUTES`) does. A provider already installed (a test's, or
    `opentelemetry-instrument`'s) is kept."""
    if not (settings or TracingSettings()).enabled:
        return False
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return True
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service}))
    provider = TracerProvider(resource=resource)
    # Batched, off the caller's path; the provider flushes it at exit.
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return True


def client_interceptors(settings: TracingSettings | None = None) -> list[Interceptor]:
    """The client's interceptors: Temporal's `TracingInterceptor` when tracing is on,
    none otherwise."""
    if not start_tracing("jobforge", settings):
        return []
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return [TracingInterceptor()]
