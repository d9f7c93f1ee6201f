"""ALBERT in PyTorch: factorized embeddings, grouped cross-layer sharing, and the task heads."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import AlbertConfig
from .params import check_fits_in_memory

__all__ = [
    "AlbertModel",
    "AlbertForPreTraining",
    "AlbertForMaskedLM",
    "AlbertForSequenceClassification",
    "AlbertForTokenClassification",
    "AlbertForQuestionAnswering",
    "AlbertForMultipleChoice",
    "HEADS",
    "CHOICE_HEADS",
    "ALL_HEADS",
    "build_model",
    "num_params",
]

# Added to attention scores at padded keys. The original ALBERT code uses -10000 too: it is
# representable in fp16 and keeps int8 ranges sane, unlike finfo.min.
MASK_VALUE = -10000.0


def _activation(name: str):
    if name in ("gelu_new", "gelu_fast", "gelu_pytorch_tanh"):
        return lambda x: F.gelu(x, approximate="tanh")
    return {"gelu": F.gelu, "relu": F.relu, "silu": F.silu, "swish": F.silu, "tanh": torch.tanh}[name]


class AlbertEmbeddings(nn.Module):
    """Token, position and token-type embeddings, all E wide (the V x E half of the factorization)."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        E = config.embedding_size
        self.word_embeddings = nn.Embedding(config.vocab_size, E, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, E)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, E)
        self.LayerNorm = nn.LayerNorm(E, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor) -> Tensor:
        T = input_ids.shape[1]
        positions = torch.arange(T, device=input_ids.device).unsqueeze(0)  # (1, T)
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        x = x + self.position_embeddings(positions)  # (B, T, E)
        return self.dropout(self.LayerNorm(x))


class AlbertAttention(nn.Module):
    """Multi-head self-attention with its residual and LayerNorm (original: attention_1 + LayerNorm)."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        H = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        # Separate Q, K, V projections: packing them would create a new tensor per layer on export.
        self.query = nn.Linear(H, H)
        self.key = nn.Linear(H, H)
        self.value = nn.Linear(H, H)
        self.dense = nn.Linear(H, H)
        self.LayerNorm = nn.LayerNorm(H, eps=config.layer_norm_eps)
        self.attention_dropout = nn.Dropout(config.attention_probs_dropout_prob)
        self.output_dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, x: Tensor, mask_bias: Tensor) -> Tensor:
        B, T, H = x.shape

        def heads(t: Tensor) -> Tensor:
            return t.view(B, T, self.num_heads, self.head_dim).transpose(1, 2)  # (B, nh, T, hd)

        q, k, v = heads(self.query(x)), heads(self.key(x)), heads(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)  # (B, nh, T, T)
        probs = self.attention_dropout(torch.softmax(scores + mask_bias, dim=-1))
        context = torch.matmul(probs, v).transpose(1, 2).reshape(B, T, H)  # (B, T, H)
        return self.LayerNorm(x + self.output_dropout(self.dense(context)))


class AlbertLayer(nn.Module):
    """One transformer layer: attention, then FFN, each with residual + LayerNorm (post-LN)."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        H = config.hidden_size
        self.attention = AlbertAttention(config)
        self.ffn = nn.Linear(H, config.intermediate_size)
        self.ffn_output = nn.Linear(config.intermediate_size, H)
        self.full_layer_layer_norm = nn.LayerNorm(H, eps=config.layer_norm_eps)
        self.activation = _activation(config.hidden_act)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, x: Tensor, mask_bias: Tensor) -> Tensor:
        a = self.attention(x, mask_bias)  # (B, T, H)
        f = self.ffn_output(self.activation(self.ffn(a)))  # (B, T, H)
        return self.full_layer_layer_norm(a + self.dropout(f))


class AlbertLayerGroup(nn.Module):
    """inner_group_num distinct layers, applied in sequence; one group is one set of shared weights."""

    def __init__(self, config: AlbertConfig, used: bool = True):
        super().__init__()
        # A group no depth uses (Google's layout with G = L = 22, say) is built empty, as
        # Google's code never creates its variables.
        n_layers = config.inner_group_num if used else 0
        self.albert_layers = nn.ModuleList(AlbertLayer(config) for _ in range(n_layers))

    def forward(self, x: Tensor, mask_bias: Tensor) -> Tensor:
        for layer in self.albert_layers:
            x = layer(x, mask_bias)
        return x


