"""Fixtures of the training tests: the small test corpus, its vocabulary, a tiny config."""

from __future__ import annotations

from pathlib import Path

import pytest

from albert_edge.config import AlbertConfig

DATA = Path(__file__).parent.parent / "data"


@pytest.fixture(scope="session")
def corpus_file() -> Path:
    """11 blank-line separated documents, one sentence per line."""
    return DATA / "corpus.txt"


@pytest.fixture(scope="session")
def vocab(spiece_model):
    from albert_edge.train.tokens import Vocabulary

    return Vocabulary(spiece_model)


@pytest.fixture(scope="session")
def tiny_config(vocab) -> AlbertConfig:
    """The tiny preset (E=8, H=16, L=4, G=2) with the test vocabulary and no dropout anywhere,
    so runs on one and on two processes can agree to the last digit."""
    return AlbertConfig.preset("tiny").replace(vocab_size=vocab.vocab_size, classifier_dropout_prob=0.0)


