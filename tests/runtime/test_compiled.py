"""albert_edge.runtime.compiled: TFLite files through LiteRT's CompiledModel (libLiteRt.so's C API)
with XNNPACK's weight cache, each shared weight packed once, with the same outputs as the classic
Interpreter, and none of ai-edge-litert's Python wrapper in the process."""

from __future__ import annotations

import ctypes
import json
import struct
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from albert_edge.runtime import compiled as runtime_memory
from albert_edge.formats.graph import TensorSpec
from albert_edge.errors import RuntimeUnavailable
from albert_edge.runtime import Session


def _needs_the_route() -> None:
    """Skip the tests that run files through the route; the pure ones (output shapes, the CPU
    gate, a damaged file's message) run wherever the route is declined too."""
    if not runtime_memory.available():
        pytest.skip("LiteRT's CompiledModel route not available (ai-edge-litert release, CPU)")


INPUTS = ("input_ids", "attention_mask", "token_type_ids")
# The shared-weight file: one W x W fp32 weight (4 MiB) read by N_USES fully-connected nodes.
WIDTH, N_USES = 1024, 16


@pytest.fixture(scope="module")
def albert_file(tmp_path_factory) -> Path:
    """A tiny ALBERT (4 layers over 2 shared groups) exported to TFLite unrolled: the form whose
    shared weights the Interpreter packs per layer, and only the weight cache once."""
    _needs_the_route()
    from albert_edge.converters import tflite

    from ..converters.conftest import tiny_model

    return tflite.export(tiny_model(), tmp_path_factory.mktemp("mem") / "model.tflite", seq_len=16,
                         layers="unrolled")


