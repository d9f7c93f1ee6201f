"""Test-only: a fine-tuned classifier given early exits without training them, each exit reading
its pass with the final classifier (ALBERT's passes share one layer and one pooler, so the passes
before the last answer much as the last does), an exit rule under which texts stop at
different passes, and a tiny classifier whose config records exits fine-tuning scored (a rule
and its curve) without weights trained for them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from albert_edge.exits import ExitRule, softmax

__all__ = ["classifier_with_exits", "median_confidence_rule", "checkpoint_with_curve"]


def classifier_with_exits(checkpoint: Path):
    """The classifier at ``checkpoint`` with frozen exits, each a copy of its final classifier."""
    from albert_edge import checkpoints
    from albert_edge.model import build_model
    from albert_edge.train.exits import with_exits

    config, plain = checkpoints.load_model(checkpoint)
    model = build_model(with_exits(config, "frozen"), "classification").eval()
    model.load_state_dict(plain.state_dict(), strict=False)
    with torch.no_grad():
        for head in model.exit_classifiers:
            head.load_state_dict(model.classifier.state_dict())
    return model


def median_confidence_rule(model, tokenizer, texts: Sequence[str]) -> ExitRule:
    """A confidence rule at the median of the first pass's top probability on ``texts``: about half
    of them stop after one pass, the others later."""
    with torch.no_grad():
        first = [softmax(model.pass_logits(torch.tensor([tokenizer.encode(t)])).numpy()[:, 0]).max() for t in texts]
    return ExitRule("confidence", float(np.median(first)), 1)


def checkpoint_with_curve(out: Path, spiece: Path, curve: list[dict], max_positions: int = 64) -> Path:
    """A tiny 3-label classifier saved in ``out`` (with ``spiece``) whose config records exits trained
    ``frozen`` with the rule confidence 0.6 and ``curve`` over 200 held-out texts."""
    import json

    from albert_edge.config import AlbertConfig
    from albert_edge.model import build_model
    from albert_edge.train.state import export_model

    exits = {"training": "frozen", "rule": {"kind": "confidence", "setting": 0.6, "min_passes": 1},
             "held_out": {"n": 200}, "curve": curve}
    config = AlbertConfig.preset("tiny").replace(vocab_size=400, num_labels=3, label_names=("a", "b", "c"),
                                                 max_position_embeddings=max_positions, exits=json.dumps(exits))
    torch.manual_seed(0)
    return export_model(build_model(config, "classification"), out, spiece)
