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




def weather_task(sentences: list[str]) -> tuple[list[dict], list[dict]]:
    """(train, eval) rows of a two-label task only the cue words decide: "weather" when rain,
    wind and storm were inserted at random places, "none" otherwise. Each training sentence comes
    in both versions, so only the cue words can tell them apart."""
    import random
    import re

    rng = random.Random(0)
    plain = [s for s in sentences if not re.search(r"rain|wind|storm", s, re.I)]

    def weather(sentence):
        words = sentence.split()
        for cue in ("rain", "wind", "storm"):
            words.insert(rng.randrange(len(words) + 1), cue)
        return {"text": " ".join(words), "label": "weather"}

    train = [row for s in plain[:50] for row in (weather(s), {"text": s, "label": "none"})]
    evaluation = [weather(s) if rng.random() < 0.5 else {"text": s, "label": "none"} for s in plain]
    return train, evaluation
