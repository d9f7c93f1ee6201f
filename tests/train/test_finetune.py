"""Fine-tuning: labelled files, the three tasks, checkpoints transformers loads."""

from __future__ import annotations

import csv
import json
import random

import pytest
import torch

from albert_edge import checkpoints
from albert_edge.model import build_model
from albert_edge.text import split_sentences
from albert_edge.train.errors import DataError
from albert_edge.train.finetune import FinetuneOptions, finetune
from albert_edge.train.finetune_data import Columns, build_features, label_names, read_records
from albert_edge.train.metrics import macro_f1, squad_scores, tag_f1
from albert_edge.train.state import export_model

from .conftest import weather_task


@pytest.fixture(scope="module")
def base_checkpoint(tmp_path_factory, tiny_config, spiece_model):
    """A pretraining-head checkpoint (random weights) with its spiece.model, as pretrain writes it."""
    torch.manual_seed(0)
    return export_model(build_model(tiny_config, "pretraining"), tmp_path_factory.mktemp("base"), spiece_model)


@pytest.fixture(scope="module")
def sentences(corpus_file):
    return [s for line in corpus_file.read_text().splitlines() for s in split_sentences(line)]


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _opts(tmp_path, base, task, train, eval_, **changes):
    base_opts = dict(task=task, train_file=str(train), eval_file=str(eval_), model=str(base),
                     out_dir=str(tmp_path / "out"), epochs=2, batch_size=8, lr=1e-2, max_seq_length=64, device="cpu",
                     log_every=5)
    base_opts.update(changes)
    return FinetuneOptions(**base_opts)


def test_classification_learns(tmp_path, base_checkpoint, sentences):
    train, evaluation = weather_task(sentences)
    result = finetune(_opts(tmp_path, base_checkpoint, "classification", _write_jsonl(tmp_path / "train.jsonl", train),
                            _write_jsonl(tmp_path / "eval.jsonl", evaluation), epochs=10, lr=1e-3))
    m = result.metrics
    assert m["acc"] >= m["majority_acc"] + 0.2 and m["acc"] >= 0.75, m
    saved = json.loads((result.out_dir / "eval_results.json").read_text())
    assert saved["acc"] == m["acc"]
    config, model = checkpoints.load_model(result.out_dir)
    assert config.label_names == ("none", "weather")


_FUNCTION_WORDS = {"the": "DET", "a": "DET", "an": "DET", "of": "PREP", "in": "PREP", "on": "PREP", "to": "PREP",
                   "at": "PREP", "by": "PREP", "for": "PREP", "with": "PREP", "from": "PREP"}


def _tag(word: str) -> str:
    return _FUNCTION_WORDS.get(word.lower().strip(".,"), "O")


