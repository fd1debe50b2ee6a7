"""docker-compose.yml and the Dockerfile, checked without a Docker engine.

`docker-compose config` (Debian's docker-compose package; `make debian-tools`
installs it) validates the file against the compose schema and resolves it. The rest
is read in Python: every pulled image is pinned to a version, every variable given to
a jobforge container is one a jobforge settings class reads (found by introspecting
the classes, not listed by hand), and the start order cannot loop.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import re
import shutil
import subprocess
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import AliasChoices
from pydantic_settings import BaseSettings

from engine.log_settings import LogSettings
from tests.conftest import ROOT
from worker.devserver import DYNAMIC_CONFIG

COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
PACKAGES = ("workflows", "engine", "activities", "api", "worker")
# A version with at least major.minor (`16` or `latest` would move under the stack), or
# one of MinIO's dated releases (`RELEASE.2025-04-22T22-12-26Z`).
PINNED_TAG = re.compile(r"^(v?\d+\.\d+[\w.-]*|RELEASE\.\d{4}-\d\d-\d\dT\d\d-\d\d-\d\dZ)$")
# What the stack needs from whoever starts it.
SECRETS = {"FORGE_INGEST_SECRET": "s3cret", "MINIO_ROOT_PASSWORD": "m1nio-s3cret"}


def compose() -> dict[str, Any]:
    """docker-compose.yml as YAML (anchors and merge keys resolved)."""
    data: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text())
    return data


def services() -> dict[str, dict[str, Any]]:
    """Its services by name."""
    found: dict[str, dict[str, Any]] = compose()["services"]
    return found


def jobforge_services() -> dict[str, dict[str, Any]]:
    """The services that run the jobforge image (built from the Dockerfile)."""
    return {name: svc for name, svc in services().items() if "build" in svc}


def project() -> dict[str, Any]:
    """pyproject.toml's [project] table."""
    table: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return table


def environment_names(service: dict[str, Any]) -> set[str]:
    """The variables a service is given (mapping or `KEY=value` list form)."""
    env = service.get("environment") or {}
    if isinstance(env, dict):
        return set(env)
    return {entry.split("=", 1)[0] for entry in env}


@cache
def settings_classes() -> tuple[type[BaseSettings], ...]:
    """Every pydantic-settings class defined in jobforge's packages."""
    for package in PACKAGES:
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, f"{package}."):
            importlib.import_module(info.name)
    found: list[type[BaseSettings]] = []
    pending: list[type[BaseSettings]] = [BaseSettings]
    while pending:
        for sub in pending.pop().__subclasses__():
            pending.append(sub)
            if sub.__module__.split(".")[0] in PACKAGES:
                found.append(sub)
    return tuple(found)


def env_names_read_by(cls: type[BaseSettings]) -> set[str]:
    """The environment variables one settings class reads: a field's validation alias
    (every choice) or alias if it has one, else the class's env prefix plus its name."""
    prefix = str(cls.model_config.get("env_prefix", ""))
    names: set[str] = set()
    for name, field in cls.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseSettings):
            continue  # a nested settings object reads its own variables
        alias = field.validation_alias
        if isinstance(alias, str):
            names.add(alias)
        elif isinstance(alias, AliasChoices):
            names |= {choice for choice in alias.choices if isinstance(choice, str)}
        elif field.alias:
            names.add(field.alias)
        else:
            names.add(prefix + name)
    # pydantic-settings matches names case-insensitively unless told otherwise.
    return {n.upper() for n in names} if not cls.model_config.get("case_sensitive") else names


@cache
def env_names_jobforge_reads() -> frozenset[str]:
    """Every variable any jobforge settings class reads."""
    return frozenset().union(*(env_names_read_by(cls) for cls in settings_classes()))


# -- the compose tool ---------------------------------------------------------------


def compose_command() -> list[str]:
    """docker-compose (v1, from Debian), or the `docker compose` plugin if that is here."""
    if found := shutil.which("docker-compose"):
        return [found]
    docker = shutil.which("docker")
    if (
        docker
        and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0
    ):
        return [docker, "compose"]
    pytest.skip(
        "neither docker-compose nor the docker compose plugin is installed, and `make "
        "debian-tools` could not install it (not root, or no apt): compose file not validated"
    )


