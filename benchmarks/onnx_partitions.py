"""ONNX files for a phone's NPU: how ONNX Runtime Mobile's NNAPI and Core ML providers would split
each file, by onnxruntime's own mobile usability checker (albert_edge.formats.mobile_partitions).

For a model (ALBERT-base's shape with random weights, or the pipeline's builtin small model, trained
and cached by albert_edge.pipeline.small): the dynamic fp32 .onnx (``convert``), the static fp32
.onnx (``convert --static``), the int8-dynamic file of the dynamic one (``quantize``) and the
static int8 QDQ file of the static one (int8-static, the static-file variant), calibrated and
measured against its parent on held-out real text as ``quantize`` does (rows padded to N). For
each file: partitions, nodes covered and the operators left to the CPU with the checker's reason,
per provider (and, for a dynamic file, as they would be with its shapes fixed); file size; stored
and unique weight bytes; the int8 files' accuracy against their parent. Writes a JSON result file
(versions, date, commit) under benchmarks/results/.

    python benchmarks/onnx_partitions.py --model albert-base --seq-len 128
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _harness as harness  # noqa: E402  (options, models, the result file)

HEADS = {"albert-base": ("base", "mlm"), "small": ("pretraining",)}


def checkpoint(model_name: str, head: str, work: Path) -> tuple[Path, Path, str]:
    """(checkpoint, spiece.model, what its weights are). The tokenizer is the builtin small
    model's: real text for ALBERT-base's shape too (its 4000 pieces are ids ALBERT-base has)."""
    from albert_edge import checkpoints
    from albert_edge.config import AlbertConfig
    from albert_edge.pipeline.small import PIPELINE_RECIPE, pretrained

    small, _ = pretrained(PIPELINE_RECIPE, "albert-small-builtin")
    spiece = small / "spiece.model"
    if model_name == "small":
        return small, spiece, "albert-small-builtin: the pipeline's small ALBERT, pretrained 200 steps (cached)"
    model = harness.random_model(AlbertConfig.preset("albert-base-v2"), head)
    return checkpoints.save(model, work / head / "ckpt"), spiece, "random (seed 0)"


def weights(path: Path) -> dict:
    from albert_edge.formats.weights import analyze, read_file

    report = analyze(read_file(path))
    return {"size": path.stat().st_size, "stored_bytes": report.stored_bytes, "unique_bytes": report.unique_bytes,
            "duplicates": len(report.duplicates)}


def partitions(path: Path) -> dict:
    from albert_edge.formats.mobile_partitions import mobile_partitions

    start = time.perf_counter()
    report = mobile_partitions(path).to_dict()
    report["check_seconds"] = round(time.perf_counter() - start, 1)
    del report["path"]
    return report


def accuracy_row(report) -> dict:
    value, what = report.headline
    return {"headline": value, "headline_of": what, "text": report.text,
            "outputs": [{"output": o.name, "rows": o.rows, "cosine_mean": o.cosine_mean, "cosine_min": o.cosine_min,
                         "max_abs_diff": o.max_abs_diff, "agreement": o.agreement, "agreement_of": o.agreement_of,
                         "agreement_count": o.agreement_count} for o in report.outputs]}


def static_int8(path: Path, spiece: Path, samples: int):
    """The static file's int8-static twin, made and measured as quantize makes and measures it,
    with the text padded to N row by row (albert_edge.quantize.static_text)."""
    from albert_edge.quantize import QuantizeConfig
    from albert_edge.quantize.accuracy import measure
    from albert_edge.quantize.calibration import prepare
    from albert_edge.quantize.checks import check_quantized
    from albert_edge.quantize.onnx import build
    from albert_edge.quantize.schemes import recipe_for
    from albert_edge.quantize.source import open_model_file
    from albert_edge.quantize.static_text import for_static
    from albert_edge.runtime import Session

    source = open_model_file(path)
    recipe = recipe_for("onnx", "int8-static")
    config = QuantizeConfig("int8-static", tokenizer=spiece, num_samples=samples, eval_samples=samples)
    text = for_static(prepare(config, source, recipe, source.seq_len), source.entry.static_len)
    out = path.with_name("model.int8-static.onnx")
    built = build(source, out, recipe, config, text.calibration)
    check = check_quantized(out, source.path, built.kept_float, text.evaluation[0].feeds)
    if not check.ok:
        raise SystemExit(f"{out.name} failed its checks: {check.problems}")
    accuracy = measure(Session(source.path), Session(out), text.evaluation, source.head,
                       text=text.described["evaluation"])
    return out, built.notes, accuracy


def run(model_name: str, seq_len: int, samples: int, work: Path) -> list[dict]:
    from albert_edge.converters.export import convert
    from albert_edge.quantize import QuantizeConfig, quantize

    rows = []
    for head in HEADS[model_name]:
        ckpt, spiece, weights_are = checkpoint(model_name, head, work)
        dynamic, static = work / head / "dynamic", work / head / "static"
        start = time.perf_counter()
        convert(str(ckpt), dynamic, targets=("onnx",), seq_len=seq_len, tokenizer=spiece)
        convert(str(ckpt), static, targets=("onnx",), seq_len=seq_len, tokenizer=spiece, static=True)
        int8 = quantize(dynamic / "model.onnx", QuantizeConfig("int8-dynamic", tokenizer=spiece, eval_samples=samples))
        npu, notes, npu_accuracy = static_int8(static / "model.onnx", spiece, samples)
        print(f"{head}: files made in {time.perf_counter() - start:.0f} s", file=sys.stderr)
        files = (("dynamic fp32", dynamic / "model.onnx", None, []),
                 ("static fp32", static / "model.onnx", None, []),
                 ("int8-dynamic (of the dynamic file)", int8.out_path, int8.accuracy, int8.notes),
                 ("static int8 QDQ (int8-static of the static file)", npu, npu_accuracy, notes))
        for what, path, accuracy, file_notes in files:
            row = {"model": model_name, "head": head, "weights": weights_are, "file": what, "name": path.name,
                   **weights(path), "partitions": partitions(path)}
            if accuracy is not None:
                row["accuracy_against_fp32"] = accuracy_row(accuracy)
                row["notes"] = file_notes
            rows.append(row)
            summary = {p["provider"]: f"{p['partitions']} / {p['covered']}/{p['nodes']}"
                       for p in row["partitions"]["providers"]}
            print(json.dumps({"head": head, "file": what, **summary}), file=sys.stderr)
    return rows


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--model", choices=tuple(HEADS), default="albert-base",
                        help="ALBERT-base's shape with random weights (base and mlm heads), or the pipeline's "
                             "builtin small model (pretraining head, trained)")
    harness.options(parser, seq_len={"default": 128, "help": "N of the static files' [1, N] inputs"})
    parser.add_argument("--samples", type=int, default=32, help="calibration and held-out sentences")
    harness.options(parser, out={"help": "result file (default: benchmarks/results/onnx_partitions-MODEL.json)"})
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="onnx-partitions-") as work:
        rows = run(args.model, args.seq_len, args.samples, Path(work))
    result = {
        "benchmark": "onnx_partitions",
        "what": "NNAPI / Core ML partitions of the ONNX files (onnxruntime's mobile usability checker, basic-level "
                "optimization first), sizes, stored vs unique weight bytes, int8 accuracy against fp32 on "
                "held-out real text",
        "model": args.model, "seq_len": args.seq_len, "samples": args.samples,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "commit": harness.commit(),
        "machine": harness.platform_info(),
        "versions": harness.package_versions(("albert-edge", "onnxruntime", "onnx", "torch", "numpy")),
        "files": rows,
    }
    print(harness.write_json(args.out or harness.RESULTS / f"onnx_partitions-{args.model}.json", result))


if __name__ == "__main__":
    main()
