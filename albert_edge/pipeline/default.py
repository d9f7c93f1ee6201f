"""The built-in default of `albert-edge pipeline` with no SOURCE: two checkpoints made here, no
download.

- ``albert-base-v2-random``: the albert-base-v2 shape (V=30000, E=128, H=768, 12 layers sharing
  one set of weights) with random weights (seeded; every parameter nudged by noise so no zero
  bias or unit LayerNorm folds away). Its files have the real sizes and run at the real speed;
  its agreement figures mean nothing and the report leaves them out.
- ``albert-small-builtin``: a small ALBERT (V=4000, E=64, H=128, 4 layers) pretrained briefly
  on the builtin corpus with a tokenizer trained on it, so that the int8 and fp16 files'
  agreement with their fp32 parent is measured on real held-out text.
- ``albert-small-topics``: that model fine-tuned on the builtin topic task (the demo's
  classifier task) with early exits trained on it (:mod:`.classifier`), so that its adaptive
  files (``convert --adaptive``, in ``files-adaptive/``) are profiled on the held-out texts beside
  the same model at full depth, and reported with their speed/accuracy curve.

The trained ones come from :mod:`.small` and :mod:`.classifier` (the recipes the demo bundle
shares), cached under ``~/.cache/albert-edge/pipeline/`` keyed by their recipes and the corpus
they read, and verified by sha256 before reuse.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..files import atomic_write
from ..report import WEIGHTS_NOTE
from .classifier import HELD_OUT, ClassifierRecipe, topic_classifier
from .small import PIPELINE_RECIPE, copied, copy_checkpoint

__all__ = ["RANDOM_NAME", "SMALL_NAME", "CLASSIFIER_NAME", "CLASSIFIER_RECIPE", "HELD_OUT", "DESCRIPTION",
           "make_random", "make_small", "make_classifier"]

log = logging.getLogger(__name__)

RANDOM_NAME = "albert-base-v2-random"
SMALL_NAME = "albert-small-builtin"
CLASSIFIER_NAME = "albert-small-topics"
CLASSIFIER_RECIPE = ClassifierRecipe()
DESCRIPTION = (f"built-in default: {RANDOM_NAME} (the albert-base-v2 shape with random weights: sizes and latency), "
               f"{SMALL_NAME} (V=4000, E=64, H=128, 4 layers, pretrained briefly on the builtin corpus: "
               f"accuracy of the int8/fp16 files against fp32 on real text) and {CLASSIFIER_NAME} (that model "
               "fine-tuned on the builtin topic task with early exits: its adaptive files beside full depth)")

def make_random(out: Path, seed: int = 0) -> Path:
    """The albert-base-v2 shape with random weights, saved as a checkpoint in ``out`` with a
    note saying so (the report reads it)."""
    import torch

    from .. import checkpoints
    from ..config import AlbertConfig
    from ..model import build_model

    generator = torch.manual_seed(seed)
    model = build_model(AlbertConfig.preset("albert-base-v2"), "base")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.02)
    checkpoints.save(model, out)
    atomic_write(out / WEIGHTS_NOTE, json.dumps({"weights": "random-init", "seed": seed,
                                                 "shape": "albert-base-v2"}, indent=2) + "\n")
    return out


def make_small(out: Path, on_event: Callable[[dict], None] | None = None) -> tuple[Path, dict[str, Any]]:
    """The small pretrained ALBERT in ``out`` (a checkpoint with its spiece.model), from the cache
    when a verified copy of the same recipe is there. Returns (checkpoint, training figures)."""
    return copy_checkpoint(PIPELINE_RECIPE, SMALL_NAME, out, on_event)


def make_classifier(out: Path, on_event: Callable[[dict], None] | None = None) -> tuple[Path, dict[str, Any]]:
    """The topic classifier with early exits in ``out`` (a checkpoint with its spiece.model and
    the held-out texts, HELD_OUT), from the cache when a verified copy is there. Returns
    (checkpoint, its fine-tuning figures)."""
    made, figures = topic_classifier(CLASSIFIER_RECIPE, PIPELINE_RECIPE, SMALL_NAME, CLASSIFIER_NAME, on_event)
    return copied(made, out), figures
