"""`albert-edge demo`."""

from __future__ import annotations

COMMANDS: list = []
