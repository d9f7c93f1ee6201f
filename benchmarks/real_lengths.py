"""Real sentences at their own lengths against the same sentences padded to length buckets.

A file exported with a dynamic sequence axis runs each sentence at its own length; every new
length makes the runtime re-plan (onnxruntime's shape inference and arena, TFLite's tensor
re-allocation). Bucketing (padding to the next power of two, masked) avoids most shape changes but
computes on padding. Which costs more is measured here, not guessed: for each file, rounds of
fresh child processes (one model each) alternate between

    exact     each sentence at its own length, in corpus order (a new shape almost every call)
    buckets   each sentence padded to the next power of two (>= --min-bucket), attention mask 0
              on the padding, in corpus order

and report the mean time per sentence and the ratio buckets/exact per round (median, range).
Outputs at the real positions are compared too (padding is masked, so they agree to float
rounding, not bit for bit).

    python benchmarks/real_lengths.py model.int8.onnx model.int8.tflite --tokenizer spiece.model
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
import _harness as harness  # noqa: E402  (options, the child mode, rounds: the way every benchmark here times)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = harness.parser(__doc__)
    p.add_argument("files", nargs="+", type=Path, help="Model files (.onnx, .tflite) with a dynamic sequence axis.")
    p.add_argument("--tokenizer", required=True, help="SentencePiece model (or a directory holding spiece.model).")
    p.add_argument("--text", default="builtin", help="'builtin' or a UTF-8 text file of sentences.")
    p.add_argument("--sentences", type=int, default=200, help="Sentences per pass.")
    p.add_argument("--passes", type=int, default=3, help="Timed passes over the sentences per child (after one untimed).")
    p.add_argument("--max-seq-len", type=int, default=128, help="Longer sentences are truncated.")
    p.add_argument("--min-bucket", type=int, default=16, help="Smallest bucket length.")
    harness.options(p, threads=2, rounds={"default": 3, "help": "Rounds of (exact, buckets) children, interleaved."},
                    json=True)
    return p.parse_args(argv)


def bucket(length: int, smallest: int, largest: int) -> int:
    """The next power of two >= ``length`` (at least ``smallest``, at most ``largest``)."""
    size = smallest
    while size < length:
        size *= 2
    return min(size, max(largest, length))


def _padded(feeds: dict[str, np.ndarray], size: int) -> dict[str, np.ndarray]:
    pad = size - feeds["input_ids"].shape[1]
    return {name: np.pad(value, ((0, 0), (0, pad))) for name, value in feeds.items()}  # ids 0 = <pad>, mask 0


def child(job: dict) -> dict:
    """Runs in the fresh process: every sentence in one mode, timed per pass; the outputs at the
    real positions saved to ``job["out"]``."""
    from albert_edge.profile.inputs import text_feeds
    from albert_edge.runtime import Session

    mode, path, max_len = job["mode"], Path(job["file"]), job["max_seq_len"]
    feeds_list, _ = text_feeds(job["text"], job["tokenizer"], job["sentences"], max_len)
    lengths = [f["input_ids"].shape[1] for f in feeds_list]
    if mode == "buckets":
        feeds_list = [_padded(f, bucket(n, job["min_bucket"], max_len)) for f, n in zip(feeds_list, lengths)]
    session = Session(path, num_threads=job["threads"])
    calls = [session.prepare(f) for f in feeds_list]
    first = [call() for call in calls]  # one untimed pass: every shape seen once
    clock = time.perf_counter_ns
    per_pass = []
    for _ in range(job["passes"]):
        start = clock()
        for call in calls:
            call()
        per_pass.append((clock() - start) / 1e6 / len(calls))
    name = session.output_names[0]
    real = [out[name][:, :n] for out, n in zip(first, lengths)]  # the real positions only
    np.savez(job["out"], *real)
    return {"ms_per_sentence": statistics.median(per_pass),
            "tokens_computed": sum(f["input_ids"].shape[1] for f in feeds_list),
            "tokens_real": sum(lengths), "shapes": len({f["input_ids"].shape for f in feeds_list})}


def measure(args: argparse.Namespace, tmp: Path) -> list[dict]:
    setting = {k: getattr(args, k) for k in ("tokenizer", "text", "sentences", "passes", "max_seq_len", "min_bucket",
                                             "threads")}
    rows = []
    for i, path in enumerate(args.files):
        outs = {mode: tmp / f"{i}-{mode}.npz" for mode in ("exact", "buckets")}

        def one(mode: str) -> dict:
            job = {**setting, "mode": mode, "file": str(path), "out": str(outs[mode])}
            return harness.child("real_lengths:child", job, f"{mode} {path}", path)

        def ratio(r: int, got: dict) -> str:
            ratio = got["buckets"][-1]["ms_per_sentence"] / got["exact"][-1]["ms_per_sentence"]
            return f"{path.name} round {r + 1}/{args.rounds}: buckets/exact {ratio:.3f}"

        # every other round buckets first: neither always runs first
        runs = harness.interleave(("exact", "buckets"), args.rounds, one, alternate=True, after_round=ratio)
        exact, padded = np.load(outs["exact"]), np.load(outs["buckets"])
        diff = max(float(np.abs(exact[k] - padded[k]).max()) for k in exact.files)
        ratios = [b["ms_per_sentence"] / e["ms_per_sentence"] for e, b in zip(runs["exact"], runs["buckets"])]
        rows.append({
            "file": str(path),
            "exact_ms_per_sentence": harness.median((r["ms_per_sentence"] for r in runs["exact"]), 3),
            "buckets_ms_per_sentence": harness.median((r["ms_per_sentence"] for r in runs["buckets"]), 3),
            "ratio": harness.median(ratios, 3), "ratio_range": harness.spread(ratios, 3),
            "padding_tokens_share": round(1 - runs["buckets"][0]["tokens_real"] / runs["buckets"][0]["tokens_computed"], 3),
            "shapes_exact": runs["exact"][0]["shapes"], "shapes_buckets": runs["buckets"][0]["shapes"],
            "max_abs_diff_real_positions": diff,
        })
    return rows


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    import tempfile

    with tempfile.TemporaryDirectory(prefix="albert-lengths-") as tmp:
        rows = measure(args, Path(tmp))
    if args.json:
        print(json.dumps({"setup": {k: v for k, v in vars(args).items() if k != "files"}, "rows": rows},
                         indent=2))
        return 0
    print(f"{'file':<28} {'exact ms':>9} {'buckets ms':>11} {'ratio':>6}  {'range':<12} {'padding':>8} "
          f"{'shapes':>9}  max diff")
    for row in rows:
        lo, hi = row["ratio_range"]
        print(f"{Path(row['file']).name:<28} {row['exact_ms_per_sentence']:>9.3f} {row['buckets_ms_per_sentence']:>11.3f} "
              f"{row['ratio']:>6.3f}  {lo:.3f}-{hi:.3f}  {row['padding_tokens_share']:>7.1%} "
              f"{row['shapes_exact']:>4}/{row['shapes_buckets']:<4}  {row['max_abs_diff_real_positions']:.2e}")
    print(f"(mean per sentence, median of {args.rounds} rounds x {args.passes} passes, {args.threads} threads; "
          "padding = share of computed tokens that are padding in buckets mode)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
