"""What every table of the report is made of: the table itself and the way it writes counts and
bytes."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Table:
    key: str
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    right: tuple[int, ...] = ()  # number columns
    notes: tuple[str, ...] = field(default=())
    chart: str | None = None  # the chart drawn from the same figures
    lead: str | None = None  # one sentence shown above the table
    keep: tuple[int, ...] = ()  # columns a narrow terminal never leaves out (the first is always kept)


def fmt_count(n: float | None) -> str:
    if n is None:
        return ""
    for unit, size in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f}{unit}"
    return str(int(n))


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return ""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"
