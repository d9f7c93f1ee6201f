"""New results against a baseline: the same file (by sha256, else by name) under the same
setting, compared as two sets of call times, not as two numbers.

For each pair: the ratio of the medians (new / old) with its 95 % bootstrap interval, and the
Mann-Whitney U test of "one set tends to be slower than the other" (its p-value). The verdict:

- **slower** / **faster**: the test is significant (p < ALPHA) and the whole interval of the
  ratio lies beyond the threshold (default 5 %): a change this size is there, not noise;
- **no change**: the whole interval lies within the threshold;
- **inconclusive**: anything else, and always when either record's timing was judged noisy or
  unusable (a busy machine): a noisy record never yields a regression.

Peak memory is steady from run to run; growth beyond MEMORY_TOLERANCE is a regression of its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Comparison", "compare", "mann_whitney", "ratio_interval", "verdict", "THRESHOLD", "ALPHA",
           "MEMORY_TOLERANCE", "setting_key", "VERDICTS"]

THRESHOLD = 0.05  # a change of the median smaller than 5 % is "no change"
ALPHA = 0.01  # significance level of the Mann-Whitney test
MEMORY_TOLERANCE = 0.05  # more than 5 % growth of peak memory is a regression
BOOTSTRAP = 2000  # resamples for the interval of the ratio of medians
VERDICTS = ("slower", "faster", "no change", "inconclusive")
_SETTING = ("format", "provider", "threads", "batch", "seq_len", "input_mode")


@dataclass(frozen=True)
class Comparison:
    file_name: str
    setting: dict[str, Any]
    p50_ratio: float  # new / old medians
    p90_ratio: float
    memory_ratio: float | None
    verdict: str  # one of VERDICTS
    why: str  # the reason, in words
    ratio_ci: tuple[float, float] | None = None  # 95 % interval of p50_ratio
    p_value: float | None = None  # Mann-Whitney U, two-sided
    threshold: float = THRESHOLD
    memory_grew: bool = False

    @property
    def regression(self) -> bool:
        """Slower beyond the threshold with statistical confidence, or more peak memory."""
        return self.verdict == "slower" or self.memory_grew

    def to_dict(self) -> dict[str, Any]:
        return {"file_name": self.file_name, **self.setting, "p50_ratio": self.p50_ratio, "p90_ratio": self.p90_ratio,
                "p50_ratio_ci": list(self.ratio_ci) if self.ratio_ci else None, "p_value": self.p_value,
                "threshold": self.threshold, "verdict": self.verdict, "why": self.why,
                "memory_ratio": self.memory_ratio, "memory_grew": self.memory_grew, "regression": self.regression}


def setting_key(record: dict[str, Any]) -> tuple:
    # A call fed the text (its tokenizer timed too) is another setting than one fed the same file's
    # ids; records from before input_kind was kept were all fed ids.
    # A file opened as an app opens it (opened_as) is another setting than the same file in Session.
    # The GPU (and its precision) is another setting than the CPU; older records ran on the CPU.
    return tuple(record.get(k) for k in _SETTING) + (record.get("host"), record.get("input_kind") == "text",
                                                     record.get("opened_as"), record.get("accelerator") or "cpu",
                                                     record.get("gpu_precision"))


def compare(records: list[dict[str, Any]], baseline: list[dict[str, Any]],
            threshold: float = THRESHOLD) -> list[Comparison]:
    """One Comparison per measured record that has a match in ``baseline``."""
    by_sha: dict[tuple, dict] = {}
    by_name: dict[tuple, dict] = {}
    for old in baseline:
        if old.get("latency"):
            by_sha.setdefault((old.get("sha256"), *setting_key(old)), old)
            by_name.setdefault((old.get("file_name"), *setting_key(old)), old)
    out = []
    for new in records:
        if not new.get("latency") or new.get("estimated"):
            continue
        old = by_sha.get((new.get("sha256"), *setting_key(new))) or by_name.get((new.get("file_name"), *setting_key(new)))
        if old is not None:
            out.append(_compare(new, old, threshold))
    return out


def _compare(new: dict[str, Any], old: dict[str, Any], threshold: float) -> Comparison:
    a, b = new["latency"], old["latency"]
    mem_new = (new.get("memory") or {}).get("peak_after_timed")
    mem_old = (old.get("memory") or {}).get("peak_after_timed")
    memory = mem_new / mem_old if mem_new and mem_old else None
    ratio_ci = p_value = None
    noisy = [f"{which} record's timing is {lat.get('quality')}" for which, lat in (("the new", a), ("the baseline", b))
             if lat.get("quality") in ("noisy", "unusable")]
    if noisy:
        why = " and ".join(noisy) + ": measure again on a quiet machine (--wait-quiet)"
        outcome = "inconclusive"
    elif not a.get("samples") or not b.get("samples"):
        why = "a record has no call times (made by an older albert-edge): ratio only, no test"
        outcome = "inconclusive"
    else:
        x, y = np.asarray(a["samples"]), np.asarray(b["samples"])
        p_value = mann_whitney(x, y)
        ratio_ci = ratio_interval(x, y)
        outcome, why = verdict(ratio_ci, p_value, threshold)
    return Comparison(file_name=new["file_name"], setting={k: new.get(k) for k in _SETTING},
                      p50_ratio=a["p50"] / b["p50"], p90_ratio=a["p90"] / b["p90"], memory_ratio=memory,
                      verdict=outcome, why=why, ratio_ci=ratio_ci, p_value=p_value, threshold=threshold,
                      memory_grew=memory is not None and memory > 1 + MEMORY_TOLERANCE)


def verdict(ratio_ci: tuple[float, float], p_value: float, threshold: float = THRESHOLD) -> tuple[str, str]:
    """The verdict on a ratio of medians (new / old) from its interval and the test's p-value."""
    low, high = ratio_ci
    band = (1 / (1 + threshold), 1 + threshold)
    if band[0] <= low and high <= band[1]:
        return "no change", f"the interval lies within ±{threshold:.0%}"
    if p_value < ALPHA and low > band[1]:
        return "slower", f"slower beyond {threshold:.0%} (p = {p_value:.2g})"
    if p_value < ALPHA and high < band[0]:
        return "faster", f"faster beyond {threshold:.0%} (p = {p_value:.2g})"
    if p_value >= ALPHA:
        return "inconclusive", f"no significant difference (p = {p_value:.2g}) but the interval is wider than ±{threshold:.0%}"
    return "inconclusive", f"the interval straddles ±{threshold:.0%}"


