"""Terminal output shared by the commands: tables for people, JSON for machines."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import click
from rich.console import Console
from rich.table import Table

# Pipes and CI logs get a fixed, wide layout instead of rich's 80-column fallback. Markup is off:
# what is printed is text (file names, messages, labels, a user's own words), and rich would take
# "[tflite]" in an install line (errors.install_line) for a style and drop it, or fail on "[/x]". A
# line that styles itself passes markup=True and escapes what it interpolates (rich.markup.escape).
console = Console(width=None if sys.stdout.isatty() else 120, markup=False)
err_console = Console(stderr=True, markup=False)


def print_json(data: Any) -> None:
    """Machine output: plain JSON on stdout, nothing else."""
    click.echo(json.dumps(data, indent=2, default=_jsonable))


@dataclass(frozen=True)
class Column:
    """One column of a printed table. ``number``: right-aligned, never wrapped or cut. ``drop``:
    where a terminal too narrow for the whole table leaves this column out (lowest first); None
    keeps it always."""

    name: str
    number: bool = False
    drop: int | None = None


# A text column is folded down to this many characters at the least before a column is left out.
_TEXT_MIN = 8


def print_table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]],
                right: Sequence[int] = ()) -> None:
    """A table a person can read. ``right`` names the column indices to right-align (numbers):
    those are never cut; a terminal too narrow leaves whole columns out from the right."""
    cols = [Column(c, i in right, drop=len(columns) - i if i else None) for i, c in enumerate(columns)]
    show_table(title, cols, rows)


def show_table(title: str | None, columns: Sequence[Column], rows: Iterable[Sequence[Any]],
               after: Sequence[str] = ()) -> None:
    """Print a table whose figures are always whole. Output that is not a terminal (a pipe, a
    log) gets plain text as wide as the table needs; a terminal gets rich's table, its text
    columns folded and, when even that is too wide, whole columns left out in their ``drop``
    order with a line that names them. ``after``: lines printed below the table."""
    out = console  # looked up here: a test may give the module another console
    cells = [["" if v is None else " ".join(str(v).split("\n")) for v in row] for row in rows]
    if not out.is_terminal:
        out.out(plain_table(title, columns, cells), highlight=False)
        for line in after:
            out.print(line)
        return
    kept = list(range(len(columns)))
    droppable = sorted((i for i, c in enumerate(columns) if c.drop is not None), key=lambda i: columns[i].drop)
    while droppable and _narrowest(title, columns, cells, kept, out) > out.width:
        kept.remove(droppable.pop(0))
    out.print(_rich_table(title, columns, cells, kept))
    for line in after:
        out.print(line)
    left_out = [columns[i].name for i in range(len(columns)) if i not in kept]
    if left_out:
        out.print(f"columns left out to fit {out.width} columns: {', '.join(left_out)} (a wider terminal, or the "
                  "output piped to a file, shows every column)")


def plain_table(title: str | None, columns: Sequence[Column], cells: Sequence[Sequence[str]]) -> str:
    """The table as plain text, each column as wide as its widest cell: nothing is cut or wrapped."""
    widths = [max([len(c.name), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if c.number else v.ljust(w)
                         for v, w, c in zip(values, widths, columns)).rstrip()

    lines = [title] if title else []
    lines += [line([c.name for c in columns]), "  ".join("-" * w for w in widths)]
    lines += [line(row) for row in cells]
    return "\n".join(lines)


def _rich_table(title: str | None, columns: Sequence[Column], cells: Sequence[Sequence[str]], kept: Sequence[int]):
    from rich import box

    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for i in kept:
        c = columns[i]
        table.add_column(c.name, justify="right" if c.number else "left", no_wrap=c.number,
                         overflow="ignore" if c.number else "fold")
    for row in cells:
        table.add_row(*(row[i] for i in kept))
    return table


def _narrowest(title, columns, cells, kept, out: Console) -> int:
    """The least width the table can take with its numbers whole: each text column folded down to
    _TEXT_MIN characters."""
    def short(i: int, text: str) -> str:
        return text if columns[i].number else text[:_TEXT_MIN]

    probe = _rich_table(None, [Column(short(i, c.name), c.number) for i, c in enumerate(columns)],
                        [[short(i, v) for i, v in enumerate(row)] for row in cells], kept)
    return out.measure(probe, options=out.options.update_width(10**6)).maximum


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
