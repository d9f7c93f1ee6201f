"""The per-operator breakdown on synthetic profiler output: onnxruntime trace events and LiteRT
profiler events shaped as the runtimes write them, with one call much slower than the others.
Each figure is the median of per-call sums, so that call moves none of them; the whole call is
set against the kernels and the unprofiled latency."""

from __future__ import annotations

import json

import pytest

from albert_edge.profile.ops import onnx_breakdown, union
from albert_edge.profile.tflite_ops import summarize

LAYER = "/encoder/albert_layer_groups.{g}/albert_layers.0/attention{suffix}/{op}"
PREEMPTED = 2  # the profiled call that is slow, in its layer at depth 2


def _onnx_trace(path, calls=5, threads=1, call_us=400):
    """``calls`` + 1 model_run events (the first allocates), each running the embeddings and four
    layer applications (G=2, L=4) of a MatMul and an Add; in call PREEMPTED the MatMul of depth 2
    takes 100 times as long. With ``threads`` = 2 the Add of each layer runs beside its MatMul."""
    events, ts = [{"cat": "Session", "name": "session_initialization", "ts": 0, "dur": 10, "tid": 1}], 100
    for call in range(calls + 1):
        slow = call - 1 == PREEMPTED
        events.append({"cat": "Session", "name": "model_run", "ts": ts, "dur": call_us + (2000 if slow else 0),
                       "tid": 1, "ph": "X", "args": {}})
        t = ts + 5
        nodes = [("/embeddings/Gather", "Gather", 10)]
        for depth in range(4):
            suffix = "_1" if depth % 2 else ""
            matmul = 20 * (100 if slow and depth == 2 else 1)
            nodes += [(LAYER.format(g=depth // 2, suffix=suffix, op="MatMul"), "MatMul", matmul),
                      (LAYER.format(g=depth // 2, suffix=suffix, op="Add"), "Add", 10)]
        for i, (name, op, dur) in enumerate(nodes):
            parallel = threads > 1 and op == "Add"
            start = t - 12 if parallel else t  # inside the MatMul before it, on another thread
            events.append({"cat": "Node", "name": f"{name}_kernel_time", "ts": start, "dur": dur, "ph": "X",
                           "tid": 2 if parallel else 1, "args": {"op_name": op, "provider": "CPUExecutionProvider"}})
            t = max(t, start + dur) + 2
        ts += call_us + (2000 if slow else 0) + 50
    path.write_text(json.dumps(events))
    return path


def test_onnx_medians_over_calls_ignore_a_preempted_call(tmp_path):
    ops = onnx_breakdown(_onnx_trace(tmp_path / "trace.json"), latency_p50=0.3)
    assert ops["available"] and ops["calls"] == 5 and ops["spread"] == "p10-p90 over 5 calls"
    assert [row["ms"] for row in ops["layers"]] == pytest.approx([0.03] * 4)  # not 2.0 at depth 2
    assert ops["layers"][2]["ms_high"] > 0.5  # the slow call shows in the spread only
    assert {row["op"]: row["ms"] for row in ops["op_types"]} == pytest.approx({"MatMul": 0.08, "Add": 0.04,
                                                                                 "Gather": 0.01})
    assert ops["outside_layers"] == [{"part": "embeddings", "ms": pytest.approx(0.01), "ms_low": pytest.approx(0.01),
                                      "ms_high": pytest.approx(0.01), "share": pytest.approx(0.01 / 0.13, abs=1e-4)}]
    assert ops["total_ms"] == pytest.approx(0.13) and ops["kernels_union_ms"] == pytest.approx(0.13)
    # the whole call: 0.4 ms profiled, 0.13 ms of it in kernels; 0.3 ms without the profiler
    assert ops["call_ms"] == pytest.approx(0.4) and ops["outside_kernels_ms"] == pytest.approx(0.27)
    assert ops["latency_p50_ms"] == 0.3 and ops["profiler_overhead_ms"] == pytest.approx(0.1)
    assert "overlapped" not in (ops["reconcile_note"] or "")


def test_onnx_kernels_on_parallel_threads_are_counted_once(tmp_path):
    ops = onnx_breakdown(_onnx_trace(tmp_path / "trace.json", threads=2, call_us=120), latency_p50=0.1)
    assert ops["total_ms"] == pytest.approx(0.13)  # the sum, as before
    assert ops["kernels_union_ms"] == pytest.approx(0.09)  # each Add ran beside its MatMul
    assert ops["call_ms"] == pytest.approx(0.12) and ops["outside_kernels_ms"] == pytest.approx(0.03)
    assert "kernels overlapped on parallel threads" in ops["reconcile_note"]


def test_union_of_intervals():
    assert union([(0, 10), (5, 12), (20, 25), (21, 22)]) == 17
    assert union([]) == 0


def _litert_events(calls=5, invoke_us=200):
    """(tag, event type, microseconds, node, subgraph) as tflite_ops._events gives them: per call an
    Invoke, a builtin GATHER, then four layers of XNNPACK operators (one Softmax each) and a head; in
    call PREEMPTED the layer at depth 2 takes 1000 times as long."""
    events = []
    for call in range(calls):
        slow = call == PREEMPTED
        events.append((b"Invoke", 1, invoke_us + (6000 if slow else 0), 0, 0))
        events.append((b"GATHER", 2, 5, 1, 0))
        for depth in range(4):
            scale = 1000 if slow and depth == 2 else 1
            events += [(b"Fully Connected (NC, F32) GEMM", 8, 6 * scale, 0, 0),
                       (b"Softmax (NC, F32)", 8, 2 * scale, 1, 0), (b"Add (ND)", 8, 0, 2, 0)]
        events.append((b"TANH", 2, 3, 40, 0))
    return events


def _litert_loop_events(calls=3):
    """The same four layers as two WHILE loops of two applications (G=2), as LiteRT records a loop
    file: the WHILE's event spans its loop; each invocation of the condition (subgraphs 1, 3) and the
    body (2, 4) opens with an Invoke of that subgraph, whose kernels carry the subgraph's index."""
    events = []
    for _ in range(calls):
        events += [(b"Invoke", 1, 200, 0, 0), (b"GATHER", 2, 5, 1, 0)]
        for cond, body in ((1, 2), (3, 4)):
            events += [(b"WHILE", 2, 50, 2, 0)]
            for turn in range(3):  # condition, body, condition, body, condition
                events += [(b"Invoke", 1, 2, 0, cond), (b"LESS", 2, 1, 0, cond)]
                if turn < 2:
                    events += [(b"Invoke", 1, 9, 0, body), (b"Fully Connected (NC, F32) GEMM", 8, 6, 0, body),
                               (b"Softmax (NC, F32)", 8, 2, 1, body)]
        events.append((b"TANH", 2, 3, 4, 0))
    return events


def test_tflite_loop_file_applications_are_the_body_invocations():
    ops = summarize(_litert_loop_events(), (4, 2), latency_p50=0.15)
    assert ops["available"] and ops["calls"] == 3 and "WHILE bodies" in ops["layers_from"]
    assert [(row["depth"], row["group"], row["application"]) for row in ops["layers"]] == [
        (0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 1, 1)]
    assert [row["ms"] for row in ops["layers"]] == pytest.approx([0.008] * 4)
    assert {row["part"]: row["ms"] for row in ops["outside_layers"]} == pytest.approx(
        {"before the layers (embeddings)": 0.005, "after the layers (pooler, head)": 0.003,
         "the layer loops' conditions (WHILE)": 0.006})
    assert "WHILE" not in {row["op"] for row in ops["op_types"]}  # its span is its body's kernels
    assert ops["total_ms"] == pytest.approx(0.046)
    assert any(row["node"] == "layer 3: Softmax (NC, F32) [subgraph 4, XNNPACK op 1]" for row in ops["top_nodes"])
    unknown = summarize(_litert_loop_events(), (6, 2))  # a manifest whose depth the loops do not run
    assert unknown["layers"] == [] and unknown["layers_from"] is None


def test_tflite_medians_over_calls_ignore_a_preempted_call():
    """With each operator's mean over calls (the old summary), layer 2 took 1.61 of 1.64 ms: 98%."""
    ops = summarize(_litert_events(), (4, 2), latency_p50=0.15)
    assert ops["available"] and ops["calls"] == 5 and ops["source"].startswith("LiteRT")
    assert [(row["group"], row["application"]) for row in ops["layers"]] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [row["ms"] for row in ops["layers"]] == pytest.approx([0.008] * 4)
    assert [row["share"] for row in ops["layers"]] == pytest.approx([0.008 / 0.04] * 4, abs=1e-4)
    assert {row["part"]: row["ms"] for row in ops["outside_layers"]} == pytest.approx(
        {"before the layers (embeddings)": 0.005, "after the layers (pooler, head)": 0.003})
    assert ops["top_nodes"][0]["ms"] == pytest.approx(0.006) and ops["top_nodes"][0]["node"].startswith("layer ")
    assert ops["total_ms"] == pytest.approx(0.04) and ops["kernels_union_ms"] is None
    assert ops["call_ms"] == pytest.approx(0.2) and ops["outside_kernels_ms"] == pytest.approx(0.16)
    assert ops["profiler_overhead_ms"] == pytest.approx(0.05)
    assert "whole microseconds" in ops["reconcile_note"]  # 18 operators of 1 us each in 0.2 ms


def test_reconcile_says_why_instead_of_a_negative_remainder():
    ops = summarize(_litert_events(invoke_us=30), (4, 2), latency_p50=0.05)
    assert ops["outside_kernels_ms"] is None and "add up to more than the profiled call" in ops["reconcile_note"]
    assert ops["profiler_overhead_ms"] == pytest.approx(-0.02)
    assert "shorter than the unprofiled p50" in ops["reconcile_note"]
    no_latency = summarize(_litert_events(), (4, 2))
    assert no_latency["latency_p50_ms"] is None and "no unprofiled latency" in no_latency["reconcile_note"]
