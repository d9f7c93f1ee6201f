"""What a model file or a conversion output directory holds, for `albert-edge info` and
`inspect` and for the report: inputs, outputs, weights, the manifest's config. Device side."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..errors import AlbertEdgeError, RuntimeUnavailable

__all__ = ["describe_model_file", "describe_manifest", "inspect_model", "shape_of"]

def describe_model_file(path: Path) -> dict[str, Any]:
    from .weights import read_file  # the reader `inspect` uses: one clear line on a damaged file

    contents = read_file(path)
    info: dict[str, Any] = {
        "kind": "model file",
        "path": str(path),
        "format": contents.format,
        "file_bytes": path.stat().st_size,
        "inputs": [vars(s) for s in contents.inputs],
        "outputs": [vars(s) for s in contents.outputs],
        "ops": sum(contents.ops.values()),
        "weight_tensors": len(contents.weights),
        "stored_weight_bytes": contents.stored_weight_bytes,
        "metadata": contents.metadata,
    }
    manifest = path.parent / "manifest.json"
    if manifest.is_file():
        data = _read_manifest(manifest)
        info["config"] = data.get("config")
        info["shape"] = shape_of(data.get("config") or {})
        entry = next((f for f in data.get("files", []) if f.get("name") == path.name), None)
        if entry:
            info["manifest_entry"] = entry
    return info


def describe_manifest(directory: Path) -> dict[str, Any]:
    data = _read_manifest(directory / "manifest.json")
    return {
        "kind": "conversion output",
        "path": str(directory),
        "source": data.get("source"),
        "config": data.get("config"),
        "shape": shape_of(data.get("config") or {}),
        "files": data.get("files", []),
    }


def _read_manifest(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AlbertEdgeError(f"{path} is not a readable manifest: {exc}") from None
    if not isinstance(data, dict):
        raise AlbertEdgeError(f"{path} is not a manifest (expected a JSON object)")
    return data


def shape_of(config: dict[str, Any]) -> str:
    """The paper's symbols for a config's sizes: "V=30000 E=128 H=768 L=12 G=1 inner=1"."""
    keys = (("V", "vocab_size"), ("E", "embedding_size"), ("H", "hidden_size"), ("L", "num_hidden_layers"),
            ("G", "num_hidden_groups"), ("inner", "inner_group_num"))
    return " ".join(f"{k}={config[n]}" for k, n in keys if n in config)


def inspect_model(path: str | os.PathLike) -> dict[str, Any]:
    """What `albert-edge inspect --json` prints for one .onnx/.ort/.tflite/.pte file (and what the report
    shows of it): inputs, outputs, op histogram, stored vs unique weight bytes and every duplicated
    weight, the weight precision analysis, and for TFLite the operator versions with the first
    runtime that has each."""
    from .kinds import by_name
    from .op_versions import runtime_report
    from .precision import describe as describe_precision
    from .weights import inspect_file

    contents, report = inspect_file(path)
    kind = by_name(contents.format)
    extra: dict[str, Any] = {}
    if kind.precision_note is not None:
        # Where the products that read float weights are not analysed (a .pte; an .ort, whose
        # graph is onnxruntime's optimized one): its weight bytes by dtype, and its reader's
        # metadata (a .pte's delegates and segments) under the format's name.
        precision = {"weight_bytes_by_dtype": _bytes_by_dtype(contents), "unavailable": kind.precision_note}
        extra[kind.name] = {k: v for k, v in contents.metadata.items() if k != "opsets"}
    else:
        try:
            precision = describe_precision(path)
        except RuntimeUnavailable as exc:  # its TFLite analysis reads with ai-edge-litert's bindings
            precision = {"unavailable": str(exc)}
    runtime = runtime_report(path) if kind.op_versions else None
    return {
        "path": str(path), "format": contents.format,
        "inputs": [vars(s) for s in contents.inputs], "outputs": [vars(s) for s in contents.outputs],
        "ops": dict(contents.ops.most_common()), "metadata": contents.metadata, **report.to_dict(),
        "precision": precision, **(runtime or {}), **extra,
    }


def _bytes_by_dtype(contents) -> dict[str, int]:
    totals: dict[str, int] = {}
    for weight in contents.weights:
        totals[weight.dtype] = totals.get(weight.dtype, 0) + weight.nbytes
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))
