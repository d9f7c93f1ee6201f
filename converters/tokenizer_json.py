"""ALBERT's tokenizer as a ``tokenizer.json``: the file Hugging Face's ``tokenizers`` library and
transformers.js load, written from the checkpoint's spiece.model with no dependency beyond
sentencepiece.

What :func:`tokenizer_json` writes follows :mod:`albert_edge.tokenizer` step by step, so the ids
are ours, not merely close to them:

- **added tokens**: the unknown and control pieces (``<pad> <unk> [CLS] [SEP] [MASK]``), matched
  in the raw text before normalization and kept whole, as we and transformers keep them. The
  user-defined pieces (``( ) " - .`` ...) are not added tokens: we leave them to sentencepiece,
  which finds them inside the normalized text, and so does the Unigram model (their score, 0, is
  above every learned piece's).
- **normalizer**: Python's whitespace (``str.split``'s set, spelled out: it is not Unicode's
  White_Space) becomes one space and the ends are stripped; ``` `` ``` and ``''`` become ``"``;
  unless ``keep_accents``, NFKD and the removal of every character with a combining class (what
  :func:`unicodedata.combining` drops; the ``StripAccents`` normalizer removes the nonspacing
  marks, another set); when ``do_lower_case``, a capital sigma that ends a word becomes ``ς``
  (str.lower's one context rule; ``Lowercase`` maps each character alone) and then lower case;
  then the model's own sentencepiece normalization (its precompiled character map, nmt_nfkc for
  ALBERT) and sentencepiece's removal of extra whitespace. transformers.js reads no precompiled
  map (it deletes and spaces a fixed list of characters, then runs NFKC): what the map deletes or
  makes a space of is spelled out before it, and what the map keeps but that list would change
  (U+200D, the joiner inside emoji) crosses the step as a noncharacter stand-in.
- **pre-tokenizer**: Metaspace: a ``▁`` before the text (each stretch between added tokens, as
  sentencepiece sees each one alone) and for each space.
- **model**: Unigram with the pieces and scores of spiece.model, its unknown id. A piece that ends
  in a digit and a comma ("▁1,") scores 100 lower: ALBERT cuts such a piece again after
  sentencepiece, and a Unigram model with the piece all but removed finds the same cut.
- **post-processor**: ``[CLS] A [SEP]`` and ``[CLS] A [SEP] B [SEP]`` with token type 0, then 1.

What differs still is measured against :class:`albert_edge.tokenizer.AlbertTokenizer` on the
hard strings of :mod:`.tokenizer_parity` and named by its classes (tests/converters/
test_tokenizer_json.py; ``benchmarks/tokenizer_json_parity.py`` lists them).

A spiece.model whose model is not Unigram (BPE, word, char) has no such tokenizer.json: that is
one :class:`~albert_edge.errors.ConversionError` line (:func:`check_spiece`).
"""

from __future__ import annotations

import json
import os
import sys
import unicodedata
from pathlib import Path
from typing import Any

from albert_edge.errors import ConversionError, TokenizerError
from albert_edge.tokenizer import SPIECE_UNDERLINE, AlbertTokenizer, _fields

__all__ = ["tokenizer_json", "tokenizer_config", "special_tokens_map", "check_spiece", "write_tokenizer_files",
           "added_tokens", "load_tokenizer", "difference", "count_differences", "CLASSES", "TOKENIZER_FILES",
           "MODEL_TYPES"]

# What transformers.js reads for the tokenizer, beside config.json.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
# TrainerSpec.model_type of a spiece.model.
MODEL_TYPES = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}
_TRAINER_SPEC, _MODEL_TYPE = 2, 3
_NORMALIZER_SPEC, _PRECOMPILED = 3, 2
_NORMALIZER_FLAGS = {3: "add_dummy_prefix", 4: "remove_extra_whitespaces", 5: "escape_whitespaces"}
# What transformers.js's Precompiled normalizer deletes or makes a space of, whatever the map says
# (@huggingface/tokenizers' Precompiled.ts): a fixed list standing in for sentencepiece's nmt_nfkc.
_JS_CHANGED = frozenset([*range(0x01, 0x09), 0x0B, *range(0x0E, 0x20), 0x7F, 0x8F, 0x9F,  # deleted
                         0x09, 0x0A, 0x0C, 0x0D, 0xA0, 0x1680, *range(0x2000, 0x2010), 0x2028, 0x2029,  # spaces
                         0x202F, 0x205F, 0x2581, 0x3000, 0xFEFF, 0xFFFD])
