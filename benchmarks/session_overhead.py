"""What ``albert_edge.runtime.Session`` costs over calling the runtime directly on the same file.

For each file and sequence length, rounds alternate fresh child processes (one model per process:
two runtimes in one process steal each other's spinning threads):

    session   Session(file, num_threads).run(feeds): what a user calls, feeds as int32 numpy
              arrays (checked and cast on every call)
    raw       the runtime's own API on the same file, set up as Session sets it up, inputs cast
              once before the loop:
                .onnx    onnxruntime.InferenceSession(...).run(names, feeds)
                .tflite  ai-edge-litert's Python CompiledModel with XNNPACK's in-memory weight
                         cache (input buffers written, run_by_name, outputs read into numpy) when
                         Session uses that route, else the classic Interpreter's signature runner

Each child times ``--runs`` calls after ``--warmup``; the ratio session/raw of p50 is taken per
round (the two children of one round ran back to back) and the median and range over rounds are
printed. Target: within 3 %.

    python benchmarks/session_overhead.py model.int8.onnx model.int8.tflite --seq-lens 16 32 128
    python benchmarks/session_overhead.py model.tflite --rounds 7 --runs 200 --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import _harness as harness  # noqa: E402  (fresh_process: the way every benchmark here times)

INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", type=Path, help="Model files (.onnx, .tflite).")
    p.add_argument("--seq-lens", nargs="+", type=int, default=[16, 32, 128], help="Sequence lengths.")
    p.add_argument("--threads", type=int, default=2, help="Runtime threads.")
    p.add_argument("--runs", type=int, default=100, help="Timed calls per child.")
    p.add_argument("--warmup", type=int, default=10, help="Untimed calls per child before timing.")
    p.add_argument("--rounds", type=int, default=5, help="Rounds of (session, raw) children, interleaved.")
    p.add_argument("--json", action="store_true", help="Print the results as JSON.")
    p.add_argument("--child", nargs=3, metavar=("ROUTE", "FILE", "SEQ"), help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _feeds(seq_len: int) -> dict[str, np.ndarray]:
    ids = np.random.default_rng(seq_len).integers(5, 1000, size=(1, seq_len)).astype(np.int32)
    return {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}


def _raw_onnx(session, feeds):
    ort_session = session._backend._session  # the InferenceSession Session made, same options
    names = [o.name for o in session.outputs]
    cast = {k: v.astype(np.int64) for k, v in feeds.items()}
    return lambda: ort_session.run(names, cast)


def _aligned(shape, dtype, align: int = 64) -> np.ndarray:
    """A zeroed array starting on an ``align``-byte boundary (LiteRT copies unaligned host memory)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    raw = np.zeros(nbytes + align, dtype=np.uint8)
    start = -raw.ctypes.data % align
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def _raw_compiled(path: Path, threads: int, feeds):
    """ai-edge-litert's own CompiledModel API with the in-memory weight cache Session asks for."""
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.options import CpuOptions, Options
    from ai_edge_litert.tensor_buffer import TensorBuffer

    from albert_edge.runtime import compiled as runtime_memory

    key, _, outputs = runtime_memory.read_signature(path)
    cpu = CpuOptions(num_threads=threads, xnnpack_weight_cache_path=runtime_memory.WEIGHT_CACHE)
    model = CompiledModel.from_file(str(path), options=Options(cpu_options=cpu))
    names = model.get_signature_list()[key]["inputs"]
    shape = next(iter(feeds.values())).shape
    for i in range(len(names)):
        model.resize_input_tensor(i, list(shape), strict=False)
    ins = {n: model.create_input_buffer_by_name(key, n) for n in names}
    # Outputs into host memory (the model does not report output shapes after a resize).
    arrays = {s.name: _aligned(runtime_memory.output_shape(s, shape), s.dtype) for s in outputs}
    outs = {n: TensorBuffer.create_from_host_memory(a) for n, a in arrays.items()}

    def call():
        for n, buffer in ins.items():
            buffer.write(feeds[n])
        model.run_by_name(key, ins, outs)
        return {n: a.copy() for n, a in arrays.items()}

    return call


def child(args: argparse.Namespace) -> None:
    from albert_edge.runtime import compiled as runtime_memory
    from albert_edge.runtime import Session

    route, path, seq_len = args.child[0], Path(args.child[1]), int(args.child[2])
    feeds = _feeds(seq_len)
    if route == "session":
        session = Session(path, num_threads=args.threads)
        call = lambda: session.run(feeds)  # noqa: E731
    elif path.suffix == ".onnx":
        call = _raw_onnx(Session(path, num_threads=args.threads), feeds)
    elif runtime_memory.available():  # Session's route for .tflite on this CPU
        call = _raw_compiled(path, args.threads, feeds)
    else:
        from ai_edge_litert.interpreter import Interpreter

        runner = Interpreter(model_path=str(path), num_threads=args.threads).get_signature_runner()
        call = lambda: runner(**feeds)  # noqa: E731
    for _ in range(args.warmup + 1):
        call()
    clock = time.perf_counter_ns
    times = []
    for _ in range(args.runs):
        start = clock()
        call()
        times.append((clock() - start) / 1e6)
    print(json.dumps({"p50_ms": statistics.median(times), "mean_ms": statistics.fmean(times)}))


def _run_child(args: argparse.Namespace, route: str, path: Path, seq_len: int) -> dict:
    argv = [__file__, "x", "--threads", str(args.threads), "--runs", str(args.runs),
            "--warmup", str(args.warmup), "--child", route, str(path), str(seq_len)]
    return harness.fresh_process(argv, f"{route} {path} seq {seq_len}", path)


def measure(args: argparse.Namespace) -> list[dict]:
    rows = []
    for path in args.files:
        for seq_len in args.seq_lens:
            ratios, session_ms, raw_ms = [], [], []
            for r in range(args.rounds):
                order = ("session", "raw") if r % 2 == 0 else ("raw", "session")  # neither always first
                got = {route: _run_child(args, route, path, seq_len) for route in order}
                session_ms.append(got["session"]["p50_ms"])
                raw_ms.append(got["raw"]["p50_ms"])
                ratios.append(session_ms[-1] / raw_ms[-1])
                print(f"{path.name} seq {seq_len} round {r + 1}/{args.rounds}: {ratios[-1]:.4f}", file=sys.stderr)
            rows.append({"file": str(path), "seq_len": seq_len, "session_p50_ms": round(statistics.median(session_ms), 3),
                         "raw_p50_ms": round(statistics.median(raw_ms), 3),
                         "ratio": round(statistics.median(ratios), 4),
                         "ratio_range": [round(min(ratios), 4), round(max(ratios), 4)]})
    return rows


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.child:
        child(args)
        return 0
    rows = measure(args)
    if args.json:
        print(json.dumps({"setup": {"threads": args.threads, "runs": args.runs, "rounds": args.rounds}, "rows": rows},
                         indent=2))
        return 0
    print(f"{'file':<40} {'seq':>4} {'session p50':>12} {'raw p50':>9} {'ratio':>7}  range over rounds")
    for row in rows:
        lo, hi = row["ratio_range"]
        print(f"{Path(row['file']).name:<40} {row['seq_len']:>4} {row['session_p50_ms']:>10.3f}ms "
              f"{row['raw_p50_ms']:>7.3f}ms {row['ratio']:>7.4f}  {lo:.4f}-{hi:.4f}")
    print(f"(median of {args.rounds} rounds x {args.runs} calls, {args.threads} threads, fresh process per child)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
