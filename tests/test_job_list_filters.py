"""`GET /api/jobs` narrowed by `pool`, `group` and `target`, and the CLI's client paging
through a listing to its end."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.conftest import SECRET, Api, wait_until
from worker.hub_client import HubClient, HubSettings

# Gated submissions need the gates' workflows running.
pytestmark = pytest.mark.usefixtures("session_worker")


def listed(api: Api, **query: Any) -> set[str]:
    """The ids of one page of `GET /api/jobs` for `query`."""
    response = api.http.get("/api/jobs", params={"limit": 100, **query})
    assert response.status_code == 200, response.text
    return {job["id"] for job in response.json()}


@pytest.fixture
def jobs(api: Api, job_type: str) -> dict[str, str]:
    """Four pending jobs of a type no worker serves: name → id."""
    tag = uuid.uuid4().hex[:8]
    names = {"pool": f"p-{tag}", "other_pool": f"q-{tag}", "group": f"g-{tag}"}
    names["target"] = f"t-{tag}"
    specs = {
        "a": {"pool": names["pool"], "group": names["group"]},
        "b": {"pool": names["other_pool"], "group": names["group"], "target": names["target"]},
        "c": {"pool": names["pool"], "target": names["target"]},
        "d": {},
    }
    made = {name: api.submit(type=job_type, **spec) for name, spec in specs.items()}
    return {**names, **made}


def test_the_list_takes_pool_group_and_target_filters(
    api: Api, job_type: str, jobs: dict[str, str]
) -> None:
    def ids(*names: str) -> set[str]:
        return {jobs[name] for name in names}

    wanted = [
        ({"type": job_type}, ids("a", "b", "c", "d")),
        ({"pool": jobs["pool"]}, ids("a", "c")),
        ({"group": jobs["group"]}, ids("a", "b")),
        ({"target": jobs["target"]}, ids("b", "c")),
        ({"pool": jobs["pool"], "target": jobs["target"]}, ids("c")),
        ({"pool": jobs["other_pool"], "group": jobs["group"], "status": "pending"}, ids("b")),
        ({"pool": f"none-{uuid.uuid4().hex[:8]}"}, set()),
    ]
    for query, expected in wanted:
        wait_until(
            lambda q=query, e=expected: listed(api, **q) == e,  # type: ignore[misc]
            timeout=30,
            what=f"the list for {query} to be {expected}",
        )
    both = listed(api, pool=jobs["pool"], order="priority")
    assert both == ids("a", "c")


@pytest.mark.parametrize(
    ("field", "value"),
    [("pool", "a b"), ("group", "-x"), ("target", "a/b/c"), ("pool", "x" * 65)],
)
def test_a_bad_filter_value_answers_422_naming_the_field(api: Api, field: str, value: str) -> None:
    response = api.http.get("/api/jobs", params={field: value})

    assert response.status_code == 422, response.text
    assert field in response.json()["error"]


def test_the_cli_client_pages_through_a_listing_to_its_end(api: Api, jobs: dict[str, str]) -> None:
    wait_until(
        lambda: listed(api, target=jobs["target"]) == {jobs["b"], jobs["c"]},
        timeout=30,
        what="the target's jobs to be listed",
    )
    with HubClient(HubSettings(HUB_URL=api.url, FORGE_INGEST_SECRET=SECRET)) as client:
        paged = [job["id"] for job in client.job_pages({"target": jobs["target"]}, page=1)]
        first = client.call("GET", "/api/jobs", params={"target": jobs["target"], "limit": 1})

    assert len(first.json()) == 1 and first.headers["Next-Page-Token"]
    assert sorted(paged) == sorted([jobs["b"], jobs["c"]])


def test_the_list_and_the_page_take_an_id_prefix_and_the_worker(
    api: Api, job_type: str, jobs: dict[str, str]
) -> None:
    # Ids are uuid7s: all but their last characters name one job among these.
    for name in ("a", "b", "c", "d"):
        prefix = jobs[name][:-3]
        wait_until(
            lambda p=prefix, n=name: listed(api, type=job_type, id_prefix=p) == {jobs[n]},  # type: ignore[misc]
            timeout=30,
            what=f"the list for the prefix {prefix} to be job {name}",
        )
        page = api.http.get("/api/jobs/page", params={"type": job_type, "id_prefix": prefix})
        assert page.status_code == 200, page.text
        assert [job["id"] for job in page.json()["jobs"]] == [jobs[name]]
    assert listed(api, type=job_type, id_prefix="zz-none") == set()
    # The page takes the list's search-attribute filters too; these jobs are unclaimed.
    page = api.http.get("/api/jobs/page", params={"pool": jobs["pool"], "worker": "w-none"})
    assert page.status_code == 200, page.text
    assert page.json()["jobs"] == []
    page = api.http.get("/api/jobs/page", params={"pool": jobs["pool"]})
    assert {job["id"] for job in page.json()["jobs"]} == {jobs["a"], jobs["c"]}


@pytest.mark.parametrize("path", ["/api/jobs", "/api/jobs/page"])
@pytest.mark.parametrize("value", ["a'b", "x y", "", "a" * 65])
def test_a_bad_id_prefix_answers_422_naming_it(api: Api, path: str, value: str) -> None:
    response = api.http.get(path, params={"id_prefix": value})

    assert response.status_code == 422, response.text
    assert "id_prefix" in response.json()["error"]
