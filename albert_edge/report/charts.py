"""The report's charts, drawn with matplotlib (the optional ``report`` extra, Agg backend) from
the report's own figures, each written as PNG and SVG. Without matplotlib there are no charts and
the report says so in one line."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ..formats.kinds import ONNX, Format, by_name
from ..profile.record import HEADLINE
from .adaptive import adaptive_chart

__all__ = ["draw_all", "available", "MAIN_CHART", "NO_MATPLOTLIB"]

log = logging.getLogger(__name__)

MAIN_CHART = "overview"
NO_MATPLOTLIB = "charts left out: matplotlib is not installed (pip install 'albert-edge[report]'); the tables show the same figures"

_ALBERT, _BERT = "#2a7ab0", "#c8553d"
# The accuracy chart's colour of each format's files: .onnx in the first colour, the others in the second.
_FORMAT_COLORS: dict[Format, str] = {ONNX: _ALBERT}


def _format_color(name: str) -> str:
    return _FORMAT_COLORS.get(by_name(name), _BERT)
_PARTS = ("#2a7ab0", "#7fb3d5", "#f0b429", "#3d9970", "#8e6c8a")


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def draw_all(data: dict[str, Any], out_dir: Path) -> list[dict[str, str]]:
    """Draw every chart the figures allow into ``out_dir``; returns [{name, title, png, svg}]."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "albert-edge", "font.size": 9, "axes.spines.top": False,
                         "axes.spines.right": False})
    charts = []
    for name, title, draw in _CHARTS:
        fig = draw(data, plt)
        if fig is None:
            continue
        fig.suptitle(title, fontsize=11, x=0.01, ha="left")
        fig.tight_layout()
        png, svg = out_dir / f"{name}.png", out_dir / f"{name}.svg"
        fig.savefig(png, dpi=110, metadata={"Software": None})
        fig.savefig(svg, metadata={"Date": None})
        plt.close(fig)
        charts.append({"name": name, "title": title, "png": png.name, "svg": svg.name})
        log.debug("drew %s", png)
    return charts


def _count(x: float, _pos=None) -> str:
    """Axis ticks and labels: 12000000 -> '12M', 1500 -> '1.5K'."""
    for unit, size in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(x) >= size:
            return f"{x / size:.3g}{unit}"
    return f"{x:.3g}"


def _overview(data, plt):
    parts = data.get("param_parts")
    if not parts:
        return None
    name = data["model"]["name"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6), gridspec_kw={"width_ratios": [1.35, 1]})
    labels = [f"{name} (ALBERT)", "BERT, same width\nand depth"]
    colors = dict(zip(parts["albert"], _PARTS))
    for y, side in ((1, parts["albert"]), (0, parts["bert"])):
        start = 0
        for part, color in colors.items():
            count = side.get(part, 0)
            if count:
                left.barh(y, count, left=start, height=0.6, color=color, edgecolor="white",
                          label=part if y == 1 else None)
                start += count
        left.text(start, y, f"  {_count(start)}", va="center")
    left.set_yticks([1, 0], labels)
    left.xaxis.set_major_formatter(_count)
    left.set_xlim(0, parts["bert_total"] * 1.2)
    left.set_ylim(-0.5, 2.1)
    left.set_xlabel("parameters (each shared weight once)")
    left.set_title(f"parameters: {parts['bert_total'] / parts['albert_total']:.1f}x fewer", loc="left")
    left.legend(fontsize=7, loc="upper right", ncol=2, frameon=False)
    compute = data["compute"]
    if compute:
        x = range(len(compute))
        width = 0.38
        right.bar([i - width / 2 for i in x], [r["macs_total"] for r in compute], width, color=_ALBERT, label="ALBERT")
        right.bar([i + width / 2 for i in x], [r["bert_macs_total"] for r in compute], width, color=_BERT,
                  label="BERT, same width and depth")
        for i, r in zip(x, compute):
            right.text(i, r["bert_macs_total"], f"{r['macs_total'] / r['bert_macs_total']:.3f}x",
                       ha="center", va="bottom", fontsize=7)
        right.set_xticks(list(x), [str(r["seq_len"]) for r in compute])
        right.yaxis.set_major_formatter(_count)
        right.set_ylim(0, max(r["bert_macs_total"] for r in compute) * 1.45)
        right.set_xlabel("sequence length (batch 1)")
        right.set_ylabel("MACs per forward pass")
        right.set_title("compute: the same (ratio on top)", loc="left")
        right.legend(fontsize=7, frameon=False, loc="upper left")
    return fig


