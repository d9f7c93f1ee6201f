"""`albert-edge` commands: train (filled in by its issue)."""

from __future__ import annotations

COMMANDS: list = []
