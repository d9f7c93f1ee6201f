"""What a path holds: a checkpoint (HF directory, original TF checkpoint), a converted model file
(.onnx, .tflite) or a conversion output directory with its manifest.json."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .errors import AlbertEdgeError
from .hub import resolve

__all__ = ["describe", "inspect_model"]

MODEL_SUFFIXES = (".onnx", ".tflite")


def describe(path: str | os.PathLike) -> dict[str, Any]:
    """A JSON-able description of ``path``; raises AlbertEdgeError when it is none of the above."""
    path = resolve(path)
    if not path.exists() and not Path(str(path) + ".index").exists():
        raise AlbertEdgeError(f"{path} does not exist")
    if path.is_file() and path.suffix.lower() in MODEL_SUFFIXES:
        return _describe_model_file(path)
    if path.is_dir() and (path / "manifest.json").is_file():
        return _describe_manifest(path)
    return _describe_checkpoint(path)


def _describe_checkpoint(path: Path) -> dict[str, Any]:
    from .checkpoints import load, validate  # build side: needs torch

    ckpt = load(path)
    validate(ckpt)
    c = ckpt.config
    return {
        "kind": "checkpoint",
        "path": str(path),
        "format": {"hf": "Hugging Face directory", "tf": "original TF checkpoint"}.get(ckpt.format, ckpt.format),
        "heads": list(ckpt.heads),
        "head": ckpt.head,
        "parameters": int(sum(t.numel() for t in ckpt.state.values())),
        "tensors": len(ckpt.state),
        "file_bytes": sum(f.stat().st_size for f in ckpt.files),
        "files": [f.name for f in ckpt.files],
        "config": c.to_hf_dict(),
        "shape": _shape(c.to_hf_dict()),
    }


def _describe_model_file(path: Path) -> dict[str, Any]:
    from .formats.weights import read_file  # the reader `inspect` uses: one clear line on a damaged file

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
        info["shape"] = _shape(data.get("config") or {})
        entry = next((f for f in data.get("files", []) if f.get("name") == path.name), None)
        if entry:
            info["manifest_entry"] = entry
    return info


def _describe_manifest(directory: Path) -> dict[str, Any]:
    data = _read_manifest(directory / "manifest.json")
    return {
        "kind": "conversion output",
        "path": str(directory),
        "source": data.get("source"),
        "config": data.get("config"),
        "shape": _shape(data.get("config") or {}),
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


def _shape(config: dict[str, Any]) -> str:
    keys = (("V", "vocab_size"), ("E", "embedding_size"), ("H", "hidden_size"), ("L", "num_hidden_layers"),
            ("G", "num_hidden_groups"), ("inner", "inner_group_num"))
    return " ".join(f"{k}={config[n]}" for k, n in keys if n in config)


def inspect_model(path: str | os.PathLike) -> dict[str, Any]:
    """What `albert-edge inspect --json` prints for one .onnx/.tflite file (and what the report
    shows of it): inputs, outputs, op histogram, stored vs unique weight bytes and every duplicated
    weight, the weight precision analysis, and for TFLite the operator versions with the first
    runtime that has each."""
    from .formats.op_versions import runtime_report
    from .formats.weights import inspect_file
    from .errors import RuntimeUnavailable
    from .formats.precision import describe as describe_precision

    contents, report = inspect_file(path)
    try:
        precision = describe_precision(path)
    except RuntimeUnavailable as exc:  # its TFLite analysis reads with ai-edge-litert's bindings
        precision = {"unavailable": str(exc)}
    runtime = runtime_report(path) if contents.format == "tflite" else None
    return {
        "path": str(path), "format": contents.format,
        "inputs": [vars(s) for s in contents.inputs], "outputs": [vars(s) for s in contents.outputs],
        "ops": dict(contents.ops.most_common()), "metadata": contents.metadata, **report.to_dict(),
        "precision": precision, **(runtime or {}),
    }
