"""The container policy and command line as pure functions: what the API refuses at
submit and the workers refuse before a run, and the options a run is given (the
process-level tests with real containers are in test_containers.py)."""

from __future__ import annotations

import itertools

import pytest
from pydantic import ValidationError

from activities.container import ContainerRuntime
from workflows.container_models import ContainerSpec, container_problem, under_prefix
from workflows.models import AttemptInput, JobSpec

IMAGE = "localhost/jobforge-test:1"


def spec(**extra: object) -> ContainerSpec:
    return ContainerSpec.model_validate({"image": IMAGE, **extra})


@pytest.mark.parametrize(
    ("path", "prefix", "inside"),
    [
        ("/srv/a", "/srv/a", True),
        ("/srv/a/b", "/srv/a", True),
        ("/srv/a/b", "/srv/a/", True),
        ("/srv/ab", "/srv/a", False),
        ("/srv", "/srv/a", False),
        ("/anything", "/", True),
    ],
)
def test_a_prefix_admits_itself_and_what_is_under_it_by_path_components(
    path: str, prefix: str, inside: bool
) -> None:
    assert under_prefix(path, prefix) is inside


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        (
            {"volumes": [{"source": "/srv/data/../etc", "target": "/x"}]},
            "container.volumes[0].source",
        ),
        ({"volumes": [{"source": "/srv/data/", "target": "/x"}]}, "container.volumes[0].source"),
        (
            {"volumes": [{"source": "/srv/data:/etc", "target": "/x"}]},
            "container.volumes[0].source",
        ),
        ({"volumes": [{"source": "/srv/data", "target": "/x,ro"}]}, "container.volumes[0].target"),
        ({"volumes": [{"source": "/etc", "target": "/x"}]}, "container.volumes[0].source"),
        ({"workdir": "relative"}, "container.workdir"),
        ({"env": {"JOBFORGE_PARAMS": "x"}}, "container.env.JOBFORGE_PARAMS"),
        ({"image": "docker.io/library/busybox:1"}, "container.image"),
    ],
)
def test_the_policy_names_the_first_refused_field(extra: dict[str, object], field: str) -> None:
    problem = container_problem(spec(**extra), ["/srv/data"], ["localhost/jobforge-*"])
    assert problem is not None and problem[0] == field


def test_no_prefixes_means_no_volumes_and_no_globs_means_any_image() -> None:
    volume = {"source": "/srv/data", "target": "/x"}
    assert container_problem(spec(volumes=[volume]), [], [])[0] == (  # type: ignore[index]
        "container.volumes[0].source"
    )
    assert container_problem(spec(image="any/image:1"), [], []) is None
    assert container_problem(spec(volumes=[volume]), ["/srv/data"], []) is None


@pytest.mark.parametrize(
    "container",
    [
        {"image": "--privileged"},
        {"image": IMAGE, "privileged": True},
        {"image": IMAGE, "network": "host"},
        {"image": IMAGE, "cap_add": ["SYS_ADMIN"]},
        {"image": IMAGE, "env": {"A=B": "x"}},
        {"image": IMAGE, "memory_mb": "64"},
    ],
)
def test_a_spec_cannot_ask_for_privileges_or_smuggle_options(container: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        JobSpec.model_validate({"type": "t", "container": container})


def test_a_job_runs_a_container_or_a_solver_not_both() -> None:
    with pytest.raises(ValidationError, match="not both"):
        JobSpec.model_validate(
            {
                "type": "t",
                "solver_url": "https://example.org/s",
                "solver_checksum": "0" * 64,
                "container": {"image": IMAGE},
            }
        )


def test_the_run_command_carries_labels_limits_env_params_and_volumes_only() -> None:
    runtime = ContainerRuntime("podman", ("--runtime", "runc"), memory_mb=512, cpus=1.5)
    job = AttemptInput(
        type="t",
        params={"n": 1},
        max_runtime_ms=1000,
        job_id="j1",
        attempt=2,
        container=spec(
            command=["/bin/sh", "-c", "echo"],
            env={"A": "b c"},
            volumes=[{"source": "/srv/in", "target": "/in", "read_only": True}],
            workdir="/in",
            cpus=0.5,
        ),
    )
    argv = runtime.run_argv(job, "j1", 2, "w-1")
    assert argv[:4] == ["podman", "--runtime", "runc", "run"]
    assert argv[-4:] == [IMAGE, "/bin/sh", "-c", "echo"]
    pairs = list(itertools.pairwise(argv[4:-4]))
    for pair in [
        ("--name", "jobforge-j1-2"),
        ("--label", "jobforge.job=j1"),
        ("--label", "jobforge.attempt=2"),
        ("--label", "jobforge.worker=w-1"),
        ("--memory", "512m"),  # the worker's default
        ("--cpus", "0.5"),  # the job's own
        ("--env", "A=b c"),
        ("--env", 'JOBFORGE_PARAMS={"n":1}'),
        ("--volume", "/srv/in:/in:ro"),
        ("--workdir", "/in"),
    ]:
        assert pair in pairs, pair
    assert "--rm" in argv
    joined = " ".join(argv)
    for forbidden in ("--privileged", "--network", "--net", "--cap-add", "--pid", "--ipc"):
        assert forbidden not in joined
