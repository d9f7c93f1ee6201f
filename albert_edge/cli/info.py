"""`albert-edge info`: what a checkpoint or model file is."""

from __future__ import annotations

import click

from ._output import fmt_bytes, fmt_count, print_json, print_table


@click.command("info", short_help="Describe a checkpoint, model file or conversion output.")
@click.argument("path", type=click.Path(path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print the description as JSON.")
def info(path: str, as_json: bool) -> None:
    """Say what PATH is: format, config, heads, parameter count, file size.

    PATH is a Hugging Face checkpoint directory or model id (albert/albert-base-v2,
    org/name@revision), an original TF checkpoint (directory or model.ckpt-N prefix), an .onnx,
    .ort, .tflite or .pte file, or a `convert` output directory.
    """
    from ..info import describe

    data = describe(path)
    if as_json:
        print_json(data)
        return
    rows: list[tuple[str, str]] = [("kind", data["kind"]), ("format", str(data.get("format", "")))]
    if data.get("shape"):
        rows.append(("shape", data["shape"]))
    if "heads" in data:
        rows.append(("heads", f"{', '.join(data['heads'])} (saved as {data['head']})"))
    if "parameters" in data:
        rows.append(("parameters", f"{data['parameters']:,} ({fmt_count(data['parameters'])}) in "
                                   f"{data['tensors']} tensors"))
    for key in ("inputs", "outputs"):
        if key in data:
            rows.append((key, ", ".join(f"{s['name']} {s['dtype']}{list(s['shape'])}" for s in data[key])))
    if "stored_weight_bytes" in data:
        rows.append(("weights", f"{data['weight_tensors']} tensors, {fmt_bytes(data['stored_weight_bytes'])}"))
    if "packed" in data:  # a MediaPipe file's tokenizer and labels, checked against its model
        rows.append(("packed files", data["packed"]["summary"]))
    if "file_bytes" in data:
        rows.append(("file size", f"{fmt_bytes(data['file_bytes'])} ({data['file_bytes']:,} bytes)"))
    if data["kind"] == "conversion output":
        for f in data["files"]:
            rows.append((f.get("name", "?"), f"{f.get('format', '')} {fmt_bytes(f.get('size', 0))}"))
    print_table(str(data["path"]), ["field", "value"], rows)


COMMANDS = [info]
