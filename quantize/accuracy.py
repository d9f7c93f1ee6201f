"""How far a quantized file is from its fp32 parent, both run in their real runtime on held-out
text: per output the cosine similarity (per token, or per example) and the largest absolute
difference; masked-LM top-1 agreement for MLM heads; label agreement for classifiers.

Padded positions are left out of every figure: what a model says there is never used.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .calibration import Batch

__all__ = ["OutputAccuracy", "AccuracyReport", "measure", "output_kind", "length_bucket", "COLUMNS",
           "LENGTH_COLUMNS", "LENGTH_BUCKETS"]

log = logging.getLogger(__name__)

# What each output is, which decides the rows compared and the agreement measured:
#   tokens      (B, T, D) hidden states, one row per real token, cosine only
#   examples    (B, D) one row per example, cosine only
#   mlm         (B, T, V) one row per real token; top-1 agreement at the [MASK] positions
#   label       (B, L) one row per example; argmax agreement
#   token-label (B, T, L) one row per real token; argmax agreement
#   span        (B, T) one row per example over its real tokens; argmax (start/end) agreement
#   passes      (B,) an adaptive file's pass count per example; agreement = the same count
_KINDS = {
    "last_hidden_state": "tokens", "pooler_output": "examples", "prediction_logits": "mlm",
    "sop_logits": "label", "start_logits": "span", "end_logits": "span",
    # A MediaPipe task file's one output (converters/task_heads.py).
    "probabilities": "label", "embedding": "examples",
    # An adaptive file's (convert --adaptive) pass counts.
    "passes": "passes",
}
_AGREEMENT = {"mlm": "MLM top-1", "label": "label", "token-label": "label", "span": "label",
              "passes": "same passes"}
COLUMNS = ("output", "rows", "cosine mean", "cosine min", "max |diff|", "agreement", "of")
# Inputs by their real tokens (special tokens included, padding not): a short text padded to a
# static file's length runs through activations a calibration on long text never saw.
LENGTH_BUCKETS = ((8, "<=8"), (32, "9-32"), (128, "33-128"), (None, ">128"))
LENGTH_COLUMNS = ("output", "tokens", "rows", "cosine mean", "max |diff|", "agreement", "of")


def length_bucket(tokens: int) -> str:
    """The LENGTH_BUCKETS label of an input of ``tokens`` real tokens."""
    return next(label for top, label in LENGTH_BUCKETS if top is None or tokens <= top)


def output_kind(name: str, head: str) -> str:
    if name == "logits":
        return "label" if head == "classification" else "token-label"
    return _KINDS.get(name, "tokens")


@dataclass
class OutputAccuracy:
    name: str
    kind: str
    rows: int
    cosine_mean: float
    cosine_min: float
    max_abs_diff: float
    agreement: float | None = None
    agreement_of: str | None = None  # "MLM top-1" | "label"
    agreement_count: int = 0
    # The same figures for the inputs of each LENGTH_BUCKETS label that occurred:
    # {label: {"rows", "cosine_mean", "max_abs_diff", "agreement", "agreement_count"}}
    by_length: dict[str, dict[str, Any]] = field(default_factory=dict)

    def row(self) -> tuple:
        agreement = "" if self.agreement is None else f"{100 * self.agreement:.2f}%"
        of = "" if self.agreement is None else f"{self.agreement_of} ({self.agreement_count})"
        if self.kind == "passes":  # counts: no cosine, the largest difference in passes
            return (self.name, self.rows, "", "", f"{self.max_abs_diff:.4g}", agreement, of)
        return (self.name, self.rows, f"{self.cosine_mean:.5f}", f"{self.cosine_min:.5f}",
                f"{self.max_abs_diff:.4g}", agreement, of)


@dataclass
class AccuracyReport:
    outputs: list[OutputAccuracy] = field(default_factory=list)
    text: str = ""
    batches: int = 0

    @property
    def headline(self) -> tuple[float, str]:
        """(value, what): the lowest agreement when the head has labels, else the lowest mean
        cosine over the outputs. An adaptive file's pass counts are reported beside the answers,
        not as the headline: a pass more or less that gives the same answer costs no accuracy."""
        agreements = [(o.agreement, f"{o.name} {o.agreement_of} agreement")
                      for o in self.outputs if o.agreement is not None and o.kind != "passes"]
        if agreements:
            return min(agreements)
        cosines = [(o.cosine_mean, f"{o.name} mean cosine") for o in self.outputs if o.kind != "passes"]
        return min(cosines) if cosines else (0.0, "nothing measured")

    @property
    def drop(self) -> float:
        return max(0.0, 1.0 - self.headline[0])

    def passes(self, max_drop: float | None) -> bool:
        return max_drop is None or self.drop <= max_drop + 1e-12

    def rows(self) -> list[tuple]:
        return [o.row() for o in self.outputs]

    def length_rows(self) -> list[tuple]:
        """One row per output and length bucket, in LENGTH_COLUMNS order."""
        rows = []
        for o in self.outputs:
            for label, f in o.by_length.items():
                agreement = "" if f["agreement"] is None else f"{100 * f['agreement']:.2f}%"
                of = "" if f["agreement"] is None else f"{o.agreement_of} ({f['agreement_count']})"
                rows.append((o.name, label, f["rows"], f"{f['cosine_mean']:.5f}", f"{f['max_abs_diff']:.4g}",
                             agreement, of))
        return rows

    def to_dict(self) -> dict[str, Any]:
        value, what = self.headline
        return {"text": self.text, "batches": self.batches, "headline": value, "headline_of": what,
                "drop": self.drop, "outputs": [asdict(o) for o in self.outputs]}


class _Running:
    """Figures of one output, accumulated batch by batch (logits of a 30k vocabulary over many
    tokens would not fit in memory at once)."""

    def __init__(self, name: str, kind: str):
        self.name, self.kind = name, kind
        self.cosines: list[np.ndarray] = []
        self.max_abs = 0.0
        self.agree = 0
        self.count = 0
        self.buckets: dict[str, _Running] = {}  # the same figures, for the rows of each length bucket

    def add(self, ref: np.ndarray, got: np.ndarray, batch: Batch, by_length: bool = True) -> None:
        if by_length:
            tokens = batch.valid.sum(-1)
            labels = [length_bucket(int(n)) for n in tokens]
            for label in dict.fromkeys(labels):
                rows = np.array([lab == label for lab in labels])
                part = Batch({k: v[rows] for k, v in batch.feeds.items()},
                             None if batch.masked is None else batch.masked[rows], batch.source)
                self.buckets.setdefault(label, _Running(self.name, self.kind)).add(ref[rows], got[rows], part, False)
        ref, got = ref.astype(np.float64), got.astype(np.float64)
        valid = batch.valid
        if self.kind == "passes":
            self.max_abs = max(self.max_abs, float(np.abs(ref - got).max(initial=0.0)))
            self._agree(ref, got)
            return
        if self.kind in ("tokens", "mlm", "token-label"):
            a, b = ref[valid], got[valid]  # (N, D)
        elif self.kind == "span":
            a, b = np.where(valid, ref, 0.0), np.where(valid, got, 0.0)  # (B, T)
        else:
            a, b = ref.reshape(ref.shape[0], -1), got.reshape(got.shape[0], -1)  # (B, D)
        self.cosines.append(_cosine(a, b))
        if a.size:
            self.max_abs = max(self.max_abs, float(np.abs(a - b).max()))
        if self.kind == "mlm":
            where = batch.masked if batch.masked is not None and batch.masked.any() else valid
            self._agree(ref[where].argmax(-1), got[where].argmax(-1))
        elif self.kind == "span":
            low = np.finfo(np.float64).min
            self._agree(np.where(valid, ref, low).argmax(-1), np.where(valid, got, low).argmax(-1))
        elif self.kind in ("label", "token-label"):
            self._agree(a.argmax(-1), b.argmax(-1))

    def _agree(self, x: np.ndarray, y: np.ndarray) -> None:
        self.agree += int((x == y).sum())
        self.count += int(x.size)

    def result(self) -> OutputAccuracy:
        cos = np.concatenate(self.cosines) if self.cosines else np.zeros(0)
        of = _AGREEMENT.get(self.kind)
        return OutputAccuracy(
            name=self.name, kind=self.kind, rows=self.count if self.kind == "passes" else int(cos.size),
            cosine_mean=float(cos.mean()) if cos.size else 0.0,
            cosine_min=float(cos.min()) if cos.size else 0.0,
            max_abs_diff=self.max_abs,
            agreement=(self.agree / self.count) if of and self.count else None,
            agreement_of=of if of and self.count else None,
            agreement_count=self.count,
            by_length={label: _bucket_figures(self.buckets[label].result()) for _, label in LENGTH_BUCKETS
                       if label in self.buckets},
        )


def _bucket_figures(result: OutputAccuracy) -> dict[str, Any]:
    return {"rows": result.rows, "cosine_mean": result.cosine_mean, "max_abs_diff": result.max_abs_diff,
            "agreement": result.agreement, "agreement_count": result.agreement_count}


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity; two all-zero rows are identical (1.0)."""
    dot = (a * b).sum(-1)
    norm = np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
    both_zero = (np.linalg.norm(a, axis=-1) == 0) & (np.linalg.norm(b, axis=-1) == 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = np.where(norm > 0, dot / np.where(norm > 0, norm, 1.0), 0.0)
    return np.where(both_zero, 1.0, cos)


def measure(parent, quantized, batches: Sequence[Batch], head: str, text: str = "") -> AccuracyReport:
    """Run ``parent`` and ``quantized`` (albert_edge.runtime Sessions) on every batch and
    compare every output."""
    names = [n for n in parent.output_names]
    running = {name: _Running(name, output_kind(name, head)) for name in names}
    for batch in batches:
        ref = parent.run(batch.feeds)
        got = quantized.run(batch.feeds)
        for name in names:
            if got[name].shape != ref[name].shape:
                raise ValueError(f"output {name} has shape {list(got[name].shape)} in the quantized file "
                                 f"but {list(ref[name].shape)} in its parent")
            running[name].add(ref[name], got[name], batch)
    report = AccuracyReport([r.result() for r in running.values()], text=text, batches=len(batches))
    value, what = report.headline
    log.info("accuracy against the fp32 parent: %s %.4f", what, value)
    return report
