"""`albert-edge` commands: info."""

from __future__ import annotations

COMMANDS: list = []
