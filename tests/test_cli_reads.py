"""The `jobforge` read commands as a script uses them: `--json` on every one, the list's
filters, `target list`, the plural list commands, `--version` and shell completion.
Processes against the session's API and worker."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from typing import Any

import pytest

from tests.conftest import REGISTERED_TYPE, SECRET, Api, wait_until
from tests.test_cli import JOBFORGE, jobforge, ok, one_error_line

pytestmark = pytest.mark.usefixtures("session_worker")


def printed_json(api: Api, *args: str) -> Any:
    """A read command's `--json` output: one JSON document on stdout."""
    return json.loads(ok(jobforge(api.url, *args, "--json")))


def api_json(api: Api, path: str, **params: Any) -> Any:
    response = api.http.get(path, params=params)
    assert response.status_code == 200, response.text
    return response.json()


def test_version_prints_the_installed_packages_version() -> None:
    from importlib.metadata import version

    out = ok(jobforge("http://unused", "--version"))

    assert out == f"jobforge {version('jobforge')}\n"


def in_shell(shell: str, command: str, **env: str) -> str:
    """What `command` printed, run by `shell` as its child (`&& true` keeps the shell from
    exec'ing it in its place), once it exited 0."""
    result = subprocess.run(
        [shell, "-c", f"{command} && true"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_show_completion_prints_the_script_of_the_shell_it_runs_in() -> None:
    out = in_shell("bash", f"{JOBFORGE} --show-completion")

    assert "complete " in out, out
    assert "_JOBFORGE_COMPLETE" in out, out


def test_a_bash_completion_script_is_printed_from_any_shell() -> None:
    out = in_shell("sh", str(JOBFORGE), _JOBFORGE_COMPLETE="source_bash")

    assert "complete " in out, out
    assert "_JOBFORGE_COMPLETE=complete_bash" in out, out


def test_help_offers_install_completion_and_version() -> None:
    out = ok(jobforge("http://unused", "--help"))

    for option in ("--install-completion", "--show-completion", "--version"):
        assert option in out, out


def test_show_and_list_print_the_apis_json(api: Api) -> None:
    job_id = api.submit(type=REGISTERED_TYPE, params={"n": 2})
    api.wait_status(job_id, "completed")

    shown = printed_json(api, "show", job_id)

    # The list reads visibility, which shows the job a moment after it is made.
    def with_the_job() -> Any:
        jobs = printed_json(api, "list", "--type", REGISTERED_TYPE, "--limit", "500")
        return jobs if job_id in {job["id"] for job in jobs} else None

    listed = wait_until(with_the_job, timeout=30, what="the job listed")

    assert shown == api.job(job_id)
    assert isinstance(listed, list)
    assert {job["type"] for job in listed} == {REGISTERED_TYPE}


@pytest.mark.parametrize(
    ("args", "path", "key"),
    [
        (("groups",), "/api/groups", "group"),
        (("group", "list"), "/api/groups", "group"),
        (("pools",), "/api/pools", "pool"),
        (("pool", "list"), "/api/pools", "pool"),
        (("targets",), "/api/targets", "target"),
        (("target", "list"), "/api/targets", "target"),
        (("token", "list"), "/api/tokens", "name"),
    ],
)
def test_every_list_command_prints_the_apis_array_with_json(
    api: Api, args: tuple[str, ...], path: str, key: str
) -> None:
    name = f"cli-{uuid.uuid4().hex[:8]}"
    api.submit(type=f"t-{name}", group=name, pool=name, target=name)
    made = api.http.post("/api/tokens", json={"name": name, "role": "reader"})
    assert made.status_code == 201, made.text

    def listing() -> list[dict[str, Any]] | None:
        printed = printed_json(api, *args)
        return printed if name in {item[key] for item in printed} else None

    printed = wait_until(listing, timeout=30, what=f"{name} in {args}")
    answered = api_json(api, path)
    assert isinstance(printed, list)
    assert set(printed[0]) == set(answered[0])  # the API's objects, as they are
    assert {item[key] for item in printed} <= {item[key] for item in answered} | {name}


def test_workers_lists_the_fleet_as_text_and_json(api: Api) -> None:
    fleet = printed_json(api, "workers")
    text = ok(jobforge(api.url, "workers"))

    session = next(w for w in fleet if w["worker_id"] == "session-worker")
    assert session["alive"] is True
    assert session["cores"] == 4
    line = next(line for line in text.splitlines() if line.startswith("session-worker "))
    assert " alive " in line and "4 cores · " in line, line


def test_target_list_prints_a_line_per_target(api: Api) -> None:
    name = f"cli-{uuid.uuid4().hex[:8]}"
    api.submit(type=f"t-{name}", target=name)

    def line() -> str | None:
        out = ok(jobforge(api.url, "target", "list"))
        return next((x for x in out.splitlines() if x.startswith(f"{name}  ")), None)

    found = wait_until(line, timeout=30, what=f"target {name} listed")
    assert found.startswith(f"{name}  open  running=0 pending=1"), found


def test_show_of_a_group_pool_and_target_print_the_apis_object(api: Api) -> None:
    name = f"cli-{uuid.uuid4().hex[:8]}"
    api.submit(type=f"t-{name}", group=name, pool=name, target=name)

    for noun, path in (("group", "groups"), ("pool", "pools"), ("target", "targets")):
        shown = wait_until(lambda n=noun: printed_json(api, n, "show", name), timeout=30, what=noun)
        assert shown[noun] == name
        assert set(shown) == set(api_json(api, f"/api/{path}/{name}"))


def test_list_narrows_by_group_pool_target_tenant_and_worker(api: Api) -> None:
    tag = uuid.uuid4().hex[:8]
    job_type = f"t-{tag}"
    a = api.submit(type=job_type, group=f"g-{tag}", pool=f"p-{tag}")
    b = api.submit(type=job_type, target=f"acme-{tag}/t-{tag}", tenant=f"acme-{tag}")
    ran = api.submit(type=REGISTERED_TYPE, params={"tag": tag})
    worker = api.wait_status(ran, "completed")["worker_id"]

    def ids(*args: str) -> set[str]:
        listed = printed_json(api, "list", "--limit", "500", *args)
        return {job["id"] for job in listed}

    wanted = [
        (("--type", job_type), {a, b}),
        (("--type", job_type, "--group", f"g-{tag}"), {a}),
        (("--type", job_type, "--pool", f"p-{tag}"), {a}),
        (("--type", job_type, "--target", f"acme-{tag}/t-{tag}"), {b}),
        (("--type", job_type, "--tenant", f"acme-{tag}"), {b}),
        (("--type", job_type, "--worker", worker), set()),
    ]
    for args, expected in wanted:
        wait_until(lambda a=args, e=expected: ids(*a) == e, timeout=30, what=f"list {args}")
    wait_until(
        lambda: ran in ids("--worker", worker, "--status", "completed"),
        timeout=30,
        what=f"list --worker {worker}",
    )
    assert ran not in ids("--worker", f"nobody-{tag}")


@pytest.mark.parametrize(
    ("option", "value", "field"),
    [("--worker", "a b", "worker"), ("--tenant", "a b", "X-Tenant"), ("--group", "-x", "group")],
)
def test_a_bad_list_filter_is_one_line_naming_the_option(
    api: Api, option: str, value: str, field: str
) -> None:
    result = jobforge(api.url, "list", option, value)

    line = one_error_line(result)
    assert result.returncode == 1
    assert line.startswith(f"error: HTTP 422: {field}"), line
    if field == "X-Tenant":
        assert line.endswith("(set by --tenant)"), line


def test_a_tenant_token_listing_another_tenant_is_refused_naming_the_option(api: Api) -> None:
    tag = uuid.uuid4().hex[:8]
    created = api.http.post(
        "/api/tokens", json={"name": f"r-{tag}", "role": "reader", "tenant": f"own-{tag}"}
    )
    assert created.status_code == 201, created.text
    token = created.json()["token"]

    result = jobforge(api.url, "list", "--tenant", f"other-{tag}", secret=token)

    line = one_error_line(result)
    assert line.startswith("error: HTTP 403: "), line
    assert line.endswith("(set by --tenant)"), line
    assert SECRET not in line


def test_logs_json_with_follow_is_refused_before_any_call() -> None:
    result = jobforge("http://127.0.0.1:9", "logs", "x", "--json", "--follow")

    assert result.returncode == 2
    assert "--follow" in one_error_line(result)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("lsit",), "error: No such command 'lsit'. Did you mean 'list'"),
        (("group", "shw", "x"), "error: No such command 'shw'. Did you mean 'show'?"),
        (("--nope",), "error: No such option: --nope"),
        (("list", "--nope"), "error: No such option: --nope"),
        (("pool", "set", "x"), "error: Missing option '--capacity'."),
    ],
)
def test_a_usage_mistake_is_one_line_naming_it_exit_2(args: tuple[str, ...], expected: str) -> None:
    result = jobforge("http://127.0.0.1:9", *args)

    assert result.returncode == 2
    assert one_error_line(result).startswith(expected)
