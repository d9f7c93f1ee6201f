"""Per-operator time of a .tflite file from LiteRT's own profiler.

ai-edge-litert's Python API offers no per-operator profiler: the classic ``Interpreter`` has no
profiler hook (``experimental_force_delegate_node_profiling`` only matters to a profiler set from
C++), the Python ``CompiledModel`` cannot switch profiling on, ``profiling_info_pb2`` and
``model_runtime_info_pb2`` are output formats of the C++ benchmark tool (not in the wheel), and
``tools/benchmark_litert_model.py`` times whole calls. The ``libLiteRt.so`` the wheel ships,
however, exports LiteRT's C API with the profiler (``LiteRtCompiledModelGetProfiler``,
``LiteRtGetProfilerEvents``), and profiling is switched on by the runtime options payload
(``enable_profiling = true``). This module calls that C API through ctypes, with the one class
``Session`` runs .tflite files with (``runtime_memory.CompiledTFLite``: CPU, XNNPACK, the weight
cache) plus the profiling payload, its profiler events read per call. Each event is
a builtin kernel (tagged with the TFLite op name, node index in ``event_metadata1``) or an
XNNPACK operator inside a delegated partition (tagged with XNNPACK's name, e.g. "Fully
Connected (NC, QD8, F32, QC8W) GEMM"), in execution order.

TFLite files carry no module path in their node names, so the time per shared-layer application
comes from the execution order: the encoder's L layers run the same operators L times (see
``layer_blocks``). In a loop file (``convert --layers loop``) each application is one invocation
of a WHILE body, which the profiler records like the main graph, tagged with its subgraph index
(``event_metadata2``).
"""

from __future__ import annotations

import ctypes as C
import os
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from ..runtime import compiled as runtime_memory
from ..errors import RuntimeUnavailable
from .inputs import read_manifest
from .ops import Place, summarize_calls

__all__ = ["tflite_breakdown", "SOURCE", "layer_blocks"]

SOURCE = "LiteRT CompiledModel profiler (libLiteRt.so C API through ctypes)"
_INVOKE_TAG = b"Invoke"
_RESOLUTION_MS = 0.001  # LiteRT reports whole microseconds per operator
_OPERATOR_EVENTS = (2, 4, 8)  # operator, delegate operator, delegate-profiled operator (tflite::Profiler::EventType)
_CONTROL_FLOW = ("WHILE",)  # operators whose event spans the subgraphs they run
_CONDITION = "condition"
Event = tuple[bytes, int, int, int, int]  # tag, event type, microseconds, node index, subgraph index
Kernel = tuple[str, str, float, "int | str | None"]  # node, op type, ms, where (see _per_call)


class _Memory(C.Structure):
    _fields_ = [("total", C.c_size_t), ("in_use", C.c_size_t), ("private", C.c_size_t)]


class _Event(C.Structure):  # ProfiledEventData (litert/c/litert_profiler_event.h)
    _fields_ = [("tag", C.c_char_p), ("event_type", C.c_int), ("start_us", C.c_uint64), ("elapsed_us", C.c_uint64),
                ("begin_mem", _Memory), ("end_mem", _Memory), ("metadata1", C.c_int64), ("metadata2", C.c_int64),
                ("source", C.c_int)]


_PROFILING = (b"runtime_options_string", b"enable_profiling = true\n")


def _events(session: runtime_memory.CompiledTFLite, profiler: C.c_void_p) -> list[Event]:
    """(tag, event type, microseconds, node index, subgraph index) of every event since the last reset."""
    count = C.c_int()
    session.call("LiteRtGetNumProfilerEvents", profiler, C.byref(count))
    events = (_Event * count.value)()
    session.call("LiteRtGetProfilerEvents", profiler, count, events)
    return [(e.tag or b"?", e.event_type, e.elapsed_us, e.metadata1, e.metadata2) for e in events]


