"""One row per model file: what `albert-edge inspect --json` says about it (the same analysis,
the same dict) and what its manifest entry or quantize result records (scheme, accuracy against
the fp32 parent). Device side."""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

from ..formats.describe import inspect_model
from ..formats.kinds import by_name
from ..formats.packed import check_packed
from ..labels import check_task_labels
from .sources import ModelFileInput

__all__ = ["file_row"]


def file_row(item: ModelFileInput) -> dict[str, Any]:
    """The report's figures of one file; ``inspect`` holds the inspect analysis unchanged."""
    check_packed(item.path)  # a MediaPipe file's tokenizer and labels must work with its model
    inspected = inspect_model(item.path)
    # a classifier's packed labels name the classes its snippets show: one per output
    check_task_labels(inspected["metadata"].get("task"), inspected["outputs"], str(item.path))
    entry = item.entry
    scheme = entry.precision if entry is not None else None
    if scheme is None and item.quantize_result is not None:
        scheme = item.quantize_result["scheme"]
    row: dict[str, Any] = {
        "name": item.path.name,
        "path": str(item.path),
        "folder": item.path.parent.name,
        "label": item.path.name,  # build_data prefixes the folder when the report reads more than one
        "format": inspected["format"],
        "scheme": scheme,
        "bytes": item.path.stat().st_size + sum(d["size"] for d in (entry.data_files if entry else [])),
        "download_bytes": download_bytes([item.path, *(item.path.parent / d["name"] for d in
                                                       (entry.data_files if entry else []))]),
        "sha256": item.sha256,
        "stored_weight_bytes": inspected["stored_bytes"],
        "unique_weight_bytes": inspected["unique_bytes"],
        "model_param_bytes": inspected["model_param_bytes"],
        "duplicates": len(inspected["duplicates"]),
        "bytes_by_precision": inspected["precision"]["weight_bytes_by_dtype"],
        "parent": None,
        "accuracy": None,
        "accuracy_note": None,
        "random_weights": item.random_weights,
        "inspect": inspected,
        "static_len": entry.static_len if entry is not None else _static_len(item.path, inspected["format"]),
        "gpu": None,
    }
    parity = entry.parity if entry is not None and isinstance(entry.parity, dict) else {}
    if isinstance(parity.get("gpu"), dict):  # convert --static's run on LiteRT's GPU accelerator
        row["gpu"] = parity["gpu"]
    accuracy = parity.get("accuracy")
    if item.quantize_result is not None:
        accuracy = item.quantize_result["accuracy"]
        row["parent"] = item.quantize_result["parent"]
    elif parity.get("against") == "fp32 parent":
        row["parent"] = parity.get("parent")
    if accuracy is None:
        if scheme not in (None, "fp32"):
            row["accuracy_note"] = "no accuracy recorded"
        return row
    if item.random_weights:
        row["accuracy_note"] = ("random weights: agreement with the fp32 parent is not an accuracy "
                                "figure and is not shown")
        return row
    random_ids = "random ids" in str(accuracy.get("text", ""))
    row["accuracy"] = {"headline": accuracy["headline"], "headline_of": accuracy["headline_of"],
                       "drop": accuracy["drop"], "text": accuracy.get("text"), "random_ids": random_ids,
                       **_sample(accuracy)}
    if random_ids:
        row["accuracy_note"] = "agreement measured on random token ids, not real text (left out of the accuracy chart)"
    return row


def download_bytes(paths: list[Path]) -> int:
    """What downloading ``paths`` costs over HTTP with gzip (zlib level 6, what web servers and CDNs
    apply by default): the compressed size of each file, summed. Read in blocks, never whole."""
    total = 0
    for path in paths:
        packer = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 31: the gzip container
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                total += len(packer.compress(block))
        total += len(packer.flush())
    return total


def _static_len(path, fmt: str) -> int | None:
    """N of a static-shape file that no manifest describes, read from the file as convert does."""
    if not by_name(fmt).static_shapes:
        return None
    from ..formats.manifest import static_length
    from ..formats.weights import read_file

    return static_length(path, read_file(path))


# What one agreement is counted over, by the kind of output (quantize.accuracy's output kinds).
_COUNTED = {"mlm": "masked tokens", "label": "examples", "token": "tokens", "span": "answers"}


def _sample(accuracy: dict[str, Any]) -> dict[str, Any]:
    """How many predictions the headline agreement was counted over, and of what: a figure of
    99.49 % means little without "of 198 masked tokens"."""
    for output in accuracy.get("outputs") or ():
        if f"{output.get('name')} {output.get('agreement_of')} agreement" == accuracy.get("headline_of"):
            count = output.get("agreement_count")
            if isinstance(count, int):
                return {"count": count, "count_of": _COUNTED.get(output.get("kind"), "predictions")}
        # a mean cosine: its rows and its least, what its interval is taken from
        if f"{output.get('name')} mean cosine" == accuracy.get("headline_of") and isinstance(output.get("rows"), int):
            return {"count": output["rows"], "count_of": "examples" if output.get("kind") == "examples" else "tokens",
                    "cosine_min": output.get("cosine_min")}
    return {}
