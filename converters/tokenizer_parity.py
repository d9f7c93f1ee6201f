"""Hard strings for a tokenizer, and the named ways a phone engine's ids can differ from ALBERT's.

:func:`hard_strings` makes, deterministically, strings of every kind the tokenizer tests have
(case, accents, Unicode whitespace, quotes, digits, CJK, emoji, control characters, special
tokens written in the text, text longer than the sequence), each a sentence of the builtin
corpus (:mod:`albert_edge.text`) with one or more systematic variants applied.

:func:`difference_class` names how the ids an engine computed from the raw text differ from
albert_edge.tokenizer's: each class in :data:`CLASSES` is a difference that albert-edge can
undo on its side (a tokenizer setting, a rewrite of the text), and a string is put in the
smallest set of classes whose undoing gives the engine's ids ("digit-comma+final-sigma"). A
difference no known class explains is ``other``: a new kind of difference.

Device side: needs only albert_edge.tokenizer; the engine's ids come from elsewhere
(:func:`albert_edge.converters.mediapipe_ids.engine_ids` for MediaPipe, the file's ``token_ids``
output for :mod:`.onnx_text`).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence

from albert_edge.tokenizer import SPECIAL_TOKENS, AlbertTokenizer, truncate

__all__ = ["CLASSES", "hard_strings", "difference_class", "count_classes", "is_known"]

# Each class: what differs, why, and why it is left (README's MediaPipe section has the counts).
CLASSES = {
    "digit-comma": "ALBERT splits a piece ending in a digit and a comma (\"▁1,\" -> \"▁1\" \",\"); "
                   "sentencepiece alone keeps it whole. A rule of ALBERT's Python code after "
                   "sentencepiece, not a normalization: no normalizer can do it.",
    "special-token-in-text": "albert-edge keeps [CLS], [SEP], [MASK], <unk>, <pad> written in the text "
                             "whole, as transformers does; the engine tokenizes their characters.",
    "final-sigma": "str.lower turns a capital sigma at a word's end into \"ς\"; a per-character "
                   "normalizer map can only give one lower case for \"Σ\" (\"σ\").",
    "nul-ends-text": "the engine reads the text up to its first NUL character (onnxruntime-extensions' "
                     "tokenizer takes the string as a C string); ALBERT's tokenizer drops the NUL and reads on. "
                     "An app that can receive NULs removes them before the call.",
    "score-tie": "the engine cuts some text into other pieces whose scores add up to the same total "
                 "(\"000\" as \"00\" \"0\" or \"0\" \"00\"): two best segmentations, and MediaPipe's "
                 "sentencepiece breaks the tie otherwise, depending on the text around it.",
}
# Classes that are a comparison of the ids, not a difference albert-edge can undo.
_COMPARED = ("score-tie",)
OTHER = "other"
SAME = "same"

_DECOMPOSABLE = {"a": "áàâäåã", "e": "éèêë", "i": "íìîï", "o": "óòôöõ", "u": "úùûü", "c": "ç", "n": "ñ",
                 "A": "ÁÀÂÄÅ", "E": "ÉÈÊË", "O": "ÓÒÔÖ", "U": "ÚÙÛÜ", "y": "ýÿ", "s": "šś", "z": "žź"}
# Letters NFKD leaves whole: ALBERT keeps them (lower-cased).
_WHOLE = {"o": "øœ", "d": "đð", "l": "ł", "s": "ß", "a": "æ", "i": "ı", "t": "þŧ", "O": "ØŒ", "D": "ĐÐ", "L": "Ł",
          "A": "Æ", "T": "Þ", "h": "ħ"}
_SPACES = ["\u00a0", "\u2009", "\u3000", "\t", "\n", "\r\n", "\u2002", "\u2003", "\u202f", "\u205f", "\u1680",
           "\u000b", "\u000c", "  ", " \t "]
_QUOTES = [("\u201c", "\u201d"), ("\u2018", "\u2019"), ("``", "''"), ("\u201e", "\u201c"), ("\u00ab", "\u00bb"),
           ('"', '"'), ("'", "'"), ("`", "'"), ("```", "'''"), ("\u2039", "\u203a")]
_NUMBERS = ["1,000", "12,345", "3,500,000", "3.14", "2019,", "0.5", "1,5", "99,", "1.000,25", "7", "42.",
            "10,000.00", "v1.2.3", "$1,200", "50%", "1st", "2,", "1990s", ",1,", "4,096-token"]
_CJK = ["你好", "世界", "中文字符", "東京", "こんにちは", "カタカナ", "한국어", "안녕하세요", "漢字かな混じり", "ＡＢＣ１２３",
        "北京大学", "日本語テキスト"]
_EMOJI = ["😀", "😀😀", "👍🏽", "🇫🇷", "👨\u200d👩\u200d👧", "❤\ufe0f", "1\ufe0f\u20e3", "🏳\ufe0f\u200d🌈", "🙂",
          "✨", "👩🏻\u200d💻", "🤖"]
_CONTROLS = ["\u0000", "\u0007", "\u001c", "\u001d", "\u001e", "\u001f", "\u007f", "\u0085", "\u2028", "\u2029",
             "\u200b", "\ufeff", "\u00ad", "\u200d", "\u0008", "\u001b"]
_ODD_CASE = ["ΟΔΟΣ", "Σίσυφος", "ΑΣ ΒΑΣ", "İstanbul", "STRASSE", "straße", "ẞ", "ǅ", "ﬁne", "½", "Ⅻ", "ＦＵＬＬ",
             "Ǆ", "ÅNGSTRÖM", "ΣΑΣ.", "ﬀ", "™", "№"]


def _words(rng: random.Random, text: str, change: Callable[[str], str], share: float = 0.3) -> str:
    return " ".join(change(w) if rng.random() < share else w for w in text.split(" "))


def _swap(rng: random.Random, word: str, table: dict[str, str]) -> str:
    return "".join(rng.choice(table[c]) if c in table and rng.random() < 0.5 else c for c in word)


def _insert(rng: random.Random, text: str, items: Sequence[str], k: int = 2, glue: Sequence[str] = (" ",)) -> str:
    words = text.split(" ")
    for _ in range(k):
        i = rng.randrange(len(words) + 1)
        words.insert(i, rng.choice(items) + ("" if rng.random() < 0.5 else rng.choice(glue)))
    return " ".join(words)


def _spaces(rng: random.Random, text: str) -> str:
    out = "".join(rng.choice(_SPACES) if c == " " and rng.random() < 0.5 else c for c in text)
    return rng.choice(["", " ", "\u3000", "\t"]) + out + rng.choice(["", " ", "\n", "\u00a0"])


def _quotes(rng: random.Random, text: str) -> str:
    def quote(w: str) -> str:
        left, right = rng.choice(_QUOTES)
        return left + w + right

    return _words(rng, text, quote, 0.25)


def _attach(rng: random.Random, text: str, items: Sequence[str]) -> str:
    """Items inside words, beside them, and between words."""
    words = text.split(" ")
    for _ in range(3):
        i = rng.randrange(len(words))
        w, item = words[i], rng.choice(items)
        at = rng.randrange(len(w) + 1)
        words[i] = w[:at] + item + w[at:]
    return " ".join(words)


_VARIANTS: dict[str, Callable[[random.Random, str], str]] = {
    "as-is": lambda rng, t: t,
    "upper": lambda rng, t: t.upper(),
    "title": lambda rng, t: t.title(),
    "accents": lambda rng, t: _words(rng, t, lambda w: _swap(rng, w, _DECOMPOSABLE), 0.5),
    "accents-whole": lambda rng, t: _words(rng, t, lambda w: _swap(rng, w, _WHOLE), 0.5),
    "combining": lambda rng, t: _words(rng, t, lambda w: w + rng.choice("\u0301\u0300\u0308\u0327\u030a"), 0.3),
    "spaces": _spaces,
    "quotes": _quotes,
    "digits": lambda rng, t: _insert(rng, t, _NUMBERS, 3, (" ", ", ", ". ")),
    "cjk": lambda rng, t: _attach(rng, t, _CJK),
    "emoji": lambda rng, t: _attach(rng, t, _EMOJI),
    "controls": lambda rng, t: _attach(rng, t, _CONTROLS),
    "odd-case": lambda rng, t: _insert(rng, t, _ODD_CASE, 3),
    "special-tokens": lambda rng, t: _attach(rng, t, [*SPECIAL_TOKENS, " [MASK] ", "[cls]", "[MASK][MASK]"]),
}
_MIXABLE = [k for k in _VARIANTS if k not in ("as-is", "special-tokens")]


def hard_strings(n: int = 2400, seed: int = 0, sentences: Sequence[str] | None = None,
                 long_every: int = 25) -> list[tuple[str, str]]:
    """``n`` (kind, text) pairs: sentences of the builtin corpus (or ``sentences``), each with one
    variant in turn, every fifth with two or three variants, every ``long_every``-th a run of
    sentences far longer than any sequence length (about 4,000 characters). The same arguments
    give the same strings, on the same Python version (the builtin corpus is its docstrings)."""
    if sentences is None:
        from albert_edge.text import builtin_corpus_path, split_sentences

        lines = builtin_corpus_path().read_text(encoding="utf-8").splitlines()
        sentences = [s for line in lines for s in split_sentences(line) if 3 <= len(s.split()) <= 60]
    rng = random.Random(seed)
    pool = list(sentences)
    rng.shuffle(pool)
    kinds = list(_VARIANTS)
    out = []
    for i in range(n):
        text = pool[i % len(pool)]
        if long_every and i % long_every == long_every - 1:
            chosen = [kinds[(i // long_every) % len(kinds)]]
            text = " ".join(pool[(i + j) % len(pool)] for j in range(40))
            text = _VARIANTS[chosen[0]](rng, text)
            kind = "long+" + chosen[0]
        elif i % 5 == 4:
            chosen = rng.sample(_MIXABLE, rng.choice((2, 3)))
            for name in chosen:
                text = _VARIANTS[name](rng, text)
            kind = "+".join(chosen)
        else:
            kind = kinds[i % len(kinds)]
            text = _VARIANTS[kind](rng, text)
        out.append((kind, text))
    return out


# -- differences -----------------------------------------------------------------------------

class _Reference:
    """albert-edge's ids of a text, with any set of the known differences undone."""

    def __init__(self, spiece, seq_len: int):
        self.seq_len = seq_len
        self._tok = {split: AlbertTokenizer(spiece, split_number_comma=split) for split in (True, False)}

    def same_scores(self, ids: Sequence[int], other: Sequence[int]) -> bool:
        """Whether two id lists are segmentations of one text with the same total score."""
        sp = self._tok[True]._sp
        if [i for i in ids if sp.is_control(i)] != [i for i in other if sp.is_control(i)]:
            return False
        if "".join(sp.id_to_piece(list(ids))) != "".join(sp.id_to_piece(list(other))):
            return False
        return abs(sum(map(sp.get_score, ids)) - sum(map(sp.get_score, other))) < 1e-4

    def ids(self, text: str, undo: frozenset[str] = frozenset()) -> list[int]:
        tok = self._tok["digit-comma" not in undo]
        if "nul-ends-text" in undo:
            text = text.split("\x00", 1)[0]
        if "final-sigma" in undo:
            text = text.replace("\u03a3", "\u03c3")
        if "special-token-in-text" in undo:
            from albert_edge.tokenizer import normalize

            words = normalize(text, tok.do_lower_case, tok.keep_accents)
            pieces = tok._encode_pieces(words) if words else []
            body = tok._sp.piece_to_id(pieces) if pieces else []
            body, _ = truncate(list(body), None, self.seq_len - 2)
            return [tok.cls_id, *body, tok.sep_id]
        return tok([text], max_length=self.seq_len, truncation=True, padding="longest")["input_ids"][0].tolist()


