"""`albert-edge convert` (checkpoint -> verified ONNX/.ort/TFLite/ExecuTorch files + manifest) and
`albert-edge inspect` (what a model file stores, and whether any weight is stored twice)."""

from __future__ import annotations

from pathlib import Path

import click

from ..converters.targets import TARGETS  # names and options only: no exporter is imported
from ..formats.graph import LAYER_FORMS
from ._output import Steps, console, err_console, fmt_bytes, print_json, print_table
from ._types import gpu_precision as checked_gpu_precision, gpu_precision_option

TARGET_NAMES = tuple(TARGETS)
SCHEMES = tuple(dict.fromkeys(str(s) for t in TARGETS.values() for s in t.schemes))  # what --scheme adds
HEAD_NAMES = ("base", "mlm", "pretraining", "classification", "token-classification", "qa")


@click.command("convert", short_help="Convert a checkpoint to ONNX / ONNX Runtime .ort / TFLite / ExecuTorch / "
                                     "MediaPipe, verified.")
@click.argument("checkpoint", metavar="CHECKPOINT")
@click.option("--to", "targets", multiple=True, metavar="TARGET",
              help=f"Target format, repeatable: {', '.join(TARGET_NAMES)} (default onnx). ort writes model.ort "
                   "for ONNX Runtime Mobile (converted by onnxruntime, graph optimized at its extended level) and "
                   "required_operators.config and required_operators_and_types.config beside it, from which a "
                   "reduced-size onnxruntime build is made. executorch writes model.pte lowered to XNNPACK (batch 1, "
                   "any length up to the model's maximum or --max-seq-len; needs the [convert-executorch] extra). "
                   "mediapipe writes model.mediapipe.tflite for MediaPipe Tasks / "
                   "the TFLite Task Library: TFLite metadata and the spiece.model inside; a classification head "
                   "with id2label becomes a TextClassifier (class probabilities), the base model a TextEmbedder "
                   "(the pooled vector); int32 inputs of shape (1, --seq-len): the app pads every text to that "
                   "length, so a short text costs as much as a long one (needs the [mobile] extra). onnx-text "
                   "writes model.text.onnx, whose input is the text itself (one string per call): the "
                   "checkpoint's spiece.model with ALBERT's pre-processing is an onnxruntime-extensions "
                   "SentencepieceTokenizer node in front of the model, and a token_ids output shows what it "
                   "fed (needs the [onnx-text] extra; the app registers the extensions' library).")
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path),
              help="Output directory for the files and manifest.json.")
@click.option("--head", default=None, metavar="HEAD",
              help=f"Head to export: {', '.join(HEAD_NAMES)} (default: the checkpoint's own).")
@click.option("--seq-len", type=int, default=128, show_default=True,
              help="Sequence length to build and verify at (TFLite is built for it, ONNX is dynamic; the "
                   "mediapipe file runs at it alone).")
@click.option("--opset", type=int, default=None,
              help="ONNX opset, 17 or newer (default 20: GELU as one node, faster in onnxruntime).")
@click.option("--outputs", "outputs", multiple=True, metavar="NAME",
              help="Keep only this output in the files, repeatable (default: all of the head's). "
                   "--head base --outputs last_hidden_state leaves out pooler_output and its weights.")
@click.option("--scheme", default=None, metavar="SCHEME",
              help=f"ort, executorch and onnx-text: also write model.SCHEME.ort / .pte / .text.onnx "
                   f"({', '.join(SCHEMES)}: per-channel int8 weights, dynamic int8 activations), measured against "
                   "the fp32 file on real text. The int8 .ort is the .onnx that `albert-edge quantize` makes, "
                   "converted, and the int8 .text.onnx that .onnx behind the tokenizer; each must give its outputs.")
@click.option("--max-seq-len", type=int, default=None, metavar="N",
              help="executorch only: the longest sequence the .pte takes (default: the model's "
                   "max_position_embeddings). ExecuTorch sizes the tensors it keeps outside XNNPACK for it and "
                   "allocates them at load, so a shorter maximum takes less memory; a longer input is refused.")
