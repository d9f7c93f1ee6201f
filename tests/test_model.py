"""The model: sharing is structure (same Parameter objects), counts are unique, heads have fixed outputs."""

from __future__ import annotations

import pytest
import torch

from albert_edge.config import AlbertConfig
from albert_edge.model import HEADS, build_model, num_params
from albert_edge.params import param_report

TINY = AlbertConfig.preset("tiny")
OUTPUT_SHAPES = {  # B=2, T=7, H=16, V=99, num_labels=2
    "base": [(2, 7, 16), (2, 16)],
    "mlm": [(2, 7, 99)],
    "pretraining": [(2, 7, 99), (2, 2)],
    "classification": [(2, 2)],
    "token-classification": [(2, 7, 2)],
    "qa": [(2, 7), (2, 7)],
}


@pytest.mark.parametrize("head", list(HEADS))
def test_fixed_outputs_per_head(head):
    model = build_model(TINY, head)
    ids = torch.randint(0, 99, (2, 7))
    out = model(ids, torch.ones_like(ids), torch.zeros_like(ids))
    out = out if isinstance(out, tuple) else (out,)
    assert [tuple(o.shape) for o in out] == OUTPUT_SHAPES[head]
    assert len(model.output_names) == len(out)


def test_layers_share_parameter_objects():
    config = TINY.replace(num_hidden_layers=6, num_hidden_groups=2)
    model = build_model(config)
    assert len(model.encoder.albert_layer_groups) == 2  # only the G distinct groups are built
    per_layer = num_params(model.encoder.albert_layer_groups[0])
    unshared = build_model(config.replace(num_hidden_groups=6))
    assert num_params(unshared) - num_params(model) == 4 * per_layer


@pytest.mark.parametrize("sharing", ["attention", "ffn"])
def test_partial_sharing_ties_modules(sharing):
    config = TINY.replace(sharing=sharing, num_hidden_groups=1)
    groups = build_model(config).encoder.albert_layer_groups
    assert len(groups) == config.num_hidden_layers
    first, second = groups[0].albert_layers[0], groups[1].albert_layers[0]
    assert (first.attention is second.attention) == (sharing == "attention")
    assert (first.ffn is second.ffn) == (sharing == "ffn")


def test_mlm_decoder_is_the_embedding_table():
    model = build_model(TINY, "pretraining")
    assert model.predictions.decoder.weight is model.albert.embeddings.word_embeddings.weight
    names = [n for n, _ in model.named_parameters()]
    assert "predictions.decoder.weight" not in names and "predictions.decoder.bias" not in names


@pytest.mark.parametrize("sharing", ["all", "attention", "ffn", "none"])
@pytest.mark.parametrize("inner", [1, 2])
def test_param_report_equals_built_model(sharing, inner):
    config = TINY.replace(sharing=sharing, inner_group_num=inner)
    assert param_report(config).total == num_params(build_model(config))


def test_padding_is_masked():
    model = build_model(TINY)
    ids = torch.randint(5, 99, (1, 6))
    mask = torch.tensor([[1, 1, 1, 1, 0, 0]])
    a, _ = model(ids, mask, torch.zeros_like(ids))
    ids2 = ids.clone()
    ids2[0, 4:] = 7  # change only padded positions
    b, _ = model(ids2, mask, torch.zeros_like(ids))
    torch.testing.assert_close(a[:, :4], b[:, :4])


def test_trains():
    torch.manual_seed(0)
    model = build_model(TINY, "classification").train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    ids = torch.randint(5, 99, (8, 10))
    labels = (ids[:, 1] > 50).long()
    losses = []
    for _ in range(60):
        loss = torch.nn.functional.cross_entropy(model(ids, torch.ones_like(ids), torch.zeros_like(ids)), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
