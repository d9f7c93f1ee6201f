"""Which int8 TFLite form runs best, and on which interpreter: candidate files of one model timed
in fresh processes, interleaved, with ratios to the first file. `albert-edge profile FILE --ops`
gives the time per operator of each (LiteRT's profiler: XNNPACK operators by their XNNPACK name,
ops left to LiteRT's builtin kernels by their TFLite name).

Routes (each file x route in its own child process, ``--rounds`` times, interleaved, so load from
other processes falls on every one alike):

    interpreter   ai-edge-litert's classic Interpreter, XNNPACK on (packs weights per node)
    session       albert_edge.runtime.Session's defaults (CompiledModel, weights once)
    tf            tensorflow.lite.Interpreter (TensorFlow's own kernels, XNNPACK on)

``--build DIR`` makes the candidates first from DIR/model.tflite (a file `albert-edge convert`
wrote, with its manifest): int8-dynamic as albert-edge writes it, and int8-full in the
converter's form (attention products and GELU in int8), with the attention products in float,
and with GELU in float too (albert-edge's form), using the calibration text and tokenizer given. Every child saves its outputs; the table shows each
file's cosine to the first file's, so a form that is fast but wrong shows at once.

    python benchmarks/tflite_int8_forms.py --build work/ --tokenizer spiece.model --rounds 3
    python benchmarks/tflite_int8_forms.py a.tflite b.tflite --routes interpreter session tf --seq-lens 32 128

Timings on a shared machine are noisy: quote ratios from one run, never figures from two.

What it showed (ALBERT-base shape, ai-edge-litert 2.3, x86-64, 2 threads): the converter's
int8-full form, whose attention products are int8 BATCH_MATMULs, runs ~3x slower than
int8-dynamic on ai-edge-litert (XNNPACK delegates no int8 BATCH_MATMUL; LiteRT's builtin kernel
took two thirds of the call) while TensorFlow's interpreter runs it fast (and, there, 0.84 cosine
to the other routes). With the products in float, int8-full runs as fast as int8-dynamic on every
route; with GELU in float too (XNNPACK fuses it into an int8 lookup table) a few % faster still.
Graph variants of int8-dynamic (Q/K/V as one FULLY_CONNECTED, the 1/sqrt(d) scale on the
queries, LayerNorm subtracting its mean once) changed its p50 by less than the noise (+-3%):
the file is bound by its FULLY_CONNECTED products (~72% of a call, near the CPU's int8 peak).
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
import memory  # noqa: E402  (benchmarks/memory.py: feeds and /proc memory of the child)

ROUTES = ("interpreter", "session", "tf")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = harness.parser(__doc__)
    p.add_argument("files", nargs="*", type=Path,
                   help="The .tflite files to compare; the first is the reference of the ratios and cosines "
                        "(with --build alone: DIR/model.tflite).")
    p.add_argument("--build", type=Path, metavar="DIR",
                   help="Make the candidate forms from DIR/model.tflite first and compare them (after FILES).")
    p.add_argument("--tokenizer", help="spiece.model for --build's calibration text (default: the checkpoint's).")
    p.add_argument("--calibration", default="builtin", help="Calibration text for --build (default: builtin).")
    p.add_argument("--samples", type=int, default=32, help="Calibration sentences for --build's int8-full forms.")
    p.add_argument("--routes", nargs="+", default=["interpreter", "session"], choices=ROUTES,
                   help="Interpreters to time each file on (default: interpreter session).")
    harness.options(p, seq_lens=[32, 128], threads={"default": 2, "help": "Interpreter threads."}, runs=20, rounds=3,
                    json=True)
    return p.parse_args(argv)


# -- the candidates ------------------------------------------------------------------------------

def build(directory: Path, tokenizer: str | None, calibration: str, samples: int) -> list[Path]:
    """The candidate forms of DIR/model.tflite, written beside it (kept when already there). Built
    with the TFLite builder directly, each form named; `albert-edge quantize` writes the default
    form and checks it (weights once, accuracy), which the cosine column stands in for here."""
    from albert_edge.quantize import QuantizeConfig, recipe_for
    from albert_edge.quantize.calibration import prepare
    from albert_edge.quantize.source import open_model_file
    from albert_edge.quantize.tflite import Form
    from albert_edge.converters.tflite_quantized import build as build_tflite

    source = open_model_file(directory / "model.tflite")
    candidates = {
        "model.int8-dynamic.tflite": ("int8-dynamic", Form()),
        "model.int8-full.converter-form.tflite": ("int8-full", Form(attention_in_float=False, gelu_in_float=False)),
        "model.int8-full.int8-gelu.tflite": ("int8-full", Form(gelu_in_float=False)),
        "model.int8-full.tflite": ("int8-full", Form()),
    }
    made = []
    for name, (scheme, form) in candidates.items():
        out = directory / name
        if not out.is_file():
            config = QuantizeConfig(scheme, calibration=(calibration,), tokenizer=tokenizer, num_samples=samples,
                                    eval_samples=1)
            recipe = recipe_for("tflite", scheme)
            text = prepare(config, source, recipe, source.seq_len)
            build_tflite(source, out, recipe, config, text.calibration, form=form)
            print(f"built {out}", file=sys.stderr)
        made.append(out)
    return made


# -- the child: one file on one route --------------------------------------------------------------

def _open(route: str, path: Path, threads: int):
    if route == "session":
        from albert_edge.runtime import Session

        return Session(path, num_threads=threads).run
    if route == "interpreter":
        from ai_edge_litert.interpreter import Interpreter
    else:
        from tensorflow.lite.python.interpreter import Interpreter
    interpreter = Interpreter(model_path=str(path), num_threads=threads)
    runner = interpreter.get_signature_runner("serving_default")
    return lambda feeds: runner(**{k: v.astype(np.int32) for k, v in feeds.items()})


def child(job: dict) -> dict:
    """Runs in the fresh process: one file on one route, timed per length; outputs saved to ``job["out"]``."""
    start = time.perf_counter()
    run = _open(job["route"], Path(job["file"]), job["threads"])
    record: dict = {"load_s": time.perf_counter() - start, "latency_ms": {}}
    outputs = {}
    for T in job["seq_lens"]:
        feeds = memory._feeds(1, T)
        outputs[T] = run(feeds)
        run(feeds)  # the first call at a new length resizes and plans
        record["latency_ms"][T] = harness.timed(lambda: run(feeds), job["runs"])
    record["peak_rss_mib"] = memory._memory()["VmHWM"]
    memory.save_outputs(Path(job["out"]), outputs)
    return record


# -- the comparison --------------------------------------------------------------------------------

def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.reshape(-1, a.shape[-1]).astype(np.float64), b.reshape(-1, b.shape[-1]).astype(np.float64)
    return float(np.mean(np.sum(a * b, 1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) + 1e-12)))


def measure(args: argparse.Namespace, files: list[Path]) -> list[dict]:
    plan = [(path, route) for path in files for route in args.routes]
    setting = {"seq_lens": args.seq_lens, "threads": args.threads, "runs": args.runs}
    with tempfile.TemporaryDirectory(prefix="albert-forms-") as tmp:
        outs = {key: Path(tmp) / f"{i}.npz" for i, key in enumerate(plan)}

        def one(key: tuple[Path, str]) -> dict:
            job = {**setting, "route": key[1], "file": str(key[0]), "out": str(outs[key])}
            return harness.child("tflite_int8_forms:child", job, f"{key[1]} {key[0]}", key[0],
                                 env={"TF_CPP_MIN_LOG_LEVEL": "2"})

        records = harness.interleave(plan, args.rounds, one, said=lambda key: f"{key[1]} {key[0].name}")
        reference = dict(np.load(outs[plan[0]]))
        rows = []
        for key in plan:
            got = dict(np.load(outs[key]))
            row = {"file": key[0].name, "route": key[1], "bytes": key[0].stat().st_size,
                   "peak_rss_mib": harness.median((r["peak_rss_mib"] for r in records[key]), 1),
                   "load_s": harness.median((r["load_s"] for r in records[key]), 3),
                   "cosine": round(min(_cosine(got[n], reference[n]) for n in reference if n in got), 5)}
            for T in args.seq_lens:
                times = [t for r in records[key] for t in r["latency_ms"][str(T)]]
                row[f"p50_ms@{T}"] = round(float(np.percentile(times, 50)), 2)
            rows.append(row)
    first = {route: next(r for r in rows if r["route"] == route) for route in args.routes}
    for row in rows:
        for T in args.seq_lens:
            row[f"ratio@{T}"] = round(row[f"p50_ms@{T}"] / first[row["route"]][f"p50_ms@{T}"], 3)
    return rows


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    files = list(args.files)
    if args.build:  # alone, the fp32 parent first: ratios and cosines against it
        files = (files or [args.build / "model.tflite"]) + build(args.build, args.tokenizer, args.calibration,
                                                                   args.samples)
    if not files:
        raise SystemExit("give .tflite files, or --build DIR")
    rows = measure(args, files)
    if args.json:
        print(json.dumps({"setup": {k: str(v) for k, v in vars(args).items()}, "rows": rows},
                         indent=2))
        return 0
    cols = ["file", "route", "bytes", "peak_rss_mib", "load_s", "cosine",
            *[f"{p}@{T}" for T in args.seq_lens for p in ("p50_ms", "ratio")]]
    print("  ".join(cols))
    for row in rows:
        print("  ".join(str(row[c]) for c in cols))
    print(f"(medians over {args.rounds} fresh processes x {args.runs} calls per route; ratio: p50 over the "
          "first file's on the same route; cosine: against the first file's outputs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
