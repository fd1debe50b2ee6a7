"""The `jobforge` scheduling commands as a user runs them: `submit`'s scheduling options
and `group`, `pool`, `target`, as processes against the session's API and worker.

They prove the wiring (options → request → one line out or one error line); the
scheduling itself is proven in test_gates_workflow and test_scheduling_api.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import pytest

from tests.conftest import REGISTERED_TYPE, Api, Solver, wait_until
from tests.test_cli import jobforge, ok, one_error_line

pytestmark = pytest.mark.usefixtures("session_worker")

START_AT = "2099-01-02T03:04:05+01:00"
DEADLINE_MS = 4_102_444_800_000  # 2100-01-01T00:00:00Z


@pytest.fixture
def name() -> str:
    """A fresh group, pool or target name."""
    return f"cli-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def failing(make_solver: Callable[[str], Solver]) -> list[str]:
    """`jobforge submit` options of a solver whose every run fails (it exits 3)."""
    solver = make_solver("sys.exit(3)\n")
    return ["--solver-url", solver.url, "--solver-checksum", solver.checksum]


def field_line(out: str, label: str) -> str:
    """The value of a `Label   value` line of a show command."""
    found = re.search(rf"^{label}\s+(.*)$", out, re.MULTILINE)
    assert found, (label, out)
    return found.group(1)


def shown(api: Api, *args: str) -> dict[str, Any]:
    """A show command's `--json` output."""
    printed: dict[str, Any] = json.loads(ok(jobforge(api.url, *args, "--json")))
    return printed


def read(api: Api, path: str) -> Any:
    """GET `path` of the API, as JSON: what a show command's `--json` prints. A wait
    polls this, then checks the command once (each run of the CLI costs ~0.7 s CPU)."""
    answer = api.http.get(path)
    assert answer.status_code == 200, answer.text
    return answer.json()


def target_path(name: str) -> str:
    """GET /api/targets/{target} of a `tenant/name` target (its "/" stays)."""
    return f"/api/targets/{quote(name, safe='/')}"


def job_when(api: Api, job_id: str, **wanted: Any) -> dict[str, Any]:
    """The job once its fields have the wanted values."""

    def reached() -> dict[str, Any] | None:
        job = api.job(job_id)
        return job if all(job[key] == value for key, value in wanted.items()) else None

    found: dict[str, Any] = wait_until(reached, timeout=30, what=f"job {job_id} with {wanted}")
    return found


def test_submit_with_scheduling_options_shows_them_in_get_and_show(api: Api, name: str) -> None:
    job_id = ok(
        jobforge(
            api.url,
            *("submit", REGISTERED_TYPE, "--group", name, "--pool", name, "--cost", "3"),
            *("--target", f"tenant/{name}", "--start-at", START_AT),
            *("--deadline", str(DEADLINE_MS)),
        )
    ).strip()
    job_when(api, job_id, waiting_for="start_time")

    job = json.loads(ok(jobforge(api.url, "get", job_id)))
    shown_job = ok(jobforge(api.url, "show", job_id))
    ok(jobforge(api.url, "cancel", job_id))

    start_ms = int(datetime.fromisoformat(START_AT).timestamp() * 1000)
    assert {key: job[key] for key in ("group", "pool", "cost_units", "target")} == {
        "group": name,
        "pool": name,
        "cost_units": 3,
        "target": f"tenant/{name}",
    }
    assert (job["earliest_start_at"], job["deadline_at"]) == (start_ms, DEADLINE_MS)
    assert (job["status"], job["waiting_for"]) == ("pending", "start_time")
    assert job["max_attempts"] == 1  # a target job's default: the CLI left it to the API
    assert field_line(shown_job, "Group") == name
    assert field_line(shown_job, "Pool") == f"{name} (cost 3)"
    assert field_line(shown_job, "Target") == f"tenant/{name}"
    local = datetime.fromtimestamp(start_ms / 1000, tz=UTC).astimezone()
    assert field_line(shown_job, "Start at").startswith(local.strftime("%Y-%m-%d %H:%M:%S"))
    assert field_line(shown_job, "Waiting for") == "start_time"


