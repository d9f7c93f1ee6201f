"""What every table of the report is made of: the table itself and the way it writes counts and
bytes."""

from __future__ import annotations

import math
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


Z95 = 1.959964  # the normal quantile of a two-sided 95% interval


def wilson(rate: float, n: int) -> tuple[float, float]:
    """Wilson's score interval (95%) of a rate counted over ``n`` predictions."""
    z = Z95
    centre = (rate + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)