def run_config(
    compose_file: Path, *, quiet: bool = True, **env: str
) -> subprocess.CompletedProcess[str]:
    """`<compose> -f FILE config -q` in the repo, with `env` on top of a clean environment
    (no TEMPORAL_* or secrets leaking in from the caller); without `-q` when not `quiet`
    (it prints the file resolved)."""
    base = {key: value for key, value in os.environ.items() if key in {"PATH", "HOME", "LANG"}}
    return subprocess.run(
        [
            *compose_command(),
            "-f",
            str(compose_file),
            "--project-directory",
            str(ROOT),
            "config",
            *(["-q"] if quiet else []),
        ],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def resolved() -> dict[str, Any]:
    """The file as the compose tool resolves it (variables in, merge keys merged)."""
    result = run_config(COMPOSE_FILE, quiet=False, **SECRETS)
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = yaml.safe_load(result.stdout)
    return data


@pytest.mark.process  # the compose tool (tests/tiers.py)
def test_the_compose_tool_accepts_the_file() -> None:
    result = run_config(COMPOSE_FILE, **SECRETS)
    assert result.returncode == 0, result.stderr


@pytest.mark.process  # the compose tool (tests/tiers.py)
def test_the_compose_tool_rejects_a_file_with_an_unknown_key(tmp_path: Path) -> None:
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(
        COMPOSE_FILE.read_text().replace("    deploy:\n", "    deploi:\n", 1), encoding="utf-8"
    )
    result = run_config(broken, **SECRETS)
    assert result.returncode != 0
    assert "deploi" in result.stderr


@pytest.mark.parametrize("secret", sorted(SECRETS))
@pytest.mark.process  # the compose tool (tests/tiers.py)
def test_the_stack_refuses_to_start_without_its_secrets(secret: str) -> None:
    result = run_config(COMPOSE_FILE, **{k: v for k, v in SECRETS.items() if k != secret})
    assert result.returncode != 0
    assert secret in result.stderr


# -- images -------------------------------------------------------------------------


def test_every_pulled_image_is_pinned_to_a_version() -> None:
    unpinned = {}
    for name, svc in services().items():
        if "build" in svc:
            continue
        image = svc.get("image", "")
        _, _, tag = image.rpartition(":")
        if "@sha256:" not in image and (":" not in image or not PINNED_TAG.match(tag)):
            unpinned[name] = image
    assert not unpinned


def test_the_jobforge_image_is_built_here_and_tagged_with_the_package_version() -> None:
    built = jobforge_services()
    assert set(built) == {"setup", "api", "worker"}
    for svc in built.values():
        assert svc["build"] == "."
        assert svc["image"] == f"jobforge:{project()['version']}"


def test_the_dockerfile_pins_its_base_and_installs_the_package_at_build_time() -> None:
    text = DOCKERFILE.read_text()
    bases = re.findall(r"^FROM\s+(\S+)", text, flags=re.MULTILINE)
    assert bases
    assert all(re.fullmatch(r"python:3\.11\.\d+-slim-\w+", base) for base in bases), bases
    assert re.search(r"^RUN .*pip install \.$", text, flags=re.MULTILINE)
    runtime = text.split("ENTRYPOINT", 1)[1]
    assert "pip" not in runtime


def test_the_image_runs_jobforge_as_a_non_root_user_with_a_healthcheck() -> None:
    text = DOCKERFILE.read_text()
    users = re.findall(r"^USER\s+(\S+)", text, flags=re.MULTILINE)
    assert users
    assert users[-1] not in {"root", "0"}
    assert re.search(r"^HEALTHCHECK .*\n.*/healthz", text, flags=re.MULTILINE)
    entrypoint = re.search(r"^ENTRYPOINT\s+(.+)$", text, flags=re.MULTILINE)
    assert entrypoint
    assert json.loads(entrypoint.group(1)) == ["jobforge"]
    assert "jobforge" in project()["scripts"]


def test_the_build_context_holds_every_package_the_wheel_needs() -> None:
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    kept = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    assert {"pyproject.toml", "README.md", *PACKAGES} <= kept
    text = DOCKERFILE.read_text()
    for package in PACKAGES:
        assert f"COPY {package} " in text


# -- what the jobforge containers are given -----------------------------------------


def test_the_settings_introspection_finds_the_known_variables() -> None:
    names = {cls.__name__ for cls in settings_classes()}
    assert {
        "TemporalSettings",
        "ApiSettings",
        "WorkerSettings",
        "SolverSettings",
        "SolverUrlSettings",
        "HubSettings",
        "AgentSettings",
    } <= names
    assert {
        "TEMPORAL_ADDRESS",
        "TEMPORAL_TLS_CERT",
        "FORGE_INGEST_SECRET",
        "WORKER_CORES",
        "NODE_ID",
        "SOLVER_CACHE_DIR",
        "SOLVER_URL_SCHEMES",
        "HUB_URL",
        "JOB_POLL_INTERVAL_MS",
    } <= env_names_jobforge_reads()


def test_every_variable_given_to_a_jobforge_container_is_one_jobforge_reads() -> None:
    unread = {
        f"{name}: {var}"
        for name, svc in jobforge_services().items()
        for var in environment_names(svc)
        if var.upper() not in env_names_jobforge_reads()
    }
    assert not unread


def test_every_jobforge_container_knows_where_temporal_is() -> None:
    for name, svc in jobforge_services().items():
        assert svc["environment"]["TEMPORAL_ADDRESS"] == "temporal:7233", name


# -- start order and scaling --------------------------------------------------------


def test_setup_runs_once_and_the_api_and_workers_wait_for_it() -> None:
    svcs = services()
    setup = svcs["setup"]
    assert setup["command"] == ["setup"]
    assert setup["restart"] == "no"
    for name in ("api", "worker"):
        assert svcs[name]["depends_on"]["setup"] == {"condition": "service_completed_successfully"}


def test_no_one_shot_service_restarts_itself() -> None:
    one_shots = {
        dependency
        for svc in services().values()
        for dependency, condition in (svc.get("depends_on") or {}).items()
        if condition.get("condition") == "service_completed_successfully"
    }
    assert one_shots == {"temporal-schema", "temporal-namespace", "setup", "minio-init"}
    for name in one_shots:
        assert services()[name]["restart"] == "no", name


def test_no_service_installs_code_at_start_or_mounts_the_source_tree() -> None:
    for name, svc in services().items():
        command = json.dumps(svc.get("command", "")) + json.dumps(svc.get("entrypoint", ""))
        assert "pip install" not in command, name
        for volume in svc.get("volumes", []):
            assert not str(volume).startswith(".:"), name


def test_two_api_replicas_and_workers_that_scale() -> None:
    svcs = services()
    assert svcs["api"]["deploy"]["replicas"] == 2
    assert svcs["api"]["ports"] == ["8000-8001:8000"]
    worker = svcs["worker"]
    # --scale needs containers without a fixed name or host port.
    assert "container_name" not in worker
    assert "ports" not in worker
    assert all("container_name" not in svc for svc in jobforge_services().values())


def test_every_long_running_service_has_a_healthcheck() -> None:
    svcs = services()
    for name in ("postgresql", "temporal", "minio", "api", "worker"):
        assert svcs[name]["healthcheck"]["test"], name
    assert "/healthz" in " ".join(svcs["api"]["healthcheck"]["test"])
    worker_port = svcs["worker"]["environment"]["WORKER_METRICS_PORT"]
    assert f":{worker_port}/metrics" in " ".join(svcs["worker"]["healthcheck"]["test"])


def test_temporal_gets_the_dynamic_config_the_dev_server_gets() -> None:
    temporal = services()["temporal"]
    mounts = [str(volume).split(":") for volume in temporal["volumes"]]
    [(source, target, _mode)] = mounts
    assert target.endswith("/" + temporal["environment"]["DYNAMIC_CONFIG_FILE_PATH"])
    config = yaml.safe_load((ROOT / source).read_text())
    assert {key: entries[0]["value"] for key, entries in config.items()} == {
        key: json.loads(value) for key, value in DYNAMIC_CONFIG.items()
    }
    assert all(len(entries) == 1 and "constraints" not in entries[0] for entries in config.values())


# -- the shared log store -------------------------------------------------------------


@pytest.mark.process  # the compose tool (tests/tiers.py)
def test_the_api_and_workers_share_one_log_store_the_minio_service_holds() -> None:
    """Both read one LOG_STORE_URL: the bucket minio-init creates, on the minio service,
    with MinIO's own credentials; they start once the bucket exists."""
    svcs = resolved()["services"]
    api, worker = svcs["api"]["environment"], svcs["worker"]["environment"]
    keys = ("LOG_STORE_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")
    assert {k: api[k] for k in keys} == {k: worker[k] for k in keys}
    location = LogSettings(**{k: api[k] for k in keys}).s3_location()
    assert location is not None
    assert location.endpoint == "http://minio:9000"
    minio, init = svcs["minio"], svcs["minio-init"]
    assert minio["command"] == ["server", "/data"]  # the S3 API on its default port 9000
    assert (location.access_key_id, location.secret_access_key) == (
        minio["environment"]["MINIO_ROOT_USER"],
        SECRETS["MINIO_ROOT_PASSWORD"],
    )
    assert location.bucket == init["environment"]["LOG_BUCKET"]
    script = init["command"][0]
    assert (
        "http://minio:9000" in script
        and 'mc mb --ignore-existing "jobforge/$$LOG_BUCKET"' in script
    )
    assert init["depends_on"]["minio"] == {"condition": "service_healthy"}
    for name in ("api", "worker"):
        assert svcs[name]["depends_on"]["minio-init"] == {
            "condition": "service_completed_successfully"
        }
    # The bucket outlives the container; no host port reaches it.
    assert [str(v).split(":")[1] for v in services()["minio"]["volumes"]] == ["/data"]
    assert "ports" not in services()["minio"]
