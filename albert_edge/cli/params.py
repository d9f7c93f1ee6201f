"""`albert-edge` commands: params."""

from __future__ import annotations

COMMANDS: list = []
