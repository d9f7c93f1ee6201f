"""`albert-edge` commands: quantize (filled in by its issue)."""

from __future__ import annotations

COMMANDS: list = []