@click.option("--layers", type=click.Choice(LAYER_FORMS), default=None,
              help="tflite only: how the shared layer's applications are written (default loop). loop writes "
                   "each run of one weight group as a WHILE operator over one body subgraph: the TFLite "
                   "Interpreter with default options (as an Android or iOS app opens a file) then packs the shared "
                   "weights for XNNPACK once, not once per layer: a smaller peak memory in an app's Interpreter "
                   "than TFAlbertModel's converted file, and shorter calls (benchmarks/peers.py measures both; its "
                   "results hold the figures). unrolled writes every application's operators in sequence, one "
                   "subgraph, as TensorFlow's converter does. `quantize` keeps the form for "
                   "int8-dynamic and fp16 and writes int8-full and int16x8 unrolled. MediaPipe's text tasks take "
                   "single-subgraph files only, so the mediapipe target is always unrolled.")
@click.option("--static", is_flag=True,
              help="Fixed-shape inputs, [1, --seq-len], for a phone's GPU or NPU or a Jetson: LiteRT's GPU "
                   "accelerator, NNAPI, Core ML and TensorRT take static shapes only. The graph is written in ops "
                   "those delegates take whole (positions as constants, 1-D gathers, no shrink-axis slices; TFLite "
                   "unrolled, as the GPU runs no WHILE). Apps pad every input to that length. The dynamic-shape "
                   "files stay the default: they run any length on the CPU.")
@click.option("--adaptive", is_flag=True,
              help="A classifier trained with early exits (finetune --exits): files that stop when the exit rule "
                   "says the answer is settled, the rule inside the file's loop (tflite, onnx, ort, "
                   "transformers-js). They output logits and passes, the passes each input ran; the ONNX file takes "
                   "the rule's setting as an optional input, exit_setting. The mediapipe file has no loop (MediaPipe "
                   "takes one subgraph): its passes are written out, a settled text leaving the batch, and its "
                   "second head scores the passes. Default rule: the one fine-tuning chose on held-out text.")
@click.option("--exit-rule", default=None, metavar="KIND=SETTING",
              help="With --adaptive: patience=P (the answer unchanged for P passes), confidence=T (the top "
                   "probability reaches T) or entropy=E (the probabilities' entropy falls to E nats).")
@click.option("--min-passes", type=int, default=None, metavar="N",
              help="With --adaptive: never stop before N passes (default: the rule's own, else 1).")
