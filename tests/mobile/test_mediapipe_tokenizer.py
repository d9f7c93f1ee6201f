"""The ids a phone app's MediaPipe computes from raw text, against albert_edge.tokenizer's, on the
tokenizer tests' hard strings: with the spiece.model as it is, and as convert --to mediapipe
embeds it (ALBERT's normalization in its normalizer, converters/spiece_rules.py).

What still differs is named by class and counted, so a change in either tokenizer shows:
- ``digit-comma``: ALBERT splits a piece such as "▁1," into "▁1" ","; sentencepiece keeps it.
- ``special-token-in-text``: albert-edge keeps "[MASK]" written in the text whole, as
  transformers does; MediaPipe tokenizes its characters.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from albert_edge.tokenizer import SPECIAL_TOKENS, AlbertTokenizer

DATA = Path(__file__).parent.parent / "data"
LONG = " ".join((DATA / "corpus.txt").read_text(encoding="utf-8").split()[:400])
# The strings of tests/test_tokenizer.py: case, accents, digits, quotes, punctuation, emoji, CJK,
# Unicode whitespace, control characters, special tokens written in the text, an over-long text.
STRINGS = [*json.loads((DATA / "sentences.json").read_text(encoding="utf-8")), LONG]
LENGTH = 256  # LONG is truncated at it, as an app's file truncates


def _difference_class(text: str, albert: list[int], engine: list[int], spiece: Path) -> str:
    if albert == engine:
        return "same"
    plain = AlbertTokenizer(spiece, split_number_comma=False)
    if plain([text], max_length=LENGTH, truncation=True, padding="longest")["input_ids"][0].tolist() == engine:
        return "digit-comma"
    if any(token in text for token in SPECIAL_TOKENS):
        return "special-token-in-text"
    return "other"


@pytest.fixture(scope="module")
def albert_ids(spiece_model):
    tok = AlbertTokenizer(spiece_model)
    return [tok([s], max_length=LENGTH, truncation=True, padding="longest")["input_ids"][0].tolist() for s in STRINGS]


def _classes(spiece_model, albert_ids, embedded: Path) -> dict[str, int]:
    from albert_edge.converters.mediapipe_ids import engine_ids

    engine = engine_ids(embedded, STRINGS, LENGTH)
    counts: dict[str, int] = {}
    for text, a, e in zip(STRINGS, albert_ids, engine):
        kind = _difference_class(text, a, e, spiece_model)
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def test_embedded_model_gives_albert_ids_but_for_two_named_classes(spiece_model, albert_ids, tmp_path):
    from albert_edge.converters.spiece_rules import with_albert_normalizer

    embedded = tmp_path / "spiece.model"
    embedded.write_bytes(with_albert_normalizer(spiece_model))
    counts = _classes(spiece_model, albert_ids, embedded)
    # 14 strings: 11 alike; "In 2019, ... 1,000" and the long text differ only by ALBERT's
    # digit-comma split, the special-token string only by the tokens written in it.
    assert counts == {"same": 11, "digit-comma": 2, "special-token-in-text": 1}


def test_the_model_as_it_is_differs_on_accents_quotes_and_controls(spiece_model, albert_ids):
    counts = _classes(spiece_model, albert_ids, spiece_model)
    # Without ALBERT's rules four more strings differ: accents (Café), ``quotes'', Greek capitals,
    # İ, ǅ and Roman numerals (lower-cased by MediaPipe in ASCII only), and a control character
    # Python counts as whitespace.
    assert counts["same"] == 7 and counts["other"] == 4


def test_two_thousand_hard_strings_differ_only_by_documented_classes(spiece_model, tmp_path):
    """Builtin-corpus sentences with every kind of variant (converters/tokenizer_parity.py): the
    embedded model's ids equal albert-edge's, or differ by a class CLASSES documents; a string no
    class explains is a new kind of difference."""
    from albert_edge.converters.mediapipe_ids import engine_ids
    from albert_edge.converters.spiece_rules import with_albert_normalizer
    from albert_edge.converters.tokenizer_parity import count_classes, hard_strings, is_known

    strings = [text for _, text in hard_strings(2400)]
    embedded = tmp_path / "spiece.model"
    embedded.write_bytes(with_albert_normalizer(spiece_model))
    counts, examples = count_classes(spiece_model, strings, engine_ids(embedded, strings, LENGTH), LENGTH)
    assert sum(counts.values()) == len(strings) >= 2000
    unknown = {kind: examples[kind] for kind in counts if not is_known(kind)}
    assert not unknown, f"ids differ in a way no documented class explains: {unknown}"
    # Measured (400-piece model, CPython 3.11): 2,101 alike; the rest are special tokens written in
    # the text, digit-comma splits and equal-score segmentations. Most strings must stay alike
    # (the corpus, hence the strings, changes with the Python version: a margin).
    assert counts["same"] >= 0.8 * len(strings)
