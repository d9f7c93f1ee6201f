"""Fixtures of the JavaScript runtime tests: the pipeline's albert-small-builtin (a small ALBERT
pretrained on the builtin corpus, cached) as an encoder, a classifier fine-tuned from it on the
built-in topic paragraphs, their `convert --to onnx --to ort` files and the classifier's int8 file
from `quantize`, held-out real text tokenized by albert-edge, and PyTorch's answers to it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

SEQ = 64
# Paragraphs of the topic dataset's evaluation part, which the classifier was not trained on.
HELD_OUT = 256
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@pytest.fixture(scope="session")
def small_checkpoint() -> Path:
    """albert-small-builtin (V=4000, E=64, H=128, 4 layers sharing one group), from the cache that
    `albert-edge pipeline` fills (trained now when it is empty)."""
    from albert_edge.pipeline.default import SMALL_NAME
    from albert_edge.pipeline.small import PIPELINE_RECIPE, pretrained

    return pretrained(PIPELINE_RECIPE, SMALL_NAME, threads=1)[0]


@pytest.fixture(scope="session")
def topics(tmp_path_factory) -> tuple[Path, Path]:
    from albert_edge.train.labelled import write_topic_dataset

    return write_topic_dataset(tmp_path_factory.mktemp("topics"))


@pytest.fixture(scope="session")
def classifier_checkpoint(tmp_path_factory, small_checkpoint, topics) -> Path:
    """albert-small-builtin fine-tuned two epochs on the topic paragraphs (4 labels; about 20 s,
    held-out accuracy about 0.5 against 0.29 for the majority class)."""
    from albert_edge.train.finetune import FinetuneOptions, finetune

    train, evaluate = topics
    out = tmp_path_factory.mktemp("classifier") / "fine"
    finetune(FinetuneOptions(task="classification", train_file=str(train), eval_file=str(evaluate),
                             model=str(small_checkpoint), out_dir=str(out), epochs=2, batch_size=16, lr=5e-4,
                             max_seq_length=SEQ, device="cpu", threads=1, log_every=1000))
    return out


@pytest.fixture(scope="session")
def files(tmp_path_factory, small_checkpoint, classifier_checkpoint) -> dict[str, Path]:
    """``convert --to onnx --to ort`` of the encoder (``--head base``) and of the classifier, and
    ``quantize --scheme int8-dynamic`` of the classifier's .onnx, by name: base.onnx, base.ort,
    classifier.onnx, classifier.ort, classifier.int8.onnx."""
    from albert_edge.converters.export import convert
    from albert_edge.quantize import QuantizeConfig, quantize

    root = tmp_path_factory.mktemp("converted")
    convert(str(small_checkpoint), root / "base", targets=("onnx", "ort"), head="base", seq_len=SEQ)
    convert(str(classifier_checkpoint), root / "classifier", targets=("onnx", "ort"), seq_len=SEQ)
    int8 = quantize(root / "classifier" / "model.onnx", QuantizeConfig("int8-dynamic", num_threads=1)).out_path
    return {"base.onnx": root / "base" / "model.onnx", "base.ort": root / "base" / "model.ort",
            "classifier.onnx": root / "classifier" / "model.onnx",
            "classifier.ort": root / "classifier" / "model.ort", "classifier.int8.onnx": int8}


@pytest.fixture(scope="session")
def held_out(topics) -> list[str]:
    """The first 256 paragraphs of the topic dataset's evaluation part (never trained on)."""
    rows = [json.loads(line) for line in topics[1].read_text(encoding="utf-8").splitlines() if line.strip()]
    texts = [r["text"] for r in rows][:HELD_OUT]
    assert len(texts) == HELD_OUT
    return texts


@pytest.fixture(scope="session")
def feeds(held_out, classifier_checkpoint) -> dict[str, np.ndarray]:
    """The held-out texts as albert-edge's tokenizer gives them: (256, 64) int64, padded, truncated."""
    from albert_edge.tokenizer import AlbertTokenizer

    tok = AlbertTokenizer.from_dir(classifier_checkpoint)
    batch = tok(held_out, max_length=SEQ, padding="max_length", truncation=True)
    out = {name: np.asarray(batch[name], dtype=np.int64) for name in INPUTS}
    assert out["attention_mask"].sum(1).min() < SEQ, "some rows should be padded"
    return out


@pytest.fixture(scope="session")
def pytorch(small_checkpoint, classifier_checkpoint, feeds) -> dict[str, dict[str, np.ndarray]]:
    """PyTorch's outputs on ``feeds``: {"base": {last_hidden_state, pooler_output}, "classifier": {logits}}."""
    import torch

    from albert_edge.checkpoints import load_model

    x = [torch.from_numpy(feeds[name]) for name in INPUTS]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            hidden, pooled = load_model(small_checkpoint, "base")[1].eval()(*x)
            logits = load_model(classifier_checkpoint)[1].eval()(*x)
    finally:
        torch.set_num_threads(threads)
    return {"base": {"last_hidden_state": hidden.numpy(), "pooler_output": pooled.numpy()},
            "classifier": {"logits": logits.numpy()}}


@pytest.fixture(scope="session")
def int8_session(files, feeds) -> np.ndarray:
    """albert-edge's own Session (onnxruntime for Python) on the classifier's int8 file: its logits."""
    from albert_edge.runtime import Session

    return Session(files["classifier.int8.onnx"], num_threads=1).run(feeds)["logits"]
