"""`albert-edge` commands: tokenizer (filled in by its issue)."""

from __future__ import annotations

COMMANDS: list = []