def tflite_breakdown(path: str | os.PathLike, threads: int | None, feeds: dict[str, np.ndarray],
                     calls: int, latency_p50: float | None = None) -> dict[str, Any]:
    """The breakdown (``ops.summarize_calls``) of ``path`` run on ``feeds`` (int32 ids):
    ``calls`` profiled calls after one unprofiled call that allocates. ``latency_p50``: the
    latency of the same feeds timed without the profiler, in ms."""
    path = Path(path)
    # Declined (RuntimeUnavailable) where the route is not available, e.g. on an ARMv8.0 CPU
    # (Raspberry Pi 4), where CompiledModel dies with SIGILL.
    session = runtime_memory.CompiledTFLite(path, threads, payloads=(_PROFILING,))
    try:
        profiler = C.c_void_p()
        try:
            session.call("LiteRtCompiledModelGetProfiler", session.compiled, C.byref(profiler))
        except AttributeError:
            raise RuntimeUnavailable(f"{runtime_memory.library_path()}: no LiteRT profiler C API in this "
                                     "ai-edge-litert") from None
        if not profiler:
            raise RuntimeUnavailable(f"{path}: LiteRT made no profiler for it")
        session.run(feeds)  # allocates and packs weights: not profiled
        session.call("LiteRtResetProfiler", profiler)
        session.call("LiteRtStartProfiler", profiler)
        for _ in range(calls):
            session.run(feeds)
        session.call("LiteRtStopProfiler", profiler)
        events = _events(session, profiler)
    finally:
        session.close()
    return summarize(events, _layer_config(path), latency_p50)


def _layer_config(path: Path) -> tuple[int, int] | None:
    """(L, G) from the manifest beside the file, when it says."""
    config = read_manifest(path.parent / "manifest.json").get("config") or {}
    layers, groups = config.get("num_hidden_layers"), config.get("num_hidden_groups", 1)
    return (layers, groups) if isinstance(layers, int) and isinstance(groups, int) and layers > 1 else None


def _per_call(events: list[Event]) -> tuple[list[list[Kernel]], list[float]]:
    """The operator events of each call, split at each Invoke of the main graph, and each call's
    Invoke time in ms.

    Each kernel is (node, op type, ms, where): where is None in the main graph, ``_CONDITION`` in
    a WHILE's condition, and the body's invocation count within the call (0, 1, ...) in a WHILE's
    body. LiteRT's profiler records the subgraphs a WHILE runs like the main graph, tagged with
    their subgraph index, each invocation opened by an Invoke event of that subgraph. The WHILE's
    own event spans its whole loop, so it is left out (its body's kernels are counted instead).
    A WHILE evaluates its condition first: the first subgraph it invokes is the condition, the
    others its body."""
    per_call: list[list[Kernel]] = []
    invoke_ms: list[float] = []
    conditions: set[int] = set()
    invocation, opened_loop, where = -1, False, None
    for tag, kind, micros, node, subgraph in events:
        if tag == _INVOKE_TAG and kind == 1:
            if subgraph == 0:
                per_call.append([])
                invoke_ms.append(micros / 1000.0)
                invocation, opened_loop, where = -1, False, None
                continue
            if opened_loop:
                conditions.add(subgraph)
                opened_loop = False
            if subgraph in conditions:
                where = _CONDITION
            else:
                invocation += 1
                where = invocation
        elif kind in _OPERATOR_EVENTS and per_call:
            op = tag.decode(errors="replace")
            if subgraph == 0 and op in _CONTROL_FLOW:
                opened_loop = True
                continue
            at = f"node {node}" if kind == 2 else f"XNNPACK op {node}"
            name = f"{op} [{at}]" if subgraph == 0 else f"{op} [subgraph {subgraph}, {at}]"
            per_call[-1].append((name, op, micros / 1000.0, where if subgraph else None))
    kept = [i for i, c in enumerate(per_call) if c]
    return [per_call[i] for i in kept], [invoke_ms[i] for i in kept]