def mann_whitney(x, y) -> float:
    """Two-sided p-value of the Mann-Whitney U test (normal approximation with the tie
    correction and a continuity correction; the samples here are tens to thousands of calls)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    n1, n2 = x.size, y.size
    both = np.concatenate([x, y])
    ranks = _ranks(both)
    u = ranks[:n1].sum() - n1 * (n1 + 1) / 2
    _, counts = np.unique(both, return_counts=True)
    n = n1 + n2
    variance = n1 * n2 / 12 * ((n + 1) - (counts ** 3 - counts).sum() / (n * (n - 1)))
    if variance <= 0:
        return 1.0
    z = (abs(u - n1 * n2 / 2) - 0.5) / math.sqrt(variance)
    return float(min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2))))


def _ranks(values: np.ndarray) -> np.ndarray:
    """Ranks from 1, ties given their average rank."""
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(values.size)
    ranks[order] = np.arange(1, values.size + 1)
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return sums[inverse] / counts[inverse]


def ratio_interval(x, y, resamples: int = BOOTSTRAP, seed: int = 0) -> tuple[float, float]:
    """95 % percentile-bootstrap interval of median(x) / median(y), each set resampled on its own
    (a fixed seed: the same records give the same interval)."""
    rng = np.random.default_rng(seed)
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    mx = np.median(x[rng.integers(0, x.size, (resamples, x.size))], axis=1)
    my = np.median(y[rng.integers(0, y.size, (resamples, y.size))], axis=1)
    low, high = np.percentile(mx / my, [2.5, 97.5])
    return float(low), float(high)
