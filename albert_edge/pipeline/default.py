"""The built-in default of `albert-edge pipeline` with no SOURCE: two checkpoints made here, no
download.

- ``albert-base-v2-random``: the albert-base-v2 shape (V=30000, E=128, H=768, 12 layers sharing
  one set of weights) with random weights (seeded; every parameter nudged by noise so no zero
  bias or unit LayerNorm folds away). Its files have the real sizes and run at the real speed;
  its agreement figures mean nothing and the report leaves them out.
- ``albert-small-builtin``: a small ALBERT (V=4000, E=64, H=128, 4 layers) pretrained briefly
  on the builtin corpus with a tokenizer trained on it, so that the int8 and fp16 files'
  agreement with their fp32 parent is measured on real held-out text.

The trained one comes from :mod:`.small` (the recipe the demo bundle shares), cached under
``~/.cache/albert-edge/pipeline/`` keyed by its recipe and the corpus it read, and verified by
sha256 before reuse.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..files import atomic_write
from ..report import WEIGHTS_NOTE
from .small import PIPELINE_RECIPE, copy_checkpoint

__all__ = ["RANDOM_NAME", "SMALL_NAME", "DESCRIPTION", "make_random", "make_small"]

log = logging.getLogger(__name__)

RANDOM_NAME = "albert-base-v2-random"
SMALL_NAME = "albert-small-builtin"
DESCRIPTION = (f"built-in default: {RANDOM_NAME} (the albert-base-v2 shape with random weights: sizes and latency) "
               f"and {SMALL_NAME} (V=4000, E=64, H=128, 4 layers, pretrained briefly on the builtin corpus: "
               "accuracy of the int8/fp16 files against fp32 on real text)")

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
