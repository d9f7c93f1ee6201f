"""Peak memory, load time and latency of model files under each way of running them.

Each (file, route) runs in a fresh child process (one model per process: the kernel's VmHWM
then belongs to that model alone), several rounds interleaved so load from other processes
falls on every route alike. Before each child, the file is dropped from the page cache (``evict``),
so every process reads its model cold. Routes:

    tflite-plain         ai-edge-litert's Interpreter as an app opens a file: model path and thread
                         count, every other option its default (XNNPACK on, no weight cache), called
                         through its signature runner
    tflite-interpreter   the classic ai-edge-litert Interpreter, XNNPACK on, as Session opens it
                         without its weight cache (packs per node)
    tflite-no-xnnpack    the classic Interpreter without XNNPACK (reference kernels)
    tflite-compiled      LiteRT CompiledModel + XNNPACK in-memory weight cache (weights once), through
                         libLiteRt.so's C API (albert_edge.runtime.compiled.CompiledTFLite)
    tflite-wrapper       the same CompiledModel and options through ai-edge-litert's Python wrapper
                         (what runtime.compiled used before: the wrapper's own memory and speed)
    onnx                 onnxruntime, as albert_edge.runtime opens it (runtime.onnx_engine: weights mapped from the file)
    onnx-no-prepack      the same with session.disable_prepacking=1
    onnx-plain           onnxruntime with its default optimizations (how a peer's file is run)
    onnx-plain-nomp      the same with the memory pattern off, the one option the report's Kotlin and
                         JS snippets set
    executorch-plain     ExecuTorch's Python runtime with its defaults (how an app's Module runs a .pte)
    session              albert_edge.runtime.Session with its defaults (what a user gets)
    pytorch              PyTorch eager fp32 (FILE is a checkpoint directory)

Every child also saves its outputs; the table shows each route's largest difference from the
first route of the same file, so a route that is lean but wrong shows at once.

    python benchmarks/memory.py out/model.int8.tflite out/model.tflite --rounds 3
    python benchmarks/memory.py out/model.int8.onnx --routes onnx onnx-no-prepack --seq-lens 32 128
    python benchmarks/memory.py out/model.int8.tflite --routes session tflite-wrapper --rounds 5
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import _harness as harness  # noqa: E402  (options, the child mode, rounds: the way every benchmark here times)

ROUTES = {
    ".tflite": ("tflite-interpreter", "tflite-compiled", "tflite-wrapper", "tflite-no-xnnpack", "tflite-plain", "session"),
    ".onnx": ("onnx", "onnx-no-prepack", "onnx-plain", "onnx-plain-nomp", "session"),
    ".ort": ("onnx-plain", "onnx-plain-nomp", "session"),  # ONNX Runtime's own format, as Mobile loads it
    ".pte": ("executorch-plain", "session"),
    "": ("pytorch",),  # a checkpoint directory
}
# What --routes defaults to per format: the slow and the duplicate routes only when named.
_DEFAULT_ROUTES = ("tflite-interpreter", "tflite-compiled", "onnx", "onnx-no-prepack", "pytorch", "executorch-plain")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = harness.parser(__doc__)
    p.add_argument("files", nargs="+", type=Path, help="Model files (.onnx, .tflite).")
    p.add_argument("--routes", nargs="+", default=None,
                   help="Routes to run (default: all for each file's format, no-xnnpack only with --slow).")
    p.add_argument("--slow", action="store_true", help="Include tflite-no-xnnpack (many times slower).")
    harness.options(p, seq_lens=[32, 128], batch=1, threads=2, runs=20, rounds=3, json=True)
    return p.parse_args(argv)


def _memory() -> dict[str, float]:
    """VmHWM / VmRSS / Pss of this process in MiB."""
    from albert_edge.device import process_memory

    mem = process_memory()
    out = {"VmHWM": mem["peak_rss"] / 2**20, "VmRSS": mem["rss"] / 2**20}
    try:
        with open("/proc/self/smaps_rollup") as f:
            out["Pss"] = next(int(line.split()[1]) / 1024 for line in f if line.startswith("Pss:"))
    except (OSError, StopIteration):
        pass
    return out


def _open(route: str, path: Path, threads: int):
    """A runner for ``route``: feeds -> outputs."""
    if route == "pytorch":
        import torch

        from albert_edge import checkpoints

        torch.set_num_threads(threads)
        _, model = checkpoints.load_model(path)

        def eager(feeds):
            with torch.inference_mode():
                out = model(*(torch.from_numpy(feeds[n]).long() for n in INPUTS))
            out = out if isinstance(out, tuple) else (out,)
            return {name: t.numpy() for name, t in zip(model.output_names, out)}

        return eager
    if route == "session":
        from albert_edge.runtime import Session

        return Session(path, num_threads=threads).run
    if route == "executorch-plain":
        return _executorch_plain(path)
    if route == "tflite-compiled":
        from albert_edge.runtime.compiled import CompiledTFLite

        return CompiledTFLite(path, threads).run
    if route == "tflite-wrapper":
        return _wrapper(path, threads)
    if route == "tflite-plain":
        from ai_edge_litert.interpreter import Interpreter

        runner = Interpreter(model_path=str(path), num_threads=threads).get_signature_runner()
        return lambda feeds: runner(**{k: v.astype(np.int32) for k, v in feeds.items()})
    if route in ("tflite-interpreter", "tflite-no-xnnpack"):
        from albert_edge.runtime import Session

        delegate = "none" if route == "tflite-no-xnnpack" else "xnnpack"
        try:
            session = Session(path, num_threads=threads, delegate=delegate, weights_once=False)
        except TypeError:  # a runtime without the weights_once switch
            session = Session(path, num_threads=threads, delegate=delegate)
        return session.run
    import onnxruntime as ort

    from albert_edge.runtime import onnx_engine as runtime_onnx

    providers = ["CPUExecutionProvider"]
    if route in ("onnx-plain", "onnx-plain-nomp"):  # onnxruntime's defaults, by path: how a peer's file is run
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        options.enable_mem_pattern = route == "onnx-plain"
        session = ort.InferenceSession(str(path), options, providers=providers)
    else:  # as albert_edge.runtime opens it (weights mapped from the file, memory pattern off)
        options = runtime_onnx.session_options(ort, path, threads)
        if route == "onnx-no-prepack":
            options.add_session_config_entry("session.disable_prepacking", "1")
        session = runtime_onnx.inference_session(ort, path, options, providers)
    names = [o.name for o in session.get_outputs()]
    return lambda feeds: dict(zip(names, session.run(names, {k: v.astype(np.int64) for k, v in feeds.items()})))


def _executorch_plain(path: Path):
    """ExecuTorch's own Python runtime with its defaults (no XNNPACK weights cache, threads as
    the runtime chooses): how an app's ``Module(path)`` runs the file."""
    import torch
    from executorch.runtime import Runtime

    from albert_edge.formats import pte_reader

    names = [spec.name for spec in pte_reader.read(path, weights=False).outputs]
    method = Runtime.get().load_program(str(path)).load_method("forward")

    def run(feeds):
        out = method.execute([torch.from_numpy(feeds[n].astype(np.int64)) for n in INPUTS])
        return {name: t.numpy() for name, t in zip(names, out)}

    return run


