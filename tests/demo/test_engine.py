"""The demo engine on a tiny bundle, in the real runtimes (onnxruntime, the TFLite interpreter)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from albert_edge.demo.engine import VARIANTS, Bundle, BundleError, DemoInputError, Engine, Variant
from albert_edge.errors import AlbertEdgeError
from albert_edge.runtime import Session

from .conftest import DISAGREEING

KEYS = [v.key for v in VARIANTS]


@pytest.fixture(scope="module")
def engine(tiny_bundle):
    return Engine(Bundle(tiny_bundle), num_threads=1)


def test_bundle_holds_every_file_and_describes_itself(tiny_bundle):
    info = json.loads((tiny_bundle / "bundle.json").read_text())
    for task in ("classifier", "mlm"):
        for variant in VARIANTS:
            assert (tiny_bundle / variant.folder(task) / variant.file_name).is_file()
        assert (tiny_bundle / task / "manifest.json").is_file()
    assert info["labels"] == json.loads((tiny_bundle / "labels.json").read_text()) == ["asyncio", "decimal", "email", "xml"]
    acc = info["held_out_accuracy"]
    # The tiny bundle's accuracy means nothing; only that each file was measured on the same rows.
    full_depth = [v.key for v in VARIANTS if not v.adaptive]  # the adaptive files' figures: test_adaptive.py
    assert set(full_depth) <= set(acc) and acc["examples"] == info["trained_on"]["eval_examples"] > 0
    assert all(0.0 <= acc[k] <= 1.0 for k in full_depth)
    assert not list(tiny_bundle.parent.glob(".bundle.build-*"))  # the work directory is gone


@pytest.mark.parametrize("key", KEYS)
def test_classify_matches_the_runtime_run_directly(engine, tiny_bundle, key):
    engine.select(key)
    text = "Return the quotient of two decimal numbers."
    result = engine.classify(text)
    assert result["model"] == key and result["latency_ms"] > 0 and not result["truncated"]
    assert abs(sum(s["score"] for s in result["scores"]) - 1) < 1e-3
    # The same file run by hand through the runtime gives the same label.
    session = Session(engine.bundle.file("classifier", Variant.parse(key)))
    feeds = engine.bundle.tokenizer(text, max_length=None, padding="longest")
    logits = session.run({k: v for k, v in feeds.items() if k in session.input_names})
    logits = logits.get("logits", next(iter(logits.values())))
    assert engine.bundle.labels[int(np.argmax(logits[0]))] == result["label"]
    runtime = engine.status()["models"]["classifier"]["runtime"]
    assert runtime == ("onnxruntime" if key.startswith("onnx") else "ai_edge_litert")


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("text", ["The event ___ runs tasks.", "The [MASK] loop and the [MASK] task."])
def test_fill_mask_fills_every_blank(engine, key, text):
    engine.select(key)
    result = engine.fill_mask(text, top_k=3)
    assert len(result["masks"]) == text.count("[MASK]") + text.count("___")
    for mask in result["masks"]:
        scores = [p["score"] for p in mask["predictions"]]
        assert len(scores) == 3 and scores == sorted(scores, reverse=True)
        assert all(p["token"] not in ("[MASK]", "[CLS]", "[SEP]", "<pad>", "<unk>") for p in mask["predictions"])
    assert "[mask]" not in result["filled"].lower() and "___" not in result["filled"]
    assert result["masks"][0]["predictions"][0]["token"] in result["filled"]


def test_long_text_is_cut_to_the_model_and_says_so(engine):
    n = engine.bundle.seq_len
    result = engine.classify("decimal context precision " * 200)
    assert result["truncated"] and result["tokens"] == n and str(n) in result["note"]
    # Characters beyond MAX_CHARS are not even tokenized; the answer still says it was cut.
    assert engine.classify("x" * 100_000)["truncated"]
    with pytest.raises(DemoInputError, match="MASK"):  # the blank fell off the end
        engine.fill_mask("word " * 500 + "[MASK]")


@pytest.mark.parametrize("text, top_k, message", [
    ("", 5, "empty"), ("   ", 5, "empty"), (None, 5, "string"), (12, 5, "string"),
    ("no blank here", 5, "MASK"), ("a [MASK]", 0, "top_k"), ("a [MASK]", 99, "top_k"), ("a [MASK]", "3", "top_k"),
])
def test_bad_input_is_one_clear_error(engine, text, top_k, message):
    with pytest.raises(DemoInputError, match=message):
        engine.fill_mask(text, top_k)


def test_odd_text_gets_an_answer(engine):
    for text in ("\ud800 lone surrogate", "\x00\x01\x02", "émoji 🙂 ünïcödé", "[CLS] [SEP] [MASK] <pad>", "\n\t"*3 + "x"):
        assert engine.classify(text)["label"] in engine.bundle.labels


def test_switching_keeps_one_model_per_task_and_counts_latency_per_file(engine):
    engine.select("onnx-fp32")
    engine.classify("one")
    engine.select("tflite-int8")
    status = engine.status()
    assert status["model"] == "tflite-int8" and set(status["models"]) == {"classifier", "mlm"}
    assert status["models"]["classifier"]["file"] == "classifier/model.int8-dynamic.tflite"
    assert len(engine._sessions) == 2
    before = status["models"]["classifier"]["latency"]["count"]
    engine.classify("two")
    assert engine.status()["models"]["classifier"]["latency"]["count"] == before + 1
    with pytest.raises(DemoInputError, match="unknown model"):
        engine.select("onnx-int4")


def test_not_a_bundle(tmp_path):
    with pytest.raises(BundleError, match="not a bundle directory"):
        Bundle(tmp_path / "missing")
    with pytest.raises(BundleError, match="bundle.json is missing"):
        Bundle(tmp_path)


def test_a_file_that_fails_to_load_leaves_the_old_one_serving(tiny_bundle, tmp_path):
    import shutil

    from albert_edge.errors import RuntimeUnavailable

    copy = tmp_path / "bundle"
    shutil.copytree(tiny_bundle, copy)
    (copy / "classifier" / "model.tflite").write_bytes(b"not a model")
    engine = Engine(Bundle(copy), "onnx-int8", num_threads=1)
    with pytest.raises(RuntimeUnavailable):
        engine.select("tflite-fp32")
    assert engine.variant.key == "onnx-int8" and engine.classify("still here")["model"] == "onnx-int8"


@pytest.mark.parametrize("name", DISAGREEING)
def test_a_bundle_whose_parts_disagree_is_refused_when_opened(disagreeing, name):
    """Before any model runs: labels against the classifier's outputs, the tokenizer against the
    embedding table, seq_len against the position table, each folder's task."""
    bundle = disagreeing(name)
    with pytest.raises(AlbertEdgeError) as err:
        Bundle(bundle)
    assert DISAGREEING[name][1] in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("task, other", [("classifier", "mlm"), ("mlm", "classifier")])