@click.option("--force", is_flag=True, help="Write into an output directory that already holds files.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def convert(checkpoint: str, targets: tuple[str, ...], out_dir: Path, head: str | None, seq_len: int,
            opset: int | None, outputs: tuple[str, ...], scheme: str | None, max_seq_len: int | None,
            layers: str | None, static: bool, adaptive: bool, exit_rule: str | None, min_passes: int | None,
            force: bool, as_json: bool) -> None:
    """Convert CHECKPOINT (a Hugging Face directory or model id such as albert/albert-base-v2 or
    org/name@revision, an original TF checkpoint, or albert-edge training output) to each --to
    format in --out (onnx, tflite, executorch, or ort: ONNX Runtime Mobile's format). Every file
    is verified against PyTorch and checked to store each shared weight once before it is moved
    in place; manifest.json is written last."""
    from ..converters.adaptive import parse_rule
    from ..converters.export import convert as run_convert

    if not adaptive and (exit_rule is not None or min_passes is not None):
        raise click.UsageError(f"{'--exit-rule' if exit_rule is not None else '--min-passes'} goes with --adaptive")
    rule = parse_rule(exit_rule, min_passes) if adaptive else None
    with Steps("convert") as on_step:
        extra = {k: v for k, v in (("scheme", scheme), ("max_seq_len", max_seq_len), ("layers", layers),
                                   ("static", static or None)) if v is not None}
        result = run_convert(checkpoint, out_dir, targets=targets or ("onnx",), head=head, seq_len=seq_len,
                             opset=opset, force=force, on_step=on_step, outputs=outputs or None,
                             adaptive=(rule or True) if adaptive else False, **extra)
    if as_json:
        print_json(result.to_dict())
        return
    rows = []
    for f in result.files:
        w = f.entry.weights
        worst = max(f.entry.parity["max_abs_diff"].values(), default=0.0)
        blocks = f.entry.format_version.get("delegate_blocks", "")
        rows.append((f.name, f.format, fmt_bytes(f.entry.size), fmt_bytes(w["stored_bytes"]),
                     fmt_bytes(w["model_param_bytes"] or 0), len(w["duplicates"]), f"{worst:.2e}",
                     blocks, f"{f.export_seconds:.1f}s", f"{f.verify_seconds:.1f}s"))
    print_table(f"Converted ({result.head}) into {result.out_dir}",
                ["file", "format", "size", "stored weights", "model params", "duplicates", "max |diff|",
                 "delegate blocks", "export", "verify"], rows, right=(2, 3, 4, 5, 6, 7, 8, 9))
    for f in result.files:
        if f.entry.precision != "fp32" and "cosine_mean" in f.entry.parity:
            cosines = ", ".join(f"{k} {v:.5f}" for k, v in f.entry.parity["cosine_mean"].items())
            passes = f.entry.parity.get("agreement", {}).get("passes")  # an adaptive file's pass counts
            same = "" if passes is None else f"; the same passes on {100 * passes:.1f}% of the texts"
            console.print(f"{f.name} against {f.entry.parity['parent']}: mean cosine {cosines}{same}")
    for f in result.files:  # convert --static's run of each .tflite on LiteRT's GPU accelerator
        if isinstance(f.entry.parity.get("gpu"), dict):
            console.print(_gpu_check_line(f.name, f.entry.parity["gpu"]))
    if result.app_files:  # what an app reads beside the ids-in files
        console.print(f"beside them, for an app: {', '.join(a.name for a in result.app_files)}")
    for note in result.notes:
        console.print(f"note: {note}")
    console.print(f"manifest: {result.manifest_path}  ({result.seconds:.1f}s in all)")



def _gpu_check_line(name: str, gpu: dict) -> str:
    """One line of the GPU check the manifest keeps: where the file ran and how far from PyTorch,
    or why it was not run."""
    from ..runtime.accelerator import software_adapter

    if not gpu.get("ran"):
        return f"{name} on LiteRT's GPU accelerator: not run ({gpu.get('reason')})"
    placement = gpu.get("placement") or {}
    worst = max((gpu.get("max_abs_diff") or {}).values(), default=0.0)
    software = software_adapter(placement.get("adapter"))
    return (f"{name} on LiteRT's GPU accelerator (float32): {placement.get('gpu_ops')} of {placement.get('ops')} "
            f"operators on the GPU, max |diff| {worst:.2e} from PyTorch, "
            f"{'within' if gpu.get('ok') else 'outside'} the tolerance"
            + (f" (on {software}, software Vulkan: it checks the GPU path, not its speed)" if software else ""))


@click.command("inspect", short_help="What a model file stores, in which precision, and any weight stored twice.")
@click.argument("model_file", type=click.Path(path_type=Path))
@click.option("--partitions", is_flag=True,
              help="Also how ONNX Runtime Mobile's NPU providers would split an .onnx (NNAPI; Core ML MLProgram and "
                   "NeuralNetwork), by onnxruntime's own mobile usability checker: partitions, nodes covered, and "
                   "the operators left to the CPU with the checker's reason. One partition covering every node is "
                   "what `convert --static` writes for.")
@click.option("--accelerator", type=click.Choice(["cpu", "gpu"]), default="cpu", show_default=True,
              help="'gpu': also where LiteRT's GPU accelerator puts a .tflite's operators, from its own report (run "
                   "in a child process): operators on the GPU and on the CPU, each fallback with its reason, its "
                   "refusal of a dynamic-shape file, the adapter it selected.")
