"""Terminal output shared by the commands: tables for people, JSON for machines."""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import click
from rich.console import Console

# A pipe or a CI log is as wide as COLUMNS says, 100 columns when it says nothing (rich's own
# fallback is 80; a log read in an editor or a CI page takes 100). Markup is off: what is printed is
# text (file names, messages, labels, a user's own words), and rich would take the "[tflite]" of an
# install line (errors.install_line) for a style and drop it, or fail on "[/x]". A line that styles
# itself passes markup=True and escapes what it interpolates (rich.markup.escape).
PIPE_WIDTH = 100


def pipe_width() -> int:
    """The width of output that is not a terminal: COLUMNS when it holds a width, else PIPE_WIDTH."""
    columns = os.environ.get("COLUMNS", "").strip()
    return int(columns) if columns.isdigit() and int(columns) >= 20 else PIPE_WIDTH


console = Console(width=None if sys.stdout.isatty() else pipe_width(), markup=False)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else pipe_width(), markup=False)


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


# A text cell is shortened in the middle down to this many characters at the least (its whole text
# then goes to a legend below the table) before a column is left out.
_TEXT_MIN = 12
_GAP = "  "


def print_table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]],
                right: Sequence[int] = ()) -> None:
    """A table a person can read. ``right`` names the column indices to right-align (numbers):
    those are never cut; a table too wide leaves whole columns out from the right."""
    cols = [Column(c, i in right, drop=len(columns) - i if i else None) for i, c in enumerate(columns)]
    show_table(title, cols, rows)


def show_table(title: str | None, columns: Sequence[Column], rows: Iterable[Sequence[Any]],
               after: Sequence[str] = ()) -> None:
    """Print a table as wide as the output at most (a terminal's width; a pipe or log: COLUMNS,
    else 100) with its figures always whole: long text is shortened in the middle, its whole
    text in a legend below; when even that is too wide, whole columns are left out in their
    ``drop`` order with a line that names them. ``after``: lines printed below the table."""
    out = console  # looked up here: a test may give the module another console
    if not out.is_terminal and out is console:  # COLUMNS as it is now, not as it was at import
        out.width = pipe_width()
    cells = [["" if v is None else " ".join(str(v).split("\n")) for v in row] for row in rows]
    text, legend, left_out = fit_table(title, columns, cells, out.width)
    out.out(text, highlight=False)
    for line in [*after, *legend]:
        out.print(line)
    if left_out:
        out.print(f"columns left out to fit {out.width} columns: {', '.join(left_out)} (a wider terminal, or "
                  "COLUMNS=200 before the command, shows every column)")