def test_submit_with_a_required_host_shows_it_and_waits_for_the_host(api: Api, name: str) -> None:
    args = ("submit", REGISTERED_TYPE, "--require-host", name, "--host-wait-ms", "600000")
    job_id = ok(jobforge(api.url, *args)).strip()
    job_when(api, job_id, waiting_for="host")

    job = json.loads(ok(jobforge(api.url, "get", job_id)))
    shown_job = ok(jobforge(api.url, "show", job_id))
    ok(jobforge(api.url, "cancel", job_id))

    assert (job["require_host"], job["require_host_wait_ms"]) == (name, 600_000)
    assert job["preferred_host"] is None
    assert field_line(shown_job, "Require host") == name
    assert field_line(shown_job, "Waiting for") == "host"


def test_a_plain_jobs_show_has_no_scheduling_lines(api: Api) -> None:
    job_id = api.submit(type=REGISTERED_TYPE)
    api.wait_status(job_id, "completed")

    out = ok(jobforge(api.url, "show", job_id))

    assert not re.search(r"^(Group|Pool|Target|Start at|Deadline|Waiting for)\s", out, re.M)


def test_group_pause_holds_a_submitted_job_show_says_paused_and_resume_runs_it(
    api: Api, name: str
) -> None:
    assert ok(jobforge(api.url, "group", "pause", name)) == f"paused group {name}\n"
    held = ok(jobforge(api.url, "submit", REGISTERED_TYPE, "--group", name)).strip()
    job_when(api, held, status="pending", waiting_for="group_paused")

    out = ok(jobforge(api.url, "group", "show", name))
    assert field_line(out, "Group") == name
    assert field_line(out, "Paused") == "yes"
    assert field_line(out, "Max parallel") == "none"

    def listed_paused() -> bool:  # the list is cached METRICS_CACHE_MS
        listed = ok(jobforge(api.url, "group", "list")).splitlines()
        return [line.split()[:2] for line in listed if line.split()[0] == name] == [
            [name, "paused"]
        ]

    wait_until(
        lambda: any(g["group"] == name and g["paused"] for g in read(api, "/api/groups")),
        timeout=30,
        what="the group listed as paused",
    )
    assert listed_paused()

    assert ok(jobforge(api.url, "group", "resume", name)) == f"resumed group {name}\n"
    assert field_line(ok(jobforge(api.url, "group", "show", name)), "Paused") == "no"
    api.wait_status(held, "completed")
    wait_until(
        lambda: read(api, f"/api/groups/{name}")["counts"].get("completed") == 1,
        timeout=30,
        what="the group to count its completed job",
    )
    assert shown(api, "group", "show", name)["counts"].get("completed") == 1


def test_group_set_max_parallel_and_weight_then_no_max_parallel(api: Api, name: str) -> None:
    line = ok(jobforge(api.url, "group", "set", name, "--max-parallel", "2", "--weight", "3"))
    assert line.split()[:4] == [name, "active", "max_parallel=2", "weight=3"]
    out = ok(jobforge(api.url, "group", "show", name))
    assert (field_line(out, "Max parallel"), field_line(out, "Weight")) == ("2", "3")

    line = ok(jobforge(api.url, "group", "set", name, "--no-max-parallel"))
    assert line.split()[:4] == [name, "active", "max_parallel=none", "weight=3"]
    group = shown(api, "group", "show", name)
    assert (group["group"], group["max_parallel"], group["weight"]) == (name, None, 3)


def test_group_retry_failed_requeues_its_quarantined_job(
    api: Api, name: str, job_type: str, failing: list[str]
) -> None:
    job_id = ok(
        jobforge(api.url, "submit", job_type, *failing, "--group", name, "--max-attempts", "1")
    ).strip()
    api.wait_status(job_id, "quarantined")
    # Retry-failed takes the jobs the group's list shows quarantined.
    api.wait_listed(job_id, "quarantined", group=name)

    assert ok(jobforge(api.url, "group", "retry-failed", name)) == f"requeued {job_id}\n"

    job = job_when(api, job_id, status="quarantined", attempts=2)
    assert len(job["fail_history"]) == 2


