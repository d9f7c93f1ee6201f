"""`albert-edge pipeline`."""

from __future__ import annotations

COMMANDS: list = []
