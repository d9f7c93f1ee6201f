"""Training a classifier's early exits, and choosing the rule it stops by.

One classifier per pass, all reading ALBERT's one pooler (``AlbertForSequenceClassification``
with ``config.exits``), as PABEE does for ALBERT: the passes share the layer's weights but not
what their outputs mean, and a per-pass linear layer costs H x C weights (3k for ALBERT-base on
four classes), where a pooler per pass would cost H x H (590k) each.

Two ways to train them:

- ``joint``: the whole model on PABEE's loss, every pass's cross-entropy weighted by its depth
  (pass i weighs i), so the deeper, more capable passes count more;
- ``frozen``: from a checkpoint already fine-tuned for the same labels, only the exits before
  the last are trained (same loss, last term left out) and everything else is frozen, so the
  full-depth answers stay exactly as they were.

After training, ``choose_rule`` scores exit rules on the held-out file and records the fastest
whose answers agree with the full depth on at least 99 % of it.
"""

from __future__ import annotations

import json
import logging

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import AlbertConfig
from ..errors import ConfigError
from ..exits import ExitRule, sweep
from .finetune_data import Feature, collate_features
from .loop import Objective

__all__ = ["EXIT_MODES", "ExitObjective", "with_exits", "freeze_for_exits", "held_out_pass_logits",
           "candidate_rules", "choose_rule"]

log = logging.getLogger(__name__)

EXIT_MODES = ("joint", "frozen")
AGREEMENT = 0.99  # the default rule's least agreement with the full depth on held-out text


def with_exits(config: AlbertConfig, mode: str) -> AlbertConfig:
    """``config`` for a classifier with early exits trained the ``mode`` way."""
    if mode not in EXIT_MODES:
        raise ConfigError(f"exit training {mode!r} is not one of {', '.join(EXIT_MODES)}")
    if config.num_hidden_layers < 2:
        raise ConfigError(f"early exits need at least 2 passes; the model runs {config.num_hidden_layers}")
    record = {"training": mode, "loss": "pabee", "classifiers": "one per pass, shared pooler"}
    return config.replace(exits=json.dumps(record, sort_keys=True))


def freeze_for_exits(model: nn.Module) -> int:
    """Freeze everything but the exits before the last; returns how many weights still train."""
    trainable = 0
    for name, param in model.named_parameters():
        param.requires_grad = name.startswith("exit_classifiers.")
        trainable += param.numel() if param.requires_grad else 0
    return trainable


class ExitObjective(Objective):
    """PABEE's weighted cross-entropy over the passes, per labelled example."""

    def __init__(self, model: nn.Module, frozen: bool):
        super().__init__()
        self.model, self.frozen = model, frozen

    def counts(self, batch: dict[str, Tensor]) -> Tensor:
        return torch.tensor([float(len(batch["input_ids"]))])

    def forward(self, batch: dict[str, Tensor], denominators: Tensor) -> tuple[Tensor, Tensor]:
        logits = self.model.pass_logits(batch["input_ids"], batch["attention_mask"],
                                        batch["token_type_ids"]).float()  # (B, L, C)
        labels = batch["labels"]
        trained = logits.shape[1] - 1 if self.frozen else logits.shape[1]  # frozen: the last pass is fixed
        weights = torch.arange(1, trained + 1, dtype=logits.dtype, device=logits.device)
        weights = weights / weights.sum()
        loss_sum = sum(w * F.cross_entropy(logits[:, i], labels, reduction="sum") for i, w in enumerate(weights))
        # The figure logged as accuracy: the deepest pass this run trains.
        correct = (logits[:, trained - 1].argmax(-1) == labels).sum()
        stats = torch.stack([loss_sum.detach(), correct.float(), torch.tensor(float(len(labels)))])
        return loss_sum / denominators[0], stats


@torch.no_grad()
def held_out_pass_logits(model: nn.Module, features: list[Feature], pad_id: int, device: torch.device,
                         batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(N, L, C) logits after every pass, and the (N,) labels, of the held-out examples."""
    was_training = model.training
    model.eval()
    logits, labels = [], []
    for i in range(0, len(features), batch_size):
        batch = {k: v.to(device) for k, v in collate_features(features[i:i + batch_size], "classification",
                                                              pad_id).items()}
        logits.append(model.pass_logits(batch["input_ids"], batch["attention_mask"],
                                        batch["token_type_ids"]).float().cpu().numpy())
        labels.append(batch["labels"].cpu().numpy())
    model.train(was_training)
    return np.concatenate(logits), np.concatenate(labels)


def candidate_rules(passes: int, classes: int) -> list[ExitRule]:
    """The settings scored on held-out text: every patience, and confidences above chance."""
    rules = [ExitRule("patience", p) for p in range(1, passes)]
    rules += [ExitRule("confidence", c) for c in (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99) if c > 1 / classes]
    return rules


def choose_rule(pass_logits: np.ndarray, labels: np.ndarray) -> tuple[ExitRule, list[dict]]:
    """The rule with the fewest mean passes whose answers agree with the full depth's on at least
    AGREEMENT of the held-out examples (patience L - 1, which never stops early, always does),
    and every candidate's figures."""
    n, passes, classes = pass_logits.shape
    rules = candidate_rules(passes, classes)
    rows = sweep(pass_logits, labels, rules)
    fine = [(row["mean_passes"], i) for i, row in enumerate(rows) if row["agreement"] >= AGREEMENT]
    best = min(fine)[1] if fine else len(rules) - 1
    log.info("exit rule %s: %.2f of %d passes on average, %.1f%% agreement with the full depth (%d held-out)",
             rules[best], rows[best]["mean_passes"], passes, 100 * rows[best]["agreement"], n)
    return rules[best], rows