def layer_blocks(ops: list[str], layers: int) -> list[tuple[int, int]] | None:
    """(start, end) of each of the ``layers`` layer applications in ``ops`` (op types in execution
    order), or None when they cannot be told apart.

    Every application runs the same operators, though not always in the same order (independent
    reshapes and transposes are scheduled differently from layer to layer). An op type that runs
    exactly once per layer (softmax, GELU; the most evenly spaced one) marks each application; the
    blocks start a fixed number of operators before each mark, that number being the smallest for
    which every block holds the same operators: a later start would pull the head's operators
    into the last block.
    """
    positions: dict[str, list[int]] = defaultdict(list)
    for i, op in enumerate(ops):
        positions[op].append(i)
    # Marks at the most even spacing first: an op scheduled at the same place in every layer.
    candidates = sorted((m for m in positions.values() if len(m) == layers), key=lambda m: np.ptp(np.diff(m)))
    for marks in candidates:
        period = int(np.median(np.diff(marks)))
        for back in range(period):
            starts = [m - back for m in marks]
            if starts[0] < 0 or starts[-1] + period > len(ops):
                continue
            bounds = list(zip(starts, starts[1:] + [starts[-1] + period]))
            first = Counter(ops[bounds[0][0]:bounds[0][1]])
            if all(Counter(ops[a:b]) == first for a, b in bounds[1:]):
                return bounds
    return None


def summarize(events: list[Event], config: tuple[int, int] | None,
              latency_p50: float | None = None) -> dict[str, Any]:
    """The breakdown (``ops.summarize_calls``) of LiteRT profiler events; ``config``: (L, G) to
    find the layer applications with, ``latency_p50``: the latency timed without the profiler.

    A loop file's applications are its WHILE bodies' invocations; an unrolled file's are found in
    the execution order (:func:`layer_blocks`)."""
    calls, invoke_ms = _per_call(events)
    if not calls:
        return {"available": False, "source": SOURCE, "note": "LiteRT's profiler recorded no operator events"}
    # Calls run the same operators in the same order: position j of each call is one operator.
    width = min(len(c) for c in calls)
    names, kinds, wheres = ([calls[0][j][k] for j in range(width)] for k in (0, 1, 3))
    depth_of: list[int | None] = [w if isinstance(w, int) else None for w in wheres]
    inside = [j for j in range(width) if depth_of[j] is not None]
    layers_from = None
    if inside:
        if config and depth_of[inside[-1]] + 1 == config[0]:
            layers_from = "the WHILE bodies' invocations: one per layer"
    elif config and (blocks := layer_blocks(kinds, config[0])):
        layers_from = "execution order: blocks of the same operators, one per layer"
        for depth, (a, b) in enumerate(blocks):
            depth_of[a:b] = [depth] * (b - a)
        inside = [j for j in range(width) if depth_of[j] is not None]
    places: list[Place | None] = [None] * width
    for j in range(width):
        if wheres[j] == _CONDITION:
            places[j] = "the layer loops' conditions (WHILE)"
        elif depth_of[j] is not None:
            if layers_from:  # else a body whose applications the manifest cannot place: no place
                places[j] = _application(depth_of[j], *config)
                names[j] = f"layer {depth_of[j]}: {names[j]}"
        elif inside:
            places[j] = "before the layers (embeddings)" if j < inside[0] else "after the layers (pooler, head)"
    nodes = {j: (names[j], kinds[j], places[j]) for j in range(width)}
    return {
        "source": SOURCE,
        **summarize_calls([{j: c[j][2] for j in range(width)} for c in calls], nodes, call_ms=invoke_ms,
                          latency_p50=latency_p50, resolution_ms=_RESOLUTION_MS),
        "layers_from": layers_from,
    }


def _application(depth: int, count: int, groups: int) -> Place:
    """(depth, group, inner layer, application) of the layer at ``depth`` of ``count`` over ``groups``."""
    group = depth * groups // count  # the group whose weights this depth uses
    first = next(d for d in range(count) if d * groups // count == group)
    return depth, group, 0, depth - first
