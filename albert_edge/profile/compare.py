"""New results against a baseline: the same file (by sha256, else by name) under the same
setting, ratios new/old of p50, p90 and peak memory, and a regression mark when a slowdown is
larger than the noise both runs measured."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Comparison", "compare", "MIN_NOISE", "MEMORY_TOLERANCE", "setting_key"]

MIN_NOISE = 0.05  # never call a change below 5% a regression, however quiet the runs were
MEMORY_TOLERANCE = 0.05  # peak memory is steady from run to run; more than 5% growth is flagged
_SETTING = ("format", "provider", "threads", "batch", "seq_len", "input_mode")


@dataclass(frozen=True)
class Comparison:
    file_name: str
    setting: dict[str, Any]
    p50_ratio: float
    p90_ratio: float
    memory_ratio: float | None
    noise: float  # the relative change below which a difference is taken as noise
    reasons: tuple[str, ...] = ()  # why it is a regression; empty when it is none

    @property
    def regression(self) -> bool:
        return bool(self.reasons)


def setting_key(record: dict[str, Any]) -> tuple:
    return tuple(record.get(k) for k in _SETTING) + (record.get("host"),)


def compare(records: list[dict[str, Any]], baseline: list[dict[str, Any]]) -> list[Comparison]:
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
            out.append(_compare(new, old))
    return out


def _compare(new: dict[str, Any], old: dict[str, Any]) -> Comparison:
    a, b = new["latency"], old["latency"]
    noise = max(MIN_NOISE, a.get("block_spread") or 0.0, b.get("block_spread") or 0.0)
    p50, p90 = a["p50"] / b["p50"], a["p90"] / b["p90"]
    reasons = [f"{name} {ratio:.2f}x slower (noise {noise:.1%})" for name, ratio in (("p50", p50), ("p90", p90))
               if ratio > 1 + noise]
    mem_new = (new.get("memory") or {}).get("peak_after_timed")
    mem_old = (old.get("memory") or {}).get("peak_after_timed")
    memory = mem_new / mem_old if mem_new and mem_old else None
    if memory is not None and memory > 1 + MEMORY_TOLERANCE:
        reasons.append(f"peak memory {memory:.2f}x")
    return Comparison(file_name=new["file_name"], setting={k: new.get(k) for k in _SETTING}, p50_ratio=p50,
                      p90_ratio=p90, memory_ratio=memory, noise=noise, reasons=tuple(reasons))
