"""Checkpoints both ways, with transformers as the oracle: HF saves -> we load; we save -> HF loads;
and original TF checkpoints written here with TensorFlow under Google's variable names."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
import transformers

from albert_edge import checkpoints
from albert_edge.config import AlbertConfig
from albert_edge.errors import CheckpointError, ConfigError
from albert_edge.model import build_model, num_params
from albert_edge.params import param_report

TINY = AlbertConfig.preset("tiny")
CONFIGS = {
    "tiny-G<L": TINY,
    "inner2": TINY.replace(inner_group_num=2),
    "E!=H": TINY.replace(embedding_size=12, num_hidden_layers=5, num_hidden_groups=3),
    "E=H": TINY.replace(embedding_size=16),  # transformers keeps the E -> H projection
    "albert-base-v2": AlbertConfig.preset("albert-base-v2"),
    # transformers puts depth 9 in group 6 (int(9 / (18 / 14))); the exact quotient says 7.
    "L18-G14": TINY.replace(num_hidden_layers=18, num_hidden_groups=14),
}
# (our head, HF class, HF outputs in our output order)
HEADS = {
    "base": ("AlbertModel", ("last_hidden_state", "pooler_output")),
    "pretraining": ("AlbertForPreTraining", ("prediction_logits", "sop_logits")),
    "classification": ("AlbertForSequenceClassification", ("logits",)),
    "mlm": ("AlbertForMaskedLM", ("logits",)),
    "token-classification": ("AlbertForTokenClassification", ("logits",)),
    "qa": ("AlbertForQuestionAnswering", ("start_logits", "end_logits")),
    "multiple-choice": ("AlbertForMultipleChoice", ("logits",)),
}
PARITY_HEADS = ("base", "pretraining", "classification")


def hf_model(config: AlbertConfig, head: str):
    cls = getattr(transformers, HEADS[head][0])
    hf_config = transformers.AlbertConfig(**{k: v for k, v in config.to_hf_dict().items() if k != "model_type"})
    torch.manual_seed(0)
    return cls(hf_config).eval()


def batch(config: AlbertConfig, T: int = 12, choices: int | None = None):
    """(B, T) inputs, or (B, choices, T) for the multiple-choice head."""
    g = torch.Generator().manual_seed(1)
    lead = (2,) if choices is None else (2, choices)
    ids = torch.randint(5, config.vocab_size, (*lead, T), generator=g)
    mask = torch.ones_like(ids)
    mask[1, ..., T - 4:] = 0  # padding in the second row
    types = torch.zeros_like(ids)
    types[..., T // 2:] = 1
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
@pytest.mark.parametrize("variant", ["tiny-G<L", "inner2", "E!=H", "L18-G14"])
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
    ids, mask, types = batch(TINY, choices=3 if head == "multiple-choice" else None)
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

def google_builds(config: AlbertConfig, name: str) -> bool:
    """Whether Google's modeling.py creates the variable for our weight ``name``: no E -> H
    projection when E = H, and only the groups that int(i / L * G) picks for some depth i."""
    L, G = config.num_hidden_layers, config.num_hidden_groups
    if name.startswith("encoder.embedding_hidden_mapping_in."):
        return config.embedding_size != config.hidden_size
    if name.startswith("encoder.albert_layer_groups."):
        return int(name.split(".")[2]) in {int(i / L * G) for i in range(L)}
    return True


def write_tf_checkpoint(directory, config: AlbertConfig, model, *, prefix="", drop=(), slots=True):
    """Write a TF (V2 format) checkpoint under the original ALBERT variable names, the way
    Google's run_pretraining.py leaves it: weights, optimizer slots and global_step; of
    ``model``'s weights only those Google's code would have built."""
    import tensorflow as tf

    table = checkpoints.tf_key_table(config.replace(layout="hf"))  # every name, built or not
    names, values = [], []
    for ours, param in model.named_parameters():
        ours = ours.removeprefix("albert.")
        tf_name, transpose = table[ours]
        if tf_name in drop or not google_builds(config, ours):
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


# -- where Google's code builds ALBERT differently from transformers ---------------------------

def google_reference(config: AlbertConfig, hf):
    """``hf`` (a transformers ALBERT with the config's G groups) rewired to compute what Google's
    modeling.py computes: depth i runs group int(i / L * G), and with E = H there is no E -> H
    projection (an identity stands in for it)."""
    L, G = config.num_hidden_layers, config.num_hidden_groups
    ref = copy.deepcopy(hf)
    encoder = ref.albert.encoder
    groups = encoder.albert_layer_groups
    encoder.config.num_hidden_groups = L  # transformers then runs slot i at depth i
    encoder.albert_layer_groups = torch.nn.ModuleList(groups[int(i / L * G)] for i in range(L))
    if config.embedding_size == config.hidden_size:
        with torch.no_grad():
            encoder.embedding_hidden_mapping_in.weight.copy_(torch.eye(config.hidden_size))
            encoder.embedding_hidden_mapping_in.bias.zero_()
    return ref


ORIGINAL_LAYOUTS = {
    "E=H": TINY.replace(embedding_size=16),
    # Google: depth 15 -> int(15 / 22 * 22) = 14, so group 15 is never built (a missing tensor before).
    "L22-G22": TINY.replace(num_hidden_layers=22, num_hidden_groups=22),
    # Google: depth 9 -> group 7, transformers: group 6 (silently different outputs before).
    "L18-G14": TINY.replace(num_hidden_layers=18, num_hidden_groups=14),
}


@pytest.mark.parametrize("variant", list(ORIGINAL_LAYOUTS))
def test_original_checkpoint_loads_as_googles_code_built_it(tmp_path, variant):
    config = ORIGINAL_LAYOUTS[variant].replace(layout="original")
    hf = hf_model(config, "pretraining")
    write_tf_checkpoint(tmp_path / "tf" if (tmp_path / "tf").mkdir() is None else None, config, hf)
    loaded_config, ours = checkpoints.load_model(tmp_path / "tf")
    assert loaded_config == config and loaded_config.layout == "original"
    ids, mask, types = batch(config)
    reference = google_reference(config, hf)
    with torch.no_grad():
        assert_same(ours(ids, mask, types), reference(input_ids=ids, attention_mask=mask, token_type_ids=types),
                    HEADS["pretraining"][1])
        # transformers' own arrangement of the same weights gives other numbers: the rule matters.
        theirs = hf(input_ids=ids, attention_mask=mask, token_type_ids=types).prediction_logits
        assert not torch.allclose(ours(ids, mask, types)[0], theirs, atol=1e-3)
    # Parameters: exactly the weights Google's code built, as params counts them.
    base = checkpoints.load_model(tmp_path / "tf", head="base")[1]
    google = sum(p.numel() for n, p in hf.albert.named_parameters() if google_builds(config, n))
    assert num_params(base) == google == param_report(config).total
    # Saved as an HF directory, the layout travels with it and albert-edge reads it back.
    checkpoints.save(ours, tmp_path / "hf")
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["albert_edge_layout"] == "original"
    again_config, again = checkpoints.load_model(tmp_path / "hf")
    assert again_config == config
    with torch.no_grad():
        for a, b in zip(ours(ids, mask, types), again(ids, mask, types)):
            torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_original_config_records_the_layout_only_where_it_matters(tmp_path):
    assert AlbertConfig.from_original_dict(TINY.to_original_dict()).layout == "hf"
    for config in ORIGINAL_LAYOUTS.values():
        original = config.replace(layout="original")
        assert AlbertConfig.from_original_dict(original.to_original_dict()) == original
        with pytest.raises(ConfigError, match="cannot be written as an original albert_config.json"):
            config.to_original_dict()


def test_e_equals_h_original_has_no_projection():
    config = ORIGINAL_LAYOUTS["E=H"].replace(layout="original")
    model = build_model(config)
    assert model.encoder.embedding_hidden_mapping_in is None
    assert "E -> H projection" not in [r.part for r in param_report(config).rows]
    hf_layout = build_model(ORIGINAL_LAYOUTS["E=H"])  # transformers keeps an H x H projection
    assert num_params(hf_layout) - num_params(model) == 16 * 16 + 16


# -- the multiple-choice head -----------------------------------------------------------------

def test_we_save_multiple_choice_hf_loads(tmp_path):
    torch.manual_seed(3)
    ours = build_model(TINY, "multiple-choice")
    checkpoints.save(ours, tmp_path)
    hf = transformers.AlbertForMultipleChoice.from_pretrained(tmp_path).eval()
    ids, mask, types = batch(TINY, choices=4)
    with torch.no_grad():
        logits = ours(ids, mask, types)
        assert logits.shape == (2, 4)
        assert_same(logits, hf(input_ids=ids, attention_mask=mask, token_type_ids=types), ("logits",))


def test_one_output_classifier_also_loads_as_multiple_choice(tmp_path):
    hf = hf_model(TINY.replace(num_labels=1), "classification")
    hf.save_pretrained(tmp_path)
    assert checkpoints.load(tmp_path).heads == ("base", "classification", "multiple-choice")
    _, ours = checkpoints.load_model(tmp_path, head="multiple-choice")
    ids, mask, types = batch(TINY, choices=2)
    with torch.no_grad():
        flat = hf(input_ids=ids.view(4, -1), attention_mask=mask.view(4, -1),
                  token_type_ids=types.view(4, -1)).logits.view(2, 2)
        torch.testing.assert_close(ours(ids, mask, types), flat, atol=1e-5, rtol=0)


def test_original_race_checkpoint_loads_as_multiple_choice(tmp_path):
    """Google's run_race.py scores each choice with a top-level output_weights [1, H] on the pooled
    [CLS], the names run_classifier.py uses, so the head is asked for by name."""
    hf = hf_model(TINY, "multiple-choice")
    write_tf_checkpoint(tmp_path, TINY, hf)
    ckpt = checkpoints.load(tmp_path)
    assert ckpt.head == "classification" and "multiple-choice" in ckpt.heads
    _, ours = checkpoints.load_model(tmp_path, head="multiple-choice")
    ids, mask, types = batch(TINY, choices=4)
    with torch.no_grad():
        assert_same(ours(ids, mask, types), hf(input_ids=ids, attention_mask=mask, token_type_ids=types), ("logits",))
