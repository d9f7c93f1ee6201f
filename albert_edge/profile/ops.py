"""Per-operator cost: onnxruntime's profiler trace read into time per op type, the costliest nodes
and the time of each application of ALBERT's shared layers. TFLite files are profiled by
``tflite_ops`` (LiteRT's profiler); where it cannot run, the breakdown says so instead of guessing.

Both formats are summarized the same way (:func:`summarize_calls`): each profiled call's kernels
are added up per op type, per layer application, per part outside the layers and in all, and each
figure is the median of those per-call sums with the 10th and 90th percentiles beside it, so one
preempted call moves none of them. The whole call as the profiler saw it is set against the
kernels and against the latency timed without the profiler."""

from __future__ import annotations

import bisect
import json
import re
from collections import Counter, defaultdict
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["onnx_breakdown", "summarize_calls", "tflite_unavailable", "tflite_unavailable_note", "layer_of",
           "TOP_NODES"]

TOP_NODES = 15
SPREAD = (10, 90)  # percentiles over calls beside each median
_KERNEL = "_kernel_time"
# torch.onnx names nodes by module path; a shared module applied again gets "_1", "_2", ... on the
# module component that was re-entered: /encoder/albert_layer_groups.0/albert_layers.0/attention_1/MatMul
_GROUP = re.compile(r"albert_layer_groups\.(\d+)/albert_layers\.(\d+)")
_APPLICATION = re.compile(r"_(\d+)$")
_FUSED = "(fused by onnxruntime, no module path)"

_ELSEWHERE = "TFLite's benchmark_model --enable_op_profiling=true gives it elsewhere"
TFLITE_NOTE = ("per-operator profiling of .tflite files needs ai-edge-litert 2.3 or newer (LiteRT's profiler "
               f"in its libLiteRt.so; the TFLite interpreters' Python APIs have none); {_ELSEWHERE}")
TFLITE_NONE_NOTE = ("per-operator times come from LiteRT's CompiledModel, which always runs XNNPACK on the CPU; "
                    "the builtin kernels alone (--delegate none) cannot be profiled from Python: see the "
                    "xnnpack rows")

# Where a kernel belongs: (depth, group, inner layer, application) inside the shared layers, or the
# name of a part outside them.
Place = tuple[int, int, int, int] | str


def layer_of(node_name: str) -> tuple[int, int, int] | None:
    """(group, inner layer, application) of a node inside ALBERT's shared layers, or None outside
    them. ``application`` counts how many times that group's weights were used before this node."""
    match = _GROUP.search(node_name)
    if not match:
        return None
    parts = node_name[match.end():].strip("/").split("/")[:-1]  # module path, without the node's own name
    applications = [int(m.group(1)) for p in parts if (m := _APPLICATION.search(p))]
    return int(match.group(1)), int(match.group(2)), max(applications, default=0)


def onnx_breakdown(trace: Path, latency_p50: float | None = None) -> dict[str, Any]:
    """The breakdown (:func:`summarize_calls`) of the runs in an onnxruntime trace, the first run
    (which allocates) left out when there are others. ``latency_p50``: the same input's latency
    timed without the profiler, in ms."""
    events = json.loads(Path(trace).read_text(encoding="utf-8"))
    runs = sorted((e["ts"], e["ts"] + e.get("dur", 0)) for e in events
                  if e.get("cat") == "Session" and e.get("name") == "model_run")
    runs = runs[1:] if len(runs) > 1 else runs
    starts = [start for start, _ in runs]
    calls: list[dict[str, float]] = [{} for _ in runs]
    spans: list[list[tuple[float, float]]] = [[] for _ in runs]
    op_of: dict[str, str] = {}
    for event in events:
        name, ts = event.get("name", ""), event.get("ts", 0)
        if event.get("cat") != "Node" or not name.endswith(_KERNEL):
            continue
        i = bisect.bisect_right(starts, ts) - 1  # the run this kernel started in
        if i < 0 or ts > runs[i][1]:
            continue
        node, dur = name[: -len(_KERNEL)], float(event.get("dur", 0))
        calls[i][node] = calls[i].get(node, 0.0) + dur / 1000.0
        spans[i].append((ts, ts + dur))
        op_of[node] = (event.get("args") or {}).get("op_name", "?")
    layer = {node: key for node in op_of if (key := layer_of(node)) is not None}
    # Groups are applied in order, so sorting (group, application, inner) gives the depth order.
    depth = {key: d for d, key in enumerate(sorted(set(layer.values()), key=lambda k: (k[0], k[2], k[1])))}
    nodes = {node: (node, op, (depth[layer[node]], *layer[node]) if node in layer
                    else node.split("/")[1] if node.startswith("/") else _FUSED) for node, op in op_of.items()}
    return {"source": "onnxruntime profiler",
            **summarize_calls(calls, nodes, call_ms=[(end - start) / 1000.0 for start, end in runs],
                              kernels_union_ms=[union(s) / 1000.0 for s in spans], latency_p50=latency_p50,
                              resolution_ms=0.001)}  # the trace's times are whole microseconds