def test_group_cancel_cancels_its_waiting_jobs_and_says_which(api: Api, name: str) -> None:
    ok(jobforge(api.url, "group", "pause", name))
    ids = {ok(jobforge(api.url, "submit", REGISTERED_TYPE, "--group", name)).strip() for _ in "ab"}
    for job_id in ids:
        job_when(api, job_id, waiting_for="group_paused")

    out = ok(jobforge(api.url, "group", "cancel", name))

    assert sorted(out.splitlines()) == sorted(f"cancelled {job_id}" for job_id in ids)
    for job_id in ids:
        assert api.job(job_id)["fail_reason"] == "cancelled"
    assert ok(jobforge(api.url, "group", "cancel", name)) == f"group {name}: no jobs to cancel\n"


def test_pool_set_capacity_then_show_and_list(api: Api, name: str) -> None:
    line = ok(jobforge(api.url, "pool", "set", name, "--capacity", "3"))
    assert line == f"{name}  capacity=3 in_use=0 pending=0 running=0\n"

    out = ok(jobforge(api.url, "pool", "show", name))

    assert field_line(out, "Pool") == name
    assert (field_line(out, "Capacity"), field_line(out, "In use")) == ("3", "0")
    assert field_line(out, "Aging") == "none (priority is exact)"
    assert shown(api, "pool", "show", name) == {
        "pool": name,
        "capacity": 3,
        "aging_step_s": None,
        "in_use": 0,
        "pending": 0,
        "running": 0,
        "counts": {"pending": 0, "assigned": 0, "running": 0, "stop_requested": 0},
    }
    assert field_line(out, "Jobs") == "no jobs"
    wait_until(lambda: any(p["pool"] == name for p in read(api, "/api/pools")), timeout=30)
    assert line in ok(jobforge(api.url, "pool", "list"))

    aged = ok(jobforge(api.url, "pool", "set", name, "--capacity", "3", "--aging-step", "30"))
    assert aged == f"{name}  capacity=3 in_use=0 pending=0 running=0 aging_step_s=30\n"
    out = ok(jobforge(api.url, "pool", "show", name))
    assert field_line(out, "Aging") == "a priority point per 30 s"
    # Left out, the aging stays; --no-aging ends it.
    assert ok(jobforge(api.url, "pool", "set", name, "--capacity", "4")).endswith(
        " aging_step_s=30\n"
    )
    line = ok(jobforge(api.url, "pool", "set", name, "--capacity", "4", "--no-aging"))
    assert line == f"{name}  capacity=4 in_use=0 pending=0 running=0\n"


def test_target_show_names_the_halting_job_and_resume_retries_or_skips_it(
    api: Api, name: str, job_type: str, failing: list[str]
) -> None:
    target = f"tenant/{name}"
    # The job fails, which halts its target.
    job_id = ok(jobforge(api.url, "submit", job_type, *failing, "--target", target)).strip()
    api.wait_status(job_id, "quarantined")
    wait_until(lambda: read(api, target_path(target))["halted"], timeout=30, what="the halt")

    out = ok(jobforge(api.url, "target", "show", target))
    assert field_line(out, "Target") == target
    assert field_line(out, "Halted") == f"yes, by {job_id}"

    resumed = ok(jobforge(api.url, "target", "resume", target))
    assert resumed == f"resumed target {target}, retrying {job_id}\n"
    job_when(api, job_id, status="quarantined", attempts=2)
    wait_until(
        lambda: read(api, target_path(target))["halted_by"] == job_id,
        timeout=30,
        what="the retried job to halt the target again",
    )
    assert shown(api, "target", "show", target)["halted_by"] == job_id

    resumed = ok(jobforge(api.url, "target", "resume", target, "--skip"))
    assert resumed == f"resumed target {target}, skipping {job_id}\n"
    idle = {
        "target": target,
        "halted": False,
        "halted_by": None,
        "running": 0,
        "pending": 0,
        "counts": {"pending": 0, "assigned": 0, "running": 0, "stop_requested": 0},
    }
    # The counts read visibility, which shows the job's last transition a moment later.
    wait_until(
        lambda: shown(api, "target", "show", target) == idle, timeout=30, what="an idle target"
    )
    assert ok(jobforge(api.url, "target", "resume", target)) == f"target {target} was not halted\n"


