"""Fixtures of the MediaPipe tests: a tiny ALBERT fine-tuned on the built-in topic paragraphs (so
it has real labels), a base checkpoint, and their MediaPipe files.

These tests need mediapipe 0.10.21 (albert-edge[mobile]), which cannot share an environment with
the build side's tensorflow 2.21: .ci/mobile.sh builds the environment they run in. Elsewhere
they are skipped, saying so."""

from __future__ import annotations

import importlib.util
import json

import pytest

MEDIAPIPE = importlib.util.find_spec("mediapipe") is not None
SKIP_REASON = ("mediapipe is not installed: .ci/mobile.sh builds the albert-edge[mobile] environment "
               "(mediapipe 0.10.21, tensorflow 2.19) these tests run in")
SEQ_LEN = 32


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/mobile/" in str(item.fspath).replace("\\", "/") and not MEDIAPIPE:
            item.add_marker(pytest.mark.skip(reason=SKIP_REASON))


@pytest.fixture(scope="session")
def seq_len() -> int:
    """The files' sequence length."""
    return SEQ_LEN


@pytest.fixture(scope="session")
def classifier_checkpoint(tmp_path_factory, spiece_model):
    """A small classifier (H=64, so int8 schemes quantize its matrices: the converter keeps weights
    under 1024 elements in float) fine-tuned on the built-in topic paragraphs (4 labels)."""
    import torch

    from albert_edge.config import AlbertConfig
    from albert_edge.model import build_model
    from albert_edge.train.finetune import FinetuneOptions, finetune
    from albert_edge.train.labelled import write_topic_dataset
    from albert_edge.train.state import export_model

    root = tmp_path_factory.mktemp("classifier")
    config = AlbertConfig.preset("tiny").replace(vocab_size=400, embedding_size=32, hidden_size=64,
                                                 intermediate_size=128, classifier_dropout_prob=0.0)
    torch.manual_seed(0)
    base = export_model(build_model(config, "pretraining"), root / "base", spiece_model)
    train, evaluate = write_topic_dataset(root / "topics")
    # Five epochs over the 1,517 paragraphs (about 12 s): held-out accuracy 0.61 against 0.29 for
    # the majority class, and three of the four classes predicted, so agreement figures mean something.
    finetune(FinetuneOptions(task="classification", train_file=str(train), eval_file=str(evaluate), model=str(base),
                             out_dir=str(root / "fine"), epochs=5, batch_size=16, lr=5e-4, max_seq_length=SEQ_LEN,
                             device="cpu", threads=1, log_every=1000))
    labels = json.loads((root / "fine" / "config.json").read_text())["id2label"]
    assert len(labels) == 4
    return root / "fine"


@pytest.fixture(scope="session")
def base_checkpoint(tmp_path_factory, spiece_model):
    import torch

    from albert_edge.config import AlbertConfig
    from albert_edge.model import build_model
    from albert_edge.train.state import export_model

    config = AlbertConfig.preset("tiny").replace(vocab_size=400)
    torch.manual_seed(1)
    model = build_model(config, "base")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return export_model(model, tmp_path_factory.mktemp("base"), spiece_model)


@pytest.fixture(scope="session")
def classifier_file(tmp_path_factory, classifier_checkpoint):
    from albert_edge.converters.export import convert

    out = tmp_path_factory.mktemp("classifier-mediapipe")
    result = convert(str(classifier_checkpoint), out, targets=("mediapipe",), seq_len=SEQ_LEN)
    return result.files[0]


@pytest.fixture(scope="session")
def embedder_file(tmp_path_factory, base_checkpoint):
    from albert_edge.converters.export import convert

    out = tmp_path_factory.mktemp("embedder-mediapipe")
    result = convert(str(base_checkpoint), out, targets=("mediapipe",), seq_len=SEQ_LEN)
    return result.files[0]
