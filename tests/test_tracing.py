"""Tracing: one trace from the API's submit through the workflow to the attempt, and
nothing installed when no OTLP endpoint is set.

The API app (create_app, in process over ASGI), the workflow worker and a stand-in
`run_job` activity share one tracer provider whose spans land in memory; the clients
come from `engine.connection.connect`, as in the real processes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from temporalio import activity
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.worker import Worker

from api.main import create_app
from api.settings import ApiSettings
from engine.connection import TemporalSettings, connect
from engine.tracing import TracingSettings, client_interceptors
from worker.devserver import DevServer
from worker.native import build_workflow_worker
from workflows.models import AttemptInput, AttemptResult
from workflows.names import RUN_JOB_ACTIVITY, registry_workflow_id

ROOT = Path(__file__).resolve().parent.parent
SECRET = "tracing-secret"
ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


@activity.defn(name=RUN_JOB_ACTIVITY)
async def run_job(inp: AttemptInput) -> AttemptResult:
    """A stand-in attempt that succeeds at once."""
    return AttemptResult(worker_id="tracer-1", result={"job": inp.job_id}, result_hash="h")


@pytest.fixture(scope="module")
def exported() -> Iterator[InMemorySpanExporter]:
    """Every span this process ends, kept in memory. The provider is the process's
    (OpenTelemetry allows one); `start_tracing` keeps it rather than adding OTLP."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter
    exporter.shutdown()


@pytest.fixture
def untraced(monkeypatch: pytest.MonkeyPatch) -> None:
    """No OTLP endpoint in the environment."""
    for name in ENDPOINT_VARS:
        monkeypatch.delenv(name, raising=False)


def one(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    """The one span called `name`."""
    found = [span for span in spans if span.name == name]
    assert len(found) == 1, f"{name}: {[s.name for s in spans]}"
    return found[0]


async def test_a_submit_and_its_completion_are_one_trace_across_api_workflow_and_attempt(
    temporal: DevServer, exported: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    queue = f"tracing-{uuid.uuid4().hex[:12]}"
    job_type = f"traced-{uuid.uuid4().hex[:8]}"
    temporal_settings = TemporalSettings(address=temporal.address, task_queue=queue)
    app = create_app(ApiSettings(FORGE_INGEST_SECRET=SECRET), temporal_settings)
    client = await connect(temporal_settings)
    exported.clear()
    transport = httpx.ASGITransport(app=app)
    async with (
        build_workflow_worker(client, temporal_settings),
        Worker(client, task_queue=temporal_settings.activity_queue(job_type), activities=[run_job]),
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=transport,
            base_url="http://api",
            headers={"Authorization": f"Bearer {SECRET}"},
        ) as http,
    ):
        response = await http.post("/api/jobs", json={"type": job_type})
        assert response.status_code == 201, response.text
        job_id = response.json()["id"]
        result = await client.get_workflow_handle(job_id).result()
        assert result["status"] == "completed"
        await client.get_workflow_handle(registry_workflow_id(queue)).terminate("test over")

    spans = list(exported.get_finished_spans())
    request = one(spans, "POST /api/jobs")
    assert request.kind == SpanKind.SERVER
    assert request.context is not None
    trace_id = request.context.trace_id
    job_spans = [
        one(spans, name)
        for name in (
            "StartWorkflow:JobWorkflow",
            "RunWorkflow:JobWorkflow",
            f"StartActivity:{RUN_JOB_ACTIVITY}",
            f"RunActivity:{RUN_JOB_ACTIVITY}",
            "CompleteWorkflow:JobWorkflow",
        )
    ]
    assert {span.context.trace_id for span in job_spans if span.context} == {trace_id}
    start = job_spans[0]
    assert start.parent is not None
    assert start.parent.span_id == request.context.span_id


async def test_without_an_otlp_endpoint_the_client_gets_no_interceptor(
    temporal: DevServer, untraced: None
) -> None:
    assert not TracingSettings().enabled
    assert client_interceptors() == []
    client = await connect(TemporalSettings(address=temporal.address), lazy=True)
    assert client.config()["interceptors"] == []


@pytest.mark.process  # a fresh interpreter (tests/tiers.py)
def test_without_an_otlp_endpoint_a_worker_loads_no_tracing_sdk() -> None:
    code = (
        "import asyncio, sys, worker.native\n"
        "from engine.connection import TemporalSettings, connect\n"
        "asyncio.run(connect(TemporalSettings(), lazy=True))\n"
        "print(' '.join(sorted(sys.modules)))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    loaded = set(out.stdout.split())
    assert "temporalio.worker" in loaded
    assert not {m for m in loaded if m.startswith(("opentelemetry.sdk", "opentelemetry.exporter"))}
    assert "temporalio.contrib.opentelemetry" not in loaded


def test_without_an_otlp_endpoint_the_api_is_not_instrumented(untraced: None) -> None:
    app = create_app(ApiSettings(FORGE_INGEST_SECRET=SECRET))
    assert not getattr(app, "_is_instrumented_by_opentelemetry", False)


async def test_with_an_otlp_endpoint_the_client_traces_through_temporals_interceptor(
    temporal: DevServer, exported: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    client = await connect(TemporalSettings(address=temporal.address), lazy=True)
    interceptors = client.config()["interceptors"]
    assert [type(i) for i in interceptors] == [TracingInterceptor]


def test_sdk_disabled_turns_tracing_off_even_with_an_endpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert not TracingSettings().enabled