class AlbertTransformer(nn.Module):
    """The E -> H projection, then L layer applications drawn from G shared groups."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.config = config
        L, G = config.num_hidden_layers, config.num_hidden_groups
        # The factorized embedding's second half: E -> H, applied once (Google's layout has
        # none when E = H).
        self.embedding_hidden_mapping_in = (nn.Linear(config.embedding_size, config.hidden_size)
                                            if config.has_embedding_projection else None)
        # "all" builds only the G distinct groups. The paper's partial-sharing variants build one
        # group per depth and tie the shared half to the owner of its group (same module object).
        if config.sharing == "all":
            used = {config.group_of_depth(depth) for depth in range(L)}
            groups = (AlbertLayerGroup(config, used=g in used) for g in range(G))
        else:
            groups = (AlbertLayerGroup(config) for _ in range(L))
        self.albert_layer_groups = nn.ModuleList(groups)
        if config.sharing in ("attention", "ffn"):
            self._tie_partial(config)

    def _tie_partial(self, config: AlbertConfig) -> None:
        owners: dict[int, AlbertLayerGroup] = {}
        for depth, group in enumerate(self.albert_layer_groups):
            owner = owners.setdefault(config.group_of_depth(depth), group)
            if owner is group:
                continue
            for mine, theirs in zip(group.albert_layers, owner.albert_layers):
                if config.sharing == "attention":
                    mine.attention = theirs.attention
                else:
                    mine.ffn, mine.ffn_output = theirs.ffn, theirs.ffn_output
                    mine.full_layer_layer_norm = theirs.full_layer_layer_norm

    def forward(self, embeddings: Tensor, mask_bias: Tensor) -> Tensor:
        x = embeddings  # (B, T, E)
        if self.embedding_hidden_mapping_in is not None:
            x = self.embedding_hidden_mapping_in(x)  # (B, T, H)
        for depth in range(self.config.num_hidden_layers):
            group = self.config.group_of_depth(depth) if self.config.sharing == "all" else depth
            x = self.albert_layer_groups[group](x, mask_bias)
        return x

    def passes(self, embeddings: Tensor, mask_bias: Tensor) -> list[Tensor]:
        """The hidden states after each of the L layer applications (what early exits read)."""
        x = embeddings
        if self.embedding_hidden_mapping_in is not None:
            x = self.embedding_hidden_mapping_in(x)
        out = []
        for depth in range(self.config.num_hidden_layers):
            group = self.config.group_of_depth(depth) if self.config.sharing == "all" else depth
            x = self.albert_layer_groups[group](x, mask_bias)
            out.append(x)  # (B, T, H)
        return out


class AlbertModel(nn.Module):
    """The ALBERT encoder. Returns (last_hidden_state, pooler_output), or last_hidden_state alone
    when built without the pooler (as HF's MLM, token-classification and QA models are)."""

    hf_architecture = "AlbertModel"

    def __init__(self, config: AlbertConfig, add_pooling_layer: bool = True):
        super().__init__()
        self.config = config
        self.embeddings = AlbertEmbeddings(config)
        self.encoder = AlbertTransformer(config)
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size) if add_pooling_layer else None
        self.output_names = ("last_hidden_state", "pooler_output") if add_pooling_layer else ("last_hidden_state",)
        self.apply(lambda m: _init_weights(m, config.initializer_range))

    def encode(self, input_ids: Tensor, attention_mask: Tensor | None, token_type_ids: Tensor | None) -> Tensor:
        return self.encoder(*self._embed(input_ids, attention_mask, token_type_ids))

    def encode_passes(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                      token_type_ids: Tensor | None = None) -> list[Tensor]:
        """The hidden states (B, T, H) after every layer application, the last one encode's."""
        return self.encoder.passes(*self._embed(input_ids, attention_mask, token_type_ids))

    def _embed(self, input_ids: Tensor, attention_mask: Tensor | None,
               token_type_ids: Tensor | None) -> tuple[Tensor, Tensor]:
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        emb = self.embeddings(input_ids, token_type_ids)  # (B, T, E)
        # (B, 1, 1, T): computed once, shared by every layer application.
        mask_bias = (1.0 - attention_mask[:, None, None, :].to(emb.dtype)) * MASK_VALUE
        return emb, mask_bias

    def pool(self, hidden: Tensor) -> Tensor:
        return torch.tanh(self.pooler(hidden[:, 0]))  # (B, H) from the [CLS] position

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None):
        hidden = self.encode(input_ids, attention_mask, token_type_ids)
        if self.pooler is None:
            return hidden
        return hidden, self.pool(hidden)


