"""Checkpoints both ways, with transformers as the oracle: HF saves -> we load; we save -> HF loads;
and original TF checkpoints written here with TensorFlow under Google's variable names."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers

from albert_edge import checkpoints
from albert_edge.config import AlbertConfig
from albert_edge.errors import CheckpointError
from albert_edge.model import build_model

TINY = AlbertConfig.preset("tiny")
CONFIGS = {
    "tiny-G<L": TINY,
    "inner2": TINY.replace(inner_group_num=2),
    "E!=H": TINY.replace(embedding_size=12, num_hidden_layers=5, num_hidden_groups=3),
    "albert-base-v2": AlbertConfig.preset("albert-base-v2"),
}
# (our head, HF class, HF outputs in our output order)
HEADS = {
    "base": ("AlbertModel", ("last_hidden_state", "pooler_output")),
    "pretraining": ("AlbertForPreTraining", ("prediction_logits", "sop_logits")),
    "classification": ("AlbertForSequenceClassification", ("logits",)),
    "mlm": ("AlbertForMaskedLM", ("logits",)),
    "token-classification": ("AlbertForTokenClassification", ("logits",)),
    "qa": ("AlbertForQuestionAnswering", ("start_logits", "end_logits")),
}
PARITY_HEADS = ("base", "pretraining", "classification")


def hf_model(config: AlbertConfig, head: str):
    cls = getattr(transformers, HEADS[head][0])
    hf_config = transformers.AlbertConfig(**{k: v for k, v in config.to_hf_dict().items() if k != "model_type"})
    torch.manual_seed(0)
    return cls(hf_config).eval()


def batch(config: AlbertConfig, T: int = 12):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, config.vocab_size, (2, T), generator=g)
    mask = torch.ones_like(ids)
    mask[1, T - 4:] = 0  # padding in the second row
    types = torch.zeros_like(ids)
    types[:, T // 2:] = 1
    return ids, mask, types


def outputs(result) -> tuple[torch.Tensor, ...]:
    return result if isinstance(result, tuple) else (result,)


def assert_same(ours, hf, names, atol=1e-5):
    for name, mine in zip(names, outputs(ours)):
        theirs = getattr(hf, name)
        assert mine.shape == theirs.shape, name
        torch.testing.assert_close(mine, theirs, atol=atol, rtol=0, msg=name)


@pytest.mark.parametrize("head", PARITY_HEADS)
@pytest.mark.parametrize("variant", list(CONFIGS))
def test_hf_saves_we_load(tmp_path, variant, head):
    config = CONFIGS[variant]
    hf = hf_model(config, head)
    hf.save_pretrained(tmp_path)
    loaded_config, ours = checkpoints.load_model(tmp_path)
    assert loaded_config == config
    assert ours.hf_architecture == HEADS[head][0]
    ids, mask, types = batch(config)
    with torch.no_grad():
        assert_same(ours(ids, mask, types), hf(input_ids=ids, attention_mask=mask, token_type_ids=types),
                    HEADS[head][1])


@pytest.mark.parametrize("head", PARITY_HEADS)
@pytest.mark.parametrize("variant", ["tiny-G<L", "inner2", "E!=H"])
def test_we_save_hf_loads(tmp_path, variant, head):
    config = CONFIGS[variant]
    torch.manual_seed(3)
    ours = build_model(config, head)
    checkpoints.save(ours, tmp_path)
    hf = getattr(transformers, HEADS[head][0]).from_pretrained(tmp_path).eval()
    ids, mask, types = batch(config)
    with torch.no_grad():
        assert_same(ours(ids, mask, types), hf(input_ids=ids, attention_mask=mask, token_type_ids=types),
                    HEADS[head][1])


@pytest.mark.parametrize("head", list(HEADS))
def test_every_hf_class_loads_as_its_own_head(tmp_path, head):
    hf = hf_model(TINY, head)
    hf.save_pretrained(tmp_path)
    ckpt = checkpoints.load(tmp_path)
    assert ckpt.head == head
    _, ours = checkpoints.load_model(tmp_path)
    ids, mask, types = batch(TINY)
    with torch.no_grad():
        assert_same(ours(ids, mask, types), hf(input_ids=ids, attention_mask=mask, token_type_ids=types),
                    HEADS[head][1])


def test_pretraining_checkpoint_loads_as_base_and_mlm(tmp_path):
    hf_model(TINY, "pretraining").save_pretrained(tmp_path)
    assert checkpoints.load(tmp_path).heads == ("base", "mlm", "pretraining")
    _, base = checkpoints.load_model(tmp_path, head="base")
    _, mlm = checkpoints.load_model(tmp_path, head="mlm")
    assert base.output_names == ("last_hidden_state", "pooler_output")
    assert mlm.predictions.decoder.weight is mlm.albert.embeddings.word_embeddings.weight
    with pytest.raises(CheckpointError, match="no weights for head 'qa'"):
        checkpoints.load_model(tmp_path, head="qa")


def test_pytorch_bin_is_loaded_weights_only(tmp_path):
    hf = hf_model(TINY, "base")
    torch.save(hf.state_dict(), tmp_path / "pytorch_model.bin")
    (tmp_path / "config.json").write_text(json.dumps(TINY.to_hf_dict(["AlbertModel"])))
    _, ours = checkpoints.load_model(tmp_path)
    ids, mask, types = batch(TINY)
    with torch.no_grad():
        assert_same(ours(ids, mask, types), hf(input_ids=ids, attention_mask=mask, token_type_ids=types),
                    HEADS["base"][1])


class _NotATensor:
    pass


def test_pickle_that_is_not_a_state_dict_is_refused(tmp_path):
    torch.save({"weights": _NotATensor()}, tmp_path / "pytorch_model.bin")
    (tmp_path / "config.json").write_text(json.dumps(TINY.to_hf_dict()))
    with pytest.raises(CheckpointError, match="not a plain state dict"):
        checkpoints.load(tmp_path)


def test_missing_config_json(tmp_path):
    with pytest.raises(CheckpointError, match="no config.json"):
        checkpoints.load(tmp_path)


def test_truncated_safetensors(tmp_path):
    hf_model(TINY, "base").save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        checkpoints.load(tmp_path)


@pytest.mark.parametrize("change, message", [
    ({"intermediate_size": 40}, r"'encoder\.albert_layer_groups\.0\.albert_layers\.0\.ffn\.weight' "
                                r"has shape \[32, 16\], but the config needs \[40, 16\]"),
    ({"num_hidden_groups": 1}, r"unexpected tensor 'encoder\.albert_layer_groups\.1\."),
], ids=["tensor-shape-differs", "extra-group-is-named"])
def test_tensors_that_do_not_match_the_config(tmp_path, change, message):
    hf_model(TINY, "base").save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config.update(change)
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=message):
        checkpoints.load_model(tmp_path)


def test_partial_sharing_round_trips(tmp_path):
    config = TINY.replace(sharing="attention")
    torch.manual_seed(0)
    ours = build_model(config, "pretraining")
    checkpoints.save(ours, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["albert_edge_sharing"] == "attention"
    loaded_config, again = checkpoints.load_model(tmp_path)
    assert loaded_config.sharing == "attention"
    ids, mask, types = batch(config)
    with torch.no_grad():
        for a, b in zip(ours(ids, mask, types), again(ids, mask, types)):
            torch.testing.assert_close(a, b, atol=0, rtol=0)


# -- original TF checkpoints ------------------------------------------------------------------

def write_tf_checkpoint(directory, config: AlbertConfig, model, *, prefix="", drop=(), slots=True):
    """Write a TF (V2 format) checkpoint under the original ALBERT variable names, the way
    Google's run_pretraining.py leaves it: weights, optimizer slots and global_step."""
    import tensorflow as tf

    table = checkpoints.tf_key_table(config)
    names, values = [], []
    for ours, param in model.named_parameters():
        ours = ours.removeprefix("albert.")
        tf_name, transpose = table[ours]
        if tf_name in drop:
            continue
        value = param.detach().numpy()
        value = np.ascontiguousarray(value.T if transpose else value)
        names.append(prefix + tf_name)
        values.append(value)
        if slots:
            for slot in ("adam_m", "adam_v"):
                names.append(f"{prefix}{tf_name}/{slot}")
                values.append(np.zeros_like(value))
    names.append("global_step")
    values.append(np.array(1000, dtype=np.int64))
    (directory / "albert_config.json").write_text(json.dumps(config.to_original_dict()))
    ckpt_prefix = str(directory / "model.ckpt-1000")
    tf.raw_ops.SaveV2(prefix=ckpt_prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(v) for v in values])
    return ckpt_prefix


