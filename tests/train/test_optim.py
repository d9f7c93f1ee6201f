"""LAMB, AdamW parameter groups and the warmup + linear-decay schedule."""

from __future__ import annotations

import pytest
import torch

from albert_edge.config import AlbertConfig
from albert_edge.errors import ConfigError
from albert_edge.model import build_model
from albert_edge.train.optim import Lamb, build_optimizer, lr_factor


def test_schedule_warms_up_then_decays_to_zero():
    factors = [lr_factor(s, warmup_steps=4, total_steps=12) for s in range(12)]
    assert factors[:4] == [0.25, 0.5, 0.75, 1.0]
    assert factors[4:] == pytest.approx([1.0, 7 / 8, 6 / 8, 5 / 8, 4 / 8, 3 / 8, 2 / 8, 1 / 8])
    assert lr_factor(0, 0, 5) == 1.0 and lr_factor(5, 0, 5) == 0.0


def test_lamb_step_matches_the_formula():
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(5, 3))
    w0 = w.detach().clone()
    grad = torch.randn(5, 3)
    opt = Lamb([w], lr=0.1, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01)
    w.grad = grad.clone()
    opt.step()
    m_hat = (0.1 * grad) / (1 - 0.9)
    v_hat = (0.001 * grad * grad) / (1 - 0.999)
    update = m_hat / (v_hat.sqrt() + 1e-6) + 0.01 * w0
    expected = w0 - 0.1 * (w0.norm() / update.norm()) * update
    assert torch.allclose(w.detach(), expected, atol=1e-6)


@pytest.mark.parametrize("name, lr", [("lamb", 0.05), ("adamw", 1e-2)])
def test_optimizers_minimise_and_skip_decay_on_norms_and_biases(name, lr):
    torch.manual_seed(0)
    model = build_model(AlbertConfig.preset("tiny"), "classification")
    opt = build_optimizer(model, name, lr=lr, weight_decay=0.1)
    decayed, plain = opt.param_groups
    names = {id(p): n for n, p in model.named_parameters()}

    def is_norm(p):
        return "LayerNorm" in names[id(p)] or "layer_norm" in names[id(p)]

    assert all(is_norm(p) or names[id(p)].endswith("bias") for p in plain["params"])
    assert not any(is_norm(p) or names[id(p)].endswith("bias") for p in decayed["params"])
    assert plain["weight_decay"] == 0.0 and decayed["weight_decay"] == 0.1
    # Every unique parameter (shared ones once) is in exactly one group.
    assert len(decayed["params"]) + len(plain["params"]) == len(list(model.parameters()))
    model.train()
    g = torch.Generator().manual_seed(1)
    x = torch.randint(5, 99, (16, 12), generator=g)
    y = (x[:, 0] < 50).long()  # learnable from the first token
    losses = []
    for _ in range(30):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        losses.append(loss.item())
        loss.backward()
        opt.step()
        opt.zero_grad()
    assert losses[-1] < 0.5 * losses[0]


def test_bad_optimizer_settings():
    model = build_model(AlbertConfig.preset("tiny"))
    with pytest.raises(ConfigError, match="unknown optimizer"):
        build_optimizer(model, "sgd", 1e-3)
    with pytest.raises(ConfigError, match="must be positive"):
        build_optimizer(model, "lamb", 0.0)
