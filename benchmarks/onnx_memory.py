"""Peak memory of an .onnx file in onnxruntime under each way of opening it: the leads behind
albert_edge.runtime.onnx_engine's settings, one fresh process per (file, lead, round).

Each child imports numpy and onnxruntime, opens the file, calls it 5 times at 32 then at 128
tokens (2 threads) and reports VmHWM after loading and at the end; the table shows medians and ranges.
Peak memory does not depend on other load on the machine, so no lock is needed. Leads:

    defaults     by path, optimizers on, memory pattern on (how albert-edge opened files before)
    no-pattern   the same with enable_mem_pattern off
    in-place     no-pattern, and the weights mapped from the file (runtime.onnx_engine.in_place_model)
    no-prepack   in-place with session.disable_prepacking (slower: see the module's notes)
    arena-off    in-place with the CPU arena off
    session      albert_edge.runtime.Session, all of its settings (optimizers off for a file
                 that quantize.ort_optimize marked)

    python benchmarks/onnx_memory.py out/model.int8.onnx out/model.int8.ort-opt.onnx --rounds 5
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _harness as harness  # noqa: E402  (stdlib only: the children measure their own imports)

LEADS = ("defaults", "no-pattern", "in-place", "no-prepack", "arena-off", "session")


def _peak() -> float:
    from albert_edge.device import process_memory

    return round(process_memory()["peak_rss"] / 2**20, 1)


def _open(lead: str, path: Path):
    if lead == "session":
        from albert_edge.runtime import Session

        session = Session(path, num_threads=2)
        return lambda feeds: session.run(feeds)
    import onnxruntime as ort

    from albert_edge.runtime import onnx_engine as runtime_onnx

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads, options.inter_op_num_threads = 2, 1
    options.enable_mem_pattern = lead == "defaults"
    options.enable_cpu_mem_arena = lead != "arena-off"
    if lead == "no-prepack":
        options.add_session_config_entry("session.disable_prepacking", "1")
    cpu = ["CPUExecutionProvider"]
    if lead in ("defaults", "no-pattern"):
        session = ort.InferenceSession(str(path), options, providers=cpu,
                                       disabled_optimizers=runtime_onnx.DISABLED_OPTIMIZERS)
    else:
        session = runtime_onnx.inference_session(ort, path, options, cpu)
    return lambda feeds: session.run(None, feeds)


def child(job: dict) -> dict:
    """Runs in the fresh process: the file opened one way, called at 32 then 128 tokens."""
    import numpy as np

    run = _open(job["lead"], Path(job["file"]))
    record = {"loaded": _peak()}
    for T in (32, 128):
        ids = np.random.default_rng(T).integers(5, 1000, size=(1, T))
        for _ in range(5):  # onnxruntime's memory pattern is made on the first call and used from the second
            run({"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)})
    record["end"] = _peak()
    return record


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__)
    p.add_argument("files", nargs="*", type=Path, help=".onnx files")
    p.add_argument("--leads", nargs="+", default=list(LEADS), choices=LEADS, help="Ways of opening each file.")
    harness.options(p, rounds={"default": 5, "help": "Fresh processes per (file, lead), interleaved."})
    args = p.parse_args(argv)
    if not args.files:
        p.error("name at least one .onnx file")
    plan = [(f, lead) for f in args.files for lead in args.leads]
    got = harness.interleave(plan, args.rounds, lambda key: harness.child(
        "onnx_memory:child", {"lead": key[1], "file": str(key[0])}, f"{key[1]} {key[0]}", key[0]))
    print(f"{'file':40s} {'lead':11s} {'peak MiB':>9s} {'range':>13s} {'after load':>10s}")
    for (f, lead), records in got.items():
        end = [r["end"] for r in records]
        print(f"{f.parent.name + '/' + f.name:40s} {lead:11s} {statistics.median(end):9.1f} "
              f"{f'[{min(end)}, {max(end)}]':>13s} {statistics.median(r['loaded'] for r in records):10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