@pytest.fixture(scope="module")
def unheld(start_api: Callable[..., Api]) -> Iterator[Api]:
    """An API whose quarantined jobs close at once (nothing can re-queue them)."""
    api = start_api(JOB_REQUEUE_HOLD_S="0")
    yield api
    api.proc.stop(timeout=15)


def test_resume_of_a_target_whose_halting_job_has_closed_says_to_skip_it(
    unheld: Api, name: str, job_type: str, failing: list[str]
) -> None:
    job_id = ok(jobforge(unheld.url, "submit", job_type, *failing, "--target", name)).strip()
    unheld.wait_status(job_id, "quarantined")
    wait_until(
        lambda: shown(unheld, "target", "show", name)["halted_by"] == job_id,
        timeout=30,
        what="the halt",
    )

    line = one_error_line(jobforge(unheld.url, "target", "resume", name))

    assert line.startswith("error: HTTP 409: "), line
    assert line.endswith(f"(jobforge target resume {name} --skip)"), line
    skipped = ok(jobforge(unheld.url, "target", "resume", name, "--skip"))
    assert skipped == f"resumed target {name}, skipping {job_id}\n"


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (
            ["submit", REGISTERED_TYPE, "--pool", "p", "--cost", "0"],
            "cost_units: .* \\(set by --cost\\)$",
        ),
        (
            ["submit", REGISTERED_TYPE, "--cost", "2"],
            "cost_units: .*needs a pool.* \\(set by --cost\\)$",
        ),
        (
            ["submit", REGISTERED_TYPE, "--start-at", "2030-01-01T00:00:00"],
            "earliest_start_at: .*no zone.* \\(set by --start-at\\)$",
        ),
        (["submit", REGISTERED_TYPE, "--deadline", "1000"], "deadline_at: .*--deadline\\)$"),
        (["pool", "set", "p", "--capacity", "-1"], "capacity: "),
        (["pool", "set", "p", "--capacity", "1", "--aging-step", "0"], "aging_step_s: "),
        (["group", "set", "g", "--max-parallel", "0"], "max_parallel: "),
        (["group", "show", "cli-never-used"], "group cli-never-used not found"),
        (["target", "show", "cli-never-used"], "target cli-never-used not found"),
        (["target", "resume", "cli-never-used"], "target cli-never-used not found"),
        (["pool", "show", "cli-never-used"], "pool cli-never-used not found"),
    ],
    ids=[
        "cost-0",
        "cost-without-pool",
        "start-without-zone",
        "old-deadline",
        "capacity",
        "aging-step",
        "max-parallel",
        "unknown-group",
        "unknown-target",
        "resume-unknown-target",
        "unknown-pool",
    ],
)
def test_a_value_the_api_refuses_is_one_line_naming_it_and_exit_1(
    api: Api, args: list[str], named: str
) -> None:
    result = jobforge(api.url, *args)

    assert result.returncode == 1
    line = one_error_line(result)
    assert re.match(r"error: HTTP (404|422): ", line), line
    assert re.search(named, line), line


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["group", "set", "g"], "nothing to set"),
        (["group", "set", "g", "--max-parallel", "2", "--no-max-parallel"], "not both"),
    ],
    ids=["nothing", "both"],
)
def test_a_group_set_refused_before_any_call_is_one_line_and_exit_2(
    args: list[str], says: str
) -> None:
    result = jobforge("http://unused", *args)

    assert result.returncode == 2
    assert says in one_error_line(result)


@pytest.mark.parametrize(
    "command",
    [[], ["group"], ["group", "set"], ["target", "resume"]],
    ids=lambda command: " ".join(command) or "jobforge",
)
def test_help_names_values_by_metavar_and_groups_state_the_exit_codes(
    command: list[str],
) -> None:
    out = ok(jobforge("http://unused", *command, "--help"))

    assert not re.search(r"<\w+>|\{\w+\}", out), out
    if len(command) < 2:
        assert "Exit codes: 0 done; 1 the API refused" in " ".join(out.split()), out
    if command == ["group", "set"]:
        assert re.search(r"--max-parallel\s+N\s", out), out
        assert re.search(r"--weight\s+W\s", out), out
