"""The REST facade over real HTTP: auth, validation, limits, listing, idempotency, outages."""

from __future__ import annotations

import asyncio
import base64
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from api.main import create_app
from api.routes.jobs import RESERVED_JOB_PATHS
from api.ttl_cache import TtlCache
from tests.conftest import REGISTERED_TYPE, SECRET, Api, Solver, Stack, wait_until
from tests.ports import free_port
from worker.devserver import DevServer
from workflows.models import Job
from workflows.names import JOB_QUERY, REGISTRY_WORKFLOW_ID

CHECKSUM = "ab" * 32
SMALL_BODY_LIMIT = 2048

ROUTES = [
    ("POST", "/api/jobs"),
    ("GET", "/api/jobs"),
    ("GET", "/api/jobs/{id}"),
    ("DELETE", "/api/jobs/{id}"),
]


def fail_on_500(response: httpx.Response) -> None:
    """Event hook: no answer of the API may be an internal error."""
    response.read()
    assert response.status_code != 500, f"{response.request.method} {response.url}: 500"


def client_for(api: Api, token: str | None = SECRET, **headers: str) -> httpx.Client:
    """An HTTP client for `api` with the given bearer token (None: no Authorization)."""
    if token is not None:
        headers.setdefault("Authorization", f"Bearer {token}")
    return httpx.Client(
        base_url=api.url,
        headers=headers,
        timeout=30,
        event_hooks={"response": [fail_on_500]},
    )