@pytest.fixture(scope="module")
def shared_file(tmp_path_factory) -> Path:
    """One 4 MiB weight that 16 FULLY_CONNECTED nodes read (stored once or twice), built by
    the TFLite converter in a separate process so this one never imports tensorflow."""
    _needs_the_route()
    out = tmp_path_factory.mktemp("shared") / "shared.tflite"
    code = textwrap.dedent(f"""
        import numpy as np, tensorflow as tf

        class Shared(tf.Module):
            def __init__(self):
                rng = np.random.default_rng(0)
                self.w = tf.constant(rng.normal(size=({WIDTH}, {WIDTH})).astype(np.float32) / {WIDTH})
                self.b = tf.constant(rng.normal(size=({WIDTH},)).astype(np.float32) / {WIDTH})

            @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name=n) for n in {INPUTS!r}])
            def serve(self, input_ids, attention_mask, token_type_ids):
                x = tf.cast(input_ids + attention_mask + token_type_ids, tf.float32)
                x = tf.tile(tf.expand_dims(x, -1), [1, 1, {WIDTH}]) / 100.0
                for _ in range({N_USES}):  # a layer loop with one shared weight, as in ALBERT
                    x = tf.nn.gelu(tf.matmul(x, self.w) + self.b)
                return {{"last_hidden_state": x, "pooler_output": x[:, 0]}}

        m = Shared()
        conv = tf.lite.TFLiteConverter.from_concrete_functions([m.serve.get_concrete_function()], m)
        open({str(out)!r}, "wb").write(conv.convert())
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return out


def _feeds(batch: int, T: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 99, (batch, T)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[-1, T // 2:] = 0
    types = np.zeros_like(ids)
    types[:, T // 3:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def test_session_uses_the_weights_once_route_by_default(albert_file):
    session = Session(albert_file, num_threads=1)
    assert session.weights_once and session.accelerator == "xnnpack"
    assert not Session(albert_file, num_threads=1, weights_once=False).weights_once
    assert not Session(albert_file, num_threads=1, delegate="none").weights_once
    assert {s.name: (s.dtype, s.shape) for s in session.inputs} == {n: ("int32", (-1, -1)) for n in INPUTS}
    assert {s.name: s.shape for s in session.outputs} == {"last_hidden_state": (-1, -1, 16), "pooler_output": (-1, 16)}


def test_same_outputs_as_the_interpreter_at_every_shape(albert_file):
    once = Session(albert_file, num_threads=1)
    classic = Session(albert_file, num_threads=1, weights_once=False)
    # Grow, shrink, change batch and come back: buffers are re-made per shape, never reused wrongly.
    for batch, T in [(1, 16), (2, 5), (2, 1), (1, 32), (2, 5), (1, 16)]:
        feeds = _feeds(batch, T, seed=T)
        got, want = once.run(feeds), classic.run(feeds)
        assert sorted(got) == sorted(want)
        for name in want:
            assert got[name].shape == want[name].shape, (name, batch, T)
            np.testing.assert_allclose(got[name], want[name], rtol=0, atol=1e-6, err_msg=f"{name} {batch}x{T}")


def test_outputs_are_fresh_arrays(albert_file):
    """The runtime writes each call into the same buffers; what run() returned before must not change."""
    session = Session(albert_file, num_threads=1)
    first = session.run(_feeds(1, 8, seed=1))["last_hidden_state"]
    kept = first.copy()
    session.run(_feeds(1, 8, seed=2))
    np.testing.assert_array_equal(first, kept)


_PEAK = textwrap.dedent("""
    import json, sys
    import numpy as np
    from albert_edge.runtime import Session

    s = Session(sys.argv[1], num_threads=1, weights_once=sys.argv[2] == "1")
    ids = np.ones((1, 8), np.int32)
    s.run({"input_ids": ids, "attention_mask": ids, "token_type_ids": 0 * ids})
    peak = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
    print(json.dumps({"peak_kib": peak, "weights_once": s.weights_once}))
""")


def _peak(path: Path, weights_once: bool) -> dict:
    done = subprocess.run([sys.executable, "-c", _PEAK, str(path), "1" if weights_once else "0"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_shared_weight_is_packed_once(shared_file):
    """16 nodes read one 4 MiB weight: the Interpreter's XNNPACK packs 16 copies (+~60 MiB),
    the weight cache one (LiteRT's own libraries add ~10 MiB). Each route measured in its own
    fresh process."""
    from albert_edge.formats.tflite_reader import read

    # TensorFlow's converter stores the weight once for the 16 nodes (and, depending on its
    # version, a second copy for the first): far fewer copies than nodes.
    weights = [w for w in read(shared_file).weights if w.data.size == WIDTH * WIDTH]
    assert 1 <= len(weights) <= 2 and all(w.consumers == ("FULLY_CONNECTED",) for w in weights)
    per_node, once = _peak(shared_file, False), _peak(shared_file, True)
    assert once["weights_once"] and not per_node["weights_once"]
    weight_kib = WIDTH * WIDTH * 4 // 1024
    # 15 extra packed copies (60 MiB); measured 46 MiB less (111 vs 65 MiB): at least 6 copies less.
    assert per_node["peak_kib"] - once["peak_kib"] > 6 * weight_kib, (per_node, once)


def test_runs_with_no_torch_and_no_tensorflow(albert_file, run_blocked):
    result = run_blocked(f"""
        import numpy as np
        from albert_edge.runtime import Session

        s = Session({str(albert_file)!r}, num_threads=1)
        ids = np.ones((2, 7), np.int64)
        out = s.run({{"input_ids": ids, "attention_mask": ids, "token_type_ids": 0 * ids}})
        assert s.weights_once and out["last_hidden_state"].shape == (2, 7, 16), out
        assert not attempts, attempts
        print("ok")
    """)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-2000:]


def test_only_the_runtime_library_is_loaded(albert_file):
    """The route loads libLiteRt.so alone: no ai-edge-litert Python module, no pybind library
    (~12 MiB), no WebGPU accelerator (3.8 MiB), and XNNPACK's in-memory weight cache is in use."""
    code = textwrap.dedent(f"""
        import json, sys
        import numpy as np
        from albert_edge.runtime import Session

        s = Session({str(albert_file)!r}, num_threads=1)
        ids = np.ones((1, 8), np.int32)
        s.run({{"input_ids": ids, "attention_mask": ids, "token_type_ids": 0 * ids}})
        maps = open("/proc/self/maps").read()
        print(json.dumps({{"weights_once": s.weights_once,
                          "modules": sorted(m for m in sys.modules if m.startswith("ai_edge_litert")),
                          "libraries": sorted({{l.split("/")[-1] for l in maps.splitlines() if "LiteRt" in l
                                               or "litert" in l}}),
                          "weight_cache": "memfd:XNNPack" in maps}}))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {"weights_once": True, "modules": [], "libraries": ["libLiteRt.so"], "weight_cache": True}, got
    assert "INFO" not in done.stderr, done.stderr  # LiteRT's load log kept off the terminal


def test_runs_with_no_stderr(albert_file):
    """A service started with stderr closed: LiteRT's log has nowhere to go and the route still loads."""
    code = textwrap.dedent(f"""
        import os
        import numpy as np
        from albert_edge.runtime import Session

        os.close(2)
        s = Session({str(albert_file)!r}, num_threads=1)
        ids = np.ones((1, 3), np.int32)
        out = s.run({{"input_ids": ids, "attention_mask": ids, "token_type_ids": 0 * ids}})
        print(s.weights_once, out["last_hidden_state"].shape)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.split() == ["True", "(1,", "3,", "16)"], (done.stdout, done.returncode)


def test_a_load_litert_refuses_is_one_line_with_its_reason(albert_file, tmp_path, capfd):
    """An operator version no runtime has: LiteRT's reason in one RuntimeUnavailable, its log
    kept off the terminal, Session falls back to the Interpreter (which refuses it too)."""
    from albert_edge.formats import tflite_schema

    data = bytearray(albert_file.read_bytes())
    model = tflite_schema.Model.GetRootAs(bytes(data))
    codes = [model.OperatorCodes(i) for i in range(model.OperatorCodesLength())]
    version_at = next(c._at(2) for c in codes if c._at(2))  # the first operator with a stored version
    struct.pack_into("<i", data, version_at, 99)
    bad = tmp_path / "v99.tflite"
    bad.write_bytes(bytes(data))
    with pytest.raises(RuntimeUnavailable, match=r"LiteRtCreateCompiledModel failed .*version '99'") as caught:
        runtime_memory.CompiledTFLite(bad, 1)
    assert str(caught.value).startswith(f"{bad}: ") and "\n" not in str(caught.value)
    assert capfd.readouterr().err == ""
    assert runtime_memory.open_tflite(bad, 1) is None
    with pytest.raises(RuntimeUnavailable, match="version '99'"):
        Session(bad, num_threads=1)


def test_a_failed_call_is_named(albert_file):
    session = runtime_memory.CompiledTFLite(albert_file, 1)
    dims = (ctypes.c_int * 2)(1, 4)
    with pytest.raises(RuntimeUnavailable, match=r"LiteRtCompiledModelResizeInputTensorNonStrict failed "
                                                 r"\(index out of range 1000\)"):
        session.call("LiteRtCompiledModelResizeInputTensorNonStrict", session.compiled, ctypes.c_size_t(99),
                     ctypes.c_size_t(0), dims, ctypes.c_size_t(2))
    assert session.run(_feeds(1, 4))["last_hidden_state"].shape == (1, 4, 16)
    session.close()
    session.close()  # closing twice is harmless


def test_the_signature_is_read_without_copying_the_file(shared_file):
    """Only the flatbuffer's metadata is read: a whole-file copy (Model.GetRootAs) would add the
    file's size to the peak of every load, 44 MiB for ALBERT-base fp32."""
    tracemalloc.start()
    try:
        key, inputs, outputs = runtime_memory.read_signature(shared_file)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert key == "serving_default" and sorted(s.name for s in inputs) == sorted(INPUTS)
    assert {s.name: s.shape for s in outputs} == {"last_hidden_state": (-1, -1, WIDTH), "pooler_output": (-1, WIDTH)}
    assert shared_file.stat().st_size > 4 * 2**20 and peak < 2**20, peak


def test_the_route_is_declined_when_the_weight_cache_is_off(albert_file, monkeypatch):
    """A LiteRT that ignores the cache option would pack per node while Session reported
    weights_once: the route checks that the cache's memory exists and declines otherwise."""
    monkeypatch.setattr(runtime_memory, "WEIGHT_CACHE", "")  # no cache asked for
    with pytest.raises(RuntimeUnavailable, match="weight cache did not turn on"):
        runtime_memory.CompiledTFLite(albert_file, 1)
    assert runtime_memory.open_tflite(albert_file, 1) is None
    assert not Session(albert_file, num_threads=1).weights_once


def test_without_ai_edge_litert_the_route_is_declined(albert_file, monkeypatch):
    monkeypatch.setitem(sys.modules, "ai_edge_litert", None)  # as if not installed
    assert runtime_memory.library_path() is None and not runtime_memory.available()
    assert runtime_memory.open_tflite(albert_file, 1) is None


def test_an_unchecked_ai_edge_litert_release_is_left_to_the_interpreter(albert_file, monkeypatch):
    library = runtime_memory.library_path()
    assert runtime_memory.installed_release(library).startswith(runtime_memory.CHECKED_RELEASES)
    monkeypatch.setattr(runtime_memory, "CHECKED_RELEASES", ("9.9.",))  # as if a newer release were installed
    assert not runtime_memory.available()
    assert runtime_memory.open_tflite(albert_file, 1) is None
    session = Session(albert_file, num_threads=1)
    assert not session.weights_once and session.backend_name == "ai_edge_litert"


@pytest.mark.parametrize("shape, feed, want", [
    ((-1, -1, 768), (2, 9), (2, 9, 768)),
    ((-1, 768), (2, 9), (2, 768)),
    ((-1, -1), (1, 4), (1, 4)),
    ((-1, 3), (3, 4), (3, 3)),
    ((-1, -1, -1), (2, 9), None),  # a third dynamic dimension cannot be told from the inputs
])
def test_output_shape_follows_the_inputs(shape, feed, want):
    assert runtime_memory.output_shape(TensorSpec("out", "float32", shape), feed) == want


def test_a_damaged_file_is_one_clear_error(tmp_path):
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"\x18\x00\x00\x00TFL3" + b"\xff" * 10)
    with pytest.raises(RuntimeUnavailable, match="not a readable TFLite model"):
        runtime_memory.read_signature(bad)
    assert runtime_memory.open_tflite(bad, 1) is None  # the caller falls back to the Interpreter
    with pytest.raises(RuntimeUnavailable):
        Session(bad)


PI4 = "processor\t: 0\nFeatures\t: fp asimd evtstrm crc32 cpuid\nCPU part\t: 0xd08\n"
PI5 = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp\n"


@pytest.mark.parametrize("machine, cpuinfo, runs", [
    ("x86_64", "", True),
    ("aarch64", PI4, False),  # Cortex-A72: CompiledModel dies with SIGILL there
    ("aarch64", PI5, True),  # Cortex-A76
    ("aarch64", "", False),
    ("armv7l", PI4, False),
])
def test_the_route_is_taken_only_on_cpus_it_runs_on(machine, cpuinfo, runs):
    assert runtime_memory.cpu_runs_compiled_model(machine, cpuinfo) is runs


@pytest.mark.parametrize("machine, cpuinfo, says", [
    ("aarch64", PI4, "this CPU lacks the ARMv8.2 fp16 and dot-product extensions (asimdhp, asimddp)"),
    ("aarch64", "", "this CPU lacks the ARMv8.2"),
    ("armv7l", PI4, "runs on x86-64 and 64-bit Arm CPUs, and this one is armv7l"),
])
def test_a_cpu_that_cannot_run_the_route_is_the_reason_given(machine, cpuinfo, says):
    """On a Raspberry Pi 4 with ai-edge-litert 2.3 installed, the CPU is why the route (and the
    per-operator profiler, which runs in it) is not taken: no package is named as the cure."""
    from albert_edge.profile.ops import tflite_unavailable_note

    reason = runtime_memory.unavailable_reason(machine, cpuinfo)
    assert says in reason and "ai-edge-litert" not in reason
    note = tflite_unavailable_note(f"LiteRT's CompiledModel cannot run here: {reason}", reason)
    assert note.startswith("per-operator profiling of .tflite files is not available on this CPU: ")
    assert says in note and "needs ai-edge-litert" not in note and "benchmark_model" in note


def test_on_a_cpu_that_runs_it_the_package_is_the_reason_given():
    from albert_edge.profile.ops import TFLITE_NOTE, tflite_unavailable_note

    assert runtime_memory.unavailable_reason("aarch64", PI5) is None  # ai-edge-litert 2.3 is installed here
    assert runtime_memory.unavailable_reason("x86_64", "") is None
    assert tflite_unavailable_note("no LiteRT profiler C API", None) == f"no LiteRT profiler C API; {TFLITE_NOTE}"
