"""What every benchmark script prints about the code it measured."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT_DIRS = ("workflows", "activities", "api", "worker")


def code_version() -> str:
    """The commit measured, and whether the product code differs from it."""
    git = ["git", "-C", str(ROOT)]
    try:
        sha = subprocess.run(
            [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        status = subprocess.run(
            [*git, "status", "--porcelain", "--", *PRODUCT_DIRS],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return f"{ROOT} (not a git checkout)"
    changed = [line[3:] for line in status.splitlines() if line.strip()]
    if not changed:
        return f"{ROOT} at {sha}, product code as committed"
    shown = ", ".join(changed[:5]) + (", …" if len(changed) > 5 else "")
    return f"{ROOT} at {sha} + {len(changed)} uncommitted change(s) in product dirs: {shown}"
