"""A spiece.model that does ALBERT's text normalization itself, for engines that feed raw text
straight to sentencepiece (MediaPipe Tasks, the TFLite Task Library).

ALBERT normalizes in Python before sentencepiece sees the text (:func:`albert_edge.tokenizer.
normalize`): whitespace runs become one space, ``` `` ``` and ``''`` become ``"``, accents are
stripped (NFKD, combining marks dropped) and letters lower-cased; sentencepiece's own
``nmt_nfkc`` rules follow. A phone app's engine does only the last step (MediaPipe lower-cases
ASCII letters first). So the model embedded in a phone file gets a normalizer whose character
map is the composition, one rule per code point it changes: ``nmt_nfkc(lower(strip(NFKD(c))))``,
whitespace to a space, and the two quote pairs. It is compiled by sentencepiece itself
(``SentencePieceNormalizer(rule_tsv=...)``) and put in place of the model's normalizer spec;
the pieces and their scores are not touched.

What a per-character map cannot do stays different, and is measured by the tests: str.lower's
final sigma (``Σ`` at a word's end becomes ``ς``), ALBERT's digit-comma split ("▁1," -> "▁1"
","), and special tokens written in the text ("[MASK]").
"""

from __future__ import annotations

import os
import tempfile
import unicodedata
from pathlib import Path

from albert_edge.tokenizer import _field_spans, _fields

from .native_logs import quiet_native

__all__ = ["albert_rules", "with_albert_normalizer", "checked_spiece", "embedding_rows", "RULE_NAME"]

RULE_NAME = "albert_nmt_nfkc"
_NORMALIZER_SPEC = 3  # ModelProto.normalizer_spec
_SPEC_NAME = 1  # NormalizerSpec.name
_QUOTES = {"``": '"', "''": '"'}


def _albert_char(c: str) -> str:
    """What ALBERT's Python step makes of one character."""
    if c.isspace():  # str.split's whitespace: a separator, collapsed by sentencepiece later
        return " "
    c = "".join(x for x in unicodedata.normalize("NFKD", c) if not unicodedata.combining(x))
    return c.lower()


def albert_rules() -> list[tuple[str, str]]:
    """(source, target) pairs: every character (or quote pair) whose ALBERT normalization
    followed by nmt_nfkc is not itself."""
    import sentencepiece as spm

    nfkc = spm.SentencePieceNormalizer(rule_name="nmt_nfkc", add_dummy_prefix=False, escape_whitespaces=False,
                                       remove_extra_whitespaces=False)
    chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000 and c != 0]
    targets = nfkc.normalize([_albert_char(c) for c in chars])
    rules = [(c, t) for c, t in zip(chars, targets) if t != c]
    rules += [(pair, nfkc.normalize(quote)) for pair, quote in _QUOTES.items()]
    return rules


def embedding_rows(model) -> int:
    """The rows of ``model``'s word-embedding table: the ids it has a vector for."""
    from albert_edge.model import AlbertEmbeddings

    for module in model.modules():
        if isinstance(module, AlbertEmbeddings):
            return int(module.word_embeddings.num_embeddings)
    return int(model.config.vocab_size)


def checked_spiece(tokenizer, model, target: str) -> Path:
    """The spiece.model of ``tokenizer`` (an AlbertTokenizer, a spiece.model path or a checkpoint
    directory), checked before ``target`` exports anything: sentencepiece loads it, it has ALBERT's
    special pieces, and it has one piece per row of ``model``'s word embeddings. The engines do
    not check it: sentencepiece's parser fails inside MediaPipe's metadata writer, and an id
    past the table fails inside the app's Gather."""
    from albert_edge.errors import TokenizerError
    from albert_edge.tokenizer import AlbertTokenizer, find_spiece

    spiece = find_spiece(getattr(tokenizer, "path", tokenizer))
    pieces = AlbertTokenizer(spiece).vocab_size  # TokenizerError naming the file when it is not a model
    rows = embedding_rows(model)
    if pieces != rows:
        raise TokenizerError(f"{spiece} has {pieces} pieces but the model's word embeddings have {rows} rows: the "
                             f"{target} target packs the tokenizer with the model, and they must match (give the "
                             "checkpoint the spiece.model it was trained with)")
    return spiece


def _tsv(rules: list[tuple[str, str]]) -> str:
    def hexes(s: str) -> str:
        return " ".join(f"{ord(c):X}" for c in s)

    return "".join(f"{hexes(src)}\t{hexes(dst)}\n" for src, dst in rules)


def with_albert_normalizer(spiece: str | os.PathLike) -> bytes:
    """The bytes of ``spiece`` (a spiece.model) with its normalizer replaced by ALBERT's
    composed normalization; its whitespace flags (dummy prefix, extra whitespace, escaping)
    are kept."""
    import sentencepiece as spm

    proto = Path(spiece).read_bytes()
    old = spm.SentencePieceProcessor(model_proto=proto)
    del old  # loads: the proto is a sentencepiece model
    flags = _whitespace_flags(proto)
    with tempfile.TemporaryDirectory(prefix="albert-edge-spiece-") as tmp, quiet_native():  # its builder's log
        tsv = Path(tmp) / "rules.tsv"
        tsv.write_text(_tsv(albert_rules()), encoding="utf-8")
        spec = spm.SentencePieceNormalizer(rule_tsv=str(tsv), **flags).serialized_normalizer_spec()
    spec = _named(spec, RULE_NAME)
    out = bytearray()
    replaced = False
    for number, raw in _raw_fields(proto):
        if number == _NORMALIZER_SPEC:
            if not replaced:
                out += _length_delimited(_NORMALIZER_SPEC, spec)
                replaced = True
            continue
        out += raw
    if not replaced:
        out += _length_delimited(_NORMALIZER_SPEC, spec)
    spm.SentencePieceProcessor(model_proto=bytes(out))  # still a model sentencepiece loads
    return bytes(out)


def _whitespace_flags(proto: bytes) -> dict[str, bool]:
    """The model's NormalizerSpec flags (proto defaults: all three true)."""
    flags = {"add_dummy_prefix": True, "remove_extra_whitespaces": True, "escape_whitespaces": True}
    numbers = {3: "add_dummy_prefix", 4: "remove_extra_whitespaces", 5: "escape_whitespaces"}
    for number, value in _fields(proto):
        if number == _NORMALIZER_SPEC:
            for field, v in _fields(value):
                if field in numbers:
                    flags[numbers[field]] = bool(v)
    return flags


def _named(spec: bytes, name: str) -> bytes:
    """``spec`` with its name field set to ``name``."""
    rest = b"".join(raw for number, raw in _raw_fields(spec) if number != _SPEC_NAME)
    return _length_delimited(_SPEC_NAME, name.encode()) + rest


def _raw_fields(buf: bytes):
    """(field number, the field's bytes as stored: key and value) of one message."""
    for number, _, where in _field_spans(buf):
        yield number, buf[where]


def _length_delimited(number: int, value: bytes) -> bytes:
    return _encode_varint(number << 3 | 2) + _encode_varint(len(value)) + value


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)
