"""Real text in: read strictly (UTF-8, not empty), split into calibration and held-out sentences
that never overlap, tokenized into the batches the model takes."""

from __future__ import annotations

import numpy as np
import pytest

from albert_edge.errors import TokenizerError
from albert_edge.quantize.calibration import (
    MASK_FRACTION,
    load_tokenizer,
    random_batches,
    read_sentences,
    short_texts,
    split_text,
    text_batches,
)
from albert_edge.errors import DataError

from .conftest import CORPUS


@pytest.mark.parametrize("content, match", [
    (b"", "is empty"),
    (b"  \n\t\n", "is empty"),
    ("Caf\u00e9 au lait, s'il vous pla\u00eet, et une cr\u00eape.".encode("latin-1"), "not UTF-8"),
    (b"\xff\xfe" + "Hello there, this is text.".encode("utf-16-le"), "not UTF-8"),
    (b"some words here\x00and a NUL", "NUL"),
])
def test_unreadable_text_is_one_clear_error(tmp_path, content, match):
    path = tmp_path / "calib.txt"
    path.write_bytes(content)
    with pytest.raises(DataError, match=match) as info:
        read_sentences([path])
    assert "\n" not in str(info.value) and str(path) in str(info.value)


def test_missing_text_file(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        read_sentences([tmp_path / "nope.txt"])


def test_sentences_are_read_from_every_file(tmp_path):
    extra = tmp_path / "extra.txt"
    extra.write_text("The last file has one sentence of its own. And a second one here.\n", encoding="utf-8")
    sentences, sources = read_sentences([CORPUS, extra])
    assert sources == [str(CORPUS), str(extra)]
    assert sentences[-1] == "And a second one here."
    assert len(sentences) > 50


def test_held_out_sentences_never_calibrate():
    sentences, _ = read_sentences([CORPUS])
    split = split_text(sentences, num_calibration=30, num_eval=20, seed=3)
    assert len(split.evaluation) == 20 and len(split.calibration) == 30
    assert not set(split.evaluation) & set(split.calibration)
    assert split == split_text(sentences, 30, 20, seed=3)  # deterministic
    assert split != split_text(sentences, 30, 20, seed=4)


def test_too_little_text():
    with pytest.raises(DataError, match="at least 2"):
        split_text(["Only one sentence.", "Only one sentence."], 4, 4)


def test_tokenizer_ids_must_fit_the_model(spiece_model):
    assert load_tokenizer(spiece_model, 400).vocab_size == 400
    assert load_tokenizer(spiece_model, 30000).vocab_size == 400  # fewer pieces: every id is in range
    with pytest.raises(TokenizerError, match="400 pieces but the model's vocab_size is 300"):
        load_tokenizer(spiece_model, 300)
    with pytest.raises(TokenizerError):
        load_tokenizer(spiece_model.parent / "missing.model", 400)


def test_text_batches_are_model_inputs_with_masks(spiece_model):
    tok = load_tokenizer(spiece_model, 400)
    sentences, _ = read_sentences([CORPUS])
    batches = text_batches(tok, sentences[:20], seq_len=24, batch_size=8, mask_id=tok.mask_id, seed=1)
    assert len(batches) == 3
    for batch in batches:
        ids, mask, types = (batch.feeds[k] for k in ("input_ids", "attention_mask", "token_type_ids"))
        assert ids.dtype == np.int64 and ids.shape == mask.shape == types.shape and ids.shape[1] <= 24
        assert (ids[:, 0] == tok.cls_id).all() and types.max() == 1  # sentence pairs
        assert batch.masked.any(axis=1).all()  # every row has a [MASK]
        assert (ids[batch.masked] == tok.mask_id).all() and not (batch.masked & ~mask.astype(bool)).any()
    masked = sum(b.masked.sum() for b in batches)
    real = sum(b.feeds["attention_mask"].sum() for b in batches)
    assert 0.5 * MASK_FRACTION < masked / real < 2 * MASK_FRACTION
    padded = text_batches(tok, sentences[:4], seq_len=24, batch_size=8, pad_to_length=True)
    assert padded[0].feeds["input_ids"].shape == (2, 24) and padded[0].masked is None


def test_random_batches_pad_and_use_both_segments():
    batches = random_batches(99, 16, count=5, batch_size=2, mask_id=4)
    assert [b.feeds["input_ids"].shape[0] for b in batches] == [2, 2, 1]
    first = batches[0]
    assert first.source == "random ids" and first.feeds["attention_mask"][1].min() == 0
    assert first.feeds["input_ids"].max() < 99 and first.feeds["token_type_ids"].max() == 1


def test_short_texts_are_the_first_words_of_a_share_of_the_sentences(spiece_model):
    sentences, _ = read_sentences([CORPUS])
    shorts = short_texts(sentences[:40])
    assert len(shorts) == 10 and all(s.split() == t.split()[:len(s.split())] for s, t in zip(shorts, sentences))
    assert sorted({len(s.split()) for s in shorts}) == [1, 2, 3, 4, 6]
    tok = load_tokenizer(spiece_model, 400)
    rows = text_batches(tok, shorts, seq_len=24, batch_size=8, pairs=False)
    lengths = np.concatenate([b.feeds["attention_mask"].sum(1) for b in rows])
    assert len(lengths) == 10 and (lengths <= 8).sum() >= 5  # [CLS] + a few pieces + [SEP]
    assert all(b.feeds["token_type_ids"].max() == 0 for b in rows)  # one text per row, no pair
