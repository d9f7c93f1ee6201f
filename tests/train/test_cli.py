"""`albert-edge pretrain` and `albert-edge finetune` through click's runner and a real process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from albert_edge.cli import main

TINY = ["--config", "tiny", "--set", "classifier_dropout_prob=0", "--max-seq-length", "48", "--batch-size", "4",
        "--device", "cpu", "--threads", "1", "--log-every", "1"]


def _pretrain_args(out, spiece_model, corpus_file, *extra):
    return ["pretrain", "--corpus", str(corpus_file), "--tokenizer", str(spiece_model), "--out", str(out),
            *TINY, "--set", "vocab_size=400", "--holdout-every", "0", "--eval-corpus", str(corpus_file),
            "--eval-examples", "8", *extra]


def test_pretrain_then_finetune(tmp_path, spiece_model, corpus_file):
    runner = CliRunner()
    out = tmp_path / "run"
    result = runner.invoke(main, _pretrain_args(out, spiece_model, corpus_file, "--steps", "3", "--lr", "0.01",
                                                "--json"))
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)
    assert figures["step"] == 3 and 0 <= figures["eval_sop_acc"] <= 1 and figures["train_loss"] > 0
    assert (out / "config.json").is_file() and (out / "checkpoint-0000003").is_dir()
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if r["event"] == "train"] == [1, 2, 3]

    rows = [{"text": f"sentence number {k} about the weather", "label": "even" if k % 2 else "odd"} for k in range(12)]
    data = tmp_path / "labels.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = runner.invoke(main, ["finetune", "--task", "classification", "--train", str(data), "--eval", str(data),
                                  "--model", str(out), "--out", str(tmp_path / "ft"), "--epochs", "1",
                                  "--max-seq-length", "48", "--device", "cpu", "--threads", "1", "--json"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)
    assert set(figures) >= {"acc", "macro_f1", "majority_acc", "out_dir", "steps"}
    assert (tmp_path / "ft" / "eval_results.json").is_file()


@pytest.mark.parametrize("args, message", [
    (["--set", "vocab_size=99"], "has 400 pieces but the model config has vocab_size 99"),
    (["--set", "vocab_size=400", "--set", "hidden_sizes=3"], "--set hidden_sizes: not a config field"),
    (["--set", "vocab_size=400", "--set", "sharing=some"], "sharing ('some') is not one of"),
    (["--set", "vocab_size=400", "--max-seq-length", "65"], "larger than the model's max_position_embeddings (64)"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, spiece_model, corpus_file, args, message):
    base = ["pretrain", "--corpus", str(corpus_file), "--tokenizer", str(spiece_model), "--out", str(tmp_path / "o"),
            "--config", "tiny", "--device", "cpu", "--max-seq-length", "48", *args]
    result = CliRunner().invoke(main, base)
    assert result.exit_code == 2, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_real_process(tmp_path, spiece_model, corpus_file):
    exe = [sys.executable, "-m", "albert_edge"]
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    bad = subprocess.run([*exe, *_pretrain_args(tmp_path / "bad", spiece_model, empty, "--steps", "2")],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [f"Error: the corpus ({empty}) is empty: it holds no text"]
    assert not (tmp_path / "bad").exists()
    good = subprocess.run([*exe, *_pretrain_args(tmp_path / "good", spiece_model, corpus_file, "--steps", "2")],
                          capture_output=True, text=True, timeout=300)
    assert good.returncode == 0, good.stderr
    assert "eval_mlm_acc" in good.stdout
    assert Path(tmp_path / "good" / "model.safetensors").is_file()
