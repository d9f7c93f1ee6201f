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
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import _harness as harness  # noqa: E402  (options, the child mode, rounds: the way every benchmark here times)
import memory  # noqa: E402  (benchmarks/memory.py: the feeds every timing here uses)

def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = harness.parser(__doc__)
    p.add_argument("files", nargs="+", type=Path, help="Model files (.onnx, .tflite).")
    harness.options(p, seq_lens=[16, 32, 128], threads=2, runs={"default": 100, "help": "Timed calls per child."},
                    warmup=10, rounds={"default": 5, "help": "Rounds of (session, raw) children, interleaved."},
                    json=True)
    return p.parse_args(argv)


def _raw_onnx(session, feeds):
    ort_session = session._backend._session  # the InferenceSession Session made, same options
    names = [o.name for o in session.outputs]
    cast = {k: v.astype(np.int64) for k, v in feeds.items()}
    return lambda: ort_session.run(names, cast)


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
    arrays = {s.name: runtime_memory._aligned(runtime_memory.output_shape(s, shape), s.dtype) for s in outputs}
    outs = {n: TensorBuffer.create_from_host_memory(a) for n, a in arrays.items()}

    def call():
        for n, buffer in ins.items():
            buffer.write(feeds[n])
        model.run_by_name(key, ins, outs)
        return {n: a.copy() for n, a in arrays.items()}

    return call


def child(job: dict) -> dict:
    """Runs in the fresh process: one route on one file at one length, its p50 and mean."""
    from albert_edge.runtime import compiled as runtime_memory
    from albert_edge.runtime import Session

    route, path, threads = job["route"], Path(job["file"]), job["threads"]
    feeds = memory._feeds(1, job["seq_len"])
    if route == "session":
        session = Session(path, num_threads=threads)
        call = lambda: session.run(feeds)  # noqa: E731
    elif path.suffix == ".onnx":
        call = _raw_onnx(Session(path, num_threads=threads), feeds)
    elif runtime_memory.available():  # Session's route for .tflite on this CPU
        call = _raw_compiled(path, threads, feeds)
    else:
        from ai_edge_litert.interpreter import Interpreter

        runner = Interpreter(model_path=str(path), num_threads=threads).get_signature_runner()
        call = lambda: runner(**feeds)  # noqa: E731
    for _ in range(job["warmup"] + 1):
        call()
    times = harness.timed(call, job["runs"])
    return {"p50_ms": statistics.median(times), "mean_ms": statistics.fmean(times)}


def measure(args: argparse.Namespace) -> list[dict]:
    rows = []
    for path in args.files:
        for seq_len in args.seq_lens:
            job = {"file": str(path), "seq_len": seq_len, "threads": args.threads, "runs": args.runs,
                   "warmup": args.warmup}

            def one(route: str) -> dict:
                return harness.child("session_overhead:child", {**job, "route": route},
                                     f"{route} {path} seq {seq_len}", path)

            def ratio(r: int, got: dict) -> str:
                return (f"{path.name} seq {seq_len} round {r + 1}/{args.rounds}: "
                        f"{got['session'][-1]['p50_ms'] / got['raw'][-1]['p50_ms']:.4f}")

            # every other round the raw child first: neither always runs first
            got = harness.interleave(("session", "raw"), args.rounds, one, alternate=True, after_round=ratio)
            session_ms, raw_ms = [g["p50_ms"] for g in got["session"]], [g["p50_ms"] for g in got["raw"]]
            ratios = [s / r for s, r in zip(session_ms, raw_ms)]
            rows.append({"file": str(path), "seq_len": seq_len, "session_p50_ms": harness.median(session_ms, 3),
                         "raw_p50_ms": harness.median(raw_ms, 3), "ratio": harness.median(ratios, 4),
                         "ratio_range": harness.spread(ratios, 4)})
    return rows


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
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
