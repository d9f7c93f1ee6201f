"""`albert-edge quantize`: an fp32 model file -> int8 / fp16, checked and measured against it."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..quantize.accuracy import COLUMNS, LENGTH_COLUMNS
from ..quantize.schemes import FORMATS, TFLITE_COMPAT, CalibrationMethod, schemes_for
from ._output import Steps, console, fmt_bytes, print_json, print_table
from ._types import POSITIVE_INT, force_option, threads_option

_SCHEMES = ". ".join(f"{fmt}: {', '.join(s.value for s in schemes_for(fmt))}" for fmt in FORMATS)
_METHODS = ", ".join(m.value for m in CalibrationMethod)


@click.command("quantize", short_help="Quantize an .onnx / .tflite file (int8, int16x8, fp16), checked.")
@click.argument("model_file", type=click.Path(path_type=Path))
@click.option("--scheme", required=True, metavar="SCHEME",
              help=f"Quantization scheme. {_SCHEMES}.")
@click.option("--calibration", "calibration", multiple=True, metavar="TEXT_FILE",
              help="UTF-8 text to calibrate on and (held out) to measure accuracy on; repeatable. "
                   "'builtin' is the builtin English corpus (the default when a tokenizer is known).")
@click.option("--tokenizer", type=click.Path(path_type=Path), default=None, metavar="SPIECE",
              help="spiece.model (or a directory with one) matching the model's vocabulary "
                   "(default: the one beside the source checkpoint).")
@click.option("--method", default="minmax", show_default=True, metavar="METHOD",
              help=f"Calibration method for onnx int8-static: {_METHODS}.")
@click.option("--samples", type=POSITIVE_INT, default=64, show_default=True, help="Calibration sentences.")
@click.option("--eval-samples", type=POSITIVE_INT, default=64, show_default=True,
              help="Held-out sentences the accuracy is measured on.")
@click.option("--embeddings/--no-embeddings", default=True, show_default=True,
              help="Quantize the embedding tables to int8, one scale per row: words (and the MLM decoder "
                   "tied to it), and for ONNX also positions and token types.")
@click.option("--per-channel/--per-tensor", default=True, show_default=True,
              help="One weight scale per output channel, or one per tensor.")
@click.option("--tflite-compat", type=click.Choice(TFLITE_COMPAT), default=TFLITE_COMPAT[0], show_default=True,
              help="Oldest TFLite runtime the .tflite file must load in. 2.14 (tflite-runtime, Raspberry Pi OS "
                   "bookworm): dynamic-range weights get one scale per tensor and int16 GELU runs in float. "
                   "latest: per-channel dynamic-range weights (needs runtime 2.17 / ai-edge-litert).")
@click.option("--ort", is_flag=True,
              help="onnx int8-dynamic: also write the .ort twin beside --out (model.int8-dynamic.ort, what ONNX "
                   "Runtime Mobile loads), converted from the checked int8 .onnx and checked to store each weight "
                   "once and give its outputs, with the operator configurations of a reduced build.")
@click.option("--max-drop", type=float, default=None, metavar="X",
              help="Fail (exit 1, file not kept) when the MLM top-1 / label agreement with the fp32 "
                   "parent (the output cosine for heads without labels) is below 1 - X.")
@click.option("--seq-len", type=POSITIVE_INT, default=None, help="Sequence length of the calibration and "
              "evaluation batches (default: the one the file was converted for).")
@threads_option("Runtime threads for the checks (at least 1; default: the runtime's choice).")
@click.option("--out", "out_path", required=True, type=click.Path(path_type=Path), metavar="FILE",
              help="The quantized file to write (same suffix as MODEL_FILE).")
@force_option("the --out file exists (it is replaced only once the new file passed its checks)")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def quantize(model_file: Path, scheme: str, calibration: tuple[str, ...], tokenizer: Path | None, method: str,
             samples: int, eval_samples: int, embeddings: bool, per_channel: bool, tflite_compat: str, ort: bool,
             max_drop: float | None, seq_len: int | None, threads: int | None, out_path: Path, force: bool,
             as_json: bool) -> None:
    """Quantize MODEL_FILE (an fp32 .onnx or .tflite that `albert-edge convert` wrote) into
    --out. The file is loaded in its real runtime, checked to store every weight once and to
    keep no matrix-product weight in float unasked, compared with MODEL_FILE on held-out real
    text, and only then put in place and added to the manifest beside it."""
    from ..converters.quantized import quantize_file
    from ..quantize import QuantizeConfig

    config = QuantizeConfig(
        scheme=scheme, calibration=tuple(calibration), tokenizer=tokenizer, calibration_method=method,
        num_samples=samples, eval_samples=eval_samples, quantize_embeddings=embeddings, per_channel=per_channel,
        max_drop=max_drop, seq_len=seq_len, num_threads=threads, tflite_compat=tflite_compat,
    )
    with Steps("quantize") as step:
        step(f"{model_file.name} {scheme}: load, calibrate, check, compare on held-out text")
        result = quantize_file(model_file, config, out_path, force=force, ort=ort)
    if as_json:
        print_json(result.to_dict())
    else:
        _print(result)
    if not result.kept:
        value, what = result.accuracy.headline
        click.echo(f"Error: {what} is {value:.4f} (a drop of {result.accuracy.drop:.4f}, above --max-drop "
                   f"{max_drop}): {out_path} not kept", err=True)
        sys.exit(1)


def _print(result) -> None:
    print_table(f"{result.scheme} vs fp32 parent ({result.accuracy.text})", list(COLUMNS),
                result.accuracy.rows(), right=(1, 2, 3, 4, 5))
    print_table("by input length (real tokens, padding left out)", list(LENGTH_COLUMNS),
                result.accuracy.length_rows(), right=(2, 3, 4, 5))
    value, what = result.accuracy.headline
    limit = f" (max drop {result.max_drop})" if result.max_drop is not None else ""
    console.print(f"headline: {what} {value:.4f}{limit}")
    floats = result.check.float_weights
    if floats:
        print_table("weights read in float", ["weight", "op", "shape", "dtype", "why"],
                    [(w.name, w.op, list(w.shape), w.dtype, w.reason) for w in floats])
    else:
        console.print("every matrix-product weight is stored quantized")
    copies = result.check.copies
    console.print(f"weights once: {len(copies)} parent weights checked, "
                  f"{sum(len(c.stored_as) == 1 for c in copies)} stored exactly once, "
                  f"{len(result.check.weights.duplicates)} byte duplicates")
    for note in result.notes:
        console.print(f"note: {note}")
    if result.kept:
        ratio = result.size / result.parent_size if result.parent_size else 0.0
        console.print(f"wrote {result.out_path}: {fmt_bytes(result.size)} ({ratio:.2f}x of "
                      f"{fmt_bytes(result.parent_size)}) in {result.seconds:.1f}s; manifest {result.manifest_path}")
        if result.beside_path is not None:
            console.print(f"wrote {result.beside_path} ({fmt_bytes(result.beside_path.stat().st_size)}): its outputs "
                          f"are {result.out_path.name}'s, each weight stored once")


COMMANDS = [quantize]
