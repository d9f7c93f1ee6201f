"""The steps benchmarks/gpu_check.py runs each in a fresh Python (the harness's child mode):
build a shape's files, check one file on one execution provider against PyTorch, probe what the
installed onnxruntime can run. Each takes and returns JSON-ready dicts."""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _harness import cosine, random_model, reference_row  # noqa: E402  (the models and inputs benchmarks share)

ROOT = Path(__file__).resolve().parents[1]
SHAPES = {"tiny": "tiny", "albert-base": "albert-base-v2"}  # shape -> albert_edge.config preset
KINDS = ("static-fp32", "static-fp16", "dynamic-fp32")
SHORT = {"CPUExecutionProvider": "cpu", "CUDAExecutionProvider": "cuda", "TensorrtExecutionProvider": "tensorrt"}
FULL = {v: k for k, v in SHORT.items()}
# Cosine to PyTorch a file must reach on a provider: fp32 (CUDA may use TF32 in its matrix products)
# and fp16 files.
MIN_COSINE = {"fp32": 0.9999, "fp16": 0.999}


def build_step(job: dict) -> dict:
    """The three files of one shape, built and verified as `convert` and `quantize` do, and
    PyTorch's outputs on the reference row."""
    import torch

    from albert_edge.config import AlbertConfig
    from albert_edge.converters.export import convert
    from albert_edge.converters.quantized import quantize_file
    from albert_edge.formats import manifest
    from albert_edge.quantize import QuantizeConfig

    work, seq_len = Path(job["work"]), job["seq_len"]
    config = AlbertConfig.preset(SHAPES[job["shape"]])
    if config.max_position_embeddings < seq_len:  # the tiny preset holds 64 positions
        config = config.replace(max_position_embeddings=seq_len)
    model = random_model(config, "base")
    batch = reference_row(config.vocab_size, config.pad_token_id, seq_len)
    with torch.no_grad():
        out = model(*(torch.from_numpy(batch[n].astype(np.int64)) for n in batch))
    out = out if isinstance(out, tuple) else (out,)
    reference = work / "reference.npz"
    work.mkdir(parents=True, exist_ok=True)
    np.savez(reference, **batch, **{f"out:{n}": t.numpy() for n, t in zip(model.output_names, out)})
    timings = {}
    start = time.perf_counter()
    convert(model, work / "static", targets=("onnx",), head="base", seq_len=seq_len, static=True)
    timings["static-fp32"] = time.perf_counter() - start
    start = time.perf_counter()
    # one [1, N] row per evaluation batch: the static file takes no other shape
    quantize_file(work / "static" / "model.onnx", QuantizeConfig("fp16", batch_size=1, eval_samples=4))
    timings["static-fp16"] = time.perf_counter() - start
    start = time.perf_counter()
    convert(model, work / "dynamic", targets=("onnx",), head="base", seq_len=seq_len)
    timings["dynamic-fp32"] = time.perf_counter() - start
    files = []
    for kind, folder, name in (("static-fp32", "static", "model.onnx"), ("static-fp16", "static", "model.fp16.onnx"),
                               ("dynamic-fp32", "dynamic", "model.onnx")):
        entry = next(e for e in manifest.read(work / folder).files if e.name == name)
        path = work / folder / name
        files.append({"kind": kind, "path": str(path), "file": f"{folder}/{name}", "precision": entry.precision,
                      "static_len": entry.static_len, "size": path.stat().st_size,
                      "stored_bytes": entry.weights.get("stored_bytes"),
                      "unique_bytes": entry.weights.get("unique_bytes"), "build_s": round(timings[kind], 1)})
    return {"files": files, "reference": str(reference)}


def check_step(job: dict) -> dict:
    """One file on one provider, opened with runtime.Session's settings and onnxruntime's profiler
    on: providers held, nodes per provider, outputs against PyTorch's."""
    import onnxruntime as ort

    from albert_edge.runtime.onnx_engine import inference_session, ort_providers, session_options

    path, asked = Path(job["path"]), FULL[job["provider"]]
    row = {"file": job["file"], "provider": job["provider"], "precision": job["precision"]}
    trace = Path(job["work"]) / "traces" / f"{path.parent.parent.name}-{path.parent.name}-{path.stem}-{job['provider']}"
    trace.parent.mkdir(parents=True, exist_ok=True)
    options = session_options(ort, path, None, asked, ops_trace=trace)
    start = time.perf_counter()
    try:
        session = inference_session(ort, path, options, ort_providers(asked, ort.get_available_providers()))
    except Exception as exc:  # onnxruntime raises its own exception types
        return {**row, "ok": False, "problems": [f"cannot load: {first_line(exc)}"]}
    row["load_s"] = round(time.perf_counter() - start, 2)
    row["providers_used"] = session.get_providers()
    row["provider_options"] = {k: v for k, v in session.get_provider_options().get(asked, {}).items()
                               if k in ("use_tf32", "trt_fp16_enable", "trt_engine_cache_enable", "device_id")}
    ref = np.load(job["reference"])
    feeds = {i.name: ref[i.name].astype(np.int64 if "int64" in i.type else np.int32) for i in session.get_inputs()}
    names = [o.name for o in session.get_outputs()]
    start = time.perf_counter()
    outs = dict(zip(names, session.run(names, feeds)))
    row["first_call_ms"] = round((time.perf_counter() - start) * 1e3, 2)
    nodes = nodes_by_provider(Path(session.end_profiling()))
    row["nodes"] = {SHORT.get(p, p): len(n) for p, n in nodes.items()}
    off = {p: n for p, n in nodes.items() if p != asked}
    row["cpu_fallback_nodes"] = len(nodes.get("CPUExecutionProvider", {})) if asked != "CPUExecutionProvider" else 0
    row["nodes_off_provider"] = {SHORT.get(p, p): op_counts(n) for p, n in off.items()}
    row["max_abs_diff"] = {n: float(np.abs(outs[n].astype(np.float32) - ref[f"out:{n}"]).max()) for n in names}
    row["cosine"] = {n: cosine(outs[n], ref[f"out:{n}"]) for n in names}
    problems = []
    if row["providers_used"][0] != asked:
        problems.append(f"the session holds {row['providers_used']}, not {asked} first")
    if asked not in nodes:
        problems.append(f"no node ran on {asked}")
    low = {n: c for n, c in row["cosine"].items() if c < MIN_COSINE[job["precision"]]}
    if low:
        problems.append(f"cosine to PyTorch below {MIN_COSINE[job['precision']]}: {low}")
    return {**row, "ok": not problems, "problems": problems}


