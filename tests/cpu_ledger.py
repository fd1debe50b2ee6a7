"""Where the suite's CPU goes, test by test: a pytest plugin, on when JOBFORGE_CPU_LEDGER
names a directory (tests/conftest.py loads it; off, it costs nothing).

Each test process (an xdist worker, or pytest itself) appends a line per test to
`<dir>/<worker>.jsonl`: the test's wall time, and the CPU seconds spent during it by the
test process, by the processes it reaped meanwhile (CLI runs, stopped APIs and workers),
and by its live descendants, by kind (the session's Temporal server, APIs, workers,
Chromium...). A test's share is what changed while it ran, so a session process's work
goes to the test that caused it. Each session's dev server also leaves its request
counts (`<worker>.server.json`: gRPC calls and database operations), which say what the
server's share was spent on. `python -m tests.cpu_ledger DIR` sums it up by file and by
kind; `make cpu-ledger` runs the suite that way.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Generator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

TICK = os.sysconf("SC_CLK_TCK")


def _kind(argv: list[str]) -> str:
    """What a process is, from its command line."""
    text = " ".join(argv[:4])
    exe = os.path.basename(argv[0]) if argv else ""
    if exe == "temporal":
        return "temporal"
    if "tests.zygote" in argv:
        return "zygote"  # with its children's that ended: APIs, workers, agents stopped
    if "worker.cli" in text and len(argv) > 3:
        return f"jobforge {argv[3]}"  # python -m worker.cli api|worker|agent|dev
    if exe == "jobforge" or "runforge" in text:
        return "cli"
    if "chrom" in exe or "playwright" in text or exe == "node":
        return "browser"
    if exe in {"podman", "conmon", "crun", "runc"}:
        return "containers"
    return "other"


def _descendants(root: int) -> dict[int, tuple[str, float, int]]:
    """The live processes below `root`: (pid, start) -> (kind, CPU seconds so far,
    its reaped children's included, its parent's pid)."""
    parent: dict[int, int] = {}
    stats: dict[int, tuple[float, str]] = {}  # pid -> (CPU s, start time)
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(name)
        parent[pid] = int(fields[1])
        # Its own CPU and that of the children it reaped (a worker's solver runs, say).
        cpu = sum(int(value) for value in fields[11:15]) / TICK
        stats[pid] = (cpu, fields[19])
    found: dict[int, tuple[str, float, int]] = {}
    for pid in stats:
        up, hops = parent.get(pid, 0), 0
        while up not in (0, 1, root) and hops < 50:
            up, hops = parent.get(up, 0), hops + 1
        if up != root:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = [part.decode(errors="replace") for part in f.read().split(b"\0") if part]
            if "tests.zygote" in argv:  # a zygote's child keeps its cmdline: its name says
                with open(f"/proc/{pid}/comm") as f:
                    comm = f.read().strip()
                if comm.startswith("jf-"):
                    module = "worker.runforge_cli" if comm == "jf-runforge" else "worker.cli"
                    argv = ["python", "-m", module, comm[3:]]
        except OSError:
            continue
        # Keyed by pid and start time: a reused pid is another process.
        found[pid * 10**12 + int(stats[pid][1])] = (_kind(argv), stats[pid][0], parent[pid])
    return found


def _own() -> tuple[float, float]:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


class Ledger:
    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        self.out = (directory / f"{worker}.jsonl").open("a")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None]:
        root = os.getpid()
        start, (me0, kids0), live0 = time.monotonic(), _own(), _descendants(root)
        yield
        (me1, kids1), live1 = _own(), _descendants(root)
        kinds: Counter[str] = Counter()
        for key, (kind, cpu, _) in live1.items():
            kinds[kind] += cpu - live0.get(key, (kind, 0.0, 0))[1]
        kind_of = {key // 10**12: kind for key, (kind, _, _) in live1.items()}
        for key, (_, cpu, parent) in live0.items():
            if key not in live1:
                # Reaped meanwhile: its whole CPU is now its reaper's (in RUSAGE_CHILDREN
                # here, or in a live parent's: the zygote's, a worker's), so its part
                # before the test comes off there.
                kinds["reaped" if parent == root else kind_of.get(parent, "reaped")] -= cpu
        kinds["test process"] += me1 - me0
        kinds["reaped"] += kids1 - kids0
        line = {
            "test": item.nodeid,
            "wall": round(time.monotonic() - start, 3),
            "cpu": {kind: round(cpu, 3) for kind, cpu in kinds.items() if abs(cpu) > 0.0005},
        }
        self.out.write(json.dumps(line) + "\n")
        self.out.flush()


def directory() -> Path | None:
    """Where the ledger goes; None: it is off."""
    where = os.environ.get("JOBFORGE_CPU_LEDGER")
    return Path(where) if where else None


def pytest_configure(config: pytest.Config) -> None:
    where = directory()
    if where:
        config.pluginmanager.register(Ledger(where), "jobforge-cpu-ledger")


# The session dev server's counters the summary sums: its requests by service and
# operation (gRPC calls to the frontend, matching and history) and its database's.
SERVER_COUNTERS = ("service_requests", "persistence_requests")


def keep_server_metrics(where: Path, url: str) -> None:
    """Write the session server's request counts next to the test process's ledger."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    counts: Counter[str] = Counter()
    try:
        text = httpx.get(url, timeout=10).text
    except httpx.HTTPError:
        return
    for family in text_string_to_metric_families(text):
        if family.name not in SERVER_COUNTERS:
            continue
        for sample in family.samples:
            labels = sample.labels
            key = f"{family.name} {labels.get('service_name', '?')} {labels.get('operation', '?')}"
            counts[key] += int(sample.value)
    (where / f"{worker}.server.json").write_text(json.dumps(dict(counts)))