def union(spans: list[tuple[float, float]]) -> float:
    """How long at least one of the (start, end) intervals was open: kernels that overlap on
    parallel threads count once."""
    total, reached = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reached:
            total += end - max(start, reached)
            reached = end
    return total


def _band(values) -> dict[str, float]:
    low, mid, high = np.percentile(values, [SPREAD[0], 50, SPREAD[1]])
    return {"ms": float(mid), "ms_low": float(low), "ms_high": float(high)}


def _sums(calls: list[dict[Hashable, float]], key) -> dict[Hashable, list[float]]:
    """Per-call sums of the kernels ``key(kernel)`` groups together (a None key: left out)."""
    sums: dict[Hashable, list[float]] = defaultdict(lambda: [0.0] * len(calls))
    for i, call in enumerate(calls):
        for kernel, ms in call.items():
            if (k := key(kernel)) is not None:
                sums[k][i] += ms
    return sums


def summarize_calls(calls: list[dict[Hashable, float]], nodes: dict[Hashable, tuple[str, str, Place | None]],
                    call_ms: list[float], kernels_union_ms: list[float] | None = None,
                    latency_p50: float | None = None, resolution_ms: float | None = None) -> dict[str, Any]:
    """The per-operator breakdown of profiled calls, in ms per call.

    ``calls``: for each profiled call, its kernels' times (kernel -> ms); ``nodes``: kernel ->
    (name, op type, place), place as in :data:`Place` or None; ``call_ms``: each call's whole time
    as the profiler saw it; ``kernels_union_ms``: per call, how long some kernel was running (where
    the profiler gives start times); ``latency_p50``: the latency timed without the profiler.

    Op types, layer applications, parts outside the layers and the kernels' total are summed per
    call; each row is the median of those sums over the calls with the 10th-90th percentiles
    (``ms_low``, ``ms_high``). Top nodes are each kernel's median over the calls. ``share`` is a
    row's median over the median total (medians of parts need not add up to the median of the whole).
    """
    if not calls or not nodes:
        return {"available": False, "note": "the profiler recorded no kernel events"}
    n = len(calls)
    totals = _sums(calls, lambda kernel: "all")["all"]
    total = float(np.median(totals))

    def rows(sums: dict[Hashable, list[float]], row) -> list[dict[str, Any]]:
        bands = {key: _band(values) for key, values in sums.items()}
        return [{**row(key), **band, "share": round(band["ms"] / total, 4) if total else 0.0}
                for key, band in sorted(bands.items(), key=lambda kv: -kv[1]["ms"])]

    count = Counter(op for _, op, _ in nodes.values())
    place = {kernel: p for kernel, (_, _, p) in nodes.items()}
    layers = rows(_sums(calls, lambda k: place[k] if isinstance(place[k], tuple) else None),
                  lambda key: dict(zip(("depth", "group", "inner", "application"), key)))
    top = rows({kernel: [call.get(kernel, 0.0) for call in calls] for kernel in nodes},
               lambda kernel: {"node": nodes[kernel][0], "op": nodes[kernel][1]})[:TOP_NODES]
    return {
        "available": True,
        "calls": n,
        "spread": f"p{SPREAD[0]}-p{SPREAD[1]} over {n} calls",
        "total_ms": total,
        "total_ms_low": _band(totals)["ms_low"],
        "total_ms_high": _band(totals)["ms_high"],
        "resolution_ms": resolution_ms,
        "op_types": rows(_sums(calls, lambda k: nodes[k][1]), lambda op: {"op": op, "nodes": count[op]}),
        "top_nodes": top,
        "layers": sorted(layers, key=lambda row: row["depth"]),
        "outside_layers": rows(_sums(calls, lambda k: place[k] if isinstance(place[k], str) else None),
                               lambda part: {"part": part}),
        **reconcile(totals, call_ms, kernels_union_ms, latency_p50,
                    None if resolution_ms is None else resolution_ms * len(nodes)),
    }