_STAND_IN = 0xFDD0  # noncharacters: never in text that is interchanged
# How much lower a piece ending in a digit and a comma scores (what transformers' converter uses).
DIGIT_COMMA_PENALTY = 100.0
_KEPT_TYPES = (2, 3)  # unknown and control pieces: added tokens, matched in the raw text

# The difference a tokenizer.json cannot avoid, besides those tokenizer_parity.CLASSES names.
CLASSES = {
    "digit-comma-cut": "ALBERT takes sentencepiece's best cut of a word, then cuts a piece that ends in a digit and "
                       "a comma again, keeping the pieces before it (\"▁\" \"2,\" -> \"▁\" \"2\" \",\"); a Unigram "
                       "model finds one best cut of the word without that piece (\"▁2\" \",\"): the same text in "
                       "other pieces. The pieces' scores decide sentencepiece's first cut, so no score gives both.",
}


def check_spiece(tok: AlbertTokenizer) -> None:
    """One ConversionError line when ``tok``'s spiece.model cannot be written as a tokenizer.json
    that gives its ids: a model that is not Unigram, or whitespace flags other than ALBERT's."""
    proto = tok._sp.serialized_model_proto()  # noqa: SLF001 (the model's own bytes)
    kind = _model_type(proto)
    if kind != "unigram":
        raise ConversionError(f"{tok.path} is a sentencepiece {kind} model; the transformers-js target writes "
                              "ALBERT's Unigram tokenizer only (train one with `albert-edge tokenizer train`)")
    flags = _normalizer_flags(proto)
    if not all(flags.values()):
        off = ", ".join(name for name, on in flags.items() if not on)
        raise ConversionError(f"{tok.path} turns off sentencepiece's {off}; tokenizer.json writes ALBERT's "
                              "whitespace handling only (dummy prefix, extra whitespace removed, ▁ for spaces)")


def tokenizer_json(tok: AlbertTokenizer) -> dict[str, Any]:
    """The tokenizer.json of ``tok`` (its spiece.model and its do_lower_case / keep_accents)."""
    check_spiece(tok)
    sp = tok._sp  # noqa: SLF001
    proto = sp.serialized_model_proto()
    types = _piece_types(proto, sp.get_piece_size())
    vocab = []
    for i in range(sp.get_piece_size()):
        piece, score = sp.id_to_piece(i), float(sp.get_score(i))
        if tok.split_number_comma and _digit_comma(piece):
            score -= DIGIT_COMMA_PENALTY
        vocab.append([piece, score])
    metaspace = {"type": "Metaspace", "replacement": SPIECE_UNDERLINE, "prepend_scheme": "always", "split": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added_tokens(tok),
        "normalizer": {"type": "Sequence", "normalizers": _normalizers(tok, _precompiled(proto))},
        "pre_tokenizer": metaspace,
        "post_processor": _template(sp.id_to_piece(tok.cls_id), tok.cls_id, sp.id_to_piece(tok.sep_id), tok.sep_id),
        "decoder": dict(metaspace),
        "model": {"type": "Unigram", "unk_id": int(sp.unk_id()), "vocab": vocab,
                  "byte_fallback": any(t == 6 for t in types)},
    }


def tokenizer_config(tok: AlbertTokenizer, model_max_length: int) -> dict[str, Any]:
    """tokenizer_config.json as transformers writes an AlbertTokenizer's: the class transformers.js
    picks (AlbertTokenizer, which returns token_type_ids), the special tokens, the longest input."""
    names = _special_names(tok)
    return {
        "added_tokens_decoder": {str(t["id"]): {k: v for k, v in t.items() if k != "id"}
                                 for t in added_tokens(tok)},
        "bos_token": names["cls_token"],
        "clean_up_tokenization_spaces": False,
        "cls_token": names["cls_token"],
        "do_lower_case": tok.do_lower_case,
        "eos_token": names["sep_token"],
        "keep_accents": tok.keep_accents,
        "mask_token": names["mask_token"],
        "model_max_length": int(model_max_length),
        "pad_token": names["pad_token"],
        "remove_space": True,
        "sep_token": names["sep_token"],
        "tokenizer_class": "AlbertTokenizer",
        "unk_token": names["unk_token"],
    }