def nodes_by_provider(trace: Path) -> dict[str, dict[str, str]]:
    """{provider: {node name: op type}} of every node onnxruntime's profiler saw run."""
    nodes: dict[str, dict[str, str]] = {}
    for event in json.loads(trace.read_text()):
        args = event.get("args") or {}
        if event.get("cat") == "Node" and "provider" in args:
            name = re.sub(r"_kernel_time$", "", event["name"])
            nodes.setdefault(args["provider"], {})[name] = args.get("op_name", "?")
    return nodes


def op_counts(nodes: dict[str, str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for op in nodes.values():
        counts[op] = counts.get(op, 0) + 1
    return dict(sorted(counts.items()))


def probe_step(job: dict) -> dict:
    """Whether ``provider`` really takes a one-node model here (onnxruntime lists a provider it was
    built with even where its libraries cannot load, then runs on the CPU), the reason when not
    (from onnxruntime's log), and the CUDA libraries' versions."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    asked = FULL[job["provider"]]
    found = {"onnxruntime": ort.__version__, "available": ort.get_available_providers(), **library_versions()}
    if asked not in found["available"]:
        return {**found, "taken": False, "reason": f"{asked} is not in this onnxruntime build (onnxruntime "
                f"{ort.__version__}, providers: {', '.join(found['available'])}): install onnxruntime-gpu"}
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "probe", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = Path(job["work"]) / "probe.onnx"
    path.write_bytes(model.SerializeToString())
    options = ort.SessionOptions()
    options.log_severity_level = 2  # a provider that fails to load says why at warning or error level
    with held_stderr() as said:
        try:
            session = ort.InferenceSession(str(path), options, providers=[asked, "CPUExecutionProvider"])
            taken = session.get_providers()[0] == asked
            session.run(None, {"x": np.ones((1, 8), np.float32)})
        except Exception as exc:  # onnxruntime raises its own exception types
            taken = False
            said.append(first_line(exc))
    reason = None if taken else next((line for line in said if re.search(r"error|fail|cannot|not found", line, re.I)),
                                     said[-1] if said else "the session fell back to the CPU")
    return {**found, "taken": taken, "reason": reason}


class held_stderr:
    """Lines written to file descriptor 2 (onnxruntime's C++ log) while the block runs."""

    def __enter__(self) -> list[str]:
        self.lines: list[str] = []
        self.file = tempfile.TemporaryFile()
        sys.stderr.flush()
        self.saved = os.dup(2)
        os.dup2(self.file.fileno(), 2)
        return self.lines

    def __exit__(self, *exc) -> None:
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)
        self.file.seek(0)
        text = self.file.read().decode(errors="replace")
        self.lines[:0] = [line.strip() for line in text.splitlines() if line.strip()]
        self.file.close()


def library_versions() -> dict:
    """CUDA runtime, cuDNN and TensorRT versions as the libraries themselves report them (None where
    a library does not load)."""
    import ctypes

    def call(names: tuple[str, ...], fn: str, pointer: bool) -> int | None:
        for name in names:
            try:
                f = getattr(ctypes.CDLL(name), fn)
            except (OSError, AttributeError):
                continue
            if not pointer:
                f.restype = ctypes.c_size_t if fn == "cudnnGetVersion" else ctypes.c_int
                return int(f())
            value = ctypes.c_int()
            return value.value if f(ctypes.byref(value)) == 0 else None
        return None

    cudart = call(("libcudart.so.13", "libcudart.so.12", "libcudart.so"), "cudaRuntimeGetVersion", True)
    cudnn = call(("libcudnn.so.9", "libcudnn.so.8", "libcudnn.so"), "cudnnGetVersion", False)
    trt = call(("libnvinfer.so.10", "libnvinfer.so"), "getInferLibVersion", False)
    return {"cuda_runtime": f"{cudart // 1000}.{cudart % 1000 // 10}" if cudart else None,
            "cudnn": f"{cudnn // 10000}.{cudnn % 10000 // 100}.{cudnn % 100}" if cudnn and cudnn >= 90000 else cudnn,
            "tensorrt": f"{trt // 10000}.{trt % 10000 // 100}.{trt % 100}" if trt else None}


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
