"""config.json's id2label names are read as they are: a number, null or a list stays what it is
(not '5', 'None', "['x']"), so what writes labels for an app refuses it naming the label, while a
plain load of the checkpoint (training, PyTorch) goes on as before."""

from __future__ import annotations

import json

import pytest
import torch

from albert_edge import checkpoints
from albert_edge.config import AlbertConfig
from albert_edge.labels import CONFIG_FIX, LabelError, check_labels
from albert_edge.model import build_model

TINY = AlbertConfig.preset("tiny")
ODD = {"number": (5, "label 0 is 5, not a string"), "null": (None, "label 0 is null, not a string"),
       "list": (["x"], 'label 0 is ["x"], not a string')}


def _with_id2label(first) -> dict:
    data = TINY.replace(num_labels=3).to_hf_dict()
    data["id2label"] = {"0": first, "1": "b", "2": "c"}
    return data


@pytest.mark.parametrize("first, message", ODD.values(), ids=ODD)
def test_a_label_that_is_not_a_string_is_kept_and_refused_naming_it(first, message):
    config = AlbertConfig.from_hf_dict(_with_id2label(first))
    assert json.dumps(config.label_names[0]) == json.dumps(first)  # not str(first)
    assert config.num_labels == 3
    with pytest.raises(LabelError) as caught:
        check_labels(config.label_names, config.num_labels, where="the checkpoint's config.json id2label")
    assert message in str(caught.value) and str(caught.value).endswith(CONFIG_FIX)


@pytest.mark.parametrize("first", [v for v, _ in ODD.values()], ids=ODD)
def test_the_names_round_trip_through_config_json(first):
    config = AlbertConfig.from_hf_dict(_with_id2label(first))
    saved = json.loads(json.dumps(config.to_hf_dict()))
    assert saved["id2label"]["0"] == first
    assert AlbertConfig.from_hf_dict(saved) == config
    hash(config)  # still a frozen, hashable config


@pytest.mark.parametrize("first", [v for v, _ in ODD.values()], ids=ODD)
def test_a_plain_load_of_such_a_checkpoint_still_builds_its_classifier(first, tmp_path):
    """Loading for training or PyTorch does not need the names: it is not refused."""
    torch.manual_seed(0)
    checkpoint = checkpoints.save(build_model(TINY.replace(num_labels=3), "classification"), tmp_path / "ckpt")
    config_path = checkpoint / "config.json"
    data = json.loads(config_path.read_text())
    data["id2label"] = {"0": first, "1": "b", "2": "c"}
    config_path.write_text(json.dumps(data))
    loaded = checkpoints.load(checkpoint)
    model = checkpoints.model_from_checkpoint(loaded, "classification")
    assert model.config.num_labels == 3 and json.dumps(model.config.label_names[0]) == json.dumps(first)
    logits = model(torch.tensor([[2, 5, 3]]), torch.ones(1, 3, dtype=torch.long), torch.zeros(1, 3, dtype=torch.long))
    assert tuple(logits[0].shape if isinstance(logits, tuple) else logits.shape) == (1, 3)
