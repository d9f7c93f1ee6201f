"""`albert-edge` commands: convert (filled in by its issue)."""

from __future__ import annotations

COMMANDS: list = []
