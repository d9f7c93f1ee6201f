"""What the converter tests share: a tiny model with no two weights equal by accident."""

from __future__ import annotations

import torch

from albert_edge.config import AlbertConfig
from albert_edge.model import build_model

TINY = AlbertConfig.preset("tiny")


def tiny_model(config: AlbertConfig = TINY, head: str = "base", seed: int = 0):
    """A tiny model whose every parameter is distinct (random biases and LayerNorms too), so no
    two weights are equal by accident."""
    torch.manual_seed(seed)
    model = build_model(config, head)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model
