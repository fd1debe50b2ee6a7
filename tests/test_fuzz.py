"""API fuzz: schemathesis over /openapi.json, auth on every route, hostile bodies.

One API (with a workflow-only worker, on private task queues: fuzzed jobs stay
pending) serves the whole module. JOBFORGE_FAULT_LOAD=full fuzzes with more examples.
Never a 5xx, and the token never reaches the API's log.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import typing
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.responses import StreamingResponse

from api.main import create_app
from api.settings import ApiSettings
from tests.conftest import SECRET, Api, Proc, base_env, wait_until
from tests.faultkit import FULL, scale
from tests.ports import free_port
from tests.test_access import api_routes
from worker.devserver import DevServer, wait_for_port

# The schema fuzz alone takes about a minute in `make test` (tests/conftest.py).
pytestmark = pytest.mark.slow(100)

AUTH = {"Authorization": f"Bearer {SECRET}"}
# Long polls: a fuzzed call would wait out its `wait`.
LONG_POLLS = ["/api/jobs/claim", "/api/system/scheduler/queue/jobs/claim"]
# Every operation whose answer may be a stream (tests/test_fuzz.py checks the list is
# whole): a fuzzed call would wait for its end, or the request timeout. Each is left out
# of the schema fuzz, or fuzzed only in its form that answers at once (`fuzz_config`).
# Their auth is checked below like every other route's.
STREAMS = {
    ("GET", "/api/jobs/events"): "not fuzzed",  # every job's events: never ends
    ("GET", "/logs/{job_id}"): "not fuzzed",  # 003's log, followed until the job ends
    ("GET", "/api/jobs/{job_id}/logs"): "follow=false",  # follow: until the attempt ends
}
NOT_FUZZED = "^({})$".format(
    "|".join(
        re.sub(r"\\\{\w+\\\}", "[^/]+", re.escape(path))
        for path in [*LONG_POLLS, *(p for (_, p), how in STREAMS.items() if how == "not fuzzed")]
    )
)
OPEN = {
    ("GET", "/healthz"),
    ("GET", "/docs"),
    ("GET", "/openapi.json"),
    ("GET", "/metrics"),
    ("GET", "/api/jobs/events"),
}


@pytest.fixture(scope="module")
def fuzz_api(
    tmp_path_factory: pytest.TempPathFactory,
    spawn: Callable[..., Proc],
) -> Iterator[Api]:
    """An API on a Temporal dev server of its own, with a workflow-only worker.

    Its own server: the session's holds the workflows of stopped stacks, which no worker
    serves any more, so reading them would rightly answer 503.
    """
    server = DevServer(
        tmp_path_factory.mktemp("fuzz-temporal"), port=free_port(), ui_port=None, in_memory=True
    )
    server.start()
    port = free_port()
    proc = spawn(["api", "--port", str(port)], base_env(server, SOLVER_URL_SCHEMES="https"))
    wait_for_port(port, 30, proc.process)
    url = f"http://127.0.0.1:{port}"
    worker = spawn(
        ["worker"],
        base_env(
            server,
            WORKER_TYPES="no-such-type",
            NODE_ID="fuzz",
            SOLVER_CACHE_DIR=str(tmp_path_factory.mktemp("fuzz-cache")),
        ),
    )
    wait_until(
        lambda: "ready: workflows=True" in worker.output() or worker.process.poll() is not None,
        timeout=30,
        what="worker to start",
    )
    assert worker.process.poll() is None, worker.output()
    with httpx.Client(base_url=url, headers=AUTH, timeout=30) as http:
        yield Api(url, proc, http)
    worker.stop(timeout=15)
    proc.stop(timeout=15)
    server.stop()


# Jobs the fuzz's requests name, one set per design, made before it starts.
TENANT = "fuzz"
TARGET = "fuzz-target"
YEAR_S = 365 * 24 * 3600
# schemathesis's own list of answers that reject invalid data, and 413. (Its 5xx stays:
# the not_a_server_error check fails those.)
REJECTED = [
    "400",
    "401",
    "403",
    "404",
    "405",
    "406",
    "409",
    "413",
    "415",
    "422",
    "428",
    "429",
    "5xx",
]


def created(response: httpx.Response, key: str) -> str:
    assert response.status_code in (200, 201), response.text
    made: str = response.json()[key]
    return made


def fuzz_config(api: Api) -> str:
    """The schemathesis config: a real job for every route that takes one, of the design
    whose routes name it (another design's job is a 404 there by design), so that every
    route is fuzzed past its 404.

    003's delete takes a job of its own (a pending one: a 409 until it is stopped), so
    that deleting it leaves the job the other 003 routes read. Neither cleanup deletes
    a job the run made (`older_than_s`: a year): their `statuses` and `type` are fuzzed,
    and every job the other routes name stays there, whatever state the fuzz left it in.
    """
    http = api.http
    job = api.submit(type="fuzz-target")
    intent = created(
        http.post(
            "/api/system/scheduler/queue/jobs/submit",
            json={"addon_id": "fuzz", "job_type": "fuzz", "cost_units": 1},
        ),
        "job_id",
    )
    simulation = {"image": "fuzz:1", "config_path": "fuzz.json"}
    read = created(http.post("/run-simulation", json=simulation), "job_id")
    deleted = created(http.post("/run-simulation", json=simulation), "job_id")
    target_job = created(
        http.post(f"/targets/{TARGET}/jobs", json={"type": "fuzz"}, headers={"X-Tenant": TENANT}),
        "id",
    )
    operations = [
        (r"^/api/system/scheduler/queue/jobs/\{job_id\}", {"path.job_id": intent}),
        (
            r"^/(status|job-info|file-logs|logs|progress|result|stop|ops/jobs)/\{job_id\}",
            {"path.job_id": read},
        ),
        (r"^/job/\{job_id\}$", {"path.job_id": deleted}),
        (r"^/api/agent/job-status$", {"body.job_id": read}),
        (
            r"^/targets/\{target_id\}/jobs",
            {
                "path.target_id": TARGET,
                "path.job_id": target_job,
                "header.X-Tenant": TENANT,
                "query.tenant": TENANT,
            },
        ),
        (r"^(/api/ops/cleanup|/ops/queue/cleanup)$", {"body.older_than_s": YEAR_S}),
    ]
    # The streams fuzzed in their form that answers at once (STREAMS), by name.
    named = [("GET /api/jobs/{job_id}/logs", {"path.job_id": job, "query.follow": False})]
    lines = [
        "[parameters]",
        f'"path.job_id" = "{job}"',
        "",
        # A body over MAX_BODY_BYTES (say, an array past its maxItems of long strings) is
        # rejected whole, with 413, before its fields are read: a rejection too.
        "[checks.negative_data_rejection]",
        f"expected-statuses = {json.dumps(REJECTED)}",
    ]
    selectors = [("include-path-regex", regex, parameters) for regex, parameters in operations]
    selectors += [("include-name", name, parameters) for name, parameters in named]
    for selector, value, parameters in selectors:
        lines += [
            "",
            "[[operations]]",
            f"{selector} = {json.dumps(value)}",
            "[operations.parameters]",
        ]
        lines += [f'"{name}" = {json.dumps(value)}' for name, value in parameters.items()]
    return "\n".join(lines) + "\n"


@pytest.mark.timeout(scale(450, 1900))
def test_api_conforms_to_its_schema(fuzz_api: Api, tmp_path: Path) -> None:
    """schemathesis, every check, every phase but stateful, authenticated.

    Every `{job_id}` is a real job (of a type no worker serves; `fuzz_config`), so the
    job, worker and design routes are fuzzed past their 404: read, cancelled, then
    heartbeats, results and failures from workers that do not hold it.
    """
    config = tmp_path / "schemathesis.toml"
    config.write_text(fuzz_config(fuzz_api))
    run = subprocess.run(
        [
            str(Path(sys.executable).with_name("schemathesis")),
            "--config-file",
            str(config),
            "run",
            f"{fuzz_api.url}/openapi.json",
            "--checks",
            "all",
            # Rules across fields (solver_checksum with solver_url) or opaque values (a
            # page_token Temporal issued) are not expressible in JSON Schema: a
            # schema-valid request may rightly get a 422.
            "--exclude-checks",
            "positive_data_acceptance",
            # Speed is the benches' (bench/), not a pass/fail here: its 10 s default
            # failed a group cancel of every job the fuzz had put in the group. An
            # answer must only come within the request timeout.
            "--max-response-time",
            "60",
            # A target name may hold one "/" (`tenant/name`), which a generated path
            # segment may not: most generated names are filtered out, and hypothesis's
            # health check would end the operation's run for it.
            "--suppress-health-check",
            "filter_too_much",
            "--phases",
            # The coverage phase (full load only) is most of a full run: about 80 s of ~100.
            # Reduced (CI): 5 examples per operation keep it near a minute for 30 routes.
            "examples,coverage,fuzzing" if FULL else "fuzzing",
            "--header",
            f"Authorization: Bearer {SECRET}",
            "--exclude-path-regex",
            NOT_FUZZED,
            "--max-examples",
            str(scale(5, 100)),
            # A pause or a capacity cut answers once every holder has (at most 30 s).
            "--request-timeout",
            "60",
            # One worker: with two threads, hypothesis's ast.parse can hit CPython 3.11's
            # "AST constructor recursion depth mismatch" (gh-106905), a runtime error of
            # the tool that a full-load run met once.
            "--workers",
            "1",
            "--seed",
            os.environ.get("JOBFORGE_FUZZ_SEED", "1"),
            "--no-color",
            # Every request and the head of its answer: checked below for streams.
            "--report",
            "har",
            "--report-har-path",
            str(tmp_path / "fuzz.har"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # its .schemathesis/ state
        timeout=scale(300, 1800),
        check=False,
    )
    (tmp_path / "schemathesis.out").write_text(run.stdout + run.stderr)
    # A reproduction's body can be megabytes: each line cut short, so every failure shows.
    report = "\n".join(line[:400] for line in run.stdout.splitlines())
    assert run.returncode == 0, report[-30000:] + run.stderr[-5000:]
    assert streamed(tmp_path / "fuzz.har") == []


def streamed(har: Path) -> list[str]:
    """The fuzz's requests that a stream answered, or that went to one not fuzzed."""
    not_fuzzed = re.compile(NOT_FUZZED)
    found = []
    for entry in json.loads(har.read_text())["log"]["entries"]:
        request, answer = entry["request"], entry["response"]
        path = httpx.URL(request["url"]).path
        if answer["content"].get("mimeType", "").startswith("text/event-stream") or (
            not_fuzzed.match(path)
        ):
            found.append(f"{request['method']} {request['url'][:200]}")
    return found


def streaming_operations() -> set[tuple[str, str]]:
    """(method, path) of every operation of the schema that may answer with a stream: its
    200 may be `text/event-stream`, or its handler returns a StreamingResponse."""
    app = create_app(ApiSettings(FORGE_INGEST_SECRET="x"))
    spec = app.openapi()["paths"]
    found = set()
    for route in api_routes(app.router.routes):
        returned = typing.get_type_hints(route.endpoint).get("return")
        kinds = typing.get_args(returned) or (returned,)
        streams = any(isinstance(k, type) and issubclass(k, StreamingResponse) for k in kinds)
        for method in route.methods:
            operation = spec.get(route.path_format, {}).get(method.lower())
            if operation is None:  # not in the schema: not fuzzed
                continue
            answer = operation["responses"].get("200", {})
            if streams or "text/event-stream" in answer.get("content", {}):
                found.add((method, route.path_format))
    return found


def test_every_stream_is_left_out_of_the_fuzz_or_fuzzed_in_a_form_that_answers_at_once() -> None:
    # A new streaming route must be added to STREAMS, with how it is bounded.
    assert streaming_operations() == set(STREAMS)


def routes(api: Api) -> list[tuple[str, str]]:
    """(method, path) of every operation in the spec, path parameters filled in."""
    spec = api.http.get("/openapi.json").json()
    return [
        (method.upper(), path.replace("{job_id}", "0" * 32))
        for path, item in spec["paths"].items()
        for method in item
        if method in ("get", "post", "put", "patch", "delete")
    ]


def test_every_route_but_the_open_ones_demands_the_token(fuzz_api: Api) -> None:
    checked = 0
    with httpx.Client(base_url=fuzz_api.url, timeout=10) as anonymous:
        for method, path in routes(fuzz_api):
            if (method, path) in OPEN:
                continue
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic eA=="}):
                response = anonymous.request(method, path, headers=headers, json={})
                assert response.status_code == 401, (method, path, headers, response.text)
                checked += 1
    assert checked >= 3 * 10
    # The open ones answer without it (the event stream: just its headers).
    for path in ("/healthz", "/openapi.json", "/metrics", "/docs", "/"):
        assert httpx.get(f"{fuzz_api.url}{path}", timeout=10).status_code == 200, path
    with httpx.stream("GET", f"{fuzz_api.url}/api/jobs/events", timeout=10) as stream:
        assert stream.status_code == 200


def test_oversized_and_deeply_nested_bodies_get_4xx(fuzz_api: Api) -> None:
    http = fuzz_api.http
    nested = "[" * 100_000 + "]" * 100_000
    bodies = {
        "nested arrays": nested,
        "nested params": '{"type":"t","params":{"a":' + nested + "}}",
        "nested objects": '{"a":' * 100_000 + "1" + "}" * 100_000,
        "20 MB of params": '{"type":"t","params":{"a":"' + "x" * 20_000_000 + '"}}',
        "not JSON": "\x00\xff" * 1000,
    }
    for path in ("/api/jobs", "/api/jobs/claim", "/api/workers/register"):
        for what, body in bodies.items():
            response = http.post(
                path, content=body.encode(), headers={"Content-Type": "application/json"}
            )
            assert 400 <= response.status_code < 500, (path, what, response.text[:300])
    assert http.get("/healthz").status_code == 200


def test_the_token_never_reaches_the_log(fuzz_api: Api) -> None:
    # After the others in this module, the log also holds whatever the fuzzed requests
    # made the API write; these make it log the token's likeliest ways in on their own.
    fuzz_api.http.get("/api/jobs", params={"token": SECRET})
    fuzz_api.http.post("/api/jobs", json={"type": "bad type", "params": {"t": SECRET}})
    httpx.get(f"{fuzz_api.url}/api/jobs", headers={"Authorization": f"Bearer {SECRET}x"})

    assert SECRET not in fuzz_api.proc.output()