class AlbertMLMHead(nn.Module):
    """H -> E transform, then the decoder E -> V tied to the word embeddings."""

    def __init__(self, config: AlbertConfig, word_embeddings: nn.Embedding):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.dense = nn.Linear(config.hidden_size, config.embedding_size)
        self.activation = _activation(config.hidden_act)
        self.LayerNorm = nn.LayerNorm(config.embedding_size, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(config.embedding_size, config.vocab_size)
        # Ties are the same Parameter object, so the weights are counted and stored once.
        self.decoder.weight = word_embeddings.weight
        self.decoder.bias = self.bias

    def forward(self, hidden: Tensor) -> Tensor:
        h = self.LayerNorm(self.activation(self.dense(hidden)))  # (B, T, E)
        return self.decoder(h)  # (B, T, V)


class AlbertSOPHead(nn.Module):
    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.dropout = nn.Dropout(config.classifier_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, 2)

    def forward(self, pooled: Tensor) -> Tensor:
        return self.classifier(self.dropout(pooled))  # (B, 2)


class _OnAlbert(nn.Module):
    """A task model: ``albert`` (an AlbertModel) and the head a subclass adds after it; with
    ``classes``, the head is ``dropout`` then ``classifier`` (H -> classes), transformers' names."""

    def __init__(self, config: AlbertConfig, add_pooling_layer: bool = True, classes: int | None = None):
        super().__init__()
        self.config = config
        self.albert = AlbertModel(config, add_pooling_layer=add_pooling_layer)
        if classes is not None:
            self.dropout = nn.Dropout(config.classifier_dropout_prob)
            self.classifier = nn.Linear(config.hidden_size, classes)


class AlbertForPreTraining(_OnAlbert):
    """MLM + sentence-order prediction: returns (prediction_logits, sop_logits)."""

    hf_architecture = "AlbertForPreTraining"
    output_names = ("prediction_logits", "sop_logits")

    def __init__(self, config: AlbertConfig):
        super().__init__(config)
        self.predictions = AlbertMLMHead(config, self.albert.embeddings.word_embeddings)
        self.sop_classifier = AlbertSOPHead(config)
        _init_heads(self, config)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None) -> tuple[Tensor, Tensor]:
        hidden, pooled = self.albert(input_ids, attention_mask, token_type_ids)
        return self.predictions(hidden), self.sop_classifier(pooled)


class AlbertForMaskedLM(_OnAlbert):
    """Masked-LM only: returns prediction_logits (B, T, V)."""

    hf_architecture = "AlbertForMaskedLM"
    output_names = ("prediction_logits",)

    def __init__(self, config: AlbertConfig):
        super().__init__(config, add_pooling_layer=False)
        self.predictions = AlbertMLMHead(config, self.albert.embeddings.word_embeddings)
        _init_heads(self, config)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None) -> Tensor:
        return self.predictions(self.albert(input_ids, attention_mask, token_type_ids))


class AlbertForSequenceClassification(_OnAlbert):
    """Pooled [CLS] -> num_labels: returns logits (B, num_labels).

    Trained with early exits (``config.exits``), it also has ``exit_classifiers``: one small
    classifier for each pass but the last, reading the same pooler, so ``pass_logits`` answers
    after every application of the shared layer (albert_edge.exits says when to stop). The last
    pass is answered by ``classifier`` itself: forward() is the full-depth model, unchanged.
    """

    hf_architecture = "AlbertForSequenceClassification"
    output_names = ("logits",)

    def __init__(self, config: AlbertConfig):
        super().__init__(config, classes=config.num_labels)
        if config.exits is not None:
            # (L - 1) x (H x C): a few thousand weights next to the shared layer's millions.
            self.exit_classifiers = nn.ModuleList(nn.Linear(config.hidden_size, config.num_labels)
                                                  for _ in range(config.num_hidden_layers - 1))
        _init_heads(self, config)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None) -> Tensor:
        _, pooled = self.albert(input_ids, attention_mask, token_type_ids)
        return self.classifier(self.dropout(pooled))

    def pass_logits(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                    token_type_ids: Tensor | None = None) -> Tensor:
        """(B, L, num_labels): the logits after every pass; the last equals forward()'s."""
        heads = [*self.exit_classifiers, self.classifier]
        return torch.stack([head(self.dropout(self.albert.pool(hidden))) for head, hidden
                            in zip(heads, self.albert.encode_passes(input_ids, attention_mask, token_type_ids))],
                           dim=1)


