"""Terminal output shared by the commands: tables for people, JSON for machines."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import click
from rich.console import Console
from rich.table import Table

# Pipes and CI logs get a fixed, wide layout instead of rich's 80-column fallback. Markup is off:
# what is printed is text (file names, messages, labels, a user's own words), and rich would take
# "[tflite]" in "pip install 'albert-edge[tflite]'" for a style and drop it, or fail on "[/x]". A
# line that styles itself passes markup=True and escapes what it interpolates (rich.markup.escape).
console = Console(width=None if sys.stdout.isatty() else 120, markup=False)
err_console = Console(stderr=True, markup=False)


def print_json(data: Any) -> None:
    """Machine output: plain JSON on stdout, nothing else."""
    click.echo(json.dumps(data, indent=2, default=_jsonable))


def print_table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]],
                right: Sequence[int] = ()) -> None:
    """A table a person can read. ``right`` names the column indices to right-align (numbers)."""
    table = Table(title=title, title_justify="left", show_lines=False)
    for i, col in enumerate(columns):
        table.add_column(col, justify="right" if i in right else "left")
    for row in rows:
        table.add_row(*("" if v is None else str(v) for v in row))
    console.print(table)


def progress(**kwargs: Any):
    """A rich progress bar on stderr, so stdout stays clean for --json. Off when stderr is not a
    terminal: a log file gets the command's own lines, not a bar's leftovers."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=err_console, transient=not err_console.is_terminal,
                    disable=not err_console.is_terminal, **kwargs)


def fmt_count(n: float) -> str:
    """12345678 -> '12.35M'."""
    for unit, size in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f}{unit}"
    return str(int(n))


def fmt_bytes(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    return str(obj)