@pytest.mark.parametrize("variant", ["tiny-G<L", "inner2", "E!=H"])
@pytest.mark.parametrize("prefix", ["", "module/"])
def test_original_tf_checkpoint(tmp_path, variant, prefix):
    config = CONFIGS[variant]
    hf = hf_model(config, "pretraining")
    ckpt_prefix = write_tf_checkpoint(tmp_path, config, hf, prefix=prefix)
    for path in (tmp_path, ckpt_prefix):
        ckpt = checkpoints.load(path)
        assert ckpt.format == "tf" and ckpt.heads == ("base", "mlm", "pretraining")
        loaded_config, ours = checkpoints.load_model(path)
        assert loaded_config == config
        ids, mask, types = batch(config)
        with torch.no_grad():
            assert_same(ours(ids, mask, types), hf(input_ids=ids, attention_mask=mask, token_type_ids=types),
                        HEADS["pretraining"][1])


def test_tf_checkpoint_missing_variable_is_named(tmp_path):
    hf = hf_model(TINY, "pretraining")
    missing = "bert/encoder/transformer/group_1/inner_group_0/ffn_1/intermediate/dense/kernel"
    write_tf_checkpoint(tmp_path, TINY, hf, drop={missing})
    with pytest.raises(CheckpointError, match=f"missing tensor .*original name {missing}"):
        checkpoints.load_model(tmp_path)


