"""What the profiler itself costs: its timed loop against a bare loop calling the runtime directly,
and its peak-memory figure against GNU time's maximum RSS of the same child process.

For one model file and one setting, rounds alternate between
- the profiler's child (``python -m albert_edge.profile._child``, exactly as `albert-edge profile`
  starts it), run under ``/usr/bin/time -v``: its p50 and its peak resident memory (VmHWM read from
  /proc/self/status after the timed calls) beside GNU time's "Maximum resident set size";
- a bare child: the same runtime session (same file, threads, provider/delegate, inputs) called
  directly by the onnxruntime session / TFLite signature runner in a plain loop, no checks.
Interleaving puts load from other processes on both alike. Targets: p50 ratio within 2%, peak
memory within 5% of GNU time.

    python benchmarks/profile_overhead.py model.onnx --seq-len 128 --threads 1
    python benchmarks/profile_overhead.py model.tflite --delegate none --rounds 7 --runs 300
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from albert_edge.profile import ProfileSettings
from albert_edge.profile.runner import CHILD, plan

sys.path.insert(0, str(Path(__file__).parent))
import _harness as harness  # noqa: E402  (the options and the child mode every benchmark shares)

TIME = "/usr/bin/time"


def bare_loop(job: dict) -> dict:
    """Runs in the fresh process: the runtime object our Session wraps, called directly on pre-cast
    inputs."""
    import numpy as np

    from albert_edge.profile.inputs import fixed_feeds, model_limits
    from albert_edge.runtime import Session

    session = Session(job["file"], num_threads=job["threads"], provider=job["provider"], delegate=job["delegate"])
    limits = model_limits(job["file"])
    feeds = session._checked(fixed_feeds(job["batch"], job["seq_len"], limits.vocab_size))
    backend = session._backend
    if session.format == "onnx":
        names = [o.name for o in session.outputs]
        ort_session = backend._session
        call = lambda: ort_session.run(names, feeds)  # noqa: E731
    elif getattr(backend, "_runner", None) is not None:  # the classic Interpreter's signature runner
        runner = backend._runner
        call = lambda: runner(**feeds)  # noqa: E731
    else:  # LiteRT CompiledModel: its own run is already the direct call
        call = lambda: backend.run(feeds)  # noqa: E731
    call()
    for _ in range(job["warmup"]):
        call()
    return {"p50": float(np.median(harness.timed(call, job["runs"])))}


def main() -> int:
    parser = harness.parser(__doc__)
    parser.add_argument("model_file", type=Path, help="The model file (.onnx, .tflite).")
    harness.options(parser, seq_len=128, threads=1)
    parser.add_argument("--delegate", default="xnnpack", help="TFLite: xnnpack or none")
    parser.add_argument("--provider", default="cpu", help="ONNX: cpu, cuda or tensorrt")
    harness.options(parser, rounds={"default": 5, "help": "Interleaved rounds of each kind"},
                    runs={"default": 200, "help": "Timed calls per child"}, warmup=10,
                    json={"help": "Print the result as JSON"})
    args = parser.parse_args()
    if not Path(TIME).exists():
        sys.exit(f"{TIME} is missing: apt-get install time")

    settings = ProfileSettings(seq_lens=(args.seq_len,), threads=(args.threads,), delegates=(args.delegate,),
                               providers=(args.provider,), runs=args.runs, min_seconds=0.0, warmup=args.warmup)
    [job] = plan([args.model_file], settings)
    profiled, bare, peaks = [], [], []
    for _ in range(args.rounds):
        record, max_rss = profiler_child(job)
        profiled.append(record["latency"]["p50"])
        peaks.append((record["memory"]["peak_after_timed"], max_rss))
        bare.append(bare_child(job))
    ratios = [p / b for p, b in zip(profiled, bare)]
    mem = [ours / theirs for ours, theirs in peaks]
    result = {
        "file": str(args.model_file), "setting": {k: job[k] for k in ("provider", "delegate", "threads", "seq_len")},
        "rounds": args.rounds, "runs": args.runs,
        "p50_ms": {"profiler": profiled, "bare": bare},
        # Ratio of the medians over rounds (robust to one disturbed round), the per-round ratios
        # range beside it, and the ratio of the best rounds (least disturbed by other load).
        "p50_ratio": statistics.median(profiled) / statistics.median(bare),
        "p50_ratio_range": [min(ratios), max(ratios)], "p50_ratio_best": min(profiled) / min(bare),
        "peak_rss_ratio": statistics.median(mem), "peak_rss_ratio_range": [min(mem), max(mem)],
        "peak_rss_bytes": {"profiler": [p for p, _ in peaks], "gnu_time": [t for _, t in peaks]},
    }
    result["p50_within_2pct"] = abs(result["p50_ratio"] - 1) <= 0.02
    result["peak_within_5pct"] = abs(result["peak_rss_ratio"] - 1) <= 0.05
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{args.model_file.name} {result['setting']}: {args.rounds} interleaved rounds of {args.runs} calls")
        print(f"p50 profiler / bare loop: {result['p50_ratio']:.4f} (rounds {min(ratios):.4f}..{max(ratios):.4f}, "
              f"best rounds {result['p50_ratio_best']:.4f}; "
              f"profiler {statistics.median(profiled):.4f} ms, bare {statistics.median(bare):.4f} ms) "
              f"{'within' if result['p50_within_2pct'] else 'OUTSIDE'} 2%")
        print(f"peak RSS profiler (VmHWM) / GNU time max RSS: {result['peak_rss_ratio']:.4f} "
              f"(rounds {min(mem):.4f}..{max(mem):.4f}) {'within' if result['peak_within_5pct'] else 'OUTSIDE'} 5%")
    return 0


def profiler_child(job: dict) -> tuple[dict, int]:
    workdir = tempfile.mkdtemp(prefix="albert-edge-profile-")
    try:
        done = subprocess.run([TIME, "-v", sys.executable, "-m", CHILD, json.dumps({**job, "workdir": workdir})],
                              capture_output=True, text=True, check=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    record = json.loads(done.stdout.strip().splitlines()[-1])
    match = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    return record, int(match.group(1)) * 1024


def bare_child(job: dict) -> float:
    """``bare_loop`` in a fresh process, started as the profiler starts its child (no other settings)."""
    done = subprocess.run(harness.child_argv("profile_overhead:bare_loop", job), capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])["p50"]


if __name__ == "__main__":
    sys.exit(main())
