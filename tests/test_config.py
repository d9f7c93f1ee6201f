"""AlbertConfig: validation messages, HF and original config files, presets."""

from __future__ import annotations

import json

import pytest

from albert_edge.config import PRESETS, AlbertConfig, load_config
from albert_edge.errors import ConfigError


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(hidden_size=770, num_attention_heads=12),
         r"hidden_size \(770\) is not a multiple of num_attention_heads \(12\)"),
        (dict(num_hidden_groups=5, num_hidden_layers=4), r"num_hidden_groups \(5\) is larger than num_hidden_layers \(4\)"),
        (dict(vocab_size=0), r"vocab_size \(0\) must be a positive integer"),
        (dict(hidden_act="swishy"), r"hidden_act \('swishy'\) is not one of"),
        (dict(sharing="some"), r"sharing \('some'\) is not one of all, attention, ffn, none"),
        (dict(hidden_dropout_prob=1.5), r"hidden_dropout_prob \(1.5\) must be in \[0, 1\)"),
        (dict(pad_token_id=120), r"pad_token_id \(120\) is outside the vocabulary \(vocab_size 99\)"),
    ],
)
def test_invalid_values_are_shown(changes, message):
    with pytest.raises(ConfigError, match=message):
        AlbertConfig.preset("tiny").replace(**changes)


@pytest.mark.parametrize("name", list(PRESETS))
def test_presets_round_trip_through_hf_config_json(tmp_path, name):
    config = AlbertConfig.preset(name)
    config.save(tmp_path / "config.json", architectures=["AlbertModel"])
    assert load_config(tmp_path / "config.json") == config
    assert load_config(tmp_path) == config


def test_hf_config_json_from_transformers_is_read(tmp_path):
    transformers = pytest.importorskip("transformers")
    hf = transformers.AlbertConfig(hidden_size=64, num_attention_heads=4, intermediate_size=128,
                                   num_hidden_layers=6, num_hidden_groups=2, inner_group_num=2,
                                   id2label={0: "neg", 1: "neutral", 2: "pos"})
    hf.save_pretrained(tmp_path)
    config = load_config(tmp_path)
    assert (config.hidden_size, config.num_hidden_groups, config.inner_group_num) == (64, 2, 2)
    assert config.label_names == ("neg", "neutral", "pos") and config.num_labels == 3


def test_original_albert_config_json(tmp_path):
    original = {
        "attention_probs_dropout_prob": 0, "hidden_act": "gelu", "hidden_dropout_prob": 0,
        "embedding_size": 128, "hidden_size": 768, "initializer_range": 0.02, "intermediate_size": 3072,
        "max_position_embeddings": 512, "num_attention_heads": 12, "num_hidden_layers": 12,
        "num_hidden_groups": 1, "net_structure_type": 0, "gap_size": 0, "num_memory_blocks": 0,
        "inner_group_num": 1, "down_scale_factor": 1, "type_vocab_size": 2, "vocab_size": 30000,
    }
    (tmp_path / "albert_config.json").write_text(json.dumps(original))
    config = load_config(tmp_path)
    # The original code's "gelu" is the tanh approximation, HF's "gelu_new".
    assert config == AlbertConfig.preset("albert-base-v2")
    assert config.to_original_dict() == original


def test_original_config_cannot_express_erf_gelu():
    with pytest.raises(ConfigError, match="has no name in the original ALBERT code"):
        AlbertConfig.preset("bert-base").to_original_dict()


@pytest.mark.parametrize("text, message", [("{not json", "is not valid JSON"), ("[1, 2]", "does not hold a JSON object"),
                                           ('{"model_type": "bert"}', "model_type is 'bert', not 'albert'")])
def test_bad_config_files(tmp_path, text, message):
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(tmp_path / "config.json")


def test_unknown_source():
    with pytest.raises(ConfigError, match="neither a preset"):
        load_config("albert-huge")


def test_group_of_depth_follows_albert():
    config = AlbertConfig.preset("tiny").replace(num_hidden_layers=12, num_hidden_groups=3)
    assert [config.group_of_depth(d) for d in range(12)] == [0] * 4 + [1] * 4 + [2] * 4
