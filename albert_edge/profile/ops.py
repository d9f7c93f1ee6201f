"""Per-operator cost: onnxruntime's profiler trace read into time per op type, the costliest nodes
and the time of each application of ALBERT's shared layers. TFLite files are profiled by
``tflite_ops`` (LiteRT's profiler); where it cannot run, the breakdown says so instead of guessing."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["onnx_breakdown", "tflite_unavailable", "tflite_unavailable_note", "layer_of", "TOP_NODES"]

TOP_NODES = 15
_KERNEL = "_kernel_time"
# torch.onnx names nodes by module path; a shared module applied again gets "_1", "_2", ... on the
# module component that was re-entered: /encoder/albert_layer_groups.0/albert_layers.0/attention_1/MatMul
_GROUP = re.compile(r"albert_layer_groups\.(\d+)/albert_layers\.(\d+)")
_APPLICATION = re.compile(r"_(\d+)$")

_ELSEWHERE = "TFLite's benchmark_model --enable_op_profiling=true gives it elsewhere"
TFLITE_NOTE = ("per-operator profiling of .tflite files needs ai-edge-litert 2.3 or newer (LiteRT's profiler "
               f"in its libLiteRt.so; the TFLite interpreters' Python APIs have none); {_ELSEWHERE}")
TFLITE_NONE_NOTE = ("per-operator times come from LiteRT's CompiledModel, which always runs XNNPACK on the CPU; "
                    "the builtin kernels alone (--delegate none) cannot be profiled from Python: see the "
                    "xnnpack rows")


def layer_of(node_name: str) -> tuple[int, int, int] | None:
    """(group, inner layer, application) of a node inside ALBERT's shared layers, or None outside
    them. ``application`` counts how many times that group's weights were used before this node."""
    match = _GROUP.search(node_name)
    if not match:
        return None
    parts = node_name[match.end():].strip("/").split("/")[:-1]  # module path, without the node's own name
    applications = [int(m.group(1)) for p in parts if (m := _APPLICATION.search(p))]
    return int(match.group(1)), int(match.group(2)), max(applications, default=0)


def onnx_breakdown(trace: Path) -> dict[str, Any]:
    """Time per op type, the ``TOP_NODES`` costliest nodes and the time per shared-layer
    application from an onnxruntime trace, in ms per call. Each node's time is its median over
    the traced runs (one preempted run does not move it); the first run, which allocates, is left
    out when there are others."""
    events = json.loads(Path(trace).read_text(encoding="utf-8"))
    runs = sorted((e["ts"], e["ts"] + e.get("dur", 0)) for e in events
                  if e.get("cat") == "Session" and e.get("name") == "model_run")
    after = runs[0][1] if len(runs) > 1 else float("-inf")
    durations: dict[str, list[float]] = defaultdict(list)
    node_type: dict[str, str] = {}
    for event in events:
        name = event.get("name", "")
        if event.get("cat") != "Node" or not name.endswith(_KERNEL) or event.get("ts", 0) < after:
            continue
        node = name[: -len(_KERNEL)]
        durations[node].append(float(event.get("dur", 0)) / 1000.0)
        node_type[node] = (event.get("args") or {}).get("op_name", "?")
    by_node = {node: float(np.median(d)) for node, d in durations.items()}
    by_type: dict[str, float] = defaultdict(float)
    count_type: dict[str, int] = defaultdict(int)
    by_layer: dict[tuple[int, int, int], float] = defaultdict(float)
    outside: dict[str, float] = defaultdict(float)
    for node, ms in by_node.items():
        by_type[node_type[node]] += ms
        count_type[node_type[node]] += 1
        layer = layer_of(node)
        if layer is not None:
            by_layer[layer] += ms
        else:
            outside[node.split("/")[1] if node.startswith("/") else "(fused by onnxruntime, no module path)"] += ms
    total = sum(by_node.values())

    def share(ms: float) -> float:
        return round(ms / total, 4) if total else 0.0

    # Groups are applied in order, so sorting (group, application, inner) gives the depth order.
    order = sorted(by_layer, key=lambda k: (k[0], k[2], k[1]))
    return {
        "available": True,
        "source": "onnxruntime profiler",
        "calls": max(len(runs) - 1, 1),
        "total_ms": total,
        "op_types": [{"op": op, "ms": ms, "share": share(ms), "nodes": count_type[op]}
                     for op, ms in sorted(by_type.items(), key=lambda kv: -kv[1])],
        "top_nodes": [{"node": n, "op": node_type[n], "ms": ms, "share": share(ms)}
                      for n, ms in sorted(by_node.items(), key=lambda kv: -kv[1])[:TOP_NODES]],
        "layers": [{"depth": depth, "group": g, "inner": i, "application": a, "ms": by_layer[(g, i, a)],
                    "share": share(by_layer[(g, i, a)])} for depth, (g, i, a) in enumerate(order)],
        "outside_layers": [{"part": part, "ms": ms, "share": share(ms)}
                           for part, ms in sorted(outside.items(), key=lambda kv: -kv[1])],
    }


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
