"""runtime.Session's choices the profiler sweeps: the TFLite delegate and the onnxruntime
execution provider, checked against what the runtimes themselves report."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from albert_edge.errors import RuntimeUnavailable
from albert_edge.runtime import Session


@pytest.mark.parametrize("delegate, applied", [("xnnpack", True), ("none", False)])
def test_tflite_delegate_is_really_applied(tflite_file, delegate, applied):
    """The interpreter logs on stderr when it applies its default XNNPACK delegate."""
    code = textwrap.dedent(f"""
        from albert_edge.runtime import Session
        from albert_edge.profile.inputs import fixed_feeds
        session = Session({str(tflite_file)!r}, num_threads=1, delegate={delegate!r}, weights_once=False)
        session.run(fixed_feeds(1, 8, 400))
        print(session.accelerator)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == delegate
    assert ("XNNPACK delegate" in done.stderr) == applied, done.stderr


def test_onnx_provider_reported_and_checked(onnx_file):
    assert Session(onnx_file, provider="cpu").accelerator == "CPUExecutionProvider"
    assert Session(onnx_file, provider="CPUExecutionProvider").accelerator == "CPUExecutionProvider"
    with pytest.raises(RuntimeUnavailable, match="TensorrtExecutionProvider is not in this onnxruntime build"):
        Session(onnx_file, provider="tensorrt")
    with pytest.raises(RuntimeUnavailable, match="unknown execution provider 'npu'"):
        Session(onnx_file, provider="npu")
    with pytest.raises(RuntimeUnavailable, match="unknown TFLite delegate"):
        Session(onnx_file.with_suffix(".tflite"), delegate="gpu")


def test_ops_trace_is_written_and_ended(onnx_file, tmp_path):
    from albert_edge.profile.inputs import fixed_feeds
    from albert_edge.profile.ops import onnx_breakdown

    session = Session(onnx_file, num_threads=1, ops_trace=tmp_path / "trace")
    call = session.prepare(fixed_feeds(1, 8, 400))
    for _ in range(3):
        call()
    trace = session.end_profiling()
    assert trace.parent == tmp_path and trace.name.startswith("trace")
    breakdown = onnx_breakdown(trace)
    assert breakdown["calls"] == 2 and len(breakdown["layers"]) == 4
    assert session.end_profiling() is None  # once only


@pytest.mark.parametrize("available, expected", [
    (["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"],
     ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]),
    (["TensorrtExecutionProvider", "CPUExecutionProvider"], ["TensorrtExecutionProvider", "CPUExecutionProvider"]),
])
def test_tensorrt_leaves_to_cuda_what_it_does_not_take(available, expected):
    """onnxruntime's advice for TensorRT: CUDA after it, where the build has it, then the CPU."""
    from albert_edge.runtime.onnx_engine import ort_providers

    assert ort_providers("tensorrt", available) == expected
