"""The report's first table, the answer an app developer asks for: which file to ship for which
device, and how fast it runs there (the headline p50, the p90 beside it), before the figures
it comes from."""

from __future__ import annotations

from typing import Any

from ..profile.record import HEADLINE, TAIL
from .cells import fmt_bytes

TITLE = "What to ship: the file for each device, and its latency"
COLUMNS = ("for", "file", f"{HEADLINE} ms", f"{TAIL} ms", "measured at", "size", "vs fp32 parent", "why this file")


def answer_rows(data: dict[str, Any]) -> list[tuple[str, ...]]:
    """One row per device measured (its fastest file at the longest length measured there; an
    estimate says so), then one per accelerator not measured here (the file it takes)."""
    files = {f.get("label", f["name"]): f for f in data["files"]}
    by_name = {f["name"]: f for f in data["files"]}
    rows = []
    for (device, accelerator, estimated), best in _fastest(data["profile_rows"]).items():
        f = by_name.get(best["file_name"]) or {}
        where = f"{device}, {'GPU' if accelerator == 'gpu' else 'CPU'}" + (" (ESTIMATE)" if estimated else "")
        rows.append((where, best["file_name"], _ms(best["p50_ms"]), _ms(best["p90_ms"]),
                     f"{best['seq_len']} tokens, {best['threads']} thr", fmt_bytes(f.get("bytes")) or "-",
                     _accuracy(f), f"the fastest measured at {best['seq_len']} tokens" if not estimated
                     else f"the fastest estimated at {best['seq_len']} tokens"))
    take = (data.get("accelerators") or {}).get("take") or {}
    names = {a["key"]: a["name"] for a in (data.get("accelerators") or {}).get("accelerators") or ()}
    for key, t in take.items():
        if key == "cpu" and rows:  # the measured rows above say it, with their latency
            continue
        f = files.get(t["file"]) or {}
        rows.append((names.get(key, key), t["file"] or "-", "-", "-", "not measured here",
                     fmt_bytes(f.get("bytes")) or "-", _accuracy(f) if f else "-", t["why"]))
    return rows


def answer_notes(data: dict[str, Any]) -> list[str]:
    notes = [f"{HEADLINE}: the call a user typically waits (the headline everywhere in this report); {TAIL}: one "
             "call in ten is slower"]
    if (data.get("accelerators") or {}).get("take"):
        notes.append("accelerators not measured here: the file that puts the most of the model on it (the "
                     "Accelerators table below says how much)")
    return notes


def _fastest(rows: list[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    """Per device and accelerator (estimates apart): the row of the least p50 at the longest
    length measured there, leaving out timings the profiler called unusable."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        if r["seq_len"] and r["p50_ms"] is not None and r.get("quality") != "unusable":
            groups.setdefault((r["device"], r.get("accelerator") or "cpu", r["estimated"]), []).append(r)
    best = {}
    for key, group in groups.items():
        longest = max(r["seq_len"] for r in group)
        best[key] = min((r for r in group if r["seq_len"] == longest), key=lambda r: r["p50_ms"])
    return best


def _accuracy(f: dict[str, Any]) -> str:
    a = f.get("accuracy")
    if a:
        return f"{100 * a['headline']:.2f}%" + (" (random ids)" if a.get("random_ids") else "")
    if f.get("scheme") == "fp32":
        return "fp32 (parent)"
    return "not shown (random weights)" if f.get("random_weights") else "-"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}" if x >= 10 else f"{x:.2f}"
