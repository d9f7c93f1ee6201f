"""The outputs a task library reads, as thin PyTorch modules around our models: a classifier's
probabilities (MediaPipe's TextClassifier and the TFLite Task Library report the output tensor as
it is, so logits would be shown as scores), one sentence vector per text (TextEmbedder reads
each output tensor as one embedding), and a classifier that stops early (the answer and the passes
it ran, by an exit rule; for MediaPipe, both as class scores). They hold no weights of their own:
every parameter is the wrapped model's, so the weights-once check counts the same bytes."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from albert_edge.errors import ConversionError
from albert_edge.exits import ExitRule, decide
from albert_edge.model import AlbertForSequenceClassification, AlbertModel

__all__ = ["AdaptiveClassifier", "AdaptiveProbabilities", "ClassProbabilities", "SentenceEmbedding", "EMBEDDINGS"]

# Which vector SentenceEmbedding gives, by name.
EMBEDDINGS = {
    "pooled": "the pooler output, tanh(W h[CLS] + b): the vector ALBERT's sentence-order head reads",
    "cls": "the last hidden state at the [CLS] position",
}


class ClassProbabilities(nn.Module):
    """softmax(logits) of a sequence-classification model: (B, num_labels)."""

    output_names = ("probabilities",)

    def __init__(self, classifier: AlbertForSequenceClassification):
        super().__init__()
        self.classifier = classifier
        self.config = classifier.config

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None) -> Tensor:
        return torch.softmax(self.classifier(input_ids, attention_mask, token_type_ids), dim=-1)


class SentenceEmbedding(nn.Module):
    """One (B, H) vector per text from the base model: ``vector`` is a key of EMBEDDINGS."""

    output_names = ("embedding",)

    def __init__(self, albert: AlbertModel, vector: str = "pooled"):
        super().__init__()
        if vector not in EMBEDDINGS:
            raise ValueError(f"vector {vector!r} is not one of {', '.join(EMBEDDINGS)}")
        if vector == "pooled" and albert.pooler is None:
            raise ValueError("the model has no pooler: ask for the 'cls' vector")
        self.albert = albert
        self.vector = vector
        self.config = albert.config

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None) -> Tensor:
        hidden = self.albert.encode(input_ids, attention_mask, token_type_ids)  # (B, T, H)
        return self.albert.pool(hidden) if self.vector == "pooled" else hidden[:, 0]


class AdaptiveClassifier(nn.Module):
    """A classifier trained with early exits that stops when ``rule`` says its answer is settled:
    (logits (B, num_labels) of the pass it stopped at, passes (B,) int32). The reference the files
    are checked against: it computes every pass and applies albert_edge.exits' rule to them, which
    gives what a loop that stops early gives, input by input."""

    output_names = ("logits", "passes")

    def __init__(self, classifier: AlbertForSequenceClassification, rule: ExitRule):
        super().__init__()
        if getattr(classifier.config, "exits", None) is None:
            raise ConversionError("this classifier was trained without early exits, so its passes before the last "
                                  "have no classifier to answer: fine-tune it with --exits frozen (its full-depth "
                                  "answers stay as they are) or --exits joint")
        self.classifier = classifier
        self.rule = rule.check(classifier.config.num_hidden_layers)
        self.config = classifier.config

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None) -> tuple[Tensor, Tensor]:
        every = self.classifier.pass_logits(input_ids, attention_mask, token_type_ids)  # (B, L, C)
        answers, passes = decide(every.detach().float().cpu().numpy(), self.rule)
        return torch.from_numpy(answers).to(every.dtype), torch.from_numpy(passes.astype("int32"))


class AdaptiveProbabilities(nn.Module):
    """An adaptive classifier as MediaPipe's TextClassifier reads it, one classification head per
    output: (softmax of the logits of the pass it stopped at (B, num_labels), passes (B, 1) float32,
    a head of one category whose score is the passes)."""

    output_names = ("probabilities", "passes")

    def __init__(self, adaptive: AdaptiveClassifier):
        super().__init__()
        self.adaptive = adaptive
        self.config = adaptive.config

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None) -> tuple[Tensor, Tensor]:
        logits, passes = self.adaptive(input_ids, attention_mask, token_type_ids)
        return torch.softmax(logits, dim=-1), passes.to(torch.float32)[:, None]
