"""Optimizers and the learning-rate schedule: LAMB (ALBERT's) or AdamW, warmup then linear decay.

Weight decay and LAMB's layer-wise trust ratio skip biases and LayerNorm weights, as the original
ALBERT optimizer does (``exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"]``).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from ..errors import ConfigError

__all__ = ["Lamb", "OPTIMIZERS", "build_optimizer", "lr_factor", "set_lr"]

OPTIMIZERS = ("lamb", "adamw")


class Lamb(torch.optim.Optimizer):
    """LAMB (You et al., 2020, "Large Batch Optimization for Deep Learning"), as in ALBERT.

    Adam's bias-corrected update ``u = m / (sqrt(v) + eps) + weight_decay * p`` is scaled per
    tensor by the trust ratio ``||p|| / ||u||`` (1 when either norm is 0, or when the group has
    ``adapt=False``), then ``p -= lr * ratio * u``.
    """

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.01, adapt: bool = True):
        if lr <= 0 or eps <= 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ConfigError(f"LAMB needs lr > 0, eps > 0 and betas in [0, 1): got lr={lr}, eps={eps}, betas={betas}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, adapt=adapt))

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
                step = float(state["step"])
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                m_hat = m / (1 - beta1 ** step)
                v_hat = v / (1 - beta2 ** step)
                update = m_hat / (v_hat.sqrt() + group["eps"])
                if group["weight_decay"]:
                    update.add_(p, alpha=group["weight_decay"])
                ratio = 1.0
                if group["adapt"]:
                    w_norm, u_norm = p.norm(), update.norm()
                    if w_norm > 0 and u_norm > 0:
                        ratio = float(w_norm / u_norm)
                p.add_(update, alpha=-group["lr"] * ratio)
        return loss


def _no_decay(name: str) -> bool:
    return name.endswith(".bias") or name == "bias" or "LayerNorm" in name or "layer_norm" in name


def build_optimizer(model: nn.Module, name: str, lr: float, weight_decay: float = 0.01) -> torch.optim.Optimizer:
    """``name`` ("lamb" or "adamw") over the model's unique parameters, in two groups:
    decayed (and, for LAMB, trust-ratio adapted) weights, and biases + LayerNorms that are not."""
    if name not in OPTIMIZERS:
        raise ConfigError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
    if not lr > 0:
        raise ConfigError(f"learning rate ({lr}) must be positive")
    decay, plain = [], []
    for pname, param in model.named_parameters():  # shared/tied weights appear once here
        if param.requires_grad:
            (plain if _no_decay(pname) else decay).append(param)
    if name == "lamb":
        groups = [dict(params=decay, weight_decay=weight_decay, adapt=True),
                  dict(params=plain, weight_decay=0.0, adapt=False)]
        return Lamb(groups, lr=lr)
    groups = [dict(params=decay, weight_decay=weight_decay), dict(params=plain, weight_decay=0.0)]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), eps=1e-6)


def lr_factor(step: int, warmup_steps: int, total_steps: int) -> float:
    """Multiplier of the peak learning rate for optimizer step ``step`` (0-based): linear warmup
    from 1/warmup to 1 over ``warmup_steps``, then linear decay to 0 at ``total_steps``."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    remaining = total_steps - step
    span = max(1, total_steps - warmup_steps)
    return max(0.0, remaining / span)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