def test_a_file_of_the_other_task_is_refused_when_loaded(tiny_bundle, tmp_path, task, other):
    """The manifest may be right and the file wrong: the loaded file's own outputs are checked,
    and the engine keeps serving what it had."""
    import shutil

    copy = tmp_path / "bundle"
    shutil.copytree(tiny_bundle, copy)
    shutil.copyfile(copy / other / "model.onnx", copy / task / "model.onnx")
    engine = Engine(Bundle(copy), "tflite-int8", num_threads=1)
    with pytest.raises(BundleError, match=f"{task}/model.onnx is a .*, not .*: are the {task}/ and {other}/ "
                                          "folders swapped"):
        engine.select("onnx-fp32")
    assert engine.variant.key == "tflite-int8" and engine.classify("still here")["model"] == "tflite-int8"


def test_a_padded_embedding_table_is_accepted(tiny_bundle, tmp_path):
    """A model may embed more ids than its tokenizer has pieces (a vocabulary padded to a round
    size): the tokenizer's ids fit, so the bundle opens, and fill-mask never suggests an id that
    has no piece, however high the model scores it."""
    import shutil

    import torch

    from albert_edge import checkpoints
    from albert_edge.config import AlbertConfig
    from albert_edge.converters.export import convert
    from albert_edge.model import build_model

    info = json.loads((tiny_bundle / "bundle.json").read_text())
    config = AlbertConfig(**{**info["config"], "vocab_size": 420})
    torch.manual_seed(0)
    model = build_model(config, "mlm")
    with torch.no_grad():
        model.predictions.bias[400:] = 100.0  # the padding rows would win every blank
    copy = tmp_path / "bundle"
    shutil.copytree(tiny_bundle, copy, ignore=shutil.ignore_patterns("mlm"))
    convert(checkpoints.save(model, tmp_path / "ckpt"), copy / "mlm", targets=("onnx",), seq_len=32)
    engine = Engine(Bundle(copy), "onnx-fp32", num_threads=1)
    ids = [p["id"] for m in engine.fill_mask("the [MASK] loop", top_k=20)["masks"] for p in m["predictions"]]
    assert len(ids) == 20 and all(0 <= i < 400 for i in ids)


@pytest.mark.parametrize("text", ["The event ___ runs tasks.", "open the [MASK]"])
def test_fill_mask_answers_a_blank_with_words(engine, text):
    """A blank between spaces is answered with pieces that start a word, so the filled text reads
    as words: never "open theline" ("▁the" followed by the piece "line")."""
    tok = engine.bundle.tokenizer
    result = engine.fill_mask(text, top_k=5)
    for p in result["masks"][0]["predictions"]:
        assert tok.id_to_piece([p["id"]])[0].startswith("\u2581"), p
    best = result["masks"][0]["predictions"][0]["token"]
    assert best in result["filled"].split() or f"{best}." in result["filled"].split(), result["filled"]