def test_tf_checkpoint_converts_to_hf_that_transformers_loads(tmp_path):
    hf = hf_model(TINY, "pretraining")
    write_tf_checkpoint(tmp_path / "tf" if (tmp_path / "tf").mkdir() is None else None, TINY, hf)
    _, ours = checkpoints.load_model(tmp_path / "tf")
    checkpoints.save(ours, tmp_path / "hf")
    again = transformers.AlbertForPreTraining.from_pretrained(tmp_path / "hf").eval()
    ids, mask, types = batch(TINY)
    with torch.no_grad():
        torch.testing.assert_close(again(ids, mask, types).prediction_logits,
                                   hf(ids, mask, types).prediction_logits, atol=1e-6, rtol=0)


def test_saved_directory_carries_the_tokenizer(tmp_path, spiece_model):
    config = TINY.replace(vocab_size=400)
    checkpoints.save(build_model(config, "mlm"), tmp_path, spiece=spiece_model)
    assert (tmp_path / "spiece.model").read_bytes() == spiece_model.read_bytes()
    hf_tok = transformers.AlbertTokenizer.from_pretrained(tmp_path)
    from albert_edge.tokenizer import AlbertTokenizer

    ours = AlbertTokenizer.from_dir(tmp_path)
    text = "the weather station logged rain"
    assert ours.encode(text) == hf_tok(text)["input_ids"]


def test_saved_files_are_readable_by_others(tmp_path):
    import stat

    checkpoints.save(build_model(TINY), tmp_path)
    for name in ("config.json", "model.safetensors"):
        assert (tmp_path / name).stat().st_mode & stat.S_IROTH
