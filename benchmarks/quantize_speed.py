"""Latency of quantized ALBERT files against PyTorch eager fp32, measured in one run.

Batch 1, sequence 128, 2 threads by default. The model is built (a preset, random init, or a
checkpoint), converted to fp32 ONNX / TFLite, quantized with every scheme of each format, and
then every model runs in a fresh process of its own (benchmarks/memory.py's child: PyTorch eager
for the checkpoint, ``albert_edge.runtime.Session`` for each file), ``--rounds`` times, the
models interleaved in each round, so load from other processes falls on all of them alike and no
two runtimes share a process. Each median is printed as a ratio to PyTorch eager, with the
process's peak memory.

    python benchmarks/quantize_speed.py                              # ALBERT-base, ONNX and TFLite
    python benchmarks/quantize_speed.py --formats onnx --runs 50
    python benchmarks/quantize_speed.py --set vocab_size=8000 --tokenizer spiece.model --calibration builtin
    python benchmarks/quantize_speed.py --checkpoint out/pretrained --head mlm --json

Static schemes (onnx int8-static, tflite int8-full / int16x8) calibrate on real text, so they
need --tokenizer (whose vocabulary is the model's) and are skipped without one.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).parent))
import _harness as harness  # noqa: E402  (the options every benchmark shares)
import memory  # noqa: E402  (benchmarks/memory.py: the fresh-process measurement)

log = logging.getLogger("quantize_speed")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = harness.parser(__doc__)
    harness.model_options(p, "A checkpoint directory (default: --preset, random init).")
    p.add_argument("--head", default=None, help="Head to build or load (default: base for a preset).")
    p.add_argument("--formats", nargs="+", default=["onnx", "tflite"], choices=["onnx", "tflite"])
    p.add_argument("--schemes", nargs="+", default=None, help="Only these schemes (default: all of each format).")
    p.add_argument("--tokenizer", help="spiece.model for calibration and accuracy text.")
    p.add_argument("--calibration", nargs="+", default=None, help="Text files (or 'builtin').")
    harness.options(p, batch=1, seq_len=128, threads=2,
                    runs={"default": 10, "help": "Timed calls per model per process (after one untimed call)."},
                    rounds={"default": 3, "help": "Fresh processes per model, interleaved."}, work=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", type=float, default=0.2,
                   help="Ratio to eager every int8 file should reach or beat (default 0.2); marked per row.")
    harness.options(p, json=True)
    return p.parse_args(argv)


def _checkpoint(args, work: Path) -> tuple[Path, str]:
    """The checkpoint to convert: the one given, or the preset built with random weights."""
    if args.checkpoint:
        from albert_edge import checkpoints

        ckpt = checkpoints.load(args.checkpoint)
        return Path(args.checkpoint), args.head or ckpt.head
    import torch

    from albert_edge import checkpoints
    from albert_edge.model import build_model

    head = args.head or "base"
    out = work / "checkpoint"
    if not (out / "config.json").is_file():
        torch.manual_seed(args.seed)
        checkpoints.save(build_model(harness.model_config(args), head), out)
    return out, head


def _files(args, ckpt: Path, head: str, work: Path) -> list[tuple[str, str, Path]]:
    """(format, scheme, path) of the fp32 files and of each quantized file."""
    from albert_edge.converters.export import convert
    from albert_edge.converters.quantized import quantize_file
    from albert_edge.quantize import QuantizeConfig, recipe_for, schemes_for

    fp32 = work / "fp32"
    if not (fp32 / "manifest.json").is_file():
        log.info("converting %s to %s", ckpt, ", ".join(args.formats))
        convert(ckpt, fp32, targets=args.formats, head=head, seq_len=args.seq_len, force=True)
    files = []
    for fmt in args.formats:
        parent = fp32 / f"model.{fmt}"
        files.append((fmt, "fp32", parent))
        for scheme in schemes_for(fmt):
            if args.schemes and scheme.value not in args.schemes:
                continue
            recipe = recipe_for(fmt, scheme)
            if recipe.calibration and not args.tokenizer:
                log.warning("skipping %s %s: it calibrates on real text and no --tokenizer was given",
                            fmt, scheme.value)
                continue
            config = QuantizeConfig(scheme, calibration=tuple(args.calibration or ()), tokenizer=args.tokenizer,
                                    num_samples=32, eval_samples=16, seq_len=args.seq_len)
            out = fp32 / f"model{recipe.suffix}"
            if not out.is_file():
                start = time.perf_counter()
                result = quantize_file(parent, config, out)
                value, what = result.accuracy.headline
                log.info("%s %s: %.1fs, %s %.4f", fmt, scheme.value, time.perf_counter() - start, what, value)
            files.append((fmt, scheme.value, out))
    return files


def measure(args, ckpt: Path, files) -> list[dict]:
    """memory.measure's rows: PyTorch eager on the checkpoint, then each file through Session."""
    plan = [(ckpt, "pytorch")] + [(path, "session") for _, _, path in files]
    settings = argparse.Namespace(seq_lens=[args.seq_len], batch=args.batch, threads=args.threads, runs=args.runs,
                                  rounds=args.rounds)
    return memory.measure(settings, plan=plan, reference=plan[0])


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="quantize-speed-") as tmp:
        work = Path(args.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        ckpt, head = _checkpoint(args, work)
        files = _files(args, ckpt, head, work)
        from albert_edge.config import load_config

        config = load_config(ckpt)
        measured = measure(args, ckpt, files)
    T = args.seq_len
    eager = measured[0][f"p50_ms@{T}"]
    rows = []
    for (fmt, scheme), row in zip([("pytorch", "eager fp32")] + [(f, s) for f, s, _ in files], measured):
        median = row[f"p50_ms@{T}"]
        rows.append({"format": fmt, "scheme": scheme, "median_ms": median, "p90_ms": row[f"p90_ms@{T}"],
                     "peak_rss_mib": row["peak_rss_mib"], "ratio_to_eager": round(median / eager, 4),
                     "bytes": row["bytes"], "max_abs_diff": row["max_abs_diff"],
                     "meets_target": median / eager <= args.target if scheme.startswith("int8") else None})
    setup = {"model": args.checkpoint or args.preset, "overrides": args.overrides, "head": head,
             "hidden_size": config.hidden_size, "layers": config.num_hidden_layers, "vocab_size": config.vocab_size,
             "batch": args.batch, "seq_len": args.seq_len, "threads": args.threads, "runs": args.runs,
             "rounds": args.rounds, "target": args.target, "load_average": os.getloadavg()}
    if args.json:
        print(json.dumps({"setup": setup, "results": rows}, indent=2))
        return 0
    print(f"{setup['model']} {' '.join(args.overrides)} ({head}, H={config.hidden_size}, L={config.num_hidden_layers}, "
          f"V={config.vocab_size}): batch {args.batch}, seq {args.seq_len}, {args.threads} threads, "
          f"median of {args.rounds} fresh processes x {args.runs} calls, interleaved; "
          f"load average {setup['load_average'][0]:.1f}")
    target = f"<={args.target:g}x"
    print(f"{'format':<8} {'scheme':<14} {'size MB':>9} {'median ms':>10} {'p90 ms':>9} {'peak MiB':>9} {'x eager':>8} "
          f"{target:>7}")
    for r in rows:
        size = f"{r['bytes'] / 1e6:.2f}" if r["bytes"] else "-"
        meets = {True: "yes", False: "NO", None: ""}[r["meets_target"]]
        print(f"{r['format']:<8} {r['scheme']:<14} {size:>9} {r['median_ms']:>10.1f} {r['p90_ms']:>9.1f} "
              f"{r['peak_rss_mib']:>9.1f} {r['ratio_to_eager']:>8.3f} {meets:>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
