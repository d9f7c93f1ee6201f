"""The report's section on an adaptive file (``convert --adaptive``): its speed/accuracy curve over
the exit rule's settings.

Accuracy and agreement with the full depth come from fine-tuning's held-out texts (every setting
it scored, recorded in the checkpoint and copied into the manifest), each with its 95% Wilson
interval. Time comes from ``profile`` on real text, per format: each record of the adaptive file gives its
mean passes and p50 latency (``profile --exit-setting`` adds records at other settings), and a
record of the same model's full-depth fp32 file on real text gives the time at every pass (the
pipeline's built-in classifier has both). With two or more points at different passes, the time
of a setting is the line through them (a fixed cost plus a cost per pass); with one, it is taken
as proportional to the passes, which leaves out the cost that does not depend on depth and so
flatters the speed-up: the table says which. The speed-up divides the full depth's time (measured
when given, else the line at every pass) by the setting's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .cells import Table, wilson

__all__ = ["adaptive_data", "adaptive_table", "adaptive_chart", "TITLE"]

TITLE = "Adaptive depth: speed and accuracy over the exit rule's settings"
_COLUMNS = ("setting", "passes", "accuracy % [95% CI]", "agreement %", "speed-up")


def adaptive_data(manifest, records: list[dict]) -> dict[str, Any] | None:
    """The figures of the conversion's adaptive file, or None when it has none."""
    rule = (manifest.source or {}).get("adaptive") if manifest is not None else None
    if not rule:
        return None
    passes = int(rule.get("passes") or 0) or None
    timed = [r for r in records if not r.get("estimated") and r.get("input_mode") == "real-text"
             and (r.get("latency") or {}).get("p50")]
    measured = [{"file": r["file_name"], "format": r["format"], "p50_ms": r["latency"]["p50"],
                 "mean_passes": r["text"]["passes"]["mean"], "setting": r["text"].get("exit_setting", rule["setting"])}
                for r in timed if r["text"].get("passes")]
    formats = list(dict.fromkeys(m["format"] for m in measured))
    # The same model at full depth, on real text: its file of the format, fp32 (the adaptive file's precision).
    full = {f: float(np.median([r["latency"]["p50"] for r in timed if r["format"] == f and not r["text"].get("passes")
                                and (r.get("scheme") or "fp32") == "fp32"] or [np.nan])) for f in formats}
    full = {f: ms for f, ms in full.items() if not np.isnan(ms)}
    fits = {f: _time_per_pass([m for m in measured if m["format"] == f], passes, full.get(f)) for f in formats}
    for m in measured:
        m["full_depth_ms"] = full.get(m["format"])
    rows = []
    for row in rule.get("curve") or ():
        speedup = {}
        for f, (fixed, per_pass, _) in fits.items():
            whole = full.get(f) or (fixed + per_pass * passes if passes else None)
            speedup[f] = whole / (fixed + per_pass * row["mean_passes"]) if whole else None
        rows.append({**row, "own": row["kind"] == rule["kind"] and row["setting"] == rule["setting"],
                     "speedup": speedup})
    return {"rule": {k: rule[k] for k in ("kind", "setting", "min_passes") if k in rule}, "passes": passes,
            "n": rule.get("n"), "curve": rows, "measured": measured, "full_depth_ms": full,
            "time_model": {f: fit[2] for f, fit in fits.items()}}


def _time_per_pass(measured: list[dict], passes: int | None, full_ms: float | None) -> tuple[float, float, str]:
    """(fixed ms, ms per pass, how) from one format's records (and its full-depth time, at all
    the passes): a least-squares line when their passes differ, else proportional to the passes
    (no fixed cost)."""
    m = [x["mean_passes"] for x in measured] + ([passes] if full_ms and passes else [])
    t = [x["p50_ms"] for x in measured] + ([full_ms] if full_ms and passes else [])
    if np.ptp(m) >= 0.2:
        slope, fixed = np.polyfit(np.array(m, float), np.array(t, float), 1)
        if slope > 0:
            return float(fixed), float(slope), "line"
    return 0.0, float(np.mean(t) / np.mean(m)), "proportional"