def special_tokens_map(tok: AlbertTokenizer) -> dict[str, Any]:
    """special_tokens_map.json as transformers writes an AlbertTokenizer's ([MASK] takes the space
    before it, lstrip, as in transformers)."""
    names = _special_names(tok)
    mask = {"content": names["mask_token"], "lstrip": True, "normalized": False, "rstrip": False,
            "single_word": False}
    return {"bos_token": names["cls_token"], "cls_token": names["cls_token"], "eos_token": names["sep_token"],
            "mask_token": mask, "pad_token": names["pad_token"], "sep_token": names["sep_token"],
            "unk_token": names["unk_token"]}


def added_tokens(tok: AlbertTokenizer) -> list[dict[str, Any]]:
    """The added tokens of :func:`tokenizer_json`: its unknown and control pieces, kept whole
    ([MASK] takes the space before it, as in transformers)."""
    sp = tok._sp  # noqa: SLF001
    types = _piece_types(sp.serialized_model_proto(), sp.get_piece_size())
    return [_added(i, sp.id_to_piece(i), lstrip=i == tok.mask_id) for i in range(len(types))
            if types[i] in _KEPT_TYPES]


def write_tokenizer_files(tok: AlbertTokenizer, directory: str | os.PathLike, model_max_length: int) -> list[Path]:
    """tokenizer.json, tokenizer_config.json and special_tokens_map.json of ``tok`` in
    ``directory`` (a staging directory: plain writes)."""
    directory = Path(directory)
    texts = {"tokenizer.json": tokenizer_json(tok), "tokenizer_config.json": tokenizer_config(tok, model_max_length),
             "special_tokens_map.json": special_tokens_map(tok)}
    written = []
    for name, data in texts.items():
        path = directory / name
        path.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        written.append(path)
    return written


def load_tokenizer(tokenizer) -> AlbertTokenizer:
    """An AlbertTokenizer from what convert() was given (one, a spiece.model, a directory with one)."""
    if isinstance(tokenizer, AlbertTokenizer):
        return tokenizer
    try:
        return AlbertTokenizer.from_dir(tokenizer)
    except TokenizerError as exc:
        raise ConversionError(str(exc)) from None


def difference(reference, text: str, ids: list[int]) -> str:
    """:func:`.tokenizer_parity.difference_class` of a tokenizer.json's ``ids`` for ``text``
    (``reference``: its ``_Reference``), or ``digit-comma-cut`` (:data:`CLASSES`) where it says
    ``other`` and every stretch that differs is the same text cut otherwise at a digit-comma."""
    from .tokenizer_parity import OTHER, difference_class

    kind = difference_class(reference, text, ids)
    if kind == OTHER and _digit_comma_cut(reference, text, ids):
        return "digit-comma-cut"
    return kind


def count_differences(tok: AlbertTokenizer, engine, texts: list[str], seq_len: int
                      ) -> tuple[dict[str, int], dict[str, list[str]]]:
    """The ``tokenizers.Tokenizer`` ``engine`` (truncating at ``seq_len``) against ``tok`` on
    ``texts``: the count of each :func:`difference` and up to three texts of each."""
    from .tokenizer_parity import SAME, _Reference

    reference = _Reference(tok.path, seq_len)
    counts: dict[str, int] = {}
    examples: dict[str, list[str]] = {}
    for text, encoding in zip(texts, engine.encode_batch(list(texts)), strict=True):
        kind = difference(reference, text, encoding.ids)
        counts[kind] = counts.get(kind, 0) + 1
        if kind != SAME and len(examples.setdefault(kind, [])) < 3:
            examples[kind].append(text)
    return counts, examples


def _digit_comma_cut(reference, text: str, ids: list[int]) -> bool:
    """Whether ``ids`` are ALBERT's text cut otherwise only where a digit meets a comma: between the
    places both cut, each stretch cut otherwise holds a digit-comma, or is an equal-score tie beside
    one ("000" as "00" "0" or "0" "00")."""
    want = list(reference.ids(text))
    sp = reference._tok[True]._sp  # noqa: SLF001
    # between [CLS] and [SEP] (a cut text's last pieces end at other places)
    a, b = sp.id_to_piece(want[1:-1]), sp.id_to_piece(list(ids)[1:-1])
    x, y = "".join(a), "".join(b)
    cut = len(want) == len(ids) == reference.seq_len  # both truncated: they may end at other places
    if x != y and not (cut and (x.startswith(y) or y.startswith(x))):
        return False
    stretches = _stretches(a, b, min(len(x), len(y)))
    if not stretches:
        return False
    score = {piece: sp.get_score(sp.piece_to_id(piece)) for piece in {*a, *b}}
    found = False
    for (i1, i2), (j1, j2) in stretches:
        span = "".join(a[i1:i2])
        after = a[i2] if i2 < len(a) else b[j2] if j2 < len(b) else ""  # a cut text: what the other has next
        if _has_digit_comma(span) or (span[-1:].isdigit() and after.startswith(",")):
            found = True
        elif abs(sum(score[p] for p in a[i1:i2]) - sum(score[p] for p in b[j1:j2])) > 1e-4:
            return False
    return found


