"""Early exits: when an adaptive classifier stops passing its input through ALBERT's shared layer.

ALBERT applies the same layer weights at every depth, so one pooler can read every pass and a
small classifier per pass answers after it (``AlbertForSequenceClassification.pass_logits``).
An *exit rule* decides, pass by pass, whether the answer is settled:

- ``patience`` P (PABEE, "BERT Loses Patience", 2020): stop once the predicted class has stayed
  the same for P passes after the one that first gave it;
- ``confidence`` tau: stop once the top class's probability is at least tau;
- ``entropy`` eps: stop once the entropy of the class probabilities (in nats) is at most eps;

never before ``min_passes``, and always at the last pass. The answer is the logits of the pass
it stopped at; files also output how many passes ran.

Device side: numpy only. The same rule runs in PyTorch (the reference), in the files' own loops
(TFLite WHILE, ONNX Loop), and here, where the passes' logits are known, to score settings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .errors import ConfigError

__all__ = ["KINDS", "ExitRule", "decide", "stop_pass", "softmax", "sweep", "RULE_METADATA", "SETTING"]

# The name of an adaptive file's setting: the ONNX file's optional input, the TFLite file's
# set_exit_setting signature's input and output (the setting in effect).
SETTING = "exit_setting"

# The key of an adaptive ONNX file's metadata entry holding its rule (ExitRule.to_dict and the
# model's number of passes, as JSON): what a run-time setting is checked against.
RULE_METADATA = "albert_edge_exit_rule"

# Each rule's kind, with the range of its setting and what the setting means.
KINDS: dict[str, str] = {
    "patience": "passes the prediction must stay unchanged: a whole number from 1 to the passes minus 1",
    "confidence": "the top class's probability to stop at: above 0, at most 1",
    "entropy": "the class probabilities' entropy (nats) to stop at: 0 or more",
}


@dataclass(frozen=True)
class ExitRule:
    """When to stop: ``kind`` (one of KINDS) with its ``setting``, never before ``min_passes``."""

    kind: str
    setting: float
    min_passes: int = 1

    def check(self, passes: int) -> ExitRule:
        """This rule, when it can run on a model of ``passes`` passes; ConfigError naming the value
        and its range otherwise."""
        if self.kind not in KINDS:
            raise ConfigError(f"exit rule {self.kind!r} is not one of {', '.join(KINDS)}")
        s = self.setting
        if self.kind == "patience":
            if not float(s).is_integer() or not 1 <= s <= passes - 1:
                raise ConfigError(f"patience ({s:g}) must be a whole number from 1 to {passes - 1} "
                                  f"(the model runs {passes} passes)")
        elif self.kind == "confidence" and not 0 < s <= 1:
            raise ConfigError(f"confidence ({s:g}) must be above 0 and at most 1")
        elif self.kind == "entropy" and not (s >= 0 and math.isfinite(s)):
            raise ConfigError(f"entropy ({s:g}) must be 0 or more")
        if isinstance(self.min_passes, bool) or not isinstance(self.min_passes, int) \
                or not 1 <= self.min_passes <= passes:
            raise ConfigError(f"minimum passes ({self.min_passes}) must be from 1 to {passes} "
                              f"(the model runs {passes} passes)")
        return self

    def to_dict(self) -> dict[str, float | int | str]:
        return {"kind": self.kind, "setting": self.setting, "min_passes": self.min_passes}

    @classmethod
    def from_dict(cls, data: dict) -> ExitRule:
        return cls(str(data["kind"]), float(data["setting"]), int(data.get("min_passes", 1)))

    def __str__(self) -> str:
        setting = f"{self.setting:g}"
        return f"{self.kind} {setting}" + (f", at least {self.min_passes} passes" if self.min_passes > 1 else "")


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def _settled(pass_logits: np.ndarray, rule: ExitRule) -> np.ndarray:
    """(L,) bool: whether the rule would stop after each pass (before min_passes and the end)."""
    if rule.kind == "patience":
        top = pass_logits.argmax(-1)
        settled, same = [], 0
        for i in range(len(top)):
            same = same + 1 if i and top[i] == top[i - 1] else 0
            settled.append(same >= rule.setting)
        return np.array(settled)
    probs = softmax(pass_logits.astype(np.float64))
    if rule.kind == "confidence":
        return probs.max(-1) >= rule.setting
    entropy = -(probs * np.log(np.clip(probs, 1e-30, None))).sum(-1)
    return entropy <= rule.setting


def stop_pass(pass_logits: np.ndarray, rule: ExitRule) -> int:
    """How many passes one input runs under ``rule``, from its (L, C) logits after each pass."""
    settled = _settled(np.asarray(pass_logits), rule)
    for i in range(rule.min_passes - 1, len(settled)):
        if settled[i]:
            return i + 1
    return len(settled)


def decide(pass_logits: np.ndarray, rule: ExitRule) -> tuple[np.ndarray, np.ndarray]:
    """(answers (B, C), passes (B,)): each input's logits at the pass ``rule`` stops it, and how
    many passes it ran, from the (B, L, C) logits after every pass."""
    pass_logits = np.asarray(pass_logits)
    passes = np.array([stop_pass(row, rule) for row in pass_logits], dtype=np.int64)
    answers = pass_logits[np.arange(len(passes)), passes - 1]
    return answers, passes


def sweep(pass_logits: np.ndarray, labels: np.ndarray | None, rules: list[ExitRule]) -> list[dict]:
    """Each rule's figures on held-out inputs: mean passes, agreement with the full-depth answer
    and, with ``labels``, accuracy; the full depth's own accuracy comes with every row."""
    pass_logits = np.asarray(pass_logits)
    full = pass_logits[:, -1].argmax(-1)
    rows = []
    for rule in rules:
        answers, passes = decide(pass_logits, rule)
        top = answers.argmax(-1)
        row = {"rule": rule.to_dict(), "mean_passes": float(passes.mean()),
               "agreement": float((top == full).mean()), "n": len(top)}
        if labels is not None:
            row["accuracy"] = float((top == labels).mean())
            row["full_accuracy"] = float((full == labels).mean())
        rows.append(row)
    return rows
