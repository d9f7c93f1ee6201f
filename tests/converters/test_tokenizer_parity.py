"""The hard-string generator and the classifier of tokenizer differences (converters/tokenizer_parity.py),
without an engine: engine ids are made here by undoing each known difference on albert-edge's side."""

from __future__ import annotations

import pytest

from albert_edge.converters.tokenizer_parity import (CLASSES, _Reference, count_classes, difference_class, hard_strings,
                                                     is_known)

SENTENCES = ["The wind is from the west at 20 kilometres per hour.", "A second sentence, with a comma in it.",
             "Values are read from the table once a day."]


def test_the_strings_are_deterministic_and_of_every_kind():
    strings = hard_strings(300, sentences=SENTENCES)
    assert strings == hard_strings(300, sentences=SENTENCES)
    assert strings != hard_strings(300, seed=1, sentences=SENTENCES)
    kinds = {part for kind, _ in strings for part in kind.split("+")}
    assert {"upper", "title", "accents", "accents-whole", "spaces", "quotes", "digits", "cjk", "emoji", "controls",
            "special-tokens", "long"} <= kinds
    texts = [t for _, t in strings]
    assert any("\u3000" in t for t in texts) and any("\u200d" in t for t in texts) and any("``" in t for t in texts)
    assert max(len(t) for t in texts) > 2000  # over-long: far past 256 pieces


@pytest.fixture(scope="module")
def reference(spiece_model):
    return _Reference(spiece_model, 64)


@pytest.mark.parametrize("text, undo, kind", [
    ("In 2019, the station read 1,000 values.", {"digit-comma"}, "digit-comma"),
    ("hello [MASK] world", {"special-token-in-text"}, "special-token-in-text"),
    ("In 2019, say [MASK] 1,000", {"digit-comma", "special-token-in-text"}, "digit-comma+special-token-in-text"),
    ("The station\x00 read it twice.", {"nul-ends-text"}, "nul-ends-text"),
])
def test_an_undone_difference_is_named(reference, text, undo, kind):
    engine = reference.ids(text, frozenset(undo))
    assert engine != reference.ids(text)
    assert difference_class(reference, text, engine) == kind and is_known(kind)


def test_same_ids_and_an_unknown_difference(reference, spiece_model):
    text = "The wind is from the west."
    ids = reference.ids(text)
    assert difference_class(reference, text, ids) == "same"
    changed = ids[:1] + ids[2:]
    assert difference_class(reference, text, changed) == "other" and not is_known("other")
    counts, examples = count_classes(spiece_model, [text, text], [ids, changed], 64)
    assert counts == {"same": 1, "other": 1} and examples == {"other": [text]}


def test_an_equal_score_segmentation_is_a_tie(reference):
    """"000" cut as "0" "00" or as "00" "0": the same text, the same total score."""
    sp = reference._tok[True]._sp
    text = "1.000"
    ids = reference.ids(text)
    pieces = sp.id_to_piece(ids)
    if sorted(pieces[-3:-1]) != ["0", "00"]:
        pytest.skip(f"this vocabulary cuts {text!r} otherwise: {pieces}")
    engine = [*ids[:-3], *sp.piece_to_id(pieces[-3:-1][::-1]), ids[-1]]
    assert difference_class(reference, text, engine) == "score-tie"
    assert difference_class(reference, text, [*ids[:-3], *sp.piece_to_id(["00", "00"]), ids[-1]]) == "other"


def test_every_class_is_documented():
    assert all(len(CLASSES[name]) > 40 for name in CLASSES)
    assert not is_known("digit-comma+no-such-class")
