"""``convert --adaptive``: a classifier trained with early exits (``finetune --exits``) written as a
file that stops when its exit rule says the answer is settled (:class:`.task_heads.AdaptiveClassifier`:
TFLite WHILE loops, ONNX Loop nodes). Which targets can loop, the rule from the command line or the
checkpoint, and the one-line refusals."""

from __future__ import annotations

from albert_edge.errors import ConfigError, ConversionError
from albert_edge.exits import KINDS, ExitRule

from .task_heads import AdaptiveClassifier

__all__ = ["ADAPTIVE_TARGETS", "check_targets", "parse_rule", "adaptive_model", "adaptive_record"]

# The targets whose engines run the loop, checked against PyTorch's adaptive answers and passes.
ADAPTIVE_TARGETS = ("tflite", "onnx", "ort", "transformers-js", "mediapipe")
# Why the others are refused, and what to convert instead.
_NOT_ADAPTIVE = {
    "executorch": "ExecuTorch's export traces one fixed path through the model, so a loop that ends on the "
                  "data cannot be written into a .pte",
    "onnx-text": "the tokenizer-in graph is not yet written with the passes' loop",
}


def check_targets(targets: list[str], static: bool) -> None:
    """Refuse, before anything is exported, targets that cannot stop early."""
    if static:
        raise ConversionError("--adaptive cannot be --static: a static file for an accelerator runs no loop; "
                              "convert the adaptive file without --static, and the accelerator's file with --static "
                              "but without --adaptive")
    for name in targets:
        if name not in ADAPTIVE_TARGETS:
            raise ConversionError(f"--adaptive cannot write --to {name}: {_NOT_ADAPTIVE.get(name, 'not supported')}; "
                                  f"adaptive files are written for {', '.join(ADAPTIVE_TARGETS)}")


def parse_rule(text: str | None, min_passes: int | None) -> ExitRule | None:
    """``KIND=SETTING`` (``patience=2``, ``confidence=0.9``, ``entropy=0.3``) and a minimum of passes
    as an ExitRule; None when neither is given (the checkpoint's recorded rule)."""
    if text is None:
        return None if min_passes is None else ExitRule("", 0.0, min_passes)
    kind, sep, setting = text.partition("=")
    if not sep or kind not in KINDS:
        raise ConversionError(f"--exit-rule {text!r}: write KIND=SETTING, KIND one of {', '.join(KINDS)} "
                              "(patience=2, confidence=0.9, entropy=0.3)")
    try:
        value = float(setting)
    except ValueError:
        raise ConversionError(f"--exit-rule {text!r}: {setting!r} is not a number") from None
    return ExitRule(kind, value, 1 if min_passes is None else min_passes)


def adaptive_model(model, rule: ExitRule | None) -> AdaptiveClassifier:
    """``model`` (a classifier trained with exits) as the adaptive model under ``rule``; a rule of no
    kind only sets the minimum passes of the checkpoint's recorded rule."""
    from albert_edge.model import AlbertForSequenceClassification

    if not isinstance(model, AlbertForSequenceClassification):
        head = getattr(model, "hf_architecture", type(model).__name__)
        raise ConversionError(f"--adaptive is for a classifier (--head classification): its exits are classifiers "
                              f"of the pooled text, and {head} has none")
    recorded = (model.config.exit_training or {}).get("rule")
    if rule is None or not rule.kind:
        if recorded is None:
            if model.config.exits is None:
                AdaptiveClassifier(model, ExitRule("patience", 1))  # refused, saying how to train the exits
            raise ConversionError("the checkpoint records no exit rule: give one with --exit-rule "
                                  "(patience=2, confidence=0.9 or entropy=0.3)")
        chosen = ExitRule.from_dict(recorded)
        rule = chosen if rule is None else ExitRule(chosen.kind, chosen.setting, rule.min_passes)
    try:
        return AdaptiveClassifier(model, rule)
    except ConfigError as exc:
        raise ConversionError(f"--exit-rule: {exc}") from None


def adaptive_record(adaptive: AdaptiveClassifier) -> dict:
    """What the manifest records of an adaptive file (its source's ``adaptive``): the rule it was
    written with, the passes of the model, and the held-out figures of every setting fine-tuning
    scored (``curve``, with how many texts: what a report's speed/accuracy curve draws)."""
    record = {**adaptive.rule.to_dict(), "passes": adaptive.config.num_hidden_layers}
    trained = adaptive.config.exit_training or {}
    if trained.get("curve"):
        record.update(curve=trained["curve"], n=(trained.get("held_out") or {}).get("n"))
    return record