def adaptive_table(data: dict[str, Any]) -> Table | None:
    section = data.get("adaptive")
    if not section or not section["curve"]:
        return None
    n, passes, formats = section["n"], section["passes"], list(section["time_model"])
    rows = []
    for row in section["curve"]:
        accuracy = ""
        if "accuracy" in row:
            accuracy = f"{100 * row['accuracy']:.1f}"
            if n:
                low, high = wilson(row["accuracy"], n)
                accuracy += f" [{100 * low:.1f}-{100 * high:.1f}]"
        speedups = [row["speedup"].get(f) for f in formats] or [None]
        rows.append((f"{row['kind']} {row['setting']:g}{' *' if row['own'] else ''}",
                     f"{row['mean_passes']:.2f}" + (f" of {passes}" if passes else ""), accuracy,
                     f"{100 * row['agreement']:.1f}", *("" if x is None else f"{x:.2f}x" for x in speedups)))
    columns = (*_COLUMNS[:-1], *(f"speed-up {f}" for f in formats)) if formats else _COLUMNS
    return Table("adaptive", TITLE, columns, tuple(rows), tuple(i for i in range(1, len(columns)) if i != 2),
                 tuple(_notes(section)), "adaptive", lead=_lead(section), keep=(1, 2, 4))


def _lead(section: dict[str, Any]) -> str:
    rule = section["rule"]
    text = f"The adaptive file stops by {rule['kind']} {rule['setting']:g}"
    for x in section["measured"][:4]:
        text += (f"; {x['file']} ({x['format']}) at {x['setting']:g} ran {x['mean_passes']:.2f} passes on real text, "
                 f"p50 {x['p50_ms']:.2f} ms")
        if x["full_depth_ms"]:
            text += f" against {x['full_depth_ms']:.2f} ms at full depth ({x['full_depth_ms'] / x['p50_ms']:.2f}x)"
    return text + "."


def _notes(section: dict[str, Any]) -> list[str]:
    notes = ["* the setting the file was written with; an app changes it at run time (the TFLite file's "
             "set_exit_setting signature, the ONNX file's exit_setting input)",
             f"passes, accuracy and agreement (top-1 with the full depth): fine-tuning's held-out texts"
             + (f" ({section['n']})" if section["n"] else "") + ", 95% interval: Wilson's"]
    models = section["time_model"]
    if not models:
        notes.append("speed-up: no profile of the adaptive file on real text (albert-edge profile FILE --text "
                     "builtin --tokenizer spiece.model)")
    if section["full_depth_ms"]:
        notes.append(f"full depth ({', '.join(section['full_depth_ms'])}): the same model's full-depth fp32 file, "
                     "measured on the same texts; the other settings' times are estimated from the measured ones")
    if "line" in models.values():
        notes.append("speed-up: a setting's time is on the line through the measured p50s at different mean passes "
                     "(a fixed cost and a cost per pass)")
    proportional = [f for f, how in models.items() if how == "proportional"]
    if proportional:
        notes.append(f"speed-up ({', '.join(proportional)}): estimated as proportional to the passes, from the "
                     "measured p50 at the passes its records ran; that leaves out the cost that does not depend on "
                     "depth, so it overstates the speed-up (profile --exit-setting at a setting that stops at other "
                     "passes, or the full-depth file on the same text, measures that cost)")
    return notes


def adaptive_chart(data, plt):
    """Accuracy (with its interval) against the estimated speed-up, one point per setting."""
    section = data.get("adaptive")
    formats = list((section or {}).get("time_model") or ())
    shown = (formats or [None])[0]  # the format measured first
    rows = [r for r in (section or {}).get("curve") or () if "accuracy" in r and r["speedup"].get(shown)]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(8.5, 3.4))
    n = section["n"]
    for kind, marker in (("patience", "s"), ("confidence", "o"), ("entropy", "D")):
        mine = [r for r in rows if r["kind"] == kind]
        if not mine:
            continue
        x = [r["speedup"][shown] for r in mine]
        y = [100 * r["accuracy"] for r in mine]
        ax.plot(x, y, marker=marker, linestyle="-", linewidth=0.8, label=kind)
        if n:
            bounds = [wilson(r["accuracy"], n) for r in mine]
            ax.errorbar(x, y, yerr=[[v - 100 * b[0] for v, b in zip(y, bounds)],
                                    [100 * b[1] - v for v, b in zip(y, bounds)]],
                        linestyle="none", capsize=2, elinewidth=0.8, color="grey")
        for r, xi, yi in zip(mine, x, y):
            ax.annotate(f"{r['setting']:g}{' *' if r['own'] else ''}", (xi, yi), fontsize=7,
                        textcoords="offset points", xytext=(3, 3))
    ax.set_xlabel(f"estimated speed-up over the full depth, {shown} (x)")
    ax.set_ylabel("held-out accuracy (%)")
    bars = ", bars: 95% interval" if n else ""
    ax.set_title(f"one point per setting of the exit rule (* the file's){bars}", loc="left", fontsize=8)
    ax.legend(fontsize=7, frameon=False)
    return fig
