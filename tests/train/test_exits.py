"""Early exits: the rules, a classifier's logits after every pass, and fine-tuning the exits jointly
or alone (the full-depth answers unchanged), with the chosen rule recorded in a checkpoint that
transformers still loads."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from albert_edge import checkpoints
from albert_edge.errors import ConfigError
from albert_edge.exits import ExitRule, decide, stop_pass, sweep
from albert_edge.model import build_model
from albert_edge.text import split_sentences
from albert_edge.train.finetune import FinetuneOptions, finetune
from albert_edge.train.state import export_model

from .conftest import weather_task


# -- the rules ----------------------------------------------------------------------------------

def _passes(*tops, classes=3, margin=3.0):
    """(L, C) logits whose top class after pass i is tops[i], by ``margin``."""
    out = np.zeros((len(tops), classes))
    for i, top in enumerate(tops):
        out[i, top] = margin
    return out


@pytest.mark.parametrize("tops, patience, expected", [
    ((0, 0, 1, 1, 1, 1), 1, 2),   # the first repeat stops it
    ((0, 1, 1, 1, 1, 1), 2, 4),   # 1 three times in a row: passes 2, 3, 4
    ((0, 1, 0, 1, 0, 1), 1, 6),   # never settles: the last pass
    ((2, 2, 2, 2, 2, 2), 5, 6),   # patience L - 1 is the full depth
])
def test_patience_counts_unchanged_predictions(tops, patience, expected):
    assert stop_pass(_passes(*tops), ExitRule("patience", patience)) == expected


def test_confidence_entropy_and_minimum_passes():
    logits = np.array([[0.0, 0.0], [2.0, 0.0], [5.0, 0.0], [6.0, 0.0]])  # p(top) .5, .88, .993, .998
    assert stop_pass(logits, ExitRule("confidence", 0.8)) == 2
    assert stop_pass(logits, ExitRule("confidence", 0.99)) == 3
    assert stop_pass(logits, ExitRule("confidence", 0.8, min_passes=3)) == 3
    assert stop_pass(logits, ExitRule("confidence", 1.0)) == 4  # never reached: the last pass
    assert stop_pass(logits, ExitRule("entropy", 0.4)) == 2  # entropy of (.88, .12) is 0.36 nats
    answers, passes = decide(np.stack([logits, logits[::-1]]), ExitRule("confidence", 0.99))
    assert passes.tolist() == [3, 1] and answers.tolist() == [[5.0, 0.0], [6.0, 0.0]]


@pytest.mark.parametrize("rule, message", [
    (ExitRule("patience", 0), "patience (0) must be a whole number from 1 to 5"),
    (ExitRule("patience", 6), "patience (6) must be a whole number from 1 to 5"),
    (ExitRule("patience", 1.5), "patience (1.5)"),
    (ExitRule("confidence", 1.2), "confidence (1.2) must be above 0 and at most 1"),
    (ExitRule("confidence", 0), "confidence (0)"),
    (ExitRule("entropy", -0.1), "entropy (-0.1) must be 0 or more"),
    (ExitRule("patience", 2, min_passes=7), "minimum passes (7) must be from 1 to 6"),
    (ExitRule("whim", 1), "exit rule 'whim' is not one of patience, confidence, entropy"),
])
def test_a_rule_out_of_range_is_one_line(rule, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        rule.check(6)


def test_sweep_scores_agreement_with_the_full_depth():
    logits = np.stack([_passes(0, 0, 0, 0), _passes(1, 1, 0, 0), _passes(2, 0, 1, 1)])
    labels = np.array([0, 0, 2])
    (row,) = sweep(logits, labels, [ExitRule("patience", 1)])
    # stops at pass 2 (class 0), pass 2 (class 1, the full depth says 0), pass 4 (class 1)
    assert row["mean_passes"] == pytest.approx(8 / 3)
    assert row["agreement"] == pytest.approx(2 / 3)
    assert row["accuracy"] == pytest.approx(1 / 3) and row["full_accuracy"] == pytest.approx(2 / 3)


# -- the model ----------------------------------------------------------------------------------

def test_pass_logits_end_in_forward_and_exits_are_small(tiny_config):
    config = tiny_config.replace(exits=json.dumps({"training": "joint"}), num_labels=3)
    torch.manual_seed(0)
    model = build_model(config, "classification")
    ids = torch.randint(5, config.vocab_size, (2, 9))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    with torch.no_grad():
        every = model.pass_logits(ids, mask)
        assert every.shape == (2, config.num_hidden_layers, 3)
        torch.testing.assert_close(every[:, -1], model(ids, mask), rtol=0, atol=1e-6)
        # an early pass is read by its own classifier from that pass's hidden state
        hidden = model.albert.encode_passes(ids, mask)[0]
        torch.testing.assert_close(every[:, 0], model.exit_classifiers[0](model.albert.pool(hidden)))
    extra = sum(p.numel() for n, p in model.named_parameters() if n.startswith("exit_classifiers."))
    assert extra == (config.num_hidden_layers - 1) * (config.hidden_size + 1) * 3
    plain = build_model(tiny_config.replace(num_labels=3), "classification")
    assert not hasattr(plain, "exit_classifiers")


# -- fine-tuning --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def weather_files(tmp_path_factory, corpus_file):
    """A two-label task only the inserted cue words (rain, wind, storm) decide."""
    sentences = [s for line in corpus_file.read_text().splitlines() for s in split_sentences(line)]
    train, evaluation = weather_task(sentences)
    folder = tmp_path_factory.mktemp("weather")
    for name, rows in (("train", train), ("eval", evaluation)):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder / "train.jsonl", folder / "eval.jsonl"


@pytest.fixture(scope="module")
def base_checkpoint(tmp_path_factory, tiny_config, spiece_model):
    torch.manual_seed(0)
    return export_model(build_model(tiny_config, "pretraining"), tmp_path_factory.mktemp("base"), spiece_model)


def _opts(out, model, files, **changes):
    train, evaluation = files
    return FinetuneOptions(**{**dict(task="classification", train_file=str(train), eval_file=str(evaluation),
                                     model=str(model), out_dir=str(out), epochs=6, batch_size=8, lr=1e-3,
                                     max_seq_length=64, device="cpu", log_every=5), **changes})


@pytest.fixture(scope="module")
def fine_tuned(tmp_path_factory, base_checkpoint, weather_files):
    """The classifier fine-tuned without exits, as users have one already."""
    return finetune(_opts(tmp_path_factory.mktemp("plain") / "out", base_checkpoint, weather_files)).out_dir


def _logits(path, ids):
    _, model = checkpoints.load_model(path)
    with torch.no_grad():
        return model, model(ids)


def test_joint_exits_train_every_pass_and_record_the_rule(tmp_path, base_checkpoint, weather_files, spiece_model):
    result = finetune(_opts(tmp_path / "out", base_checkpoint, weather_files, exits="joint", epochs=10))
    exits = result.metrics["exits"]
    assert exits["passes"] == 4 and 1 <= exits["mean_passes"] <= 4 and exits["agreement"] >= 0.99
    config = json.loads((result.out_dir / "config.json").read_text())
    record = config["albert_edge_exits"]
    assert record["training"] == "joint" and record["loss"] == "pabee"
    assert record["rule"] == exits["rule"] and record["held_out"]["n"] == exits["n"]
    ExitRule.from_dict(record["rule"]).check(4)
    _, model = checkpoints.load_model(result.out_dir)
    assert model.config.exit_training["rule"] == exits["rule"]
    # the first exit learned the task too (chance is 50 %)
    first = [row for row in exits["curve"] if row["rule"] == {"kind": "patience", "setting": 1.0, "min_passes": 1}]
    assert first and first[0]["accuracy"] > 0.6


def test_frozen_exits_keep_the_full_depth_answers_exactly(tmp_path, fine_tuned, weather_files):
    result = finetune(_opts(tmp_path / "out", fine_tuned, weather_files, exits="frozen", epochs=4, lr=1e-2))
    before, after = checkpoints.load(fine_tuned), checkpoints.load(result.out_dir)
    for key, tensor in before.state.items():
        assert torch.equal(after.state[key], tensor), key  # backbone, pooler and classifier untouched
    trained = {k for k in after.state if k.startswith("exit_classifiers.")}
    assert len(trained) == 2 * 3
    ids = torch.randint(5, before.config.vocab_size, (3, 12))
    old_model, old = _logits(fine_tuned, ids)
    new_model, new = _logits(result.out_dir, ids)
    assert torch.equal(old, new)
    with torch.no_grad():
        assert torch.equal(new_model.pass_logits(ids)[:, -1], new)
    assert json.loads((result.out_dir / "config.json").read_text())["albert_edge_exits"]["training"] == "frozen"


def test_an_exit_checkpoint_loads_in_transformers(tmp_path, fine_tuned, weather_files):
    transformers = pytest.importorskip("transformers")
    result = finetune(_opts(tmp_path / "out", fine_tuned, weather_files, exits="frozen", epochs=1))
    ids = torch.randint(5, 90, (2, 10))
    _, ours = _logits(result.out_dir, ids)
    hf = transformers.AlbertForSequenceClassification.from_pretrained(result.out_dir).eval()
    with torch.no_grad():
        torch.testing.assert_close(hf(input_ids=ids).logits, ours, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("changes, message", [
    (dict(exits="frozen"), "--exits frozen keeps"),
    (dict(exits="joint", task="qa"), "--exits needs --task classification"),
    (dict(exits="sometimes"), "--exits 'sometimes' is not one of joint, frozen"),
])
def test_exits_refused_where_they_cannot_work(tmp_path, base_checkpoint, weather_files, changes, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        finetune(_opts(tmp_path / "out", base_checkpoint, weather_files, **changes))
    assert not (tmp_path / "out").exists()


def test_cli_refuses_frozen_exits_on_a_base_checkpoint_in_one_line(tmp_path, base_checkpoint, weather_files):
    train, evaluation = weather_files
    run = subprocess.run([sys.executable, "-m", "albert_edge", "finetune", "--task", "classification",
                          "--train", str(train), "--eval", str(evaluation), "--model", str(base_checkpoint),
                          "--out", str(tmp_path / "out"), "--exits", "frozen", "--device", "cpu"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 2, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "--exits frozen keeps" in run.stderr
    assert not (tmp_path / "out").exists()
