"""Host telemetry for the registry heartbeat (native workers and agents): CPU, memory,
free disk, load, running jobs and the jobforge version, read from /proc, statvfs and
getloadavg (no psutil: it is not a dependency). Linux is the target; elsewhere a field
that cannot be read is None.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from workflows.host_models import HostInfo

PROC = Path("/proc")


def jobforge_version() -> str | None:
    """The installed jobforge distribution's version."""
    try:
        return version("jobforge")
    except PackageNotFoundError:
        return None


def cpu_times(proc: Path = PROC) -> tuple[int, int] | None:
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat's `cpu` line."""
    try:
        with (proc / "stat").open() as stat:
            fields = stat.readline().split()
        # user nice system idle iowait irq softirq steal; guest time is in user already.
        ticks = [int(v) for v in fields[1:9]]
    except (OSError, ValueError):
        return None
    if fields[:1] != ["cpu"] or len(ticks) < 4:
        return None
    total = sum(ticks)
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return total - idle, total


def memory(proc: Path = PROC) -> tuple[int, int] | None:
    """(used, total) bytes: used is MemTotal minus MemAvailable, as `free` counts it."""
    values: dict[str, int] = {}
    try:
        with (proc / "meminfo").open() as meminfo:
            for line in meminfo:
                key, _, rest = line.partition(":")
                if key in ("MemTotal", "MemAvailable"):
                    values[key] = int(rest.split()[0]) * 1024  # always kB
    except (OSError, ValueError, IndexError):
        return None
    if len(values) < 2:
        return None
    total = values["MemTotal"]
    return max(total - values["MemAvailable"], 0), total


def disk_free(path: Path) -> int | None:
    """Bytes free to this user on the filesystem of `path` (or of its nearest existing
    parent: a solver cache is created on first use)."""
    for candidate in (path, *path.parents):
        try:
            st = os.statvfs(candidate)
        except FileNotFoundError:
            continue
        except OSError:
            return None
        return st.f_bavail * st.f_frsize
    return None


def load_average() -> tuple[float, float, float] | None:
    """The 1, 5 and 15 minute load averages."""
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return None
    return round(one, 2), round(five, 2), round(fifteen, 2)


class HostSampler:
    """Samples the host; CPU % is over the time since the previous sample (the first
    over the time since the sampler was made)."""

    def __init__(self, disk_dir: Path, running_jobs: Callable[[], int], proc: Path = PROC) -> None:
        self._disk_dir = disk_dir
        self._running_jobs = running_jobs
        self._proc = proc
        self._version = jobforge_version()
        self._cpu = cpu_times(proc)

    def _cpu_percent(self) -> float | None:
        now, before = cpu_times(self._proc), self._cpu
        self._cpu = now
        if now is None or before is None or now[1] <= before[1]:
            return None
        busy = (now[0] - before[0]) / (now[1] - before[1])
        return round(min(max(busy * 100, 0.0), 100.0), 1)

    def sample(self) -> HostInfo:
        """One sample (cheap: a few small /proc reads and syscalls)."""
        mem = memory(self._proc)
        return HostInfo(
            cpu_percent=self._cpu_percent(),
            mem_used_bytes=mem[0] if mem else None,
            mem_total_bytes=mem[1] if mem else None,
            disk_free_bytes=disk_free(self._disk_dir),
            load_avg=load_average(),
            running_jobs=self._running_jobs(),
            version=self._version,
        )
