"""The ids ALBERT was pretrained with, on a vocabulary that has ALBERT's user-defined pieces.

The oracle is raw sentencepiece driven the way ALBERT's own code drives it: Google's
``tokenization.py`` (``preprocess_text`` and ``encode_pieces``) as transformers' sentencepiece-based
("slow") AlbertTokenizer restates it, with ``keep_accents`` and the ``` `` ```/``''`` quotes. The
tokenizers-based AlbertTokenizer of transformers >= 5 (and any tokenizer.json a converter writes)
is not the oracle: it splits words before sentencepiece sees them. Where an older transformers
with the slow class is installed, it is compared too.

Thousands of strings are compared in a few tests, each listing every mismatch it finds.
"""

from __future__ import annotations

import json
import random
import unicodedata
from pathlib import Path

import pytest
import sentencepiece as spm

from albert_edge.tokenizer import ALBERT_USER_SYMBOLS, SPECIAL_TOKENS, AlbertTokenizer, normalize, train_spiece

CORPUS = Path(__file__).parent / "data" / "corpus.txt"
# Hand-picked hard cases, shared with test_tokenizer.py (those with special tokens written in
# the text are test_special_tokens_in_text_stay_whole's).
SENTENCES = [t for t in json.loads((CORPUS.parent / "sentences.json").read_text(encoding="utf-8"))
             if not any(special in t for special in SPECIAL_TOKENS)]
UNDERLINE = "\u2581"


# -- the oracle: ALBERT's own tokenization, restated from its source --------------------------

def reference_preprocess(text: str, do_lower_case: bool = True, keep_accents: bool = False) -> str:
    """``AlbertTokenizer.preprocess_text`` of transformers 4 (Google's ``preprocess_text`` plus
    its ``keep_accents`` switch and the quote replacement)."""
    outputs = " ".join(text.strip().split())
    outputs = outputs.replace("``", '"').replace("''", '"')
    if not keep_accents:
        outputs = unicodedata.normalize("NFKD", outputs)
        outputs = "".join([c for c in outputs if not unicodedata.combining(c)])
    if do_lower_case:
        outputs = outputs.lower()
    return outputs


def reference_pieces(sp: spm.SentencePieceProcessor, text: str, **flags) -> list[str]:
    """Google's ``encode_pieces`` (= transformers 4 ``AlbertTokenizer._tokenize``)."""
    pieces = sp.EncodeAsPieces(reference_preprocess(text, **flags))
    new_pieces = []
    for piece in pieces:
        if len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit():
            cur_pieces = sp.EncodeAsPieces(piece[:-1].replace(UNDERLINE, ""))
            if piece[0] != UNDERLINE and cur_pieces[0][0] == UNDERLINE:
                if len(cur_pieces[0]) == 1:
                    cur_pieces = cur_pieces[1:]
                else:
                    cur_pieces[0] = cur_pieces[0][1:]
            cur_pieces.append(piece[-1])
            new_pieces.extend(cur_pieces)
        else:
            new_pieces.append(piece)
    return new_pieces


def reference_ids(sp: spm.SentencePieceProcessor, text: str, **flags) -> list[int]:
    """``[CLS] pieces [SEP]``, each piece through ``PieceToId`` as ALBERT's code converts it."""
    cls, sep = sp.PieceToId("[CLS]"), sp.PieceToId("[SEP]")
    return [cls, *(sp.PieceToId(p) for p in reference_pieces(sp, text, **flags)), sep]


# -- the strings ----------------------------------------------------------------------------

WORDS = ("pytorch", "transformers", "formerly", "quoted", "the", "station", "wind", "rain", "Café",
         "naïve", "Ångström", "résumé", "ΟΔΟΣ", "Σίσυφος", "İstanbul", "straße", "ﬁne", "ＦＵＬＬ",
         "नमस्ते", "你好", "😀", "e\u0301", "don't", "it's", "U.S.", "e.g.", "self-driving", "x86-64")
INSERTS = ("-", "--", "(", ")", "()", '"', "``", "''", "'", "`", ".", "...", "…", ",", ";", ":",
           "\u2010", "\u2011", "\u2012", "\u2013", "\u2014", "\u2015", "\u2212", "£", "€", "$", "%",
           "“", "”", "‘", "’", "«", "»", "[", "]", "{", "}", "/", "&", "#", "@", "!", "?",
           "1,000", "12,345,678", "3,5", ",1,", "2019,", "99,", "1,2,3", "0,00", "£1,000", "€2,5",
           "½", "²", "①", "¹,", "٣,", "\u200b", "\ufeff", "\x1c", "\x00", "\u00ad")
SPACES = (" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u2003", "\u3000", " \t \n ", "")


