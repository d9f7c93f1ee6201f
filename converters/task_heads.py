"""The outputs a task library reads, as thin PyTorch modules around our models: a classifier's
probabilities (MediaPipe's TextClassifier and the TFLite Task Library report the output tensor as
it is, so logits would be shown as scores) and one sentence vector per text (TextEmbedder reads
each output tensor as one embedding). They hold no weights of their own: every parameter is the
wrapped model's, so the weights-once check counts the same bytes."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from albert_edge.model import AlbertForSequenceClassification, AlbertModel

__all__ = ["ClassProbabilities", "SentenceEmbedding", "EMBEDDINGS"]

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