def difference_class(reference: _Reference, text: str, engine: Sequence[int]) -> str:
    """``same``; the smallest set of :data:`CLASSES` whose undoing gives ``engine`` (names joined
    by "+", in CLASSES' order); or ``other``."""
    engine = list(engine)
    if reference.ids(text) == engine:
        return SAME
    names = [name for name in CLASSES if name not in _COMPARED]
    undos = [undo for k in range(len(names) + 1) for undo in itertools.combinations(names, k)]
    for undo in undos[1:]:
        if reference.ids(text, frozenset(undo)) == engine:
            return "+".join(undo)
    for undo in undos:
        if reference.same_scores(reference.ids(text, frozenset(undo)), engine):
            return "+".join((*undo, "score-tie"))
    return OTHER


def is_known(kind: str) -> bool:
    """A class (or set of classes) that :data:`CLASSES` documents, or ``same``."""
    return kind == SAME or all(part in CLASSES for part in kind.split("+"))


def count_classes(spiece, texts: Sequence[str], engine: Sequence[Sequence[int]], seq_len: int,
                  ) -> tuple[dict[str, int], dict[str, list[str]]]:
    """Counts per class over ``texts`` and, per class, up to three of its texts."""
    reference = _Reference(spiece, seq_len)
    counts: dict[str, int] = {}
    examples: dict[str, list[str]] = {}
    for text, got in zip(texts, engine, strict=True):
        kind = difference_class(reference, text, got)
        counts[kind] = counts.get(kind, 0) + 1
        if kind != SAME and len(examples.setdefault(kind, [])) < 3:
            examples[kind].append(text)
    return counts, examples

