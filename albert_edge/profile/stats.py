"""Timing: the stopping rule, latency percentiles with their confidence intervals, the spread
between blocks of timed calls, and the verdict on how far a record can be trusted.

The rule (adaptive, as criterion.rs and pyperf measure): time at least ``runs`` calls for at least
``min_seconds``, then go on in short rounds until the p50's 95 % confidence interval is narrower
than ``target`` of the p50, or ``max_seconds`` of timed calls have passed. The interval is the
distribution-free one of order statistics (the ranks a binomial count puts around the quantile),
so it holds for the skewed, long-tailed times a busy machine gives.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .record import Latency

__all__ = ["time_until", "latency", "quantile_ci", "block_spread", "spread", "judge", "BLOCKS",
           "CI_TARGET", "LEVEL", "QUALITIES", "KEEP_SAMPLES", "interval_text", "ci_width"]

BLOCKS = 5  # the timed calls are cut into this many consecutive blocks to see how stable they are
CI_TARGET = 0.02  # stop when the p50's interval is narrower than 2% of the p50
LEVEL = 0.95  # confidence level of every interval
KEEP_SAMPLES = 4000  # call times kept in a record (for --baseline's tests); evenly thinned beyond
QUALITIES = ("good", "noisy", "unusable")
# Beyond these a figure says little: the verdict is "unusable".
_UNUSABLE_WIDTH, _UNUSABLE_SPREAD, _MIN_CALLS = 0.25, 0.5, 10
_NOISY_SPREAD = 0.10  # block medians 10% apart: a drift or a burst of other work
_NOISY_TAIL = 2.0  # p90 more than twice the p50 at one fixed shape: some calls were held up
_Z = 1.959963984540054  # two-sided 95 %


def _time(call: Callable[[], object], runs: int, seconds: float, times: list[float]) -> list[float]:
    clock = time.perf_counter_ns
    deadline = clock() + int(seconds * 1e9)
    while len(times) < runs or clock() < deadline:
        start = clock()
        call()
        times.append((clock() - start) / 1e6)
    return times


def time_until(call: Callable[[], object], runs: int, min_seconds: float, max_seconds: float,
               target: float = CI_TARGET) -> tuple[list[float], str]:
    """The adaptive rule: call ``call`` until at least ``runs`` calls AND at least ``min_seconds``
    have passed, then in rounds (a quarter more calls, at least 0.2 s) until the p50's interval is
    narrower than ``target`` of the p50 or the timed calls have taken ``max_seconds``. Returns
    each call's milliseconds and why it stopped ("interval" | "budget")."""
    times = _time(call, runs, min_seconds, [])
    while True:
        width = ci_width(times)
        if width is not None and width <= target:
            return times, "interval"
        spent = sum(times) / 1e3
        if spent >= max_seconds:
            return times, "budget"
        _time(call, len(times) + max(len(times) // 4, 1), min(max(0.2, spent / 4), max_seconds - spent), times)


def quantile_ci(times_ms, q: float) -> tuple[float, float] | None:
    """The distribution-free 95 % confidence interval of the ``q`` quantile: the order statistics at
    ranks n q -/+ z sqrt(n q (1 - q)) (the normal approximation of the binomial count of calls
    below the quantile). None for fewer than 5 calls."""
    t = np.sort(np.asarray(times_ms, dtype=np.float64))
    n = t.size
    if n < 5:
        return None
    half = _Z * math.sqrt(n * q * (1 - q))
    lo, hi = max(math.floor(n * q - half), 0), min(math.ceil(n * q + half), n - 1)
    return float(t[lo]), float(t[hi])


def ci_width(times_ms) -> float | None:
    """Width of the p50's interval as a share of the p50."""
    ci = quantile_ci(times_ms, 0.5)
    middle = float(np.median(times_ms)) if len(times_ms) else 0.0
    return (ci[1] - ci[0]) / middle if ci and middle > 0 else None


def latency(times_ms: list[float]) -> Latency:
    """Mean, std, min, percentiles and max of per-call milliseconds, the intervals of p50 and
    p90, the block spread, the fastest block's median, and the call times themselves."""
    t = np.asarray(times_ms, dtype=np.float64)
    p50, p90, p95, p99 = np.percentile(t, [50, 90, 95, 99])
    ci50, ci90 = quantile_ci(t, 0.5), quantile_ci(t, 0.9)
    blocks = np.array_split(t, BLOCKS) if t.size >= 2 * BLOCKS else None
    return Latency(count=int(t.size), mean=float(t.mean()), std=float(t.std()), min=float(t.min()),
                   p50=float(p50), p90=float(p90), p95=float(p95), p99=float(p99), max=float(t.max()),
                   block_spread=spread(blocks) if blocks else None,
                   p50_ci=list(ci50) if ci50 else None, p90_ci=list(ci90) if ci90 else None, ci_level=LEVEL,
                   p50_ci_width=(ci50[1] - ci50[0]) / float(p50) if ci50 and p50 > 0 else None,
                   fastest_block_p50=float(min(np.median(b) for b in blocks)) if blocks else None,
                   samples=_thin(t))


def _thin(t: np.ndarray) -> list[float]:
    """The call times in order, at most KEEP_SAMPLES of them (evenly spaced), to the microsecond."""
    if t.size > KEEP_SAMPLES:
        t = t[np.linspace(0, t.size - 1, KEEP_SAMPLES).round().astype(int)]
    return [round(float(v), 4) for v in t]


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


def judge(lat: Latency, target: float = CI_TARGET, machine: list[str] = (), fixed_shape: bool = True) -> tuple[str, list[str]]:
    """How far ``lat`` can be trusted: ("good" | "noisy" | "unusable", the reasons). ``machine``
    are warnings about the machine while measuring (other work, steal, throttling): any of them
    makes a record noisy at best. ``fixed_shape`` is False for real text, whose calls differ in
    length, so their tail says nothing about noise."""
    unusable, noisy = [], list(machine)
    width, drift = lat.p50_ci_width, lat.block_spread
    if lat.count < _MIN_CALLS:
        unusable.append(f"only {lat.count} timed calls (at least {_MIN_CALLS} are needed for an interval)")
    if width is not None and width > _UNUSABLE_WIDTH:
        unusable.append(f"the p50's interval is {width:.0%} of it wide")
    elif width is not None and width > target:
        noisy.append(f"the p50's interval is {width:.1%} of it wide (target {target:.0%}; the time budget ran out)")
    if drift is not None and drift > _UNUSABLE_SPREAD:
        unusable.append(f"block medians differ by {drift:.0%}")
    elif drift is not None and drift > _NOISY_SPREAD:
        noisy.append(f"block medians differ by {drift:.1%}")
    if fixed_shape and lat.p50 > 0 and lat.p90 / lat.p50 > _NOISY_TAIL:
        noisy.append(f"p90 is {lat.p90 / lat.p50:.1f}x the p50: some calls were held up")
    if unusable:
        return "unusable", unusable + noisy
    return ("noisy", noisy) if noisy else ("good", [])


def interval_text(lat: dict[str, Any] | Latency | None, key: str = "p50") -> str:
    """'±1.2%' for the interval of ``key`` around it (its larger side), '' when there is none."""
    if lat is None:
        return ""
    get = lat.get if isinstance(lat, dict) else lambda k: getattr(lat, k, None)
    ci, value = get(f"{key}_ci"), get(key)
    if not ci or not value:
        return ""
    return f"±{max(value - ci[0], ci[1] - value) / value:.1%}"