def generated(n: int, seed: int = 0) -> list[str]:
    """Words and corpus words with punctuation, numbers, dashes, quotes, accents and odd
    whitespace between and inside them; also runs of nothing but those."""
    rng = random.Random(seed)
    corpus_words = CORPUS.read_text(encoding="utf-8").split()
    out = ["", " ", "\t\n", "-", "(", ")", "()", '"', "––", "£€", "1,", ",", ".", "..."]
    while len(out) < n:
        parts = []
        for _ in range(rng.randint(1, 12)):
            kind = rng.random()
            if kind < 0.35:
                parts.append(rng.choice(corpus_words))
            elif kind < 0.55:
                parts.append(rng.choice(WORDS))
            elif kind < 0.85:
                parts.append(rng.choice(INSERTS))
            else:  # glued: a symbol inside or around a word
                word = rng.choice(corpus_words)
                cut = rng.randint(0, len(word))
                parts.append(word[:cut] + rng.choice(INSERTS) + word[cut:])
            parts.append(rng.choice(SPACES) if rng.random() < 0.8 else "")
        text = "".join(parts)
        out.append(text.upper() if rng.random() < 0.1 else text)
    return out


def reference_text_lines(limit: int) -> list[str]:
    """Lines of the Python Language Reference topics, part of the builtin corpus: prose full
    of brackets, quotes, hyphens and numbers."""
    from pydoc_data.topics import topics

    lines = [line.strip() for key in sorted(topics) for line in topics[key].splitlines() if line.strip()]
    return lines[:: max(1, len(lines) // limit)][:limit]


def corpus_lines() -> list[str]:
    """The test corpus, line by line and sentence by sentence."""
    lines = [line for line in CORPUS.read_text(encoding="utf-8").splitlines() if line.strip()]
    return lines + [s for line in lines for s in line.split(". ")]


STRINGS = {
    "generated": lambda: generated(2500),
    "language-reference": lambda: reference_text_lines(1500),
    "test-corpus": corpus_lines,
}


# -- fixtures -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def albert_spiece(tmp_path_factory) -> Path:
    """A vocabulary made as ALBERT's was: the 5 special pieces, ALBERT's user-defined pieces at
    ids 5..12, trained on text with numbers that take "▁1,"-style pieces into the vocabulary."""
    directory = tmp_path_factory.mktemp("albert_spiece")
    extra = directory / "numbers.txt"
    rng = random.Random(1)
    extra.write_text("\n".join(
        f"in {rng.randint(1900, 2030)}, about {rng.randint(1, 99)},{rng.randint(100, 999)} people paid "
        f"£{rng.randint(1, 9)},{rng.randint(100, 999)} (or €{rng.randint(1, 99)}) - \"so\" it went."
        for _ in range(300)), encoding="utf-8")
    return train_spiece([CORPUS, extra], directory, vocab_size=600)


@pytest.fixture(scope="module")
def sp(albert_spiece) -> spm.SentencePieceProcessor:
    return spm.SentencePieceProcessor(model_file=str(albert_spiece))


def mismatches(tok: AlbertTokenizer, sp, texts, **flags) -> list[str]:
    found = []
    for text in texts:
        ours, theirs = tok.encode(text), reference_ids(sp, text, **flags)
        if ours != theirs:
            found.append(f"{text!r}: ours {tok.id_to_piece(ours)} != ALBERT's {tok.id_to_piece(theirs)}")
    return found


# -- the vocabulary -------------------------------------------------------------------------

def test_vocabulary_has_alberts_user_defined_pieces(sp):
    assert [sp.id_to_piece(i) for i in range(13)] == [*SPECIAL_TOKENS, *ALBERT_USER_SYMBOLS]
    assert all(sp.IsControl(i) for i in (0, 2, 3, 4)) and sp.IsUnknown(1)
    # User-defined pieces are neither control nor unknown, and sentencepiece cuts them out
    # of the middle of a word.
    assert not any(sp.IsControl(i) or sp.IsUnknown(i) for i in range(5, 13))
    assert "-" in sp.EncodeAsPieces("pytorch-transformers")
    # The vocabulary has number-comma pieces, so encode_pieces' rule is exercised.
    assert any(len(p) > 1 and p[-1] == "," and p[-2].isdigit()
               for p in (sp.id_to_piece(i) for i in range(sp.get_piece_size())))


# -- ids ------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", list(STRINGS))
def test_ids_match_albert_on_thousands_of_strings(albert_spiece, sp, kind):
    texts = STRINGS[kind]()
    assert len(texts) >= 100
    found = mismatches(AlbertTokenizer(albert_spiece), sp, texts)
    assert not found, f"{len(found)} of {len(texts)} strings differ:\n" + "\n".join(found[:30])


@pytest.mark.parametrize("flags", [dict(do_lower_case=False), dict(keep_accents=True),
                                   dict(do_lower_case=False, keep_accents=True)], ids=str)
def test_ids_match_albert_with_flags(albert_spiece, sp, flags):
    texts = generated(600, seed=2)
    found = mismatches(AlbertTokenizer(albert_spiece, **flags), sp, texts, **flags)
    assert not found, f"{len(found)} of {len(texts)} strings differ:\n" + "\n".join(found[:30])


@pytest.mark.parametrize("flags", [{}, dict(do_lower_case=False), dict(keep_accents=True)], ids=str)
@pytest.mark.parametrize("text", SENTENCES, ids=[f"s{i}" for i in range(len(SENTENCES))])
def test_hand_picked_sentences(spiece_model, flags, text):
    """The shared spiece.model fixture (trained by train_spiece, so with ALBERT's user-defined
    pieces) on the hard cases; normalization compared as text too, which sees differences
    that ids hide when both sides map a character to <unk>."""
    sp = spm.SentencePieceProcessor(model_file=str(spiece_model))
    tok = AlbertTokenizer(spiece_model, **flags)
    assert normalize(text, **flags) == reference_preprocess(text, **flags)
    assert tok.encode(text) == reference_ids(sp, text, **flags)


def test_the_example_from_the_report(albert_spiece, sp):
    """User-defined pieces inside words and before words: no "▁" is invented after them."""
    tok = AlbertTokenizer(albert_spiece)
    text = 'pytorch-transformers (formerly) "quoted"'
    pieces = tok.tokenize(text)
    assert pieces == reference_pieces(sp, text)
    assert pieces[pieces.index("-") + 1][0] != UNDERLINE  # "transformers" continues the word
    assert pieces.count('"') == 2 and "(" in pieces and ")" in pieces


def test_raw_sentencepiece_on_text_albert_leaves_alone(albert_spiece, sp):
    """Where ALBERT's preprocessing changes nothing and no number-comma piece occurs, the ids
    are sentencepiece's own, piece for piece."""
    tok = AlbertTokenizer(albert_spiece)
    compared = 0
    for text in map(reference_preprocess, generated(1500, seed=3)):
        if reference_preprocess(text) != text:
            continue
        pieces = sp.EncodeAsPieces(text)
        if any(len(p) > 1 and p[-1] == "," and p[-2].isdigit() for p in pieces):
            continue
        compared += 1
        assert tok.encode(text)[1:-1] == sp.EncodeAsIds(text), repr(text)
    assert compared > 900


@pytest.mark.parametrize("text", ["1,000", "in 2019, we", "paid £1,250 (or 99, 12,5)"])
def test_number_comma_rule(albert_spiece, sp, text):
    """sentencepiece alone gives a piece such as "▁1,"; ALBERT splits the comma off."""
    raw = sp.EncodeAsPieces(text)
    assert any(len(p) > 1 and p[-1] == "," and p[-2].isdigit() for p in raw)
    pieces = AlbertTokenizer(albert_spiece).tokenize(text)
    assert pieces == reference_pieces(sp, text)
    assert "," in pieces and not any(len(p) > 1 and p.endswith(",") for p in pieces)
    assert AlbertTokenizer(albert_spiece, split_number_comma=False).tokenize(text) == raw


@pytest.mark.parametrize("text, parts", [
    ("hello[MASK]world", ["hello", "[MASK]", "world"]),
    ("a [SEP] b-c [CLS][CLS]", ["a", "[SEP]", "b-c", "[CLS]", "[CLS]"]),
    ("<unk>(x) <pad>", ["<unk>", "(x)", "<pad>"]),
    ("[mask] (x)", ["[mask] (x)"]),  # lower case is not the special token: ALBERT's pieces
])
def test_special_tokens_in_text_stay_whole(albert_spiece, sp, text, parts):
    """Special tokens written in the text are one id, as transformers keeps them; the text
    between them is tokenized on its own, as transformers does."""
    expected = [p for part in parts
                for p in ([part] if part in SPECIAL_TOKENS else reference_pieces(sp, part))]
    assert AlbertTokenizer(albert_spiece).tokenize(text) == expected


def test_slow_transformers_tokenizer_when_installed(albert_spiece):
    """transformers < 5 ships the sentencepiece-based AlbertTokenizer; compare with it there.
    (transformers >= 5 has only the tokenizers-based class.)"""
    transformers = pytest.importorskip("transformers")
    from transformers.models.albert import tokenization_albert

    cls = tokenization_albert.AlbertTokenizer
    if not hasattr(cls, "preprocess_text"):
        pytest.skip(f"transformers {transformers.__version__} has no sentencepiece-based AlbertTokenizer")
    slow = cls(str(albert_spiece))
    tok = AlbertTokenizer(albert_spiece)
    texts = generated(2000, seed=4) + reference_text_lines(500)
    found = [t for t in texts if tok.encode(t) != slow(t)["input_ids"]]
    assert not found, f"{len(found)} of {len(texts)} differ, e.g. {found[:5]}"
