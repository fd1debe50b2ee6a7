"""A container runtime for the container tests and bench, and a busybox image built
without a registry: a rootfs holding the static busybox and a few applet links,
imported as `localhost/jobforge-test:1`.

- `find_runtime()`: podman or docker on PATH (CONTAINER_RUNTIME names one), or None.
- `runtime_env(dir)`: the environment every runtime call gets: a containers.conf with
  no default ulimits (this sandbox refuses them) and, for podman with runc installed,
  `CONTAINER_RUNTIME_ARGS=--runtime runc` (crun fails here: cgroups in hybrid mode).
- `build_image(...)`: the image, imported from a tarball of the rootfs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

IMAGE = "localhost/jobforge-test:1"
BUSYBOX = Path("/bin/busybox")
APPLETS = ("sh", "echo", "cat", "sleep", "printf", "ls", "env", "kill", "true", "touch")
INSTALL_HINT = "apt-get install podman runc busybox-static (make debian-tools does, as root)"


@dataclass(frozen=True)
class Runtime:
    """A container runtime as jobforge's workers will call it."""

    program: str
    args: tuple[str, ...]
    env: dict[str, str]

    def cli(self, *args: str) -> list[str]:
        """A command line of the runtime with its global options."""
        return [self.program, *self.args, *args]

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run the runtime's CLI; its output as text."""
        return subprocess.run(
            self.cli(*args),
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            check=check,
            timeout=120,
        )

    def names(self, label: str) -> list[str]:
        """Names of the containers, running or not, that carry `label` (k or k=v)."""
        out = self.run("ps", "-a", "--filter", f"label={label}", "--format", "{{.Names}}")
        return out.stdout.split()

    @property
    def worker_env(self) -> dict[str, str]:
        """The CONTAINER_* environment of a worker that uses this runtime."""
        return {
            **self.env,
            "CONTAINER_RUNTIME": self.program,
            "CONTAINER_RUNTIME_ARGS": " ".join(self.args),
        }


def find_runtime() -> str | None:
    """The runtime to use: CONTAINER_RUNTIME if set, else podman, else docker."""
    wanted = os.environ.get("CONTAINER_RUNTIME")
    for program in [wanted] if wanted else ["podman", "docker"]:
        if shutil.which(program):
            return program
    return None


def runtime_env(program: str, workdir: Path) -> Runtime:
    """The runtime with the options and config this machine needs."""
    env: dict[str, str] = {}
    args = os.environ.get("CONTAINER_RUNTIME_ARGS")
    if program == "podman":
        conf = workdir / "containers.conf"
        conf.write_text("[containers]\ndefault_ulimits = []\n")
        env["CONTAINERS_CONF"] = str(conf)
        if args is None and shutil.which("runc"):
            args = "--runtime runc"
    return Runtime(program, tuple((args or "").split()), env)


def build_image(runtime: Runtime, workdir: Path, tag: str = IMAGE) -> str:
    """Import a busybox image as `tag` (replacing an older one of that tag)."""
    if not BUSYBOX.exists():
        raise FileNotFoundError(f"{BUSYBOX} is missing: {INSTALL_HINT}")
    rootfs = workdir / "rootfs"
    (rootfs / "bin").mkdir(parents=True, exist_ok=True)
    (rootfs / "tmp").mkdir(exist_ok=True)
    shutil.copy2(BUSYBOX, rootfs / "bin" / "busybox")
    for applet in APPLETS:
        link = rootfs / "bin" / applet
        if not link.is_symlink():
            link.symlink_to("busybox")
    tarball = workdir / "rootfs.tar"
    with tarfile.open(tarball, "w") as tar:
        tar.add(rootfs, arcname=".")
    runtime.run("import", str(tarball), tag)
    return tag