def _presets(data, plt):
    rows = data["presets"]
    fig, ax = plt.subplots(figsize=(8, 3.4))
    names = [r["name"] for r in rows]
    values = [r["params"] for r in rows]
    colors = [_ALBERT if r["family"] == "ALBERT" else _BERT for r in rows]
    bars = ax.bar(names, values, color=colors)
    for bar, r in zip(bars, rows):
        ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), f"{r['params'] / 1e6:.0f}M",
                ha="center", va="bottom", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("parameters")
    ax.tick_params(axis="x", labelrotation=20)
    ax.set_title("ALBERT (blue), BERT (red); log scale", loc="left", fontsize=8)
    return fig


def _file_sizes(data, plt):
    files = data["files"]
    if not files:
        return None
    from .tables import fmt_bytes

    unit, scale = ("MiB", 2**20) if max(f["bytes"] for f in files) >= 2**20 else ("KiB", 2**10)
    fig, ax = plt.subplots(figsize=(8, 1.0 + 0.45 * len(files)))
    # precisions that are a visible share of some file (shape vectors in int64 are not)
    dtypes = sorted({d for f in files for d, n in f["bytes_by_precision"].items() if n >= 0.01 * f["bytes"]},
                    key=lambda d: -sum(f["bytes_by_precision"].get(d, 0) for f in files))
    palette = dict(zip(dtypes, _PARTS * 3))
    labels = [f"{f['format']} {f['scheme'] or '?'}" + (" static" if f.get("static_len") else "") for f in files]
    for i, f in enumerate(files):
        ax.barh(i, f["bytes"] / scale, height=0.7, color="#e4e8ec", label="whole file" if i == 0 else None)
        start = 0
        for d in dtypes:
            n = f["bytes_by_precision"].get(d, 0)
            if n:
                ax.barh(i, n / scale, left=start, height=0.5, color=palette[d],
                        label=f"{d} weights" if f"{d} weights" not in ax.get_legend_handles_labels()[1] else None)
                start += n / scale
        ax.text(f["bytes"] / scale, i, f"  {fmt_bytes(f['bytes'])}", va="center", fontsize=8)
    ax.set_yticks(range(len(files)), labels)
    ax.invert_yaxis()
    ax.set_xlim(0, max(f["bytes"] for f in files) / scale * 1.3)
    ax.set_xlabel(f"{unit}: whole file (grey), weight bytes by precision (colour)")
    ax.legend(fontsize=7, frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return fig


def _accuracy(data, plt):
    files = [f for f in data["files"] if f["accuracy"] and not f["accuracy"].get("random_ids")]
    if not files:
        return None
    from .tables import accuracy_interval

    fig, ax = plt.subplots(figsize=(8.5, 3.4))
    markers = {"int8": "o", "fp16": "s", "int16": "D"}
    for f in files:
        color = _format_color(f["format"])
        marker = next((m for key, m in markers.items() if key in (f["scheme"] or "")), "^")
        value = 100 * f["accuracy"]["headline"]
        ax.scatter(f["bytes"] / 2**20, value, color=color, marker=marker, s=40, clip_on=False,
                   label=f"{f['format']} {f['scheme']}: {value:.2f}%")
        interval = accuracy_interval(f["accuracy"])
        if interval:  # its 95% interval from the sample it was counted on (the files table's note says how)
            # (a mean cosine can round to a hair above 1, over its interval's end: no bar there)
            ax.errorbar(f["bytes"] / 2**20, value, yerr=[[max(0.0, value - 100 * interval[0])],
                                                         [max(0.0, 100 * interval[1] - value)]],
                        color=color, capsize=3, elinewidth=1, linestyle="none")
    parents = [f for f in data["files"] if f["scheme"] == "fp32"]
    for f in parents:
        ax.scatter(f["bytes"] / 2**20, 100, facecolors="none", edgecolors=_format_color(f["format"]),
                   s=40, clip_on=False, label=f"{f['format']} fp32 (the reference)")
    low = min(100 * (accuracy_interval(f["accuracy"]) or (f["accuracy"]["headline"],))[0] for f in files)
    # No agreement is above 100%: the axis ends there, its markers drawn whole over the edge.
    ax.set_ylim(max(0.0, min(low - 2, 95)), 100)
    ax.set_xlim(0, max(f["bytes"] for f in files + parents) / 2**20 * 1.1)
    ax.set_xlabel("file size (MiB)")
    ax.set_ylabel("agreement with fp32 parent (%)")
    bars = ", bars: 95% interval" if any(accuracy_interval(f["accuracy"]) for f in files) else ""
    ax.set_title(f"headline figure: {files[0]['accuracy']['headline_of']}, on held-out text{bars}", loc="left",
                 fontsize=8)
    ax.legend(fontsize=7, frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return fig


def _latency(data, plt):
    # A point the profiler called unusable (too few calls, too much spread) would draw a trend that
    # is not there: it is left out, and the caption and the table's notes say how many.
    rows = [r for r in data["profile_rows"] if r["seq_len"] and r["p50_ms"] is not None
            and r.get("quality") != "unusable"]
    from .tables import unusable_left_out

    left_out = unusable_left_out(data)
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(9.5, 3.8))
    series: dict[tuple, list] = {}
    for r in rows:
        key = (r["file_name"], r["device"], r["provider"], r["threads"], r["batch"], r["estimated"])
        # The error bar: the p50's 95% interval, or an estimate's range.
        low, high = r.get("p50_ci") or r.get("ms_range") or (r["p50_ms"], r["p50_ms"])
        series.setdefault(key, []).append((r["seq_len"], r["p50_ms"], low, high, r.get("quality")))
    for (name, device, provider, threads, batch, estimated), points in sorted(series.items(), key=str):
        points.sort()
        label = f"{name}, {threads} thr" + (f", batch {batch}" if batch != 1 else "")
        if len({k[1] for k in series}) > 1:
            label += f" ({device})"
        if estimated:
            label += " [estimate]"
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        bars = [[max(p[1] - p[2], 0) for p in points], [max(p[3] - p[1], 0) for p in points]]
        line = ax.errorbar(xs, ys, yerr=bars, marker="o", markersize=3, capsize=3, elinewidth=1,
                           linestyle="--" if estimated else "-", label=label)
        noisy = [p for p in points if p[4] == "noisy"]
        if noisy:  # hollow rings around the points the profiler did not fully trust
            ax.scatter([p[0] for p in noisy], [p[1] for p in noisy], s=90, facecolors="none",
                       edgecolors=line[0].get_color(), linewidths=1.2)
    estimates = any(r["estimated"] for r in rows)
    # The caption names only what is drawn: dashes and ranges where there are estimates.
    caption = [f"bars: 95% interval of the {HEADLINE}" + (" (estimates: their range)" if estimates else "")]
    if estimates:
        caption.append("dashed: estimates")
    if any(r.get("quality") == "noisy" for r in rows):
        caption.append("ringed: noisy timing")
    if left_out:
        caption.append(f"{left_out} unusable timing{'s' * (left_out > 1)} left out (in the table, marked ✗)")
    ax.set_title("; ".join(caption), loc="left", fontsize=8)
    seqs = sorted({r["seq_len"] for r in rows})
    ax.set_xscale("log", base=2)
    ax.set_xticks(seqs, [str(n) for n in seqs])
    ax.minorticks_off()
    ax.set_ylim(0, max(max(r["p50_ms"], *(r.get("p50_ci") or r.get("ms_range") or ())) for r in rows) * 1.15)
    ax.set_xlabel("sequence length")
    ax.set_ylabel(f"{HEADLINE} latency (ms)")
    ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


_CHARTS = (
    (MAIN_CHART, "ALBERT vs BERT: parameters and compute", _overview),
    ("presets", "Parameters of the presets", _presets),
    ("file_sizes", "File size by format and scheme", _file_sizes),
    ("accuracy_vs_size", "Accuracy vs size", _accuracy),
    ("latency", "Latency vs sequence length, per file and device", _latency),
    ("adaptive", "Adaptive depth: accuracy vs speed-up over the exit rule's settings", adaptive_chart),
)