def _stretches(a: list[str], b: list[str], length: int) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """The stretches of two cuts of one text (up to ``length`` characters) between the places both
    cut, where their pieces differ: ((first, end) in ``a``, (first, end) in ``b``)."""
    def ends(pieces):
        out, at = {}, 0
        for k, piece in enumerate(pieces):
            at += len(piece)
            out[at] = k + 1
        return out

    ea, eb = ends(a), ends(b)
    common = sorted(at for at in ea if at in eb and at <= length)
    out, i, j = [], 0, 0
    for at in common:
        if a[i:ea[at]] != b[j:eb[at]]:
            out.append(((i, ea[at]), (j, eb[at])))
        i, j = ea[at], eb[at]
    return out


def _has_digit_comma(text: str) -> bool:
    return any(c.isdigit() and n == "," for c, n in zip(text, text[1:]))


# -- the parts -----------------------------------------------------------------------------------

def _normalizers(tok: AlbertTokenizer, precompiled: bytes) -> list[dict[str, Any]]:
    """albert_edge.tokenizer.normalize, then the model's sentencepiece normalization."""
    steps: list[dict[str, Any]] = [
        _replace_regex(f"[{_char_class(_python_whitespace())}]+", " "),  # " ".join(text.split())
        {"type": "Strip", "strip_left": True, "strip_right": True},
        _replace_string("``", '"'),
        _replace_string("''", '"'),
    ]
    if not tok.keep_accents:
        steps += [{"type": "NFKD"}, _replace_regex(f"[{_char_class(_combining())}]", "")]
    if tok.do_lower_case:
        # str.lower's Final_Sigma: after a cased letter, and no cased letter after it in the word.
        steps += [_replace_regex("(?<=\\p{Cased})\u03a3(?!\\p{Case_Ignorable}*\\p{Cased})", "\u03c2"),
                  {"type": "Lowercase"}]
    if precompiled:
        deleted, spaces, kept = _model_map(tok)
        # What the model's map deletes or makes a space of, spelled out: transformers.js reads no
        # precompiled map (it deletes and spaces a fixed list, then runs NFKC) and then agrees.
        steps += [_replace_regex(f"[{_char_class(deleted)}]", ""), _replace_regex(f"[{_char_class(spaces)}]", " ")]
        # What the map keeps and that fixed list would change (U+200D, the joiner inside emoji):
        # stood in for by noncharacters across the step.
        stand_ins = {c: chr(_STAND_IN + i) for i, c in enumerate(kept)}
        steps += [_replace_string(c, x) for c, x in stand_ins.items()]
        steps.append({"type": "Precompiled", "precompiled_charsmap": _base64(precompiled)})
        steps += [_replace_string(x, c) for c, x in stand_ins.items()]
    # sentencepiece's remove_extra_whitespaces, after its own map (which makes spaces of some
    # characters and drops others, so two spaces can meet again)
    steps += [_replace_regex(" {2,}", " "), {"type": "Strip", "strip_left": True, "strip_right": True}]
    return steps


def _model_map(tok: AlbertTokenizer) -> tuple[list[int], list[int], list[str]]:
    """The code points the model's own normalizer deletes, those it makes a space of, and those
    of transformers.js's fixed list (:data:`_JS_CHANGED`) that it keeps as they are."""
    import sentencepiece as spm

    normalizer = spm.SentencePieceNormalizer(model_proto=tok._sp.serialized_model_proto(),  # noqa: SLF001
                                             add_dummy_prefix=False, escape_whitespaces=False,
                                             remove_extra_whitespaces=False)
    points = [c for c in range(1, sys.maxunicode + 1) if not 0xD800 <= c < 0xE000]
    mapped = normalizer.normalize([chr(c) for c in points])
    deleted = [c for c, m in zip(points, mapped) if m == ""]
    spaces = [c for c, m in zip(points, mapped) if m == " " and c != 0x20]
    kept = [chr(c) for c, m in zip(points, mapped) if chr(c) == m and c in _JS_CHANGED]
    return deleted, spaces, kept