@gpu_precision_option("With --accelerator gpu: the GPU's arithmetic, float32 or float16 (the accelerator's default).")
@click.option("--json", "as_json", is_flag=True, help="Print the analysis as JSON.")
def inspect(model_file: Path, partitions: bool, accelerator: str, gpu_precision: str | None, as_json: bool) -> None:
    """Read MODEL_FILE (.onnx, ONNX Runtime .ort, .tflite or ExecuTorch .pte) back and report its inputs, outputs, op histogram,
    a .tflite's TFLite metadata (the MediaPipe task, tensor names, tokenizer inside, labels),
    weight tensors, stored vs unique weight bytes, and every duplicated weight: exact copies and
    reshaped or transposed copies of another stored tensor. Then the weight bytes per precision
    and every matrix product that reads a float weight, with the reason; for a quantized file
    whose manifest names its fp32 parent, each parent weight is also looked for by value, so an
    int8 copy made twice with different scales shows too."""
    from ..formats.describe import inspect_model
    from ..formats.manifest import check_beside
    from ..formats.packed import check_packed
    from ..labels import check_task_labels

    gpu_precision = checked_gpu_precision(accelerator, gpu_precision)
    with err_console.status(f"reading {model_file.name}"):
        data = inspect_model(model_file)
        check_beside(model_file)  # a file its manifest lists must be the one it lists
        check_packed(model_file)  # a MediaPipe file's packed tokenizer and labels against its model
        check_task_labels(data["metadata"].get("task"), data["outputs"], str(model_file))
        if partitions:
            from ..formats.mobile_partitions import mobile_partitions

            data["partitions"] = mobile_partitions(model_file).to_dict()
        if accelerator == "gpu":
            data["gpu"] = _gpu_placement(model_file, data["format"], gpu_precision)
    if as_json:
        print_json(data)
        return
    io_rows = [("input", s["name"], s["dtype"], list(s["shape"])) for s in data["inputs"]]
    io_rows += [("output", s["name"], s["dtype"], list(s["shape"])) for s in data["outputs"]]
    print_table(f"{model_file.name} ({data['format']})", ["tensor", "name", "dtype", "shape"], io_rows)
    print_table("Ops", ["op", "count"], data["ops"].items(), right=(1,))
    if "task" in data["metadata"]:
        _print_task(data["metadata"]["task"])
    duplicates = data["duplicates"]
    summary = [
        ("weight tensors", f"{data['num_tensors']} (+ {data['num_constants']} small constants)"),
        ("stored weight bytes", f"{fmt_bytes(data['stored_bytes'])} ({data['stored_bytes']:,})"),
        ("unique weight bytes", f"{fmt_bytes(data['unique_bytes'])} ({data['unique_bytes']:,})"),
        ("duplicates", len(duplicates)),
    ]
    print_table("Weights", ["field", "value"], summary)
    if duplicates:
        print_table("Duplicated weights", ["tensor", "copy of", "kind", "bytes"],
                    [(d["name"], d["original"], d["kind"], f"{d['nbytes']:,}") for d in duplicates], right=(3,))
    precision = data["precision"]
    if "unavailable" in precision:
        console.print(f"weight precision not analysed: {precision['unavailable']}")
    else:
        _print_precision(precision)
    if "op_versions" in data:
        _print_runtime(data)
    if "executorch" in data:
        _print_executorch(data["executorch"])
    if "ort" in data:
        _print_ort(data["ort"], data["precision"]["weight_bytes_by_dtype"])
    if "partitions" in data:
        _print_partitions(data["partitions"])
    if "gpu" in data:
        _print_gpu(data["gpu"])


