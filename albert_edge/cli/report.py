"""`albert-edge report`."""

from __future__ import annotations

COMMANDS: list = []
