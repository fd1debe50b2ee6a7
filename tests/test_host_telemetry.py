"""The host telemetry reader (worker/host_telemetry.py) on a made-up /proc, and on this
machine's."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from worker.host_telemetry import HostSampler, cpu_times, disk_free, memory

MEMINFO = """MemTotal:       16000000 kB
MemFree:         1000000 kB
MemAvailable:   12000000 kB
Buffers:          100000 kB
"""


def fake_proc(root: Path, cpu: str, meminfo: str = MEMINFO) -> Path:
    root.mkdir(exist_ok=True)
    (root / "stat").write_text(f"{cpu}\ncpu0 1 2 3 4\nintr 5\n")
    (root / "meminfo").write_text(meminfo)
    return root


def test_cpu_percent_is_busy_time_over_the_interval_between_samples(tmp_path: Path) -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice
    proc = fake_proc(tmp_path / "proc", "cpu  100 0 100 700 100 0 0 0 50 0")
    sampler = HostSampler(tmp_path, lambda: 3, proc=proc)
    # +300 busy (user 200, system 50, steal 50), +100 idle, +100 iowait; guest ignored.
    fake_proc(proc, "cpu  300 0 150 800 200 0 0 50 999 0")

    info = sampler.sample()

    assert info.cpu_percent == 60.0
    assert info.running_jobs == 3
    assert (info.mem_used_bytes, info.mem_total_bytes) == (4_000_000 * 1024, 16_000_000 * 1024)


def test_no_cpu_time_between_samples_gives_no_cpu_percent(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path / "proc", "cpu  1 2 3 4 5 6 7 8 0 0")
    sampler = HostSampler(tmp_path, lambda: 0, proc=proc)

    assert sampler.sample().cpu_percent is None


def test_unreadable_proc_files_give_none_not_an_error(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path / "proc", "garbage", meminfo="MemTotal: 10 kB\n")

    assert cpu_times(proc) is None
    assert memory(proc) is None
    assert cpu_times(tmp_path / "missing") is None
    info = HostSampler(tmp_path, lambda: 0, proc=tmp_path / "missing").sample()
    assert (info.cpu_percent, info.mem_total_bytes) == (None, None)


def test_disk_free_of_a_dir_not_made_yet_is_its_nearest_parents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Which directory was measured, not two figures compared: the disk's free bytes
    # change between two reads while other processes write.
    measured: list[Path] = []
    real = os.statvfs

    def statvfs(path: Path) -> os.statvfs_result:
        found = real(path)
        measured.append(Path(path))
        return found

    monkeypatch.setattr(os, "statvfs", statvfs)

    assert (disk_free(tmp_path / "cache" / "not" / "yet") or 0) > 0
    assert measured == [tmp_path]


def test_this_hosts_sample_is_complete_and_plausible(tmp_path: Path) -> None:
    sampler = HostSampler(tmp_path, lambda: 1)
    start = cpu_times()
    assert start is not None
    deadline = time.monotonic() + 5
    while cpu_times() == start and time.monotonic() < deadline:
        pass  # until the kernel's counters tick (every 10 ms or so), busy as it may be

    info = sampler.sample()

    assert info.cpu_percent is not None
    assert 0 <= info.cpu_percent <= 100
    assert info.mem_total_bytes is not None
    assert info.mem_used_bytes is not None
    assert 0 < info.mem_used_bytes <= info.mem_total_bytes
    assert info.load_avg is not None
    assert len(info.load_avg) == 3
    assert info.version == "0.1.0"