def fit_table(title: str | None, columns: Sequence[Column], cells: Sequence[Sequence[str]],
              width: int) -> tuple[str, list[str], list[str]]:
    """The table as plain text at most ``width`` wide, the legend of what it shortened, and the
    names of the columns it left out."""
    kept = list(range(len(columns)))
    droppable = sorted((i for i, c in enumerate(columns) if c.drop is not None), key=lambda i: columns[i].drop)
    natural = [max([len(c.name), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    least = [w if c.number else min(w, max(_TEXT_MIN, len(c.name))) for w, c in zip(natural, columns)]
    # Columns always kept (a verdict, a note) stay whole, and the one that names the row keeps a quarter,
    # while a column can still be left out; then they too are shortened.
    wanted = [natural[i] if c.drop is None and not c.number and i else least[i] for i, c in enumerate(columns)]
    wanted[0] = max(least[0], min(natural[0], width // 4))
    while droppable and _span(wanted, kept) > width:
        kept.remove(droppable.pop(0))
    floor = wanted if _span(wanted, kept) <= width else least
    widths = list(natural)
    text = [i for i in reversed(kept) if not columns[i].number]  # the rightmost first, those left out first
    for i in sorted(text, key=lambda i: (columns[i].drop is None, i == 0)):
        widths[i] = max(floor[i], widths[i] - max(0, _span(widths, kept) - width))
    if floor is not least:  # what the whole kept columns still overflow
        for i in text:
            widths[i] = max(least[i], widths[i] - max(0, _span(widths, kept) - width))
    legend: dict[str, str] = {}
    shown = [[_shorten(row[i], widths[i], legend) for i in kept] for row in cells]
    table = plain_table(None, [columns[i] for i in kept], shown)
    lines = textwrap.wrap(title, width) if title else []
    return "\n".join([*lines, table]), [f"{short} = {whole}" for short, whole in legend.items()], \
        [columns[i].name for i in range(len(columns)) if i not in kept]


def _span(widths: Sequence[int], kept: Sequence[int]) -> int:
    return sum(widths[i] for i in kept) + len(_GAP) * (len(kept) - 1)


def _shorten(text: str, width: int, legend: dict[str, str]) -> str:
    """``text`` in ``width`` characters, noted in ``legend`` when cut: a name (no spaces) keeps its
    start and end around '…' (file names differ at both ends: the model and the scheme), words
    keep their start."""
    if len(text) <= width:
        return text
    head = width // 2 if " " not in text else width - 1
    short = f"{text[:head]}…{text[len(text) - (width - 1 - head):] if width - 1 - head else ''}"
    legend[short] = text
    return short


def plain_table(title: str | None, columns: Sequence[Column], cells: Sequence[Sequence[str]]) -> str:
    """The table as plain text, each column as wide as its widest cell: nothing is cut or wrapped."""
    widths = [max([len(c.name), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]

    def line(values: Sequence[str]) -> str:
        return _GAP.join(v.rjust(w) if c.number else v.ljust(w)
                         for v, w, c in zip(values, widths, columns)).rstrip()

    lines = [title] if title else []
    lines += [line([c.name for c in columns]), _GAP.join("-" * w for w in widths)]
    lines += [line(row) for row in cells]
    return "\n".join(lines)


def progress(**kwargs: Any):
    """A rich progress bar on stderr, so stdout stays clean for --json. Off when stderr is not a
    terminal: a log file gets the command's own lines, not a bar's leftovers."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=err_console, transient=not err_console.is_terminal,
                    disable=not err_console.is_terminal, **kwargs)


def elapsed(seconds: float) -> str:
    """0:41, 12:05, 1:02:09."""
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}" if minutes >= 60 else f"{minutes}:{secs:02d}"


class Steps:
    """Progress of a long command on stderr: a bar on a terminal; in a pipe or a log, one line per
    step with the time since the start, "[pipeline 2/5 convert] 0:41 elapsed", so a log is never
    silent for the minutes a step takes. Call it with the step's words and, when known, the
    steps done and their number. Nothing is printed for the first QUIET_FOR seconds (then the step
    under way, and every step after it): a command done or refused by then, bad input or a failure
    early in the work, prints only its answer or its one line. ALBERT_EDGE_QUIET_FOR (seconds) sets
    another wait."""

    QUIET_FOR = 20.0

    def __init__(self, command: str):
        self.command, self.start, self.last = command, time.monotonic(), None
        self.bar = progress() if err_console.is_terminal else None
        self.held: str | None = None
        self.printed = False
        self.timer: threading.Timer | None = None
        self.lock = threading.Lock()

    def __enter__(self) -> Steps:
        if self.bar is not None:
            self.bar.__enter__()
            self.task = self.bar.add_task(self.command, total=None)
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)
            return
        if self.timer is not None:
            self.timer.cancel()
        with self.lock:
            self.held = None
        if exc[0] is None and self.printed:
            self.line(f"[{self.command} done] {elapsed(time.monotonic() - self.start)} in all")

    def __call__(self, what: str, done: int | None = None, total: int | None = None) -> None:
        if self.bar is not None:
            self.bar.update(self.task, description=what, completed=done or 0, total=total)
            return
        counted = re.search(r"\[(\d+)/(\d+)\] ", what) if done is None else None
        if counted:  # "profiling [2/6] model.onnx ..." from a library's own count
            done, total = int(counted[1]) - 1, int(counted[2])
            what = what[:counted.start()] + what[counted.end():]
        count = f" {min(done + 1, total)}/{total}" if done is not None and total else ""
        if (count, what) == self.last or what == "done":  # (the end has its own line)
            return
        self.last = (count, what)
        step = f"[{self.command}{count} {what}]"
        with self.lock:
            if not self.printed:  # still quiet: the latest step waits for the end of QUIET_FOR
                self.held = step
                if self.timer is None:
                    quiet = _seconds(os.environ.get("ALBERT_EDGE_QUIET_FOR"), self.QUIET_FOR)
                    self.timer = threading.Timer(max(0.0, quiet - (time.monotonic() - self.start)),
                                                 self._release)
                    self.timer.daemon = True
                    self.timer.start()
                return
        self.line(f"{step} {elapsed(time.monotonic() - self.start)} elapsed")

    def _release(self) -> None:
        with self.lock:
            held, self.held = self.held, None
            if held is not None:
                self.printed = True
        if held is not None:
            click.echo(f"{held} {elapsed(time.monotonic() - self.start)} elapsed", err=True)

    def line(self, text: str) -> None:
        self.printed = True
        click.echo(text, err=True)


def _seconds(text: str | None, default: float) -> float:
    try:
        return max(0.0, float(text)) if text else default
    except ValueError:
        return default


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
