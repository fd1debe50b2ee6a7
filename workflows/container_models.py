"""A container job's spec (`JobSpec.container`) and the pure checks on it that the API
(at submit, a 422 naming the field) and the workers (before a run) both apply.

Stdlib and pydantic only, like workflows/models.py: no I/O, no environment; the
allowed volume prefixes and image globs are passed in by each process's settings.
"""

from __future__ import annotations

import fnmatch
import json
import posixpath
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

# An image reference: registry/name:tag or @digest. It never starts with `-`, so the
# runtime cannot read it as an option.
IMAGE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}$"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
# The job's params reach the container in this variable.
PARAMS_ENV = "JOBFORGE_PARAMS"
PATH_MAX_LEN = 1024
ARG_MAX_LEN = 16 * 1024
CPUS_LIMIT = 1024.0
MEMORY_MB_LIMIT = 16 * 1024 * 1024


class ContainerVolume(BaseModel):
    """A host directory mounted into the container."""

    model_config = ConfigDict(extra="forbid")

    source: Annotated[str, Field(min_length=1, max_length=PATH_MAX_LEN)]
    target: Annotated[str, Field(min_length=1, max_length=PATH_MAX_LEN)]
    read_only: Annotated[bool, Field(strict=True)] = False


class ContainerSpec(BaseModel):
    """What a container job runs: an image, its command, env, volumes, limits."""

    model_config = ConfigDict(extra="forbid")

    image: Annotated[str, Field(pattern=IMAGE_PATTERN)]
    command: Annotated[
        list[Annotated[str, Field(max_length=ARG_MAX_LEN)]],
        Field(max_length=256, description="Argv after the image; empty: the image's own"),
    ] = Field(default_factory=list)
    env: Annotated[
        dict[
            Annotated[str, Field(pattern=ENV_NAME_PATTERN)],
            Annotated[str, Field(max_length=ARG_MAX_LEN)],
        ],
        Field(max_length=256),
    ] = Field(default_factory=dict)
    volumes: Annotated[list[ContainerVolume], Field(max_length=64)] = Field(default_factory=list)
    workdir: Annotated[str | None, Field(max_length=PATH_MAX_LEN)] = None
    memory_mb: Annotated[
        int | None,
        Field(strict=True, ge=4, le=MEMORY_MB_LIMIT, description="Default CONTAINER_MEMORY_MB"),
    ] = None
    cpus: Annotated[
        float | None,
        Field(strict=True, gt=0, le=CPUS_LIMIT, description="Default CONTAINER_CPUS"),
    ] = None


def _path_problem(path: str) -> str | None:
    """Why a path cannot be a mount point or source: it must be absolute and normal
    (no `.`, `..` or `//`, so a prefix check cannot be walked around) and hold no `:`
    or `,` (the runtime's volume syntax) or control characters."""
    if not path.startswith("/"):
        return "must be an absolute path"
    if posixpath.normpath(path) != path or path.startswith("//"):
        return "must be a normalised path (no '.', '..', '//' or trailing '/')"
    if any(ch in path for ch in ":,") or any(ord(ch) < 32 or ord(ch) == 127 for ch in path):
        return "must not contain ':', ',' or control characters"
    return None


def under_prefix(path: str, prefix: str) -> bool:
    """Whether `path` is `prefix` or inside it (by path components, not characters)."""
    prefix = prefix.rstrip("/") or "/"
    return prefix == "/" or path == prefix or path.startswith(prefix + "/")


def container_problem(
    spec: ContainerSpec, volume_prefixes: list[str], image_allow: list[str]
) -> tuple[str, str] | None:
    """The first field of `spec` this policy refuses, and why; None if it passes.

    A volume's source must lie under one of `volume_prefixes` (none: no volumes at all);
    with `image_allow` set, the image must match one of its globs.
    """
    if image_allow and not any(fnmatch.fnmatchcase(spec.image, g) for g in image_allow):
        return "container.image", f"{spec.image!r} is not allowed (CONTAINER_IMAGE_ALLOW)"
    if spec.workdir is not None and (problem := _path_problem(spec.workdir)):
        return "container.workdir", problem
    if PARAMS_ENV in spec.env:
        return f"container.env.{PARAMS_ENV}", "is set by jobforge from the job's params"
    for index, volume in enumerate(spec.volumes):
        where = f"container.volumes[{index}]"
        if problem := _path_problem(volume.source):
            return f"{where}.source", problem
        if problem := _path_problem(volume.target):
            return f"{where}.target", problem
        if not any(under_prefix(volume.source, prefix) for prefix in volume_prefixes):
            allowed = ", ".join(volume_prefixes) or "none"
            return (
                f"{where}.source",
                f"{volume.source} is not under an allowed prefix (CONTAINER_VOLUME_PREFIXES: "
                f"{allowed})",
            )
    return None


def split_list(value: Any) -> Any:
    """A list setting given as `["a","b"]` or `a,b`; an empty string is an empty list."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if not text:
        return []
    if text.startswith("["):
        return json.loads(text)
    return [part.strip() for part in text.split(",") if part.strip()]
