"""Compute and activation memory of one forward pass, from the config alone (no torch).

Counted as multiply-accumulates (MACs) of the matrix products, batch 1, sequence length T,
every position attending to every position (softmax, GELU, LayerNorm and adds are left out:
they are a few per element, not per weight):

- one layer application: Q, K, V and output projections ``4 T H^2``, scores ``Q K^T`` and the
  weighted sum ``P V`` ``2 T^2 H``, the FFN ``2 T H I``;
- the E -> H projection ``T E H`` (ALBERT only), the pooler ``H^2`` (the [CLS] position);
- L x inner_group_num layer applications.

Sharing weights does not share work: every layer application runs, so an ALBERT costs the
compute of the BERT of the same width and depth (plus the small projection).

Activation bytes are fp32 elements one layer application writes (Q, K, V, the scores and
probabilities of every head, the context, attention output, FFN intermediate before and after
GELU, FFN output, two LayerNorm outputs); a runtime reuses these buffers from layer to layer,
so this is what one layer needs, not a sum over depth.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..config import AlbertConfig

__all__ = ["ComputeRow", "compute_rows", "DEFAULT_SEQ_LENS", "layer_macs", "activation_bytes"]

DEFAULT_SEQ_LENS = (32, 128, 512)
FLOAT_BYTES = 4


@dataclass(frozen=True)
class ComputeRow:
    seq_len: int
    layer_applications: int
    macs_per_layer: int  # one layer application
    macs_total: int  # the whole base model, batch 1
    bert_macs_total: int  # the BERT of the same width and depth
    activation_bytes_per_layer: int  # fp32, batch 1
    activation_bytes_embeddings: int  # the embedding output (T x E) and its projection (T x H)

    def to_dict(self) -> dict:
        return asdict(self)


def layer_macs(config: AlbertConfig, seq_len: int) -> int:
    T, H, I = seq_len, config.hidden_size, config.intermediate_size
    return 4 * T * H * H + 2 * T * T * H + 2 * T * H * I


def activation_bytes(config: AlbertConfig, seq_len: int) -> int:
    T, H, I, n = seq_len, config.hidden_size, config.intermediate_size, config.num_attention_heads
    # Q, K, V, context, attention output, its LayerNorm, FFN output, its LayerNorm: 8 x (T, H)
    elements = 8 * T * H + 2 * n * T * T + 2 * T * I
    return FLOAT_BYTES * elements


def compute_rows(config: AlbertConfig, seq_lens=DEFAULT_SEQ_LENS) -> list[ComputeRow]:
    E, H = config.embedding_size, config.hidden_size
    applications = config.num_hidden_layers * config.inner_group_num
    rows = []
    for T in seq_lens:
        if T > config.max_position_embeddings:
            continue
        per_layer = layer_macs(config, T)
        bert = applications * per_layer + H * H
        rows.append(ComputeRow(
            seq_len=T, layer_applications=applications, macs_per_layer=per_layer,
            macs_total=bert + T * E * H, bert_macs_total=bert,
            activation_bytes_per_layer=activation_bytes(config, T),
            activation_bytes_embeddings=FLOAT_BYTES * T * (E + H),
        ))
    return rows
