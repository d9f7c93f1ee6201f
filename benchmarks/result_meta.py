"""What every result file says about where its figures come from, besides the machine and the
versions each benchmark reads itself."""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["commit"]


def commit() -> str | None:
    """The checkout's commit (None outside a git checkout)."""
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