@pytest.mark.parametrize("task", ["token-classification", "qa"])
def test_task_heads_train_and_load_in_transformers(tmp_path, base_checkpoint, sentences, task):
    transformers = pytest.importorskip("transformers")
    if task == "token-classification":
        rows = [{"tokens": s.split(), "tags": [_tag(w) for w in s.split()]} for s in sentences]
        hf_class = transformers.AlbertForTokenClassification
    else:
        rng = random.Random(0)
        rows = []
        for k, s in enumerate(sentences):
            words = s.split()
            answer = words[rng.randrange(len(words))]
            rows.append({"question": f"Which word is number {k}?", "context": s, "answer": answer})
        hf_class = transformers.AlbertForQuestionAnswering
    train = _write_jsonl(tmp_path / "train.jsonl", rows[:60])
    eval_ = _write_jsonl(tmp_path / "eval.jsonl", rows[60:])
    result = finetune(_opts(tmp_path, base_checkpoint, task, train, eval_, epochs=4, lr=1e-2))
    losses = [r["loss"] for r in map(json.loads, (result.out_dir / "log.jsonl").read_text().splitlines())
              if r["event"] == "train"]
    assert losses[-1] < losses[0]
    if task == "token-classification":
        assert result.metrics["acc"] > result.metrics["majority_acc"] + 0.05, result.metrics
        assert 0.5 < result.metrics["f1"] <= 1
    else:
        assert 0 <= result.metrics["exact_match"] <= result.metrics["f1"] <= 1
    theirs = hf_class.from_pretrained(result.out_dir).eval()
    _, ours = checkpoints.load_model(result.out_dir)
    ids = torch.randint(5, 400, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        mine = ours(ids)
        out = theirs(input_ids=ids)
    if task == "qa":
        assert torch.allclose(mine[0], out.start_logits, atol=1e-5)
        assert torch.allclose(mine[1], out.end_logits, atol=1e-5)
    else:
        assert torch.allclose(mine, out.logits, atol=1e-5)


def test_csv_tsv_and_jsonl_read_alike(tmp_path):
    rows = [{"text": "A first, quoted \"text\".", "label": "1"}, {"text": "Second", "label": "0"}]
    for suffix, delimiter in ((".csv", ","), (".tsv", "\t")):
        with open(tmp_path / f"d{suffix}", "w", newline="") as fh:
            writer = csv.DictWriter(fh, ["text", "label"], delimiter=delimiter)
            writer.writeheader()
            writer.writerows(rows)
        assert read_records(tmp_path / f"d{suffix}") == rows
    assert read_records(_write_jsonl(tmp_path / "d.jsonl", rows)) == rows
    assert label_names("classification", rows + [{"text": "x", "label": "10"}], Columns(), "d") == ("0", "1", "10")


def test_bad_labelled_files(tmp_path, vocab):
    cols = Columns()
    with pytest.raises(DataError, match="unknown file type"):
        read_records(_write_jsonl(tmp_path / "d.txt", [{"a": 1}]))
    with pytest.raises(DataError, match="line 2 is not JSON"):
        (tmp_path / "bad.jsonl").write_text('{"text": "a"}\n{oops\n')
        read_records(tmp_path / "bad.jsonl")
    with pytest.raises(DataError, match="holds no rows"):
        (tmp_path / "empty.csv").write_text("text,label\n")
        read_records(tmp_path / "empty.csv")
    with pytest.raises(DataError, match="no column 'label'"):
        label_names("classification", [{"text": "a"}], cols, "f")
    with pytest.raises(DataError, match="at least 2"):
        label_names("classification", [{"text": "a", "label": "x"}], cols, "f")
    with pytest.raises(DataError, match="label 'z', which the training file does not have"):
        build_features("classification", [{"text": "a", "label": "z"}], vocab, 32, ("x", "y"), cols, "eval.csv")
    with pytest.raises(DataError, match="row 1 has 2 tokens but 1 tags"):
        build_features("token-classification", [{"tokens": "a b", "tags": "O"}], vocab, 32, ("O", "X"), cols, "f")
    with pytest.raises(DataError, match="not in its context"):
        build_features("qa", [{"question": "q", "context": "the cat", "answer": "dog"}], vocab, 32, (), cols, "f")


def test_qa_features_point_at_the_answer(vocab):
    row = {"question": "Where is it?", "context": "It runs on a single board computer.", "answer": "single board"}
    (feature,) = build_features("qa", [row], vocab, 64, (), Columns(), "f")
    start, end = feature.label
    words = feature.words[feature.word_of_token[start]:feature.word_of_token[end] + 1]
    assert words == ["single", "board"]
    assert feature.token_type_ids[start] == 1 and feature.input_ids[0] == vocab.cls_id


def test_metrics():
    assert macro_f1([0, 1, 1, 0], [0, 1, 0, 0], 2) == pytest.approx((0.8 + 2 / 3) / 2)
    assert tag_f1([0, 1, 2, 0], [0, 1, 1, 2], outside=0) == pytest.approx(2 * 1 / (2 + 3))
    scores = squad_scores(["The cat!", "a dog"], ["cat", "big dog"])
    assert scores == {"exact_match": 0.5, "f1": pytest.approx(0.5 + 1 / 3)}