class AlbertForTokenClassification(_OnAlbert):
    """Every token -> num_labels: returns logits (B, T, num_labels)."""

    hf_architecture = "AlbertForTokenClassification"
    output_names = ("logits",)

    def __init__(self, config: AlbertConfig):
        super().__init__(config, add_pooling_layer=False, classes=config.num_labels)
        _init_heads(self, config)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None) -> Tensor:
        return self.classifier(self.dropout(self.albert(input_ids, attention_mask, token_type_ids)))


class AlbertForQuestionAnswering(_OnAlbert):
    """Answer spans: returns (start_logits, end_logits), each (B, T)."""

    hf_architecture = "AlbertForQuestionAnswering"
    output_names = ("start_logits", "end_logits")

    def __init__(self, config: AlbertConfig):
        super().__init__(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        _init_heads(self, config)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None) -> tuple[Tensor, Tensor]:
        logits = self.qa_outputs(self.albert(input_ids, attention_mask, token_type_ids))  # (B, T, 2)
        start, end = logits.unbind(-1)
        return start, end


class AlbertForMultipleChoice(_OnAlbert):
    """One score per choice: inputs (B, C, T), each choice encoded as its own sequence; returns
    logits (B, C)."""

    hf_architecture = "AlbertForMultipleChoice"
    output_names = ("logits",)

    def __init__(self, config: AlbertConfig):
        super().__init__(config, classes=1)
        _init_heads(self, config)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None) -> Tensor:
        B, C, T = input_ids.shape

        def flat(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.reshape(B * C, T)

        _, pooled = self.albert(flat(input_ids), flat(attention_mask), flat(token_type_ids))  # (B*C, H)
        return self.classifier(self.dropout(pooled)).view(B, C)


# Head names as the CLI spells them (--head) -> model class. Their inputs are (B, T).
HEADS: dict[str, type[nn.Module]] = {
    "base": AlbertModel,
    "mlm": AlbertForMaskedLM,
    "pretraining": AlbertForPreTraining,
    "classification": AlbertForSequenceClassification,
    "token-classification": AlbertForTokenClassification,
    "qa": AlbertForQuestionAnswering,
}
# Heads whose inputs are (B, C, T): loaded, saved and run in PyTorch; the converters export
# (B, T) inputs only, so these are kept out of HEADS.
CHOICE_HEADS: dict[str, type[nn.Module]] = {"multiple-choice": AlbertForMultipleChoice}
ALL_HEADS: dict[str, type[nn.Module]] = {**HEADS, **CHOICE_HEADS}


def build_model(config: AlbertConfig, head: str = "base", add_pooling_layer: bool = True) -> nn.Module:
    """A randomly initialised model for ``head`` (one of ALL_HEADS), in eval mode."""
    if head not in ALL_HEADS:
        raise ValueError(f"unknown head {head!r}; choose one of {', '.join(ALL_HEADS)}")
    if torch.empty(0).device.type != "meta":  # a model on the meta device holds no memory
        check_fits_in_memory(config, head)  # one line, not an allocator's failure halfway through
    model = AlbertModel(config, add_pooling_layer) if head == "base" else ALL_HEADS[head](config)
    return model.eval()


def num_params(model: nn.Module) -> int:
    """Unique parameters of ``model``.

    A weight shared across layers (or tied, like the MLM decoder and the word embeddings) is one
    ``nn.Parameter`` object reached under several names; ``named_parameters()`` yields it once,
    so it is counted once here, as it is stored once in every file albert-edge writes.
    """
    return sum(p.numel() for _, p in model.named_parameters())


def _init_weights(module: nn.Module, std: float) -> None:
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, std=std)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, std=std)
        if module.padding_idx is not None:
            with torch.no_grad():
                module.weight[module.padding_idx].zero_()
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


def _init_heads(model: nn.Module, config: AlbertConfig) -> None:
    children = dict(model.named_children())
    for name, child in children.items():
        if name != "albert":
            child.apply(lambda m: _init_weights(m, config.initializer_range))
    if "predictions" in children:
        # The decoder's weight is the word-embedding table: re-zero its padding row too.
        emb = model.albert.embeddings.word_embeddings
        with torch.no_grad():
            model.predictions.bias.zero_()
            emb.weight[emb.padding_idx].zero_()
