"""`albert-edge pipeline`: checkpoint -> ONNX/TFLite -> int8/fp16 -> profile -> report, in one
command, re-runnable."""

from __future__ import annotations

from pathlib import Path

import click

from ._output import Steps, console, print_json, print_table
from ._types import POSITIVE_INT, POSITIVE_INTS, SECONDS


def _steps(ctx, param, value: str | None) -> tuple[str, ...]:
    """The comma-separated steps of --only/--skip. Given, it must name at least one: an empty
    selection (``--only ''``, ``--skip ','``) is a mistake, not a request to run every step."""
    if value is None:
        return ()
    steps = tuple(s.strip() for s in value.split(",") if s.strip())
    if not steps:
        from ..pipeline import STEPS

        raise click.BadParameter(f"{value!r} names no step; give one or more of {', '.join(STEPS)}, "
                                 "comma-separated (or leave the option out)")
    return steps


@click.command("pipeline", short_help="Checkpoint -> files for each device -> measured report, in one command.")
@click.argument("source", required=False, metavar="[SOURCE]")
@click.option("--out", "out_dir", default="albert-edge-pipeline", show_default=True, type=click.Path(path_type=Path),
              help="Directory for every model's checkpoint/, files/, profile.json and report/ (and pipeline.json).")
@click.option("--to", "targets", multiple=True,
              type=click.Choice(["onnx", "ort", "tflite", "executorch", "mediapipe", "onnx-text", "transformers-js"]),
              help="Target format, repeatable (default: onnx and tflite). ort makes model.ort (ONNX Runtime "
                   "Mobile), executorch model.pte and onnx-text model.text.onnx (the text in, the tokenizer "
                   "inside; needs the [onnx-text] extra); with the default schemes or --scheme int8-dynamic each "
                   "also makes its model.int8-dynamic file at conversion. mediapipe makes model.mediapipe.tflite "
                   "for MediaPipe Tasks (needs the [mobile] extra), quantized with the tflite schemes. transformers-js makes "
                   "the transformers-js/ folder transformers.js loads, its int8 file inside it.")
@click.option("--scheme", "schemes", multiple=True, metavar="SCHEME",
              help="Quantization scheme, repeatable (default: int8-dynamic and fp16 for each format).")
@click.option("--seq-len", type=POSITIVE_INT, default=128, show_default=True,
              help="Sequence length to convert for (TFLite files are built for it).")
@click.option("--profile-seq-len", "profile_seq_lens", default="32,128", show_default=True, type=POSITIVE_INTS,
              help="Sequence lengths to profile at (comma-separated, at most --seq-len).")
@click.option("--threads", type=POSITIVE_INT, default=2, show_default=True, help="Runtime threads for quantize checks and profiling.")
@click.option("--runs", type=POSITIVE_INT, default=20, show_default=True, help="Timed calls per file and setting (at least).")
@click.option("--min-seconds", type=SECONDS, default=0.5, show_default=True,
              help="Timed seconds per file and setting (at least).")
@click.option("--only", callback=_steps, default=None, metavar="STEPS",
              help="Run only these steps (comma-separated): checkpoint, convert, quantize, profile, report.")
@click.option("--skip", callback=_steps, default=None, metavar="STEPS", help="Leave out these steps (comma-separated).")
@click.option("--static", is_flag=True,
              help="Also make static-shape files ([1, --seq-len] inputs, what phone GPUs and NPUs take) of the onnx "
                   "and tflite targets, in files-static/ beside files/, quantized for their accelerators: fp16 "
                   ".tflite (LiteRT's GPU), int8-static .onnx (NNAPI; needs the checkpoint's spiece.model). The "
                   "report covers both folders and says which file each accelerator takes. On the built-in default, "
                   "for the small model only. Off by default.")
@click.option("--force", is_flag=True, help="Use --out even when it holds files the pipeline did not write.")
@click.option("--json", "as_json", is_flag=True, help="Print the steps and report paths as JSON.")
def pipeline(source: str | None, out_dir: Path, targets: tuple[str, ...], schemes: tuple[str, ...], seq_len: int,
             profile_seq_lens: tuple[int, ...], threads: int, runs: int, min_seconds: float, only: tuple[str, ...],
             skip: tuple[str, ...], static: bool, force: bool, as_json: bool) -> None:
    """Convert SOURCE (a checkpoint directory, or a Hugging Face model id such as
    albert/albert-base-v2 or org/name@revision) to ONNX and TFLite, quantize each file
    (int8-dynamic, fp16), profile every file on this machine and write a report per model; prints
    where it is.

    A re-run skips each step whose outputs are complete, unchanged (sha256) and made from the
    same inputs. With no SOURCE it runs on a built-in default that needs no download: the
    albert-base-v2 shape with random weights (sizes and latency; its agreement figures are not
    shown) and a small ALBERT pretrained briefly on the builtin corpus (accuracy of the int8 and
    fp16 files against fp32 on real text), cached under ~/.cache/albert-edge.
    """
    from ..pipeline import PipelineOptions, run_pipeline

    options = PipelineOptions(
        out_dir=out_dir, source=source, targets=targets or ("onnx", "tflite"), schemes=schemes or None,
        seq_len=seq_len, profile_seq_lens=profile_seq_lens, threads=threads, runs=runs, min_seconds=min_seconds,
        only=only, skip=skip, force=force, static=static)
    with Steps("pipeline") as on_step:
        result = run_pipeline(options, on_step=on_step)
    if as_json:
        print_json(result.to_dict())
        return
    console.print(f"pipeline on {result.description}")
    rows = [(s.model, s.step, s.status, f"{s.seconds:.1f}s" if s.status == "ran" else "", s.detail)
            for s in result.steps]
    print_table(f"Steps ({result.seconds:.0f}s in all)", ["model", "step", "status", "time", "detail"], rows, right=(3,))
    for model, html in result.reports.items():
        console.print(f"report of {model}: {html}")


COMMANDS = [pipeline]
