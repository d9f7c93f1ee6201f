"""``pipeline --static``: static-shape files ([1, seq_len], ``convert --static``) beside the
dynamic ones, in their own folder (a static file has the dynamic one's name), quantized in the
schemes their accelerators take. The report reads both folders and its Accelerators table says
which file each accelerator takes.

The functions take the pipeline's model entry (its ``static``, ``static_files``, ``checkpoint``
and ``random_weights``) and its options (``static_targets``, ``threads``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..converters.targets import TARGETS, model_files
from ..quantize.schemes import Scheme

__all__ = ["STATIC_SCHEMES", "STATIC_DIR", "static_of", "static_setting", "static_fp32_files", "static_model_files",
           "quantize_static"]

# fp16 for LiteRT's GPU accelerator (it computes in float16), int8-static (QDQ) for an NPU through NNAPI.
STATIC_SCHEMES = {"onnx": (Scheme.INT8_STATIC,), "tflite": (Scheme.FP16,)}
STATIC_DIR = "files-static"


def static_of(model: Any, options: Any) -> tuple[str, ...]:
    """The targets of which this model gets static-shape files (none without --static; none for
    the built-in default's random albert-base-v2 shape, to keep it quick)."""
    return options.static_targets if model.static else ()


def static_setting(model: Any, options: Any) -> dict[str, str]:
    """The step input that says static files are asked for: only when they are, so that a run
    without --static reads the same inputs as a run before the option existed."""
    targets = static_of(model, options)
    return {"option:static": json.dumps(targets)} if targets else {}


def static_fp32_files(model: Any, options: Any) -> list[Path]:
    """The static files the conversion made (the parents of the quantized ones)."""
    paths = [model.static_files / f"model{TARGETS[t].suffix}" for t in static_of(model, options)]
    return [p for p in paths if p.is_file()]


def static_model_files(model: Any, options: Any) -> list[Path]:
    return model_files(model.static_files) if static_of(model, options) else []


def quantize_static(model: Any, options: Any, progress) -> tuple[list[Path], list[str]]:
    """The static files in STATIC_SCHEMES: the files made, and what was left out and why (int8-static
    reads calibration text, which needs the checkpoint's tokenizer)."""
    from ..converters.quantized import quantize_file
    from ..converters.targets import of_file
    from ..quantize import QuantizeConfig

    tokenizer = model.checkpoint / "spiece.model"
    made, left_out = [], []
    for parent in static_fp32_files(model, options):
        for scheme in STATIC_SCHEMES[of_file(parent).name]:
            if scheme == Scheme.INT8_STATIC and not tokenizer.is_file():
                left_out.append(f"{STATIC_DIR}/{parent.name} {scheme} (its calibration text needs the checkpoint's "
                                "spiece.model)")
                continue
            progress(f"quantize {STATIC_DIR}/{parent.name} {scheme}")
            config = QuantizeConfig(scheme, calibration=("builtin",) if tokenizer.is_file() else (),
                                    tokenizer=tokenizer if tokenizer.is_file() else None,
                                    eval_samples=8 if model.random_weights else 64, num_threads=options.threads)
            made.append(quantize_file(parent, config, force=True).out_path)
    return made, left_out
