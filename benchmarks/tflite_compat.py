"""What --tflite-compat 2.14 costs on a newer runtime: TFLite int8-dynamic with one weight scale
per tensor (loads in tflite-runtime 2.14) against one per output channel (--tflite-compat
latest, FULLY_CONNECTED version 12, runtime 2.17+), both run in the interpreter installed here
(ai-edge-litert).

A model of a preset's shape (random init, base head) is converted to fp32 TFLite and quantized
both ways. Accuracy: last_hidden_state of each against the fp32 file on random ids (cosine and
relative error). Speed: the three files timed round-robin, one call of each in turn, batch 1,
so load from other processes falls on all of them alike; medians and ratios to fp32.

    python benchmarks/tflite_compat.py                       # ALBERT-base shape, seq 128, 2 threads
    python benchmarks/tflite_compat.py --preset tiny --runs 20 --seq-len 32
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import _harness as harness  # noqa: E402  (the options every benchmark shares)


def build(preset: str, seq_len: int, out: Path) -> dict[str, Path]:
    import torch

    from albert_edge import checkpoints
    from albert_edge.config import AlbertConfig
    from albert_edge.converters.export import convert
    from albert_edge.model import build_model
    from albert_edge.converters.quantized import quantize_file
    from albert_edge.quantize import QuantizeConfig

    torch.manual_seed(0)
    checkpoint = checkpoints.save(build_model(AlbertConfig.preset(preset), "base").eval(), out / "checkpoint")
    convert(checkpoint, out / "files", targets=("tflite",), seq_len=seq_len)
    files = {"fp32": out / "files" / "model.tflite"}
    for compat in ("2.14", "latest"):
        files[compat] = out / "files" / f"model.int8-dynamic.{compat}.tflite"
        quantize_file(files["fp32"], QuantizeConfig("int8-dynamic", eval_samples=8, tflite_compat=compat), files[compat])
    return files


def main() -> int:
    parser = harness.parser(__doc__)
    parser.add_argument("--preset", default="albert-base-v2", help="model shape (albert_edge.config.PRESETS)")
    harness.options(parser, seq_len={"default": 128, "help": "sequence length"},
                    threads={"default": 2, "help": "interpreter threads"},
                    runs={"default": 60, "help": "timed calls of each file"})
    args = parser.parse_args()

    from albert_edge.config import AlbertConfig
    from albert_edge.formats.op_versions import min_runtime, op_versions
    from albert_edge.runtime import Session

    vocab = AlbertConfig.preset(args.preset).vocab_size
    rng = np.random.default_rng(0)
    feeds = [{"input_ids": rng.integers(5, vocab, (1, args.seq_len)), "attention_mask": np.ones((1, args.seq_len)),
              "token_type_ids": np.zeros((1, args.seq_len))} for _ in range(4)]
    with tempfile.TemporaryDirectory(prefix="albert-edge-tflite-compat-") as tmp:
        files = build(args.preset, args.seq_len, Path(tmp))
        sessions = {name: Session(path, num_threads=args.threads) for name, path in files.items()}
        outputs = {name: np.concatenate([s.run(f)["last_hidden_state"].reshape(-1, 1) for f in feeds])
                   for name, s in sessions.items()}
        times: dict[str, list[float]] = {name: [] for name in files}
        for run in range(args.runs + 1):
            for name, session in sessions.items():
                start = time.perf_counter()
                session.run(feeds[run % len(feeds)])
                if run:  # the first call of each is a warm-up
                    times[name].append(time.perf_counter() - start)
        backend = sessions["fp32"].backend_name
        mins = {name: min_runtime(op_versions(path)) for name, path in files.items()}
    fp32 = outputs["fp32"].reshape(-1, AlbertConfig.preset(args.preset).hidden_size)
    base = statistics.median(times["fp32"])
    print(f"{args.preset}, batch 1, seq {args.seq_len}, {args.threads} threads, {backend}, {args.runs} runs")
    print(f"{'file':<8} {'min runtime':>11} {'cosine':>8} {'rel err':>8} {'median ms':>10} {'x fp32':>7}")
    for name in files:
        got = outputs[name].reshape(fp32.shape)
        cosine = np.mean((got * fp32).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(fp32, axis=-1))
        rel = np.linalg.norm(got - fp32) / np.linalg.norm(fp32)
        median = statistics.median(times[name])
        print(f"{name:<8} {mins[name]:>11} {cosine:>8.5f} {rel:>8.4f} {1000 * median:>10.1f} {median / base:>7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
