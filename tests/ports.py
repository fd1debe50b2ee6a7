"""Ports for the servers that tests and benches start.

A port picked by binding port 0 comes from the kernel's ephemeral range, which every
outgoing connection and every server that picks its own port (a Temporal dev server's
HTTP and metrics ports) draws from too, and two picks can even return the same number.
So ports are handed out below that range instead: each test process takes its own block
and walks it, skipping a port something holds. No two test processes share a block.
"""

from __future__ import annotations

import itertools
import os
import re
import socket
from pathlib import Path

LOWEST = 10_000
BLOCK = 2_000
# Blocks kept for xdist's workers gw0…gw3; the rest go to other processes.
XDIST_BLOCKS = 4


def _ephemeral_low() -> int:
    """Where the kernel's ephemeral ports start (32768 by default)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def _block() -> range:
    """This process's block: xdist's worker N takes block N; any other process (a
    bench, a lone pytest) one of the blocks above the workers', by its pid."""
    blocks = max(1, (_ephemeral_low() - LOWEST) // BLOCK)
    worker = re.fullmatch(r"gw(\d+)", os.environ.get("PYTEST_XDIST_WORKER", ""))
    if worker:
        index = int(worker.group(1)) % blocks
    else:
        index = XDIST_BLOCKS + os.getpid() % (blocks - XDIST_BLOCKS) if blocks > XDIST_BLOCKS else 0
    start = LOWEST + index * BLOCK
    return range(start, start + BLOCK)


_next = itertools.cycle(_block())


def _free(port: int) -> bool:
    """Nothing listens on or holds 127.0.0.1:port right now."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port nobody holds, never handed out before by this process (until its block
    wraps round) and never by another test process."""
    for port in itertools.islice(_next, BLOCK):
        if _free(port):
            return port
    raise OSError(f"no free port in {_block()}")