def _wrapper(path: Path, threads: int):
    """ai-edge-litert's Python CompiledModel with the options CompiledTFLite gives the C API;
    input buffers managed by LiteRT, outputs into aligned host memory, both re-made per shape."""
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.options import CpuOptions, Options
    from ai_edge_litert.tensor_buffer import TensorBuffer

    from albert_edge.runtime import compiled as runtime_memory

    key, _, outputs = runtime_memory.read_signature(path)
    cpu = CpuOptions(num_threads=threads, xnnpack_weight_cache_path=runtime_memory.WEIGHT_CACHE)
    model = CompiledModel.from_file(str(path), options=Options(cpu_options=cpu))
    names = model.get_signature_list()[key]["inputs"]
    made: dict[tuple, tuple] = {}

    def run(feeds):
        shape = next(iter(feeds.values())).shape
        if shape not in made:
            made.clear()
            for i in range(len(names)):
                model.resize_input_tensor(i, list(shape), strict=False)
            arrays = {s.name: runtime_memory._aligned(runtime_memory.output_shape(s, shape), s.dtype) for s in outputs}
            made[shape] = ({n: model.create_input_buffer_by_name(key, n) for n in names},
                           {n: TensorBuffer.create_from_host_memory(a) for n, a in arrays.items()}, arrays)
        ins, outs, arrays = made[shape]
        for n, buffer in ins.items():
            buffer.write(feeds[n])
        model.run_by_name(key, ins, outs)
        return {n: a.copy() for n, a in arrays.items()}

    return run


INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def _feeds(batch: int, seq_len: int) -> dict[str, np.ndarray]:
    ids = np.random.default_rng(seq_len).integers(5, 1000, size=(batch, seq_len)).astype(np.int32)
    return {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}


