"""Parameter report: counts from the config equal the built model; paper figures beside ours."""

from __future__ import annotations

import pytest
import torch

from albert_edge.config import PRESETS, AlbertConfig
from albert_edge.model import HEADS, build_model, num_params
from albert_edge.params import param_report


@pytest.mark.parametrize("name", ["albert-base-v2", "albert-large-v2", "albert-xxlarge-v2", "bert-base", "tiny"])
def test_total_is_unique_parameters_of_built_model(name):
    config = AlbertConfig.preset(name)
    with torch.device("meta"):  # counts shapes without allocating 1 GB for bert/xxlarge
        model = build_model(config)
    assert param_report(config, name).total == num_params(model)


@pytest.mark.parametrize("head", list(HEADS))
def test_heads_are_counted(head):
    config = AlbertConfig.preset("tiny")
    report = param_report(config, head=head)
    model = build_model(config, head)
    pooler = 0 if head in ("base", "pretraining", "classification") else config.hidden_size ** 2 + config.hidden_size
    assert report.total - pooler == num_params(model)


@pytest.mark.parametrize("name", [n for n in PRESETS if n != "tiny"])
def test_savings_add_up_to_bert(name):
    report = param_report(AlbertConfig.preset(name), name)
    assert report.bert_total == report.total + report.factorization_saving + report.sharing_saving


def test_albert_base_against_paper():
    report = param_report(AlbertConfig.preset("albert-base-v2"), "albert-base-v2")
    assert abs(report.total - 11_683_584) == 0
    assert report.paper["figure_m"] == 12 and "agrees" in report.paper["note"]
    assert report.bert_paper["model"] == "bert-base" and report.bert_paper["figure_m"] == 108
    assert report.sharing_saving == 11 * 7_087_872
    assert report.factorization_saving == (30000 + 512 + 2) * (768 - 128) + 2 * (768 - 128) - (128 * 768 + 768)


def test_xxlarge_difference_is_said():
    report = param_report(AlbertConfig.preset("albert-xxlarge-v2"), "albert-xxlarge-v2")
    assert report.paper["figure_m"] == 235
    assert "differs from the paper by -12.4M" in report.paper["note"]


@pytest.mark.parametrize("changes", [dict(embedding_size=16), dict(num_hidden_layers=22, num_hidden_groups=22),
                                     dict(num_hidden_layers=18, num_hidden_groups=14)], ids=str)
@pytest.mark.parametrize("layout", ["hf", "original"])
def test_layouts_are_counted(layout, changes):
    """Google's layout has no E -> H projection when E = H and may leave a group unbuilt."""
    config = AlbertConfig.preset("tiny").replace(layout=layout, **changes)
    report = param_report(config)
    assert report.total == num_params(build_model(config))
    assert report.bert_total == report.total + report.factorization_saving + report.sharing_saving


def test_multiple_choice_is_counted():
    config = AlbertConfig.preset("tiny")
    report = param_report(config, head="multiple-choice")
    assert report.total == num_params(build_model(config, "multiple-choice"))
    assert report.head_rows[0].count == config.hidden_size + 1