def error_of(response: httpx.Response, status: int) -> str:
    """Assert the status and a JSON body with an "error" string; return that string."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    assert isinstance(body, dict), body
    assert isinstance(body.get("error"), str), body
    assert body["error"], body
    error: str = body["error"]
    return error


@pytest.fixture(scope="module")
def http(api: Api) -> Iterator[httpx.Client]:
    """An authenticated client for the session API that fails on any 500."""
    with client_for(api) as client:
        yield client


def ok_or_none(response: httpx.Response) -> httpx.Response | None:
    """The response if it is a 200; None for a 503; an AssertionError for anything else."""
    if response.status_code == 503:
        return None
    assert response.status_code == 200, response.text
    return response


@pytest.fixture(scope="module")
def quiet(quiet_api: Api) -> Iterator[httpx.Client]:
    """A client for `quiet_api`; every job it created is cancelled at the end."""
    with client_for(quiet_api) as client:
        yield client
        # Through a 503 (a query no worker answered in time on a loaded box).
        listed = wait_until(
            lambda: ok_or_none(client.get("/api/jobs", params={"status": "pending", "limit": 500})),
            timeout=60,
            what="the quiet API's pending jobs",
        )
        for job in listed.json():
            if job["type"].startswith("quiet-"):
                client.delete(f"/api/jobs/{job['id']}")


@pytest.fixture
def quiet_type() -> str:
    """A fresh job type for jobs that will never run."""
    return f"quiet-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def strict_api(start_api: Callable[..., Api]) -> Iterator[httpx.Client]:
    """An API with the shipped solver URL policy: https only, no private networks."""
    api = start_api(SOLVER_URL_SCHEMES="https", SOLVER_ALLOW_PRIVATE_NETWORKS="false")
    with client_for(api) as client:
        yield client


@pytest.fixture(scope="module")
def small_api(start_api: Callable[..., Api]) -> Iterator[httpx.Client]:
    """An API that takes request bodies up to 2 KiB."""
    api = start_api(API_MAX_BODY_BYTES=str(SMALL_BODY_LIMIT))
    with client_for(api) as client:
        yield client


@pytest.fixture(scope="module")
def dead_api(start_api: Callable[..., Api]) -> Iterator[httpx.Client]:
    """An API pointed at an address where no Temporal listens."""
    api = start_api(TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}")
    with client_for(api) as client:
        yield client


def call(client: httpx.Client, method: str, path: str) -> httpx.Response:
    """One request to a route, with a valid body where the route takes one."""
    path = path.format(id=uuid.uuid4().hex)
    body = {"type": "never-created"} if method == "POST" else None
    return client.request(method, path, json=body)


# -- auth --------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_every_job_route_answers_401_without_a_token(api: Api, method: str, path: str) -> None:
    with client_for(api, token=None) as client:
        response = call(client, method, path)

    assert "bearer token" in error_of(response, 401)
    assert response.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize(("method", "path"), ROUTES)
@pytest.mark.parametrize("authorization", ["Bearer wrong-secret", f"Basic {SECRET}", "Bearer"])
def test_every_job_route_answers_401_with_a_wrong_token(
    api: Api, method: str, path: str, authorization: str
) -> None:
    with client_for(api, token=None, Authorization=authorization) as client:
        response = call(client, method, path)

    assert "bearer token" in error_of(response, 401)


def test_a_request_without_a_token_creates_no_job(
    quiet_api: Api, quiet: httpx.Client, quiet_type: str
) -> None:
    with client_for(quiet_api, token=None) as client:
        error_of(client.post("/api/jobs", json={"type": quiet_type}), 401)

    # Once a job submitted after the refused one is listed, the refused one would be.
    after = quiet.post("/api/jobs", json={"type": quiet_type}).json()["id"]
    listed = wait_until(
        lambda: (ids := list_ids(quiet, type=quiet_type)) and ids,
        what="the authorised job to be listed",
    )
    assert listed == [after]


def test_healthz_needs_no_token(api: Api) -> None:
    with client_for(api, token=None) as client:
        response = client.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_the_openapi_schema_and_the_docs_page_are_served(api: Api) -> None:
    with client_for(api, token=None) as client:
        schema = client.get("/openapi.json")
        docs = client.get("/docs")

    assert schema.status_code == 200
    paths = schema.json()["paths"]
    assert {"/api/jobs", "/api/jobs/{job_id}", "/healthz"} <= set(paths)
    assert {"post", "get"} <= set(paths["/api/jobs"])
    assert {"get", "delete"} <= set(paths["/api/jobs/{job_id}"])
    assert docs.status_code == 200
    assert "text/html" in docs.headers["content-type"]
    assert "/openapi.json" in docs.text


def test_an_unknown_path_answers_404_with_an_error_body(http: httpx.Client) -> None:
    assert error_of(http.get("/api/nothing-here"), 404)


def test_the_dashboard_page_and_its_assets_are_served_without_a_token(api: Api) -> None:
    with client_for(api, token=None) as client:
        page = client.get("/")
        assets = [client.get(f"/static/{name}") for name in ("app.js", "style.css")]

    assert page.status_code == 200
    assert "text/html" in page.headers["content-type"]
    assert 'src="static/app.js"' in page.text
    assert [a.status_code for a in assets] == [200, 200]


# -- method rules ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("GET", "/api/events/token", "POST"),
        ("GET", "/api/workers/register", "POST"),
        ("DELETE", "/api/jobs", "GET, POST"),
        ("OPTIONS", "/api/jobs/counts", "GET"),
        ("DELETE", "/api/jobs/counts", "GET"),
        ("OPTIONS", "/api/jobs/page", "GET"),
        ("DELETE", "/api/jobs/events", "GET"),
        ("GET", "/api/jobs/claim", "POST"),
        # Not a read of bulk operation "count" (the full-load fuzz found a 422 here).
        ("GET", "/api/jobs/bulk/count", "POST"),
        ("PUT", f"/api/jobs/{'a' * 32}", "DELETE, GET"),
        ("GET", f"/api/jobs/{'a' * 32}/result", "POST"),
        # The most specific route is the resource, not a parameter that swallows the rest.
        ("OPTIONS", "/api/system/scheduler/queue/jobs/submit", "POST"),
        ("OPTIONS", "/api/targets/gpu-0/resume", "POST"),
        ("GET", "/api/targets/gpu-0/resume", "POST"),
        ("PATCH", "/api/groups/acme/pause", "POST"),
        ("GET", "/api/groups/acme/retry-failed", "POST"),
        ("PUT", "/api/pools/acme/lock", "DELETE, POST"),
        # A name that would not be valid either way: still the action's path.
        ("GET", "/api/targets/a/b/resume", "POST"),
        ("PATCH", "/api/groups/a/b/pause", "POST"),
    ],
)
def test_a_method_a_path_does_not_serve_answers_405_naming_the_ones_it_does(
    http: httpx.Client, method: str, path: str, allow: str
) -> None:
    response = http.request(method, path)

    assert error_of(response, 405)
    assert response.headers["allow"] == allow


def test_no_job_id_route_takes_a_path_that_has_a_route_of_its_own() -> None:
    paths = create_app().openapi()["paths"]
    literal = {
        path.split("/")[3]
        for path in paths
        if path.startswith("/api/jobs/") and not path.startswith("/api/jobs/{")
    }

    assert literal == set(RESERVED_JOB_PATHS)


# -- unknown ids -------------------------------------------------------------------


@pytest.mark.usefixtures("session_worker")
@pytest.mark.parametrize("method", ["GET", "DELETE"])
def test_an_unknown_job_id_answers_404(http: httpx.Client, method: str) -> None:
    job_id = uuid.uuid4().hex

    response = http.request(method, f"/api/jobs/{job_id}")

    assert job_id in error_of(response, 404)
    assert response.json()["id"] == job_id


@pytest.mark.usefixtures("session_worker")
@pytest.mark.parametrize("method", ["GET", "DELETE"])
def test_the_id_of_a_workflow_that_is_not_a_job_answers_404(
    http: httpx.Client, api: Api, method: str
) -> None:
    api.submit(type=REGISTERED_TYPE)  # makes sure the type registry workflow exists

    response = http.request(method, f"/api/jobs/{REGISTRY_WORKFLOW_ID}")

    assert REGISTRY_WORKFLOW_ID in error_of(response, 404)


@pytest.mark.parametrize("method", ["GET", "DELETE"])
def test_a_malformed_job_id_answers_422(http: httpx.Client, method: str) -> None:
    response = http.request(method, "/api/jobs/not.a.job.id")

    assert "job_id" in error_of(response, 422)


# -- submit validation -------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [b'{"type": "a",', b"not json", b'{"type": "a"} trailing', b"\xff\xfe"],
)
def test_a_malformed_json_body_answers_422(http: httpx.Client, body: bytes) -> None:
    response = http.post("/api/jobs", content=body, headers={"Content-Type": "application/json"})

    error = error_of(response, 422)
    assert error.startswith("body:"), error


@pytest.mark.parametrize("body", [b"", b"[]", b'"text"', b"null"])
def test_a_body_that_is_not_a_json_object_answers_422(http: httpx.Client, body: bytes) -> None:
    response = http.post("/api/jobs", content=body, headers={"Content-Type": "application/json"})

    assert error_of(response, 422).startswith("body")


def test_json_nested_too_deeply_to_parse_is_rejected_as_a_client_error(
    http: httpx.Client,
) -> None:
    depth = 50_000
    body = b'{"type": "a", "params": {"x": ' + b"[" * depth + b"]" * depth + b"}}"

    response = http.post("/api/jobs", content=body, headers={"Content-Type": "application/json"})

    assert response.status_code in (400, 422), response.text
    assert response.json()["error"]


@pytest.mark.parametrize(
    ("field", "spec"),
    [
        ("type", {"type": ""}),
        ("type", {"type": "x" * 65}),
        ("type", {"type": "has space"}),
        ("type", {"params": {}}),
        ("params", {"type": "a", "params": [1, 2]}),
        ("params", {"type": "a", "params": "text"}),
        ("params", {"type": "a", "params": {"s": "x" * (64 * 1024)}}),
        ("priority", {"type": "a", "priority": 1_000_001}),
        ("priority", {"type": "a", "priority": "high"}),
        ("max_attempts", {"type": "a", "max_attempts": 0}),
        ("max_attempts", {"type": "a", "max_attempts": 101}),
        ("max_attempts", {"type": "a", "max_attempts": True}),
        ("max_runtime_ms", {"type": "a", "max_runtime_ms": 99}),
        ("max_runtime_ms", {"type": "a", "max_runtime_ms": 7 * 24 * 3600 * 1000 + 1}),
        (
            "solver_checksum",
            {"type": "a", "solver_url": "https://x.test/s", "solver_checksum": "z"},
        ),
        ("solver_checksum", {"type": "a", "solver_url": "https://x.test/s"}),
        ("colour", {"type": "a", "colour": "red"}),
    ],
)
def test_each_bad_field_answers_422_naming_the_field(
    http: httpx.Client, field: str, spec: dict[str, Any]
) -> None:
    response = http.post("/api/jobs", json=spec)

    assert field in error_of(response, 422)
    assert any(field in (d["field"] + d["message"]) for d in response.json()["detail"])


def test_params_nested_deeper_than_32_levels_answer_422_naming_params(
    http: httpx.Client,
) -> None:
    params: dict[str, Any] = {}
    for _ in range(32):
        params = {"a": params}

    response = http.post("/api/jobs", json={"type": "a", "params": params})

    assert error_of(response, 422).startswith("params")


@pytest.mark.parametrize(
    "params", [b'{"x": NaN}', b'{"x": -Infinity}', b'{"s": "\\ud800"}', b'{"\\udfff": 1}']
)
def test_params_that_are_not_valid_json_text_answer_422_naming_params(
    http: httpx.Client, params: bytes
) -> None:
    body = b'{"type": "a", "params": ' + params + b"}"

    response = http.post("/api/jobs", content=body, headers={"Content-Type": "application/json"})

    assert error_of(response, 422).startswith("params")


@pytest.mark.parametrize(
    "url", ["http://solvers.example.com/s.py", "file:///bin/true", "ftp://x.test/s", "x.test/s"]
)
def test_a_solver_url_scheme_outside_the_default_policy_answers_422(
    strict_api: httpx.Client, url: str
) -> None:
    response = strict_api.post(
        "/api/jobs", json={"type": "a", "solver_url": url, "solver_checksum": CHECKSUM}
    )

    error = error_of(response, 422)
    assert "solver_url scheme" in error
    assert "allowed: https" in error
    assert response.json()["field"] == "solver_url"


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1/s.py",
        "https://127.0.0.1:8443/s.py",
        "https://[::1]/s.py",
        "https://[::ffff:127.0.0.1]/s.py",
        "https://localhost/s.py",
    ],
)
def test_a_solver_url_on_a_loopback_address_answers_422_when_private_networks_are_off(
    strict_api: httpx.Client, url: str
) -> None:
    response = strict_api.post(
        "/api/jobs", json={"type": "a", "solver_url": url, "solver_checksum": CHECKSUM}
    )

    error = error_of(response, 422)
    assert "solver_url" in error
    assert "SOLVER_ALLOW_PRIVATE_NETWORKS" in error
    assert response.json()["field"] == "solver_url"


@pytest.mark.parametrize(
    "url",
    [
        "https://user:pw@127.0.0.1/s.py",
        "https:///s.py",
        "https://[::1/s.py",
        "https://a..b/s.py",
        "https://" + "a" * 70 + ".test/s.py",
        "https://127.0.0.1:99999/s.py",
        "https://127.0.0.1:port/s.py",
    ],
)
def test_a_solver_url_that_is_not_a_usable_url_answers_422_naming_solver_url(
    strict_api: httpx.Client, url: str
) -> None:
    response = strict_api.post(
        "/api/jobs", json={"type": "a", "solver_url": url, "solver_checksum": CHECKSUM}
    )

    assert "solver_url" in error_of(response, 422)


@pytest.mark.parametrize("key", ["", "k" * 201])
def test_an_empty_or_overlong_idempotency_key_answers_422(http: httpx.Client, key: str) -> None:
    response = http.post("/api/jobs", json={"type": "a"}, headers={"Idempotency-Key": key})

    assert "Idempotency-Key" in error_of(response, 422)


# -- body size ---------------------------------------------------------------------


def oversized_spec() -> bytes:
    """A valid job body well over SMALL_BODY_LIMIT."""
    return b'{"type": "a", "params": {"s": "' + b"x" * (SMALL_BODY_LIMIT * 2) + b'"}}'


def test_a_body_over_the_limit_with_content_length_answers_413(small_api: httpx.Client) -> None:
    response = small_api.post(
        "/api/jobs", content=oversized_spec(), headers={"Content-Type": "application/json"}
    )

    assert str(SMALL_BODY_LIMIT) in error_of(response, 413)


def test_a_chunked_body_over_the_limit_answers_413(small_api: httpx.Client) -> None:
    body = oversized_spec()

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(body), 512):
            yield body[start : start + 512]

    response = small_api.post(
        "/api/jobs", content=chunks(), headers={"Content-Type": "application/json"}
    )

    assert response.request.headers.get("transfer-encoding") == "chunked"
    assert str(SMALL_BODY_LIMIT) in error_of(response, 413)


def test_an_oversized_body_without_a_token_answers_413_too(small_api: httpx.Client) -> None:
    response = small_api.post(
        "/api/jobs",
        content=oversized_spec(),
        headers={"Content-Type": "application/json", "Authorization": ""},
    )

    error_of(response, 413)


def test_a_body_just_under_the_limit_is_read_and_validated(small_api: httpx.Client) -> None:
    filler = "x" * (SMALL_BODY_LIMIT - 100)
    body = b'{"type": "a", "max_attempts": 0, "params": {"s": "' + filler.encode() + b'"}}'
    assert len(body) <= SMALL_BODY_LIMIT

    def chunks() -> Iterator[bytes]:
        yield body[:100]
        yield body[100:]

    response = small_api.post(
        "/api/jobs", content=chunks(), headers={"Content-Type": "application/json"}
    )

    assert "max_attempts" in error_of(response, 422)


# -- listing -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"status": "bogus"}, "status"),
        ({"status": ""}, "status"),
        ({"type": "has space"}, "type"),
        ({"type": "a'b"}, "type"),
        ({"limit": 0}, "limit"),
        ({"order": "oldest"}, "order"),
        ({"page_token": "x" * 4097}, "page_token"),
        ({"limit": "ten"}, "limit"),
        ({"offset": -1}, "offset"),
        ({"offset": 100_001}, "offset"),
    ],
)
def test_bad_list_filters_answer_422_naming_the_filter(
    http: httpx.Client, query: dict[str, Any], field: str
) -> None:
    assert field in error_of(http.get("/api/jobs", params=query), 422)


def list_ids(client: httpx.Client, **query: Any) -> list[str]:
    """Ids from GET /api/jobs."""
    response = client.get("/api/jobs", params=query)
    assert response.status_code == 200, response.text
    return [job["id"] for job in response.json()]


def test_jobs_are_listed_by_priority_descending_then_oldest_first_on_request(
    quiet: httpx.Client, quiet_type: str
) -> None:
    priorities = [0, 5, -3, 5, 10, 0, -3, 250_000, -40]
    ids = []
    for priority in priorities:
        response = quiet.post("/api/jobs", json={"type": quiet_type, "priority": priority})
        assert response.status_code == 201, response.text
        ids.append(response.json()["id"])
    expected = [ids[i] for i in sorted(range(len(ids)), key=lambda i: (-priorities[i], i))]

    def all_listed() -> list[str] | None:
        found = list_ids(quiet, type=quiet_type, order="priority")
        return found if len(found) == len(ids) else None

    listed = wait_until(all_listed, what="every job to be listed")

    assert listed == expected
    by_priority = {"type": quiet_type, "order": "priority"}
    assert list_ids(quiet, **by_priority, limit=3) == expected[:3]
    assert list_ids(quiet, **by_priority, limit=2, offset=4) == expected[4:6]
    assert list_ids(quiet, **by_priority, offset=len(ids)) == []
    assert walk(quiet, **by_priority, limit=4) == expected


def walk(client: httpx.Client, **query: Any) -> list[str]:
    """Every id of a listing, following its `Link: rel="next"` headers."""
    seen: list[str] = []
    response = client.get("/api/jobs", params=query)
    while True:
        assert response.status_code == 200, response.text
        seen += [job["id"] for job in response.json()]
        link = response.headers.get("link")
        if link is None:
            assert "next-page-token" not in response.headers
            return seen
        following = httpx.URL(link.removeprefix("<").split(">;")[0])
        assert following.params["page_token"] == response.headers["next-page-token"]
        response = client.get(str(following))


def test_jobs_are_listed_newest_first_and_walked_page_by_page(
    quiet: httpx.Client, quiet_type: str
) -> None:
    ids = [quiet.post("/api/jobs", json={"type": quiet_type}).json()["id"] for _ in range(5)]
    newest_first = ids[::-1]

    wait_until(lambda: list_ids(quiet, type=quiet_type) == newest_first, what="all listed")

    assert walk(quiet, type=quiet_type, limit=2) == newest_first
    assert list_ids(quiet, type=quiet_type, limit=2, offset=3) == newest_first[3:]
    first = quiet.get("/api/jobs", params={"type": quiet_type, "limit": 2})
    token = first.headers["next-page-token"]
    after = {"type": quiet_type, "limit": 2, "page_token": token}
    assert list_ids(quiet, **after) == newest_first[2:4]
    assert list_ids(quiet, **after, offset=1) == newest_first[3:5]
    other = {"type": f"{quiet_type}-other", "page_token": token}
    assert "page_token" in error_of(quiet.get("/api/jobs", params=other), 422)
    by_priority = {"type": quiet_type, "order": "priority", "page_token": token}
    assert "page_token" in error_of(quiet.get("/api/jobs", params=by_priority), 422)


def test_a_limit_above_the_maximum_is_cut_to_it(quiet: httpx.Client, quiet_type: str) -> None:
    quiet.post("/api/jobs", json={"type": quiet_type})
    wait_until(lambda: list_ids(quiet, type=quiet_type), what="the job listed")

    response = quiet.get("/api/jobs", params={"type": quiet_type, "limit": 1000})

    assert response.status_code == 200, response.text
    assert len(response.json()) == 1


def test_job_pages_cover_every_job_once_and_take_back_only_their_own_tokens(
    quiet: httpx.Client, quiet_type: str
) -> None:
    ids = {quiet.post("/api/jobs", json={"type": quiet_type}).json()["id"] for _ in range(5)}
    wait_until(lambda: len(list_ids(quiet, type=quiet_type)) == len(ids), what="jobs listed")

    def page(**query: Any) -> dict[str, Any]:
        response = quiet.get("/api/jobs/page", params={"type": quiet_type, "limit": 2, **query})
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    seen: list[str] = []
    tokens: list[str] = []
    body = page()
    while True:
        seen += [job["id"] for job in body["jobs"]]
        if not body["next_page_token"]:
            break
        tokens.append(body["next_page_token"])
        body = page(page_token=tokens[-1])

    assert sorted(seen) == sorted(ids)
    assert len(tokens) == 2
    forged = tokens[0][:-4] + ("AAAA" if not tokens[0].endswith("AAAA") else "BBBB")
    refused = "page_token: not a token from this API for this query"
    for bad in (forged, "bm90LWEtdG9rZW4", "%%%", tokens[0] + "x"):
        query = {"type": quiet_type, "page_token": bad}
        assert error_of(quiet.get("/api/jobs/page", params=query), 422) == refused
    other_query = {"type": f"{quiet_type}-other", "page_token": tokens[0]}
    assert error_of(quiet.get("/api/jobs/page", params=other_query), 422) == refused


def test_the_list_filters_by_status_and_type(quiet: httpx.Client, quiet_type: str) -> None:
    other_type = f"{quiet_type}-other"
    mine = quiet.post("/api/jobs", json={"type": quiet_type}).json()["id"]
    other = quiet.post("/api/jobs", json={"type": other_type}).json()["id"]

    wait_until(
        lambda: (
            list_ids(quiet, type=quiet_type, status="pending") == [mine]
            and list_ids(quiet, type=other_type, status="pending") == [other]
        ),
        what="both jobs to be listed",
    )

    assert list_ids(quiet, type=other_type, status="pending") == [other]
    assert list_ids(quiet, type=quiet_type, status="completed") == []
    listed = quiet.get("/api/jobs", params={"type": quiet_type}).json()
    assert listed[0]["status"] == "pending"
    assert listed[0]["type"] == quiet_type
    assert listed[0]["attempts"] == 0


def test_a_submitted_job_reads_back_as_pending_with_its_spec(
    quiet: httpx.Client, quiet_type: str
) -> None:
    spec = {
        "type": quiet_type,
        "params": {"x": [1, {"y": None}], "s": "é"},
        "priority": 7,
        "max_attempts": 5,
        "max_runtime_ms": 1000,
        "solver_url": "https://solvers.example.com/s.py",
        "solver_checksum": CHECKSUM.upper(),
    }

    response = quiet.post("/api/jobs", json=spec)

    assert response.status_code == 201, response.text
    assert response.json()["status"] == "pending"
    job = quiet.get(f"/api/jobs/{response.json()['id']}").json()
    assert job["status"] == "pending"
    assert {k: job[k] for k in spec} == {**spec, "solver_checksum": CHECKSUM}
    assert [t["status"] for t in job["transitions"]] == ["pending"]


# -- idempotency -------------------------------------------------------------------


async def runs_of(temporal: DevServer, job_id: str) -> list[str]:
    """Run ids of every workflow execution with this id, from visibility."""
    client = await Client.connect(temporal.address)
    return [e.run_id async for e in client.list_workflows(f"WorkflowId = '{job_id}'")]


async def current_run(temporal: DevServer, job_id: str) -> str:
    """Run id of the latest execution with this id."""
    client = await Client.connect(temporal.address)
    run_id = (await client.get_workflow_handle(job_id).describe()).run_id
    assert run_id is not None
    return run_id


async def test_the_same_idempotency_key_and_body_give_the_same_job_once(
    quiet: httpx.Client, quiet_type: str, temporal: DevServer
) -> None:
    key = {"Idempotency-Key": f"key-{uuid.uuid4()}"}

    first = quiet.post("/api/jobs", json={"type": quiet_type, "params": {"a": 1}}, headers=key)
    second = quiet.post(
        "/api/jobs",
        json={"params": {"a": 1}, "type": quiet_type, "max_attempts": 3},
        headers=key,
    )

    assert first.status_code == 201, first.text
    assert second.status_code == 201, second.text
    assert second.json()["id"] == first.json()["id"]
    job_id = first.json()["id"]
    assert wait_until(lambda: list_ids(quiet, type=quiet_type)) == [job_id]
    assert await runs_of(temporal, job_id) == [await current_run(temporal, job_id)]


def test_the_same_idempotency_key_with_a_different_body_answers_409(
    quiet: httpx.Client, quiet_type: str
) -> None:
    key = {"Idempotency-Key": f"key-{uuid.uuid4()}"}
    first = quiet.post("/api/jobs", json={"type": quiet_type, "params": {"a": 1}}, headers=key)
    assert first.status_code == 201, first.text

    for changed in (
        {"type": quiet_type, "params": {"a": 2}},
        {"type": quiet_type, "params": {"a": 1}, "priority": 1},
        {"type": f"{quiet_type}-x", "params": {"a": 1}},
    ):
        response = quiet.post("/api/jobs", json=changed, headers=key)
        assert "Idempotency-Key" in error_of(response, 409)
        assert response.json()["id"] == first.json()["id"]


def test_different_idempotency_keys_give_different_jobs(
    quiet: httpx.Client, quiet_type: str
) -> None:
    body = {"type": quiet_type}

    one = quiet.post("/api/jobs", json=body, headers={"Idempotency-Key": f"k-{uuid.uuid4()}"})
    two = quiet.post("/api/jobs", json=body, headers={"Idempotency-Key": f"k-{uuid.uuid4()}"})

    assert one.status_code == two.status_code == 201
    assert one.json()["id"] != two.json()["id"]


@pytest.mark.usefixtures("session_worker")
def test_reusing_a_key_after_the_job_completed_returns_it_without_running_it_again(
    api: Api, http: httpx.Client
) -> None:
    key = {"Idempotency-Key": f"key-{uuid.uuid4()}"}
    body = {"type": REGISTERED_TYPE, "params": {"n": 1}}
    job_id = http.post("/api/jobs", json=body, headers=key).json()["id"]
    done = api.wait_status(job_id, "completed")

    again = http.post("/api/jobs", json=body, headers=key)

    assert again.status_code == 201, again.text
    assert again.json() == {"id": job_id, "status": "completed"}
    assert api.job(job_id)["transitions"] == done["transitions"]
    assert "Idempotency-Key" in error_of(
        http.post("/api/jobs", json={**body, "params": {"n": 2}}, headers=key), 409
    )


# -- Temporal down -----------------------------------------------------------------


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_an_api_without_temporal_answers_503_with_a_clear_message(
    dead_api: httpx.Client, method: str, path: str
) -> None:
    response = call(dead_api, method, path)

    assert "Temporal is unavailable" in error_of(response, 503)
    assert response.headers["retry-after"] == "1"


def test_an_api_without_temporal_still_validates_and_authenticates(
    dead_api: httpx.Client, api: Api
) -> None:
    assert "max_attempts" in error_of(
        dead_api.post("/api/jobs", json={"type": "a", "max_attempts": 0}), 422
    )
    dead_api.headers["Authorization"] = "Bearer wrong"
    try:
        error_of(dead_api.get("/api/jobs"), 401)
    finally:
        dead_api.headers["Authorization"] = f"Bearer {SECRET}"


def test_a_page_token_the_api_did_not_issue_is_refused_without_asking_temporal(
    dead_api: httpx.Client,
) -> None:
    """Temporal is unreachable here, so only a check in the API itself can answer 422."""
    forged = base64.urlsafe_b64encode(b"0" * 16 + b'{"LastStartTime":1}').decode()

    response = dead_api.get("/api/jobs/page", params={"page_token": forged})

    assert error_of(response, 422) == "page_token: not a token from this API for this query"


def test_an_api_without_temporal_is_still_healthy(dead_api: httpx.Client) -> None:
    response = dead_api.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_counts_say_when_they_were_made(api: Api) -> None:
    before = int(time.time() * 1000)
    answer = api.http.get("/api/jobs/counts")
    assert answer.status_code == 200
    as_of = int(answer.headers["X-Counts-As-Of"])
    # Made by this call or kept from one at most METRICS_CACHE_MS times STALE_MAX before it.
    assert before - 2000 * TtlCache.STALE_MAX <= as_of <= int(time.time() * 1000)


def test_a_closed_jobs_read_is_its_runs_own_and_needs_no_worker(
    start_stack: Callable[..., Stack],
    temporal: DevServer,
    job_type: str,
    make_solver: Callable[[str], Solver],
) -> None:
    stack = start_stack()
    api = stack.api
    stack.worker(job_type, "closed-reads")
    completed = api.submit(**make_solver('print(json.dumps({"n": 1}))\n').spec(job_type))
    quarantined = api.submit(**make_solver("sys.exit(3)\n").spec(job_type, max_attempts=1))
    api.wait_status(completed, "completed")
    api.wait_status(quarantined, "quarantined")

    async def by_query() -> dict[str, Job]:
        client = await Client.connect(temporal.address, data_converter=pydantic_data_converter)
        return {
            job_id: await client.get_workflow_handle(job_id).query(JOB_QUERY, result_type=Job)
            for job_id in (completed, quarantined)
        }

    # What each run's workflow answers when a worker replays it...
    replayed = asyncio.run(by_query())
    # ...is what the API reads once no worker is left to replay it.
    for proc in stack.procs[1:]:
        proc.kill()
    read = {job_id: Job.model_validate(api.job(job_id)) for job_id in replayed}

    assert read == replayed
    assert read[completed].status == "completed" and read[completed].result == {"n": 1}
    assert read[quarantined].status == "quarantined" and read[quarantined].fail_history