def server_summary(directory: Path, most: int) -> list[str]:
    """The session servers' requests, summed over the test processes."""
    counts: Counter[str] = Counter()
    for path in sorted(directory.glob("*.server.json")):
        counts.update(json.loads(path.read_text()))
    if not counts:
        return []
    rows = [f"the session servers' {most} most frequent requests (counter service operation):"]
    rows += [f"  {count:9d}  {key}" for key, count in counts.most_common(most)]
    return rows


def summary(directory: Path, most: int = 25) -> str:
    """The ledger's totals: by kind, then the files and tests that cost most."""
    by_kind: Counter[str] = Counter()
    by_file: dict[str, Counter[str]] = defaultdict(Counter)
    by_test: Counter[str] = Counter()
    walls: Counter[str] = Counter()
    # What each test process spent in tests, back to back: the run's wall time is
    # bound by the longest of them.
    by_process: Counter[str] = Counter()
    # A test's wall time less the CPU it caused: how long it waited (timers, polls).
    waited: Counter[str] = Counter()
    for path in sorted(directory.glob("*.jsonl")):
        for raw in path.read_text().splitlines():
            line = json.loads(raw)
            cpu = line["cpu"]
            module = line["test"].split("::")[0]
            by_kind.update(cpu)
            by_file[module].update(cpu)
            by_test[line["test"]] += sum(cpu.values())
            walls[module] += line["wall"]
            by_process[path.stem] += line["wall"]
            waited[line["test"]] += line["wall"] - max(sum(cpu.values()), 0.0)
    total = sum(by_kind.values())
    rows = [f"CPU {total:.0f} s in all; by kind:"]
    rows += [f"  {cpu:8.1f} s  {kind}" for kind, cpu in by_kind.most_common()]
    each = ", ".join(f"{name} {wall:.0f}" for name, wall in sorted(by_process.items()))
    rows.append(
        f"tests' wall time {sum(by_process.values()):.0f} s in all; by test process: {each}"
    )
    rows.append(f"the {most} files that cost most (CPU s, test wall s, then its kinds):")
    files = sorted(by_file.items(), key=lambda item: -sum(item[1].values()))
    for module, kinds in files[:most]:
        top = ", ".join(f"{kind} {cpu:.0f}" for kind, cpu in kinds.most_common(3))
        rows.append(f"  {sum(kinds.values()):8.1f} {walls[module]:8.1f}  {module}  ({top})")
    rows.append(f"the {most} tests that cost most (CPU s):")
    rows += [f"  {cpu:8.1f}  {test}" for test, cpu in by_test.most_common(most)]
    rows.append(f"the {most} tests that waited most (wall s less CPU s):")
    rows += [f"  {wait:8.1f}  {test}" for test, wait in waited.most_common(most)]
    rows += server_summary(directory, 2 * most)
    return "\n".join(rows)


if __name__ == "__main__":
    sys.stdout.write(summary(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 25))
    sys.stdout.write("\n")