def _template(cls: str, cls_id: int, sep: str, sep_id: int) -> dict[str, Any]:
    def special(token: str, type_id: int) -> dict[str, Any]:
        return {"SpecialToken": {"id": token, "type_id": type_id}}

    def sequence(name: str, type_id: int) -> dict[str, Any]:
        return {"Sequence": {"id": name, "type_id": type_id}}

    single = [special(cls, 0), sequence("A", 0), special(sep, 0)]
    return {"type": "TemplateProcessing", "single": single,
            "pair": [*single, sequence("B", 1), special(sep, 1)],
            "special_tokens": {cls: {"id": cls, "ids": [cls_id], "tokens": [cls]},
                               sep: {"id": sep, "ids": [sep_id], "tokens": [sep]}}}


def _added(i: int, piece: str, lstrip: bool) -> dict[str, Any]:
    return {"id": i, "content": piece, "single_word": False, "lstrip": lstrip, "rstrip": False,
            "normalized": False, "special": True}


def _special_names(tok: AlbertTokenizer) -> dict[str, str]:
    sp = tok._sp  # noqa: SLF001
    return {name: sp.id_to_piece(i) for name, i in (("pad_token", tok.pad_id), ("unk_token", tok.unk_id),
                                                    ("cls_token", tok.cls_id), ("sep_token", tok.sep_id),
                                                    ("mask_token", tok.mask_id))}


def _replace_regex(pattern: str, content: str) -> dict[str, Any]:
    return {"type": "Replace", "pattern": {"Regex": pattern}, "content": content}


def _replace_string(pattern: str, content: str) -> dict[str, Any]:
    return {"type": "Replace", "pattern": {"String": pattern}, "content": content}


def _digit_comma(piece: str) -> bool:
    """ALBERT's rule of pieces it cuts again (albert_edge.tokenizer: "▁1," -> "▁1" ",")."""
    return len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit()


def _python_whitespace() -> list[int]:
    """The code points str.split splits at."""
    return [c for c in range(sys.maxunicode + 1) if chr(c).isspace()]


def _combining() -> list[int]:
    """The code points unicodedata.combining gives a class to: what ALBERT drops after NFKD."""
    return [c for c in range(sys.maxunicode + 1) if unicodedata.combining(chr(c))]


def _char_class(points: list[int]) -> str:
    """A regex character class body of ``points``, in ranges, the characters themselves (both
    Oniguruma and JavaScript read them; escapes differ)."""
    out = []
    start = prev = None
    for c in [*points, None]:
        if c is not None and prev is not None and c == prev + 1:
            prev = c
            continue
        if start is not None:
            out.append(_class_char(start) if start == prev else f"{_class_char(start)}-{_class_char(prev)}")
        start = prev = c
    return "".join(out)


def _class_char(c: int) -> str:
    ch = chr(c)
    return "\\" + ch if ch in "\\]^-[" else ch


def _base64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode("ascii")


def _model_type(proto: bytes) -> str:
    for number, value in _fields(proto):
        if number == _TRAINER_SPEC:
            for field, v in _fields(value):
                if field == _MODEL_TYPE:
                    return MODEL_TYPES.get(int(v), f"type {v}")
    return "unigram"  # the proto default


def _normalizer_flags(proto: bytes) -> dict[str, bool]:
    flags = dict.fromkeys(_NORMALIZER_FLAGS.values(), True)  # the proto defaults
    for number, value in _fields(proto):
        if number == _NORMALIZER_SPEC:
            for field, v in _fields(value):
                if field in _NORMALIZER_FLAGS:
                    flags[_NORMALIZER_FLAGS[field]] = bool(v)
    return flags


def _precompiled(proto: bytes) -> bytes:
    for number, value in _fields(proto):
        if number == _NORMALIZER_SPEC:
            for field, v in _fields(value):
                if field == _PRECOMPILED:
                    return bytes(v)
    return b""


def _piece_types(proto: bytes, count: int) -> list[int]:
    from albert_edge.tokenizer import _piece_types as types_of

    types = types_of(proto)
    if len(types) != count:  # a guard on the reader, never expected to fire
        raise ConversionError(f"read {len(types)} piece types from a model of {count} pieces")
    return types
