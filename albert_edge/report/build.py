"""The report's figures as one JSON-able dict (``report.json``), assembled from the inputs:
parameter counts from :func:`albert_edge.params.param_report`, file figures from the inspect
analysis and the manifest, latency and memory from profile records as they were recorded."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from .. import __version__
from ..config import PAPER_PARAMS, PRESETS, AlbertConfig
from ..errors import RuntimeUnavailable
from ..params import param_report
from .accelerator_snippets import accelerator_snippets
from .accelerators import accelerator_data
from .adaptive import adaptive_data
from .compute import DEFAULT_SEQ_LENS, compute_rows
from .files import file_row
from .snippets import snippets
from .sources import Inputs

__all__ = ["SCHEMA", "PRESET_NAMES", "build_data", "preset_rows", "param_parts", "profile_rows", "device_label"]

SCHEMA = "albert-edge.report/1"
PRESET_NAMES = ("albert-base-v2", "albert-large-v2", "albert-xlarge-v2", "albert-xxlarge-v2",
                "bert-base", "bert-large", "bert-xlarge")


def build_data(inputs: Inputs, seq_lens=DEFAULT_SEQ_LENS, on_file=None) -> dict[str, Any]:
    """Everything the report shows, and what it lacks. ``on_file(name)`` is called before each
    model file is analysed."""
    data: dict[str, Any] = {
        "schema": SCHEMA,
        "albert_edge_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "sources": inputs.sources,
        "model": None, "params": None, "param_parts": None, "compute": [],
        "presets": preset_rows(),
        "files": [], "accelerators": None, "snippets": [], "profile": list(inputs.profile), "profile_rows": [],
        "missing": [], "notes": list(inputs.notes), "charts": [],
    }
    if inputs.config is not None:
        report = param_report(inputs.config, inputs.name, "base")
        data["model"] = {"name": inputs.name, "config_from": inputs.config_from,
                         "config": inputs.config.to_hf_dict(),
                         "weights": _weights_of(inputs)}
        data["params"] = report.to_dict()
        data["param_parts"] = param_parts(report)
        data["compute"] = [r.to_dict() for r in compute_rows(inputs.config, seq_lens)]
    else:
        data["missing"].append("no model config (preset, config, checkpoint or conversion directory): "
                               "parameters and compute are not shown")
    for item in inputs.files:
        if on_file is not None:
            on_file(item.path.name)
        try:
            data["files"].append(file_row(item))
        except RuntimeUnavailable as exc:  # a device install without this format's reader ([tflite] alone)
            data["missing"].append(f"{item.path.name}: {exc}")
    _label(data["files"])
    data["accelerators"] = accelerator_data(data["files"], data["profile"])
    data["snippets"] = snippets(data["files"]) + accelerator_snippets(data["files"], data["accelerators"])
    if not inputs.files:
        data["missing"].append("no model files or conversion directory: file sizes and accuracy are not shown")
    elif data["files"] and all(f["random_weights"] for f in data["files"]):
        data["missing"].append("no accuracy figures: the weights are random, so agreement with the fp32 parent "
                               "means nothing (a trained model's files show it)")
    elif not any(f["accuracy"] and not f["accuracy"]["random_ids"] for f in data["files"]):
        data["missing"].append("no accuracy figures: no quantized file of trained weights measured on real text "
                               "(quantize with --tokenizer and --calibration)")
    data["profile_rows"] = profile_rows(inputs.profile, data["files"])
    data["adaptive"] = adaptive_data(inputs.adaptive_manifest, inputs.profile)
    if not inputs.profile:
        data["missing"].append("no profile results: latency and memory are not shown "
                               "(run `albert-edge profile FILES --json > profile.json` and add it)")
    elif all(r["estimated"] for r in inputs.profile):
        data["missing"].append("no measured latency: every profile record is an estimate")
    return data


def _label(files: list[dict[str, Any]]) -> None:
    """Files of more than one folder (a static conversion beside the dynamic one: both hold a
    model.tflite) are named with their folder."""
    if len({str(Path(f["path"]).parent) for f in files}) > 1:
        for f in files:
            f["label"] = f"{f['folder']}/{f['name']}"


def _weights_of(inputs: Inputs) -> str | None:
    if not inputs.files:
        return None
    return "random-init" if all(f.random_weights for f in inputs.files) else None


def preset_rows() -> list[dict[str, Any]]:
    """The presets side by side: parameters (from params) and compute at 128 tokens."""
    rows = []
    for name in PRESET_NAMES:
        config = AlbertConfig(**PRESETS[name])
        report = param_report(config, name, "base")
        compute = compute_rows(config, (128,))[0]
        albert = name.startswith("albert")
        # A BERT preset is built in ALBERT's layout, with an E -> H projection BERT has not: it is
        # counted as BERT is (params' bert_total), the figure the parameter table gives it too.
        params = report.total if albert else report.bert_total
        rows.append({
            "name": name, "family": "ALBERT" if albert else "BERT",
            "embedding_size": config.embedding_size, "hidden_size": config.hidden_size,
            "num_hidden_layers": config.num_hidden_layers, "params": params,
            "paper_m": PAPER_PARAMS.get(name), "fp32_bytes": 4 * params,
            "macs_128": compute.macs_total,
        })
    return rows


def param_parts(report) -> dict[str, Any]:
    """ALBERT's parameters by part and the BERT of the same width and depth, part for part. The
    BERT parts are ALBERT's plus the saving params reports for each technique (nothing counted
    a second way). For the base model (no head)."""
    rows = report.rows
    embeddings = rows[0].count + rows[1].count  # tokens (V x E), positions, types, LayerNorm
    projection = rows[2].count
    pooler = rows[-1].count
    layers = sum(r.count for r in rows[3:-1])
    albert = {"embeddings": embeddings, "E -> H projection": projection, "transformer layers": layers,
              "pooler": pooler}
    bert = {"embeddings": embeddings + projection + report.factorization_saving, "E -> H projection": 0,
            "transformer layers": layers + report.sharing_saving, "pooler": pooler}
    return {"albert": albert, "bert": bert, "albert_total": report.total, "bert_total": report.bert_total}


def device_label(device: dict | None) -> str:
    """A short name of the device a record was measured on."""
    if not device:
        return "unknown device"
    snap = device.get("before") if isinstance(device.get("before"), dict) else device
    parts = [snap.get("board") or snap.get("cpu_model") or snap.get("name") or "unknown CPU"]
    if snap.get("cpu_cores"):
        parts.append(f"{snap['cpu_cores']} cores")
    return ", ".join(str(p) for p in parts)


def profile_rows(records: list[dict], files: list[dict]) -> list[dict[str, Any]]:
    """One display row per record: the recorded figures as they are; estimates marked."""
    schemes = {f["sha256"]: f["scheme"] for f in files if f.get("sha256")}
    rows = []
    for r in records:
        latency = r.get("latency") or {}
        memory = r.get("memory") or {}
        estimate = r.get("estimate") or {}
        rows.append({
            "file_name": r["file_name"], "format": r["format"],
            "scheme": r.get("scheme") or schemes.get(r["sha256"]),
            "runtime": r.get("runtime"), "provider": r.get("provider"), "threads": r.get("threads"),
            "batch": r.get("batch"), "seq_len": r.get("seq_len"), "input_mode": r.get("input_mode"),
            "input_kind": r.get("input_kind"), "opened_as": r.get("opened_as"),
            "estimated": bool(r["estimated"]),
            "device": (estimate.get("device_title") or estimate.get("device") or device_label(r.get("device")))
            if r["estimated"] else device_label(r.get("device")),
            "load_ms": r.get("load_ms"), "first_call_ms": r.get("first_call_ms"),
            "p50_ms": latency.get("p50") if not r["estimated"] else _estimate_ms(estimate),
            "p90_ms": latency.get("p90"),
            "p50_ci": latency.get("p50_ci"), "quality": latency.get("quality"),
            "quality_reasons": [str(w) for w in latency.get("quality_reasons") or ()],
            "ms_range": estimate.get("ms_range") if r["estimated"] else None,
            "peak_rss": memory.get("peak_after_timed"),
            "host": r.get("host"),
            "warnings": [str(w) for w in r.get("warnings") or ()],
            "machine": _machine(r.get("device")),
            "accelerator": r.get("accelerator") or "cpu", "gpu_precision": r.get("gpu_precision"),
            "gpu_adapter": (r.get("placement") or {}).get("adapter"),
        })
    return rows


def _machine(device: dict | None) -> str | None:
    """The CPU architecture a record was measured on ("x86_64", "aarch64")."""
    if not isinstance(device, dict):
        return None
    snap = device.get("before") if isinstance(device.get("before"), dict) else device
    return snap.get("machine")


def _estimate_ms(estimate: dict) -> float | None:
    for key in ("p50_ms", "latency_ms", "ms", "p50"):
        value = estimate.get(key)
        if isinstance(value, (int, float)):
            return float(value)
    return None
