"""Pretraining runs: checkpoints transformers loads, exact resume, sharing variants, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from albert_edge import checkpoints
from albert_edge.errors import CheckpointError, TokenizerError
from albert_edge.model import build_model, num_params
from albert_edge.train import state
from albert_edge.train.data import MaskingOptions
from albert_edge.train.errors import DataError, TrainingError
from albert_edge.train.pretrain import PretrainOptions, pretrain


def _opts(tmp_path, config, spiece_model, corpus_file, **changes) -> PretrainOptions:
    base = dict(corpus=(str(corpus_file),), tokenizer=str(spiece_model), out_dir=str(tmp_path / "run"),
                config=config, steps=4, batch_size=4, lr=5e-3, masking=MaskingOptions(max_seq_length=48),
                chunk_documents=4, holdout_every=0, eval_corpus=(str(corpus_file),), eval_examples=16,
                eval_every=1000, save_every=2, log_every=1, device="cpu")
    base.update(changes)
    return PretrainOptions(**base)


def _log(run: Path, event: str = "train") -> list[dict]:
    return [r for r in map(json.loads, (run / "log.jsonl").read_text().splitlines()) if r["event"] == event]


def _inputs(vocab_size: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, vocab_size, (2, 10), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    types = torch.zeros_like(ids)
    types[:, 5:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def test_pretraining_learns_and_transformers_loads_the_result(tmp_path, tiny_config, spiece_model, corpus_file):
    transformers = pytest.importorskip("transformers")
    opts = _opts(tmp_path, tiny_config, spiece_model, corpus_file, steps=40, batch_size=8, lr=0.05, log_every=10,
                 eval_every=40, save_every=20, keep_checkpoints=1)
    result = pretrain(opts)
    run = Path(opts.out_dir)
    losses = [r["loss"] for r in _log(run)]
    assert losses[-1] < losses[0] - 0.4, losses
    assert 0 < result.eval["mlm_unigram_acc"] < 1 and 0 <= result.eval["sop_acc"] <= 1
    assert {"tokens_per_s", "mlm_acc", "sop_acc", "lr", "grad_norm"} <= set(_log(run)[-1])
    # One checkpoint kept (keep_checkpoints=1), complete, and the final model beside it.
    assert sorted(p.name for p in run.glob("checkpoint-*")) == ["checkpoint-0000040"]
    ckpt = run / "checkpoint-0000040"
    assert {p.name for p in ckpt.iterdir()} == {"config.json", "model.safetensors", "spiece.model",
                                                  "optimizer.pt", "trainer_state.json"}
    assert (run / "spiece.model").read_bytes() == Path(spiece_model).read_bytes()
    # transformers reads our directory as it is, and computes what our model computes.
    theirs = transformers.AlbertForPreTraining.from_pretrained(run).eval()
    _, ours = checkpoints.load_model(run)
    x = _inputs(tiny_config.vocab_size)
    with torch.no_grad():
        mlm, sop = ours(**x)
        out = theirs(**x)
    assert torch.allclose(mlm, out.prediction_logits, atol=1e-5)
    assert torch.allclose(sop, out.sop_logits, atol=1e-5)


def test_resumed_run_gives_the_same_losses(tmp_path, tiny_config, spiece_model, corpus_file):
    whole = _opts(tmp_path / "a", tiny_config, spiece_model, corpus_file, steps=6, grad_accum=2, save_every=3)
    pretrain(whole)

    class Interrupted(Exception):
        pass

    def stop_after_first_checkpoint(record):
        if record["event"] == "checkpoint":
            raise Interrupted

    cut = _opts(tmp_path / "b", tiny_config, spiece_model, corpus_file, steps=6, grad_accum=2, save_every=3)
    with pytest.raises(Interrupted):
        pretrain(cut, on_event=stop_after_first_checkpoint)
    run_b = Path(cut.out_dir)
    assert [r["step"] for r in _log(run_b)] == [1, 2, 3]
    pretrain(_opts(tmp_path / "b", tiny_config, spiece_model, corpus_file, steps=6, grad_accum=2, save_every=3,
                   resume=str(run_b)))
    expected = [(r["step"], r["loss"], r["mlm_acc"], r["sop_acc"]) for r in _log(Path(whole.out_dir))]
    got = [(r["step"], r["loss"], r["mlm_acc"], r["sop_acc"]) for r in _log(run_b)]
    assert got == expected  # exactly: same data, same dropout seeds, same optimizer state
    a = checkpoints.load(whole.out_dir).state
    b = checkpoints.load(run_b).state
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_crash_while_saving_keeps_the_last_good_checkpoint(tmp_path, tiny_config, spiece_model, corpus_file,
                                                           monkeypatch):
    opts = _opts(tmp_path, tiny_config, spiece_model, corpus_file, steps=4, save_every=2)
    real_save = torch.save

    def failing_save(obj, path, *args, **kwargs):
        if _log(Path(opts.out_dir), "checkpoint"):  # the first checkpoint went through, the second fails
            raise OSError("disk full")
        return real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(state.torch, "save", failing_save)
    with pytest.raises(OSError, match="disk full"):
        pretrain(opts)
    run = Path(opts.out_dir)
    assert [p.name for p in run.iterdir() if p.name.startswith((".", "checkpoint-"))] == ["checkpoint-0000002"]
    assert state.find_checkpoint(run).name == "checkpoint-0000002"
    assert checkpoints.load(run / "checkpoint-0000002").heads[-1] == "pretraining"
    assert state.read_optimizer_state(run / "checkpoint-0000002")["state"]


@pytest.mark.parametrize("sharing", ["all", "attention", "ffn", "none"])
def test_sharing_strategies_train_save_and_load(tmp_path, tiny_config, spiece_model, corpus_file, sharing):
    config = tiny_config.replace(sharing=sharing)
    result = pretrain(_opts(tmp_path, config, spiece_model, corpus_file, steps=2))
    saved = json.loads((result.out_dir / "config.json").read_text())
    assert saved.get("albert_edge_sharing", "all") == sharing
    loaded_config, model = checkpoints.load_model(result.out_dir)
    assert loaded_config.sharing == sharing
    x = _inputs(config.vocab_size)
    result.model.eval()
    with torch.no_grad():
        assert all(torch.equal(a, b) for a, b in zip(model(**x), result.model(**x)))
    # Each shared weight is one tensor in the file: as many stored values as unique parameters.
    stored = sum(t.numel() for t in checkpoints.load(result.out_dir).state.values())
    assert stored == num_params(model)
    counts = {s: num_params(build_model(tiny_config.replace(sharing=s), "pretraining"))
              for s in ("all", "attention", "ffn", "none")}
    assert counts["all"] < counts["attention"] < counts["none"] and counts["all"] < counts["ffn"] < counts["none"]


def test_tokenizer_must_match_the_config(tmp_path, tiny_config, spiece_model, corpus_file):
    with pytest.raises(TokenizerError, match=r"has \d+ pieces but the model config has vocab_size 99"):
        pretrain(_opts(tmp_path, tiny_config.replace(vocab_size=99), spiece_model, corpus_file))
    assert not (tmp_path / "run").exists()


def test_corpus_without_sentence_pairs_writes_nothing(tmp_path, tiny_config, spiece_model):
    flat = tmp_path / "flat.txt"
    flat.write_text("a corpus of one line with no sentence boundary at all\n")
    with pytest.raises(DataError, match="no sentence-order pairs"):
        pretrain(_opts(tmp_path, tiny_config, spiece_model, flat))
    assert not (tmp_path / "run").exists()


def test_resume_from_a_different_config_is_refused(tmp_path, tiny_config, spiece_model, corpus_file):
    first = _opts(tmp_path, tiny_config, spiece_model, corpus_file, steps=2)
    pretrain(first)
    other = _opts(tmp_path, tiny_config.replace(intermediate_size=48), spiece_model, corpus_file, steps=4,
                  resume=first.out_dir)
    expected = r"config.intermediate_size=32 but this run has config.intermediate_size=48"
    with pytest.raises(CheckpointError, match=expected):
        pretrain(other)
    with pytest.raises(CheckpointError, match="not a training checkpoint"):
        pretrain(_opts(tmp_path, tiny_config, spiece_model, corpus_file, resume=str(tmp_path)))
    with pytest.raises(CheckpointError, match="already holds checkpoints of a run: continue it with --resume"):
        pretrain(first)  # a fresh run must not mix its checkpoints with an earlier run's


def test_nan_loss_stops_the_run_before_it_spoils_a_checkpoint(tmp_path, tiny_config, spiece_model, corpus_file):
    opts = _opts(tmp_path, tiny_config, spiece_model, corpus_file, steps=40, save_every=1, optimizer="adamw",
                 lr=1e30, max_grad_norm=0.0, warmup_steps=0)
    with pytest.raises(TrainingError, match=r"became (nan|inf) at step (\d+)"):
        pretrain(opts)
    run = Path(opts.out_dir)
    good = state.find_checkpoint(run)
    weights = checkpoints.load(good).state
    assert all(torch.isfinite(t).all() for t in weights.values())
