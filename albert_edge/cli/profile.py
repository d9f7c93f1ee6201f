"""`albert-edge profile`."""

from __future__ import annotations

COMMANDS: list = []