def _gpu_placement(model_file: Path, fmt: str, precision: str) -> dict:
    """LiteRT's GPU accelerator's own report of a .tflite (a dynamic-shape file: its refusal)."""
    from ..errors import RuntimeUnavailable
    from ..runtime.accelerator import gpu_placement

    if fmt != "tflite":
        raise RuntimeUnavailable(f"{model_file}: --accelerator gpu reports LiteRT's GPU accelerator on a .tflite, and "
                                 f"this is a .{fmt} file (an .onnx's NPU partitions: --partitions)")
    return gpu_placement(model_file, enforce_f32=precision == "fp32").to_dict()


def _print_gpu(p: dict) -> None:
    """Where LiteRT's GPU accelerator puts the file's operators, as its own report says."""
    from ..runtime.accelerator import software_warning

    precision = "float32" if p["enforce_f32"] else "float16"
    refused = "no"
    if p["refused"]:
        fix = "; `convert --static` writes a file it takes" if "dynamic-sized" in (p["reason"] or "") else ""
        refused = f"yes: {p['reason']}{fix}"
    rows = [("operators", p["ops"]), ("on the GPU", p["gpu_ops"]), ("on the CPU", p["cpu_ops"]),
            ("refused", refused), ("adapter", p["adapter"] or "not named"), ("runtime", p["runtime"])]
    print_table(f"GPU placement (LiteRT's GPU accelerator, {precision} arithmetic)", ["field", "value"], rows)
    if p["fallbacks"]:
        print_table("Operators left on the CPU (the accelerator's reason)", ["op", "reason"],
                    [(f["op"], f["reason"]) for f in p["fallbacks"]])
        if not p["refused"]:
            console.print(f"note: {p['cpu_ops']} of {p['ops']} operators run on the CPU, each hand-over a copy "
                          "between CPU and GPU memory; `convert --static` writes a file the accelerator takes whole")
    warning = software_warning(p["adapter"])
    if warning:
        console.print(f"adapter: {warning}")


def _print_partitions(report: dict) -> None:
    """NNAPI / Core ML partitions by onnxruntime's mobile checker; for a dynamic-shape file also
    as they would be with its shapes fixed."""
    for title, rows in (("as it is", report["providers"]), ("with its shapes fixed", report["if_fixed"])):
        if rows:
            print_table(f"NPU partitions, {title} ({report['checker']}, {report['nodes']} nodes at the basic level)",
                        ["provider", "partitions", "nodes covered", "left to the CPU (reason)"],
                        [(p["provider"], p["partitions"], f"{p['covered']}/{p['nodes']} ({100 * p['coverage']:.1f}%)",
                          "; ".join(f"{u['op']} x{u['nodes']} ({u['reason']})" for u in p["unsupported"]) or "none")
                         for p in rows], right=(1,))


def _print_ort(ort: dict, by_dtype: dict) -> None:
    """What an ONNX Runtime .ort holds besides its graph."""
    rows = [("ORT format version", ort["ort_format_version"]), ("opset", ort["opset"]),
            ("oldest onnxruntime", ort.get("min_onnxruntime") or "unknown (opset not in the table)"),
            ("nodes", ort["nodes"]),
            ("runtime optimizations saved", "yes" if ort["runtime_optimizations"] else "no"),
            ("producer", ort["producer"])]
    rows += [(f"weights {dtype}", f"{n:,} bytes") for dtype, n in by_dtype.items()]
    print_table("ONNX Runtime format", ["field", "value"], rows)


def _print_task(task: dict) -> None:
    """The TFLite metadata an app's MediaPipe Tasks / Task Library reads."""
    tokenizer = task["tokenizer"] or "none"
    if task["tokenizer"]:
        where = "embedded" if task["tokenizer_embedded"] else "missing from the file"
        tokenizer += f" ({', '.join(task['tokenizer_files'])}: {where})"
    rows = [("task", task["task"]), ("input tensors", ", ".join(task["inputs"])),
            ("output tensors", ", ".join(task["outputs"])), ("tokenizer", tokenizer),
            ("labels", f"{len(task['labels'])}" + (f" ({', '.join(task['labels'][:5])}"
                                                    f"{', ...' if len(task['labels']) > 5 else ''})"
                                                    if task["labels"] else "")),
            ("packed files", ", ".join(task["packed_files"]) or "none"),
            ("min metadata parser", task["min_parser_version"] or "unknown")]
    print_table("TFLite metadata (MediaPipe Tasks / Task Library)", ["field", "value"], rows)