def reconcile(kernels: list[float], call_ms: list[float], union_ms: list[float] | None, latency_p50: float | None,
              rounding_ms: float | None) -> dict[str, Any]:
    """The kernels set against the whole profiled call and the unprofiled latency, medians over
    the calls: what lies outside the kernels (framework work between them: input copies,
    allocation, scheduling, and the profiler's own records) and what the profiler costs.
    ``rounding_ms``: how far the kernels' sum can be off when each kernel time is rounded."""
    call, kernel_sum = float(np.median(call_ms)), float(np.median(kernels))
    inside = union_ms if union_ms is not None else kernels
    outside = float(np.median(np.subtract(call_ms, inside)))
    notes = []
    if union_ms is not None and kernel_sum > 1.01 * np.median(union_ms):
        notes.append(f"kernels overlapped on parallel threads: their sum ({kernel_sum:.3f} ms) is more than the "
                     f"time some kernel was running ({np.median(union_ms):.3f} ms), which 'outside kernels' is "
                     "counted from")
    if rounding_ms and rounding_ms > 0.05 * call:
        notes.append(f"each operator's time is whole microseconds, so the kernels' sum can be off by up to "
                     f"{rounding_ms:.3f} ms (operators under 1 us read 0): part of 'outside kernels' may be "
                     "kernel time")
    if outside < 0:
        notes.append(f"the kernels add up to more than the profiled call ({np.median(inside):.3f} > {call:.3f} ms)"
                     + ("" if rounding_ms else ": they overlapped on parallel threads")
                     + "; nothing is counted outside them")
    overhead = None if latency_p50 is None else call - latency_p50
    if latency_p50 is None:
        notes.append("no unprofiled latency of this input to compare with (real text: the breakdown runs the "
                     "first sentence)")
    elif overhead < 0:
        notes.append(f"the profiled call is {-overhead:.3f} ms shorter than the unprofiled p50: the latency also "
                     "holds the work around the runtime's own call (Python binding, input and output copies)")
    if latency_p50 is not None and kernel_sum > latency_p50:
        notes.append(f"the kernels' sum is above the unprofiled p50 ({kernel_sum:.3f} > {latency_p50:.3f} ms): the "
                     "profiler slows each kernel too, so the shares say more than the absolute times")
    return {
        "call_ms": call, "call_ms_low": _band(call_ms)["ms_low"], "call_ms_high": _band(call_ms)["ms_high"],
        "kernels_union_ms": None if union_ms is None else float(np.median(union_ms)),
        "outside_kernels_ms": outside if outside >= 0 else None,
        "latency_p50_ms": latency_p50,
        "profiler_overhead_ms": overhead,
        "reconcile_note": "; ".join(notes) or None,
    }


PTE_NOTE = ("per-operator times of .pte files need ExecuTorch's event tracer (ETDump), which the Python "
            "bindings albert-edge runs .pte files with do not record")


def tflite_unavailable(note: str = TFLITE_NOTE) -> dict[str, Any]:
    return {"available": False, "source": None, "note": note}


def tflite_unavailable_note(error: str, cpu_reason: str | None) -> str:
    """Why a .tflite file's operators were not profiled. ``cpu_reason``: why this CPU cannot run
    LiteRT's CompiledModel (runtime.compiled.unavailable_reason), or None when the CPU is not the
    reason; then ``error`` (what failed) and what would change it. Where the CPU is the reason no
    ai-edge-litert release is the cure, so none is named."""
    if cpu_reason:
        return (f"per-operator profiling of .tflite files is not available on this CPU: it runs in LiteRT's "
                f"CompiledModel (its profiler), and {cpu_reason}; {_ELSEWHERE}")
    return f"{error}; {TFLITE_NOTE}"
