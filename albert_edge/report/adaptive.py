"""The report's section on an adaptive file (``convert --adaptive``): its speed/accuracy curve over
the exit rule's settings.

Accuracy and agreement with the full depth come from fine-tuning's held-out texts (every setting
it scored, recorded in the checkpoint and copied into the manifest), each with its 95% Wilson
interval. Time comes from ``profile`` on real text: each record of the adaptive file gives its
mean passes and p50 latency (``profile --exit-setting`` adds records at other settings). With two
or more records at different mean passes, the time of a setting is the line through them (a
fixed cost plus a cost per pass); with one, it is taken as proportional to the passes, which
leaves out the cost that does not depend on depth and so flatters the speed-up: the table says
which. The full depth is the same line at every pass.
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
    measured = [{"file": r["file_name"], "p50_ms": r["latency"]["p50"], "mean_passes": r["text"]["passes"]["mean"],
                 "setting": r["text"].get("exit_setting", rule["setting"])}
                for r in records if not r.get("estimated") and (r.get("text") or {}).get("passes")
                and (r.get("latency") or {}).get("p50")]
    fit = _time_per_pass(measured)
    rows = []
    for row in rule.get("curve") or ():
        ms = None if fit is None else fit[0] + fit[1] * row["mean_passes"]
        full = None if fit is None or passes is None else fit[0] + fit[1] * passes
        rows.append({**row, "own": row["kind"] == rule["kind"] and row["setting"] == rule["setting"],
                     "speedup": full / ms if ms and full else None})
    return {"rule": {k: rule[k] for k in ("kind", "setting", "min_passes") if k in rule}, "passes": passes,
            "n": rule.get("n"), "curve": rows, "measured": measured,
            "time_model": None if fit is None else ("line" if fit[0] else "proportional")}


def _time_per_pass(measured: list[dict]) -> tuple[float, float] | None:
    """(fixed ms, ms per pass) from the records: a least-squares line when their mean passes
    differ, else proportional to the passes (no fixed cost); None without a record."""
    if not measured:
        return None
    m = np.array([x["mean_passes"] for x in measured], float)
    t = np.array([x["p50_ms"] for x in measured], float)
    if np.ptp(m) >= 0.2:
        slope, fixed = np.polyfit(m, t, 1)
        if slope > 0:
            return float(fixed), float(slope)
    return 0.0, float(t.mean() / m.mean())


def adaptive_table(data: dict[str, Any]) -> Table | None:
    section = data.get("adaptive")
    if not section or not section["curve"]:
        return None
    n, passes = section["n"], section["passes"]
    rows = []
    for row in section["curve"]:
        accuracy = ""
        if "accuracy" in row:
            accuracy = f"{100 * row['accuracy']:.1f}"
            if n:
                low, high = wilson(row["accuracy"], n)
                accuracy += f" [{100 * low:.1f}-{100 * high:.1f}]"
        rows.append((f"{row['kind']} {row['setting']:g}{' *' if row['own'] else ''}",
                     f"{row['mean_passes']:.2f}" + (f" of {passes}" if passes else ""), accuracy,
                     f"{100 * row['agreement']:.1f}", "" if row["speedup"] is None else f"{row['speedup']:.2f}x"))
    return Table("adaptive", TITLE, _COLUMNS, tuple(rows), (1, 3, 4), tuple(_notes(section)), "adaptive",
                 lead=_lead(section), keep=(1, 2, 4))


def _lead(section: dict[str, Any]) -> str:
    rule = section["rule"]
    text = f"The adaptive file stops by {rule['kind']} {rule['setting']:g}"
    for x in section["measured"][:3]:
        text += (f"; {x['file']} at {x['setting']:g} ran {x['mean_passes']:.2f} passes on real text, "
                 f"p50 {x['p50_ms']:.2f} ms")
    return text + "."


def _notes(section: dict[str, Any]) -> list[str]:
    notes = ["* the setting the file was written with; an app changes it at run time (the TFLite file's "
             "set_exit_setting signature, the ONNX file's exit_setting input)",
             f"passes, accuracy and agreement (top-1 with the full depth): fine-tuning's held-out texts"
             + (f" ({section['n']})" if section["n"] else "") + ", 95% interval: Wilson's"]
    model = section["time_model"]
    if model is None:
        notes.append("speed-up: no profile of the adaptive file on real text (albert-edge profile FILE --text "
                     "builtin --tokenizer spiece.model)")
    elif model == "line":
        notes.append("speed-up: estimated, the full depth's time over the setting's, on the line through the "
                     "measured p50s at different mean passes (a fixed cost and a cost per pass)")
    else:
        notes.append("speed-up: estimated as proportional to the passes, from the measured p50 at the passes its "
                     "records ran; that leaves out the cost that does not depend on depth, so it overstates the "
                     "speed-up (profile --exit-setting at a setting that stops at other passes measures that cost)")
    return notes


def adaptive_chart(data, plt):
    """Accuracy (with its interval) against the estimated speed-up, one point per setting."""
    section = data.get("adaptive")
    rows = [r for r in (section or {}).get("curve") or () if "accuracy" in r and r["speedup"] is not None]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(8.5, 3.4))
    n = section["n"]
    for kind, marker in (("patience", "s"), ("confidence", "o"), ("entropy", "D")):
        mine = [r for r in rows if r["kind"] == kind]
        if not mine:
            continue
        x = [r["speedup"] for r in mine]
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
    ax.set_xlabel("estimated speed-up over the full depth (x)")
    ax.set_ylabel("held-out accuracy (%)")
    bars = ", bars: 95% interval" if n else ""
    ax.set_title(f"one point per setting of the exit rule (* the file's){bars}", loc="left", fontsize=8)
    ax.legend(fontsize=7, frameon=False)
    return fig
