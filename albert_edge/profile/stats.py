"""Timing: the stopping rule, latency percentiles and the spread between blocks of timed calls."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from .record import Latency

__all__ = ["time_calls", "latency", "BLOCKS", "SPREAD_WARN"]

BLOCKS = 5  # the timed calls are cut into this many consecutive blocks to see how stable they are
SPREAD_WARN = 0.05  # warn when the block medians differ by more than 5% of their median


def time_calls(call: Callable[[], object], runs: int, min_seconds: float) -> list[float]:
    """Call ``call`` until at least ``runs`` calls AND at least ``min_seconds`` have passed;
    the duration of each call in milliseconds."""
    clock = time.perf_counter_ns
    times: list[int] = []
    deadline = clock() + int(min_seconds * 1e9)
    while len(times) < runs or clock() < deadline:
        start = clock()
        call()
        times.append(clock() - start)
    return [t / 1e6 for t in times]


def latency(times_ms: list[float]) -> Latency:
    """Mean, std, min, percentiles and max of per-call milliseconds, and the block spread."""
    t = np.asarray(times_ms, dtype=np.float64)
    p50, p90, p95, p99 = np.percentile(t, [50, 90, 95, 99])
    return Latency(count=int(t.size), mean=float(t.mean()), std=float(t.std()), min=float(t.min()),
                   p50=float(p50), p90=float(p90), p95=float(p95), p99=float(p99), max=float(t.max()),
                   block_spread=block_spread(t))


def block_spread(times_ms, blocks: int = BLOCKS) -> float | None:
    """(max - min) / median of the medians of ``blocks`` consecutive blocks; None when there are
    too few calls (fewer than two per block) to say."""
    t = np.asarray(times_ms, dtype=np.float64)
    if t.size < 2 * blocks:
        return None
    return spread(np.array_split(t, blocks))


def spread(blocks) -> float | None:
    """(max - min) / median of the medians of ``blocks``; None when that median is not positive."""
    medians = np.array([np.median(b) for b in blocks])
    middle = float(np.median(medians))
    return float((medians.max() - medians.min()) / middle) if middle > 0 else None
