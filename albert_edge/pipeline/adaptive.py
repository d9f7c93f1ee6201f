"""The built-in default's classifier with early exits: its adaptive files (``convert
--adaptive``) in a folder of their own beside the full-depth ones (they have the same names), and
both timed on the held-out texts at their real lengths, so that the report sets the adaptive
file's speed beside the same model's at full depth.

The functions take the pipeline's model entry (its ``adaptive``, ``adaptive_files``, ``files``
and ``checkpoint``) and its options (``targets``, ``seq_len``, ``threads``, ``runs``,
``min_seconds``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..converters.targets import model_files

__all__ = ["ADAPTIVE_DIR", "adaptive_targets", "adaptive_model_files", "convert_adaptive", "profile_on_text"]

ADAPTIVE_DIR = "files-adaptive"


def adaptive_targets(model: Any, options: Any) -> tuple[str, ...]:
    """The targets whose adaptive files this model gets (none for a model trained without exits)."""
    from ..converters.adaptive import ADAPTIVE_TARGETS  # imports torch: the build side only

    return tuple(t for t in options.targets if t in ADAPTIVE_TARGETS) if model.adaptive else ()


def adaptive_model_files(model: Any) -> list[Path]:
    return model_files(model.adaptive_files) if model.adaptive else []


def convert_adaptive(model: Any, options: Any, progress) -> tuple[Any, str]:
    """The adaptive files, under the exit rule the checkpoint records: the conversion's result
    and a line saying what was made."""
    from ..converters.export import convert

    targets = adaptive_targets(model, options)
    result = convert(model.checkpoint, model.adaptive_files, targets=targets, seq_len=options.seq_len, adaptive=True,
                     force=True, keep=False, on_step=lambda what, done, total: progress(f"convert --adaptive: {what}"))
    return result, f"{len(result.files)} adaptive in {ADAPTIVE_DIR}/"


def profile_on_text(model: Any, options: Any, progress) -> list:
    """Records of the adaptive files and of the full-depth fp32 files of the same formats, each
    over the same real text, every text at its own length (batch 1): the held-out texts beside
    the built-in classifier's checkpoint, else the builtin corpus."""
    from ..profile import ProfileSettings, profile
    from .classifier import HELD_OUT

    adaptive = adaptive_model_files(model)
    full = [model.files / p.name for p in adaptive if (model.files / p.name).is_file()]
    held_out = model.checkpoint / HELD_OUT
    settings = ProfileSettings(text=str(held_out) if held_out.is_file() else "builtin", tokenizer=model.checkpoint,
                               fixed=False, threads=(options.threads,), runs=options.runs,
                               min_seconds=options.min_seconds, warmup=2, max_sentences=100)
    return profile(full + adaptive, settings, progress=lambda line: progress(f"profile on real text: {line}"))