def _print_executorch(pte: dict) -> None:
    """Where a .pte keeps its weights, and its delegate blocks."""
    backends = ", ".join(f"{b} x{n}" for b, n in pte["backends"].items()) or "none (portable kernels only)"
    rows = [("methods", ", ".join(pte["methods"])), ("delegate blocks", f"{pte['delegates']}: {backends}"),
            ("delegate payloads", f"{fmt_bytes(pte['delegate_payload_bytes'])} ({pte['delegate_payload_bytes']:,})"),
            ("segments", f"{pte['segments']} ({pte['segment_bytes']:,} bytes)"), ("named data", pte["named_data"]),
            ("input shapes", ", ".join(pte["input_dynamism"]) + " (sizes shown are the upper bounds)")]
    if "planned_bytes" in pte:
        rows.append(("planned memory", f"{fmt_bytes(pte['planned_bytes'])} ({pte['planned_bytes']:,}): tensors "
                                        "outside the delegates, sized for the upper bounds, allocated at load"))
    rows += [(f"weights in {where}", f"{n:,} bytes") for where, n in pte["weight_bytes_by_location"].items()]
    rows += [(f"weights {dtype}", f"{n:,} bytes") for dtype, n in pte["weight_bytes_by_dtype"].items()]
    print_table("ExecuTorch program", ["field", "value"], rows)


def _print_runtime(runtime: dict) -> None:
    """Which TFLite runtime the file needs: each operator version and the first runtime with it."""
    print_table("Operator versions (first TFLite runtime with each)", ["op", "version", "ops", "min runtime"],
                [(o["op"], o["version"], o["count"], o["min_runtime"] or "unknown") for o in runtime["op_versions"]],
                right=(1, 2))
    loads = ", ".join(f"tflite-runtime {v}: {'yes' if ok else 'no'}"
                      for v, ok in runtime["loads_in_tflite_runtime"].items())
    needed = runtime["min_runtime"] or "unknown (an operator version not in the table)"
    console.print(f"minimum TFLite runtime: {needed} ({loads})")


def _print_precision(precision: dict) -> None:
    """The part of ``inspect`` that ``albert_edge.quantize.describe`` supplies."""
    by_dtype = sorted(precision["weight_bytes_by_dtype"].items(), key=lambda kv: -kv[1])
    total = sum(n for _, n in by_dtype) or 1
    print_table("Weight bytes by precision", ["dtype", "bytes", "share"],
                [(d, f"{n:,}", f"{100 * n / total:.1f}%") for d, n in by_dtype], right=(1, 2))
    floats = precision["float_weights"]
    reasons = {w["reason"] for w in floats}
    if not floats:
        console.print("every matrix-product weight is stored quantized")
    elif len(reasons) == 1 and next(iter(reasons)).startswith("fp32 file"):
        console.print(f"{len(floats)} matrix-product weights in float: fp32 file, nothing in it is quantized")
    else:
        print_table("Matrix products reading a float weight", ["weight", "op", "shape", "dtype", "why"],
                    [(w["name"], w["op"], "x".join(map(str, w["shape"])), w["dtype"], w["reason"]) for w in floats])
        console.print(f"unexpected float weights: {precision['unexpected_float_weights']}")
    if "parent" in precision:
        twice = precision["stored_more_than_once"]
        console.print(f"weights of the fp32 parent {precision['parent']} looked for by value: "
                      f"{precision['weights_checked']}, stored more than once: {len(twice)}")
        for name, copies in twice.items():
            console.print(f"  {name}: {', '.join(copies)}")


COMMANDS = [convert, inspect]
