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


@pytest.mark.parametrize("layout, L, G", [("hf", 18, 14), ("original", 18, 14), ("original", 22, 22),
                                          ("hf", 22, 22), ("hf", 12, 5), ("original", 12, 5)])
def test_depths_run_the_group_their_layout_picks(layout, L, G):
    """transformers: depth i runs group int(i / (L / G)); Google's modeling.py: int(i / L * G),
    both as floating point computes them (they differ at L=18, G=14 depth 9, L=G=22 depth 15)."""
    config = TINY.replace(num_hidden_layers=L, num_hidden_groups=G, layout=layout)
    rule = {"hf": lambda i: int(i / (L / G)), "original": lambda i: int(i / L * G)}[layout]
    model = build_model(config)
    ran = []
    for g, group in enumerate(model.encoder.albert_layer_groups):
        group.register_forward_hook(lambda *_, g=g: ran.append(g))
    ids = torch.randint(5, 99, (1, 5))
    model(ids)
    assert ran == [rule(i) for i in range(L)] == [config.group_of_depth(i) for i in range(L)]
    # A group no depth runs (Google's L = G = 22 never builds group 15) holds no weights.
    for g, group in enumerate(model.encoder.albert_layer_groups):
        assert (num_params(group) > 0) == (g in ran)


def test_multiple_choice_scores_each_choice_as_its_own_sequence():
    model = build_model(TINY, "multiple-choice")
    ids = torch.randint(5, 99, (2, 3, 7))
    mask, types = torch.ones_like(ids), torch.zeros_like(ids)
    logits = model(ids, mask, types)
    assert logits.shape == (2, 3) and model.output_names == ("logits",)
    # Choice c of example b is the sequence ids[b, c] on its own.
    single = model.classifier(model.albert(ids[1, 2:3], mask[1, 2:3], types[1, 2:3])[1])
    torch.testing.assert_close(logits[1, 2], single[0, 0])
