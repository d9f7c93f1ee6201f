"""Evaluation figures for fine-tuned models: accuracy, F1, SQuAD exact match, and baselines."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

__all__ = ["accuracy", "macro_f1", "tag_f1", "majority_accuracy", "squad_scores"]


def accuracy(predicted: Sequence, gold: Sequence) -> float:
    return sum(p == g for p, g in zip(predicted, gold)) / len(gold) if gold else 0.0


def macro_f1(predicted: Sequence[int], gold: Sequence[int], num_labels: int) -> float:
    """The mean over classes of each class's F1 (a class never predicted nor present scores 0)."""
    scores = []
    for c in range(num_labels):
        tp = sum(p == c and g == c for p, g in zip(predicted, gold))
        fp = sum(p == c and g != c for p, g in zip(predicted, gold))
        fn = sum(p != c and g == c for p, g in zip(predicted, gold))
        scores.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return sum(scores) / len(scores) if scores else 0.0


def tag_f1(predicted: Sequence[int], gold: Sequence[int], outside: int | None) -> float:
    """Micro F1 over the tags that are not ``outside`` (the "O" tag), per word."""
    tp = sum(p == g and g != outside for p, g in zip(predicted, gold))
    n_pred = sum(p != outside for p in predicted)
    n_gold = sum(g != outside for g in gold)
    return 2 * tp / (n_pred + n_gold) if n_pred + n_gold else 0.0


def majority_accuracy(train_labels: Sequence, eval_labels: Sequence) -> float:
    """Accuracy on the eval labels of always answering the training set's most frequent label."""
    if not train_labels or not eval_labels:
        return 0.0
    majority = Counter(train_labels).most_common(1)[0][0]
    return sum(g == majority for g in eval_labels) / len(eval_labels)


def _normalize_answer(text: str) -> list[str]:
    """SQuAD's normalization: lower case, no punctuation, no articles, single spaces."""
    text = "".join(c for c in text.lower() if c not in set(string.punctuation))
    return re.sub(r"\b(a|an|the)\b", " ", text).split()


def squad_scores(predicted: Sequence[str], gold: Sequence[str]) -> dict[str, float]:
    """SQuAD exact match and token F1, averaged over the examples."""
    exact, f1 = 0.0, 0.0
    for p, g in zip(predicted, gold):
        pt, gt = _normalize_answer(p), _normalize_answer(g)
        exact += float(pt == gt)
        common = sum((Counter(pt) & Counter(gt)).values())
        if common:
            precision, recall = common / len(pt), common / len(gt)
            f1 += 2 * precision * recall / (precision + recall)
    n = max(len(gold), 1)
    return {"exact_match": exact / n, "f1": f1 / n}