def child(job: dict) -> dict:
    """Runs in the fresh process: load, one first call, timed calls per length; outputs saved to
    ``job["out"]``."""
    route, path, out = job["route"], Path(job["file"]), Path(job["out"])
    record: dict = {"route": route, "file": str(path), "before": _memory()}
    start = time.perf_counter()
    run = _open(route, path, job["threads"])
    record["load_s"] = time.perf_counter() - start
    record["loaded"] = _memory()
    record["latency_ms"] = {}
    outputs = {}
    for T in job["seq_lens"]:
        feeds = _feeds(job["batch"], T)
        start = time.perf_counter()
        outputs[T] = run(feeds)
        record.setdefault("first_call_s", time.perf_counter() - start)
        record["latency_ms"][T] = harness.timed(lambda: run(feeds), job["runs"])
    record["end"] = _memory()
    save_outputs(out, outputs)
    return record


def save_outputs(out: Path, outputs: dict[int, dict]) -> None:
    """A child's outputs ({length: {name: array}}) for its parent to compare, as ``LENGTH/NAME``."""
    np.savez(out, **{f"{T}/{name}": np.asarray(v) for T, o in outputs.items() for name, v in o.items()})


def _routes(args: argparse.Namespace, path: Path) -> list[str]:
    own = ROUTES.get(path.suffix.lower(), ())
    if args.routes:
        return [r for r in args.routes if r in own]
    return [r for r in own if r in _DEFAULT_ROUTES or (args.slow and r == "tflite-no-xnnpack")]


def measure(args: argparse.Namespace, plan: list[tuple[Path, str]] | None = None,
            reference: tuple[Path, str] | None = None) -> list[dict]:
    """One row per (file, route) of ``plan`` (default: every file with its format's routes).
    Each row's max_abs_diff is against ``reference`` (default: the first route of its file)."""
    plan = plan or [(path, route) for path in args.files for route in _routes(args, path)]
    setting = {"seq_lens": args.seq_lens, "batch": args.batch, "threads": args.threads, "runs": args.runs}
    with tempfile.TemporaryDirectory(prefix="albert-memory-") as tmp:
        outs = {key: Path(tmp) / f"{i}.npz" for i, key in enumerate(plan)}

        def one(key: tuple[Path, str]) -> dict:
            path, route = key
            job = {**setting, "route": route, "file": str(path), "out": str(outs[key])}
            return harness.child("memory:child", job, f"{route} {path}", path)

        records = harness.interleave(plan, args.rounds, one, said=lambda key: f"{key[1]} {key[0].name}")
        rows = []
        for key in plan:
            ref_key = reference or next(k for k in plan if k[0] == key[0])
            ref, got = dict(np.load(outs[ref_key])), dict(np.load(outs[key]))
            common = [n for n in ref if n in got]
            diff = max((float(np.abs(got[n] - ref[n]).max()) for n in common), default=float("nan"))
            rows.append(_row(key, records[key], args.seq_lens, diff, f"{ref_key[1]} {ref_key[0].name}"))
    return rows


def _row(key, records: list[dict], seq_lens: list[int], diff: float, versus: str) -> dict:
    path, route = key
    peaks = [r["end"]["VmHWM"] for r in records]
    row = {"file": f"{path.parent.name}/{path.name}", "route": route, "bytes": path.stat().st_size if path.is_file() else None,
           "peak_rss_mib": harness.median(peaks, 1), "peak_rss_range": harness.spread(peaks, 1),
           "import_rss_mib": harness.median((r["before"]["VmRSS"] for r in records), 1),
           "end_pss_mib": harness.median((r["end"].get("Pss", 0.0) for r in records), 1),
           "load_s": harness.median((r["load_s"] for r in records), 3),
           "first_call_s": harness.median((r["first_call_s"] for r in records), 3),
           "max_abs_diff": diff, "diff_versus": versus}
    for T in seq_lens:
        times = [t for r in records for t in r["latency_ms"][str(T)]]
        row[f"p50_ms@{T}"] = round(float(np.percentile(times, 50)), 2)
        row[f"p90_ms@{T}"] = round(float(np.percentile(times, 90)), 2)
        per_round = [float(np.percentile(r["latency_ms"][str(T)], 50)) for r in records]
        row[f"p50_ms_range@{T}"] = harness.spread(per_round, 2)  # the rounds' spread
    return row


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    rows = measure(args)
    if args.json:
        print(json.dumps({"setup": {k: v for k, v in vars(args).items() if k != "files"}
                          | {"files": [str(f) for f in args.files]}, "rows": rows}, indent=2))
        return 0
    cols = ["file", "route", "peak_rss_mib", "peak_rss_range", "end_pss_mib", "load_s", "first_call_s",
            *[f"{p}_ms@{T}" for T in args.seq_lens for p in ("p50", "p90")], "max_abs_diff"]
    print("  ".join(cols))
    for row in rows:
        print("  ".join(str(row[c]) for c in cols))
    return 0


if __name__ == "__main__":
    sys.exit(main())
