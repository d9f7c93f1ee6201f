"""ALBERT's tokenizer on sentencepiece alone: the ids ALBERT was pretrained with, as Google's
``tokenization.py`` and transformers' sentencepiece-based (slow) AlbertTokenizer give them, with
no torch, no tensorflow and no transformers, so it runs on the device next to the model.

The conventions are ALBERT's: text is normalized in Python (runs of whitespace become one space,
``` `` ``` and ``''`` become ``"``, accents are stripped by NFKD, letters are lower-cased), then
sentencepiece (whose own nmt_nfkc rules follow) splits the whole text into pieces. Its
user-defined pieces (ALBERT's ``( ) " - . – £ €``) are found by sentencepiece inside the text,
not cut out of it first. A piece that ends in a digit followed by a comma ("▁1,") is split again
so the comma stands alone, as ALBERT's original tokenizer does. Special tokens written in the
text ("[MASK]") are kept whole, as transformers keeps them.
"""

from __future__ import annotations

import io
import logging
import os
import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import sentencepiece as spm

from .children import child_env, python
from .errors import TokenizerError
from .files import atomic_write

log = logging.getLogger(__name__)

SPIECE_NAME = "spiece.model"
SPIECE_UNDERLINE = "\u2581"
# The shortest input a file padded to a fixed length can take: [CLS], one id, [SEP].
MIN_SEQ_LEN = 3
# Every ALBERT vocabulary starts with these pieces, at these ids.
SPECIAL_TOKENS = ("<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]")
PADDING = ("max_length", "longest", False)
# The user-defined pieces of ALBERT's own vocabulary (30k-clean.model), at ids 5..12:
# sentencepiece always cuts them out as pieces of their own, wherever they stand.
ALBERT_USER_SYMBOLS = ("(", ")", '"', "-", ".", "\u2013", "\u00a3", "\u20ac")


def normalize(text: str, do_lower_case: bool = True, keep_accents: bool = False) -> str:
    """The text ALBERT gives to sentencepiece, step by step as its ``preprocess_text`` does:
    whitespace runs to one space, quotes unified, accents stripped, lower case."""
    text = " ".join(text.strip().split())
    text = text.replace("``", '"').replace("''", '"')
    if not keep_accents:
        # Drops combining characters (canonical combining class > 0), not every mark.
        text = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    if do_lower_case:
        text = text.lower()  # str.lower, context rules included (a final sigma becomes "ς")
    return text


class AlbertTokenizer:
    """A sentencepiece model with ALBERT's conventions.

    ``split_number_comma`` splits pieces such as "▁1," into "▁1" ",", as ALBERT's own tokenizer
    does (pass False for sentencepiece's pieces as they are).
    """

    def __init__(self, path: str | os.PathLike, do_lower_case: bool = True,
                 keep_accents: bool = False, split_number_comma: bool = True) -> None:
        self.path = Path(path)
        self.do_lower_case = do_lower_case
        self.keep_accents = keep_accents
        self.split_number_comma = split_number_comma
        self._sp = _load_processor(self.path)
        ids = {}
        for token in SPECIAL_TOKENS:
            ids[token] = self._sp.piece_to_id(token)
            if self._sp.id_to_piece(ids[token]) != token:
                raise TokenizerError(f"{self.path} is not an ALBERT vocabulary: it has no {token} "
                                     f"piece (ALBERT needs {', '.join(SPECIAL_TOKENS)})")
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
            ids[t] for t in SPECIAL_TOKENS)
        # Special (unknown and control) pieces written in the text are kept whole: they are
        # matched in the raw text, before normalization, as transformers matches its special
        # tokens. User-defined pieces are left to sentencepiece, which finds them in the text.
        types = _piece_types(self._sp.serialized_model_proto())
        kept = {self._sp.id_to_piece(i): i for i, t in enumerate(types) if t in (2, 3)}
        self._kept_ids = kept
        self._special_ids = frozenset(kept.values())
        pattern = "|".join(re.escape(t) for t in sorted(kept, key=len, reverse=True))
        self._kept_re = re.compile(f"({pattern})")

    @classmethod
    def from_dir(cls, path: str | os.PathLike, **kwargs) -> AlbertTokenizer:
        """The tokenizer of a checkpoint directory (its spiece.model), or of a .model file."""
        return cls(find_spiece(path), **kwargs)

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    def check_vocab_size(self, model_vocab_size: int) -> None:
        """Raise if this vocabulary has ids the model has no embedding for."""
        if self.vocab_size > model_vocab_size:
            raise TokenizerError(f"{self.path} has {self.vocab_size} pieces but the model embeds "
                                 f"only {model_vocab_size}: tokenizer and model do not match")

    # -- text -> ids -------------------------------------------------------------------------

    def tokenize(self, text: str) -> list[str]:
        """The pieces of ``text``, without [CLS]/[SEP]; an unknown piece shows its own text."""
        return [piece for _, piece in self._pieces(text)]

    def id_to_piece(self, ids: Iterable[int]) -> list[str]:
        return [self._sp.id_to_piece(int(i)) for i in ids]

    def encode(self, text_a: str, text_b: str | None = None, max_length: int | None = None,
               truncation: bool = True) -> list[int]:
        """``[CLS] A [SEP]`` or ``[CLS] A [SEP] B [SEP]``, truncated to ``max_length``."""
        return self._pair(text_a, text_b, max_length, truncation)[0]

    def __call__(self, texts: str | Sequence[str], text_pairs: str | Sequence[str] | None = None,
                 max_length: int | None = 128, padding: str | bool = "max_length",
                 truncation: bool = True) -> dict[str, np.ndarray]:
        """A batch as the model takes it: int64 arrays (B, T) ``input_ids``, ``attention_mask``
        and ``token_type_ids``, padded on the right with <pad> and type 0."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        pairs = [text_pairs] if isinstance(text_pairs, str) else text_pairs
        if pairs is not None and len(pairs) != len(texts):
            raise TokenizerError(f"got {len(texts)} texts but {len(pairs)} text pairs")
        if padding not in PADDING:
            raise TokenizerError(f"padding must be one of {PADDING}, not {padding!r}")
        if padding == "max_length" and max_length is None:
            raise TokenizerError("padding='max_length' needs a max_length")
        rows = [self._pair(a, None if pairs is None else pairs[i], max_length, truncation)
                for i, a in enumerate(texts)]
        lengths = [len(ids) for ids, _ in rows]
        width = max_length if padding == "max_length" else max(lengths, default=0)
        if not padding and len(set(lengths)) > 1:
            raise TokenizerError(f"sequences have different lengths ({min(lengths)}..{max(lengths)}); "
                                 "use padding='longest' or 'max_length'")
        width = max([width, *lengths])
        input_ids = np.full((len(rows), width), self.pad_id, dtype=np.int64)
        attention_mask = np.zeros((len(rows), width), dtype=np.int64)
        token_type_ids = np.zeros((len(rows), width), dtype=np.int64)
        for row, ((ids, types), n) in enumerate(zip(rows, lengths)):
            input_ids[row, :n] = ids
            attention_mask[row, :n] = 1
            token_type_ids[row, :n] = types
        return {"input_ids": input_ids, "attention_mask": attention_mask,
                "token_type_ids": token_type_ids}

    # -- ids -> text -------------------------------------------------------------------------

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        """Text back from ids (lower-cased and without accents, as the model saw it)."""
        ids = [int(i) for i in ids]
        if skip_special_tokens:
            ids = [i for i in ids if i not in self._special_ids]
        pieces = self.id_to_piece(ids)
        if not pieces:
            return ""
        # As transformers' Metaspace decoder: each ▁ is a space, except in the first piece.
        return pieces[0].replace(SPIECE_UNDERLINE, "") + "".join(pieces[1:]).replace(SPIECE_UNDERLINE, " ")

    # -- internals ---------------------------------------------------------------------------

    def _ids(self, text: str) -> list[int]:
        return [i for i, _ in self._pieces(text)]

    def _pieces(self, text: str) -> list[tuple[int, str]]:
        """(id, piece) pairs; an unknown piece shows the text it stands for."""
        out: list[tuple[int, str]] = []
        for i, part in enumerate(self._kept_re.split(text)):
            if i % 2:  # a special piece written in the text
                out.append((self._kept_ids[part], part))
            elif words := normalize(part, self.do_lower_case, self.keep_accents):
                pieces = self._encode_pieces(words)
                out.extend(zip(self._sp.piece_to_id(pieces), pieces))
        return out

    def _encode_pieces(self, text: str) -> list[str]:
        """sentencepiece's pieces of the whole text (an unknown one as its own text), then
        ALBERT's ``encode_pieces`` rule: "▁1," -> "▁1" ","; "19," -> "19" "," (no ▁ added
        inside a word). Ids come from the pieces, as ALBERT's ``PieceToId`` gives them."""
        pieces: list[str] = []
        for piece in self._sp.encode(text, out_type=str):
            if self.split_number_comma and len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit():
                parts = self._sp.encode(piece[:-1].replace(SPIECE_UNDERLINE, ""), out_type=str)
                if piece[0] != SPIECE_UNDERLINE and parts and parts[0][0] == SPIECE_UNDERLINE:
                    parts = parts[1:] if len(parts[0]) == 1 else [parts[0][1:], *parts[1:]]
                pieces += [*parts, piece[-1]]
            else:
                pieces.append(piece)
        return pieces

    def _pair(self, text_a: str, text_b: str | None, max_length: int | None,
              truncation: bool) -> tuple[list[int], list[int]]:
        a = self._ids(text_a)
        b = None if text_b is None else self._ids(text_b)
        if truncation and max_length is not None:
            a, b = truncate(a, b, max_length - (2 if b is None else 3))
        return pair_ids(self.cls_id, self.sep_id, a, b)


def pair_ids(cls_id: int, sep_id: int, a: list[int], b: list[int] | None) -> tuple[list[int], list[int]]:
    """``[CLS] a [SEP]`` (and ``b [SEP]`` when given) with their token types (0 for a, 1 for b)."""
    ids = [cls_id, *a, sep_id]
    types = [0] * len(ids)
    if b is not None:
        ids += [*b, sep_id]
        types += [1] * (len(b) + 1)
    return ids, types


def truncate(a: list[int], b: list[int] | None, room: int) -> tuple[list[int], list[int] | None]:
    """Cut ``a`` (and ``b``) to ``room`` ids in all, the longer first ('longest_first').

    When both must be cut, the shorter keeps room // 2 and the longer the rest; on a tie the
    second sequence keeps the extra id (as the tokenizers library does).
    """
    if room < 0:
        raise TokenizerError(f"max_length is too small: it leaves {room} ids for the text "
                             "after [CLS] and [SEP]")
    if b is None:
        return a[:room], None
    if len(a) + len(b) <= room:
        return a, b
    short = min(len(a), len(b))
    if 2 * short <= room:  # only the longer one is cut
        keep_short, keep_long = short, room - short
    else:  # both are cut, to half each
        keep_short, keep_long = room // 2, room - room // 2
    n_a, n_b = (keep_long, keep_short) if len(a) > len(b) else (keep_short, keep_long)
    return a[:n_a], b[:n_b]


def train_spiece(files: Sequence[str | os.PathLike], out_dir: str | os.PathLike,
                 vocab_size: int = 8000, *, do_lower_case: bool = True, keep_accents: bool = False,
                 character_coverage: float = 0.99995, input_sentence_size: int = 1_000_000,
                 max_sentence_length: int = 4192, seed: int = 0,
                 user_defined_symbols: Sequence[str] = ALBERT_USER_SYMBOLS) -> Path:
    """Train a unigram spiece.model the way ALBERT's was made; returns ``out_dir/spiece.model``.

    Pieces 0..4 are <pad>, <unk>, [CLS], [SEP], [MASK]; there is no <s> or </s>. Then come
    ``user_defined_symbols``, by default ALBERT's own ``( ) " - . – £ €`` (ids 5..12), pieces
    sentencepiece always cuts out of the text, wherever they stand. Lines are
    normalized exactly as AlbertTokenizer normalizes text before encoding it, and streamed to
    the trainer, which keeps a random sample of ``input_sentence_size`` of them.
    """
    paths = [Path(f) for f in files]
    if not paths:
        raise TokenizerError("no text files given to train the tokenizer on")
    for path in paths:
        if not path.is_file():
            raise TokenizerError(f"text file {path} does not exist")
    reserved = len(SPECIAL_TOKENS) + len(user_defined_symbols)
    if vocab_size <= reserved:
        raise TokenizerError(f"vocab_size ({vocab_size}) must be larger than the {len(SPECIAL_TOKENS)} "
                             f"special tokens and {len(user_defined_symbols)} user-defined pieces")
    if 0 < input_sentence_size <= 100:  # sentencepiece refuses samples this small
        raise TokenizerError(f"input_sentence_size ({input_sentence_size}) must be 0 (all lines) "
                             "or more than 100")
    options = dict(model_type="unigram", vocab_size=vocab_size, character_coverage=character_coverage,
                   pad_id=0, unk_id=1, bos_id=-1, eos_id=-1, control_symbols=list(SPECIAL_TOKENS[2:]),
                   user_defined_symbols=list(user_defined_symbols), normalization_rule_name="nmt_nfkc",
                   input_sentence_size=input_sentence_size, shuffle_input_sentence=True,
                   max_sentence_length=max_sentence_length,
                   minloglevel=0 if log.isEnabledFor(logging.DEBUG) else 2)
    model, count, error = _train_in_child(paths, do_lower_case, keep_accents, seed, options)
    if error is not None:
        raise _training_error(RuntimeError(error), paths, count, vocab_size)
    log.info("trained a %d-piece vocabulary on %d sentences", vocab_size, count)
    sp = spm.SentencePieceProcessor(model_proto=model)
    got = tuple(sp.id_to_piece(i) for i in range(len(SPECIAL_TOKENS)))
    if got != SPECIAL_TOKENS:  # a guard on sentencepiece's options, never expected to fire
        raise TokenizerError(f"trained vocabulary starts with {got}, not {SPECIAL_TOKENS}")
    return atomic_write(Path(out_dir) / SPIECE_NAME, model)


def _train_in_child(paths: list[Path], do_lower_case: bool, keep_accents: bool, seed: int,
                    options: dict) -> tuple[bytes, int, str | None]:
    """Run sentencepiece's trainer (minutes of C++ that Python cannot interrupt) in a child
    Python process, so that Ctrl-C and SIGTERM take effect at once: the child is killed and the
    interrupt goes on; it writes only to memory, so nothing is left behind. A plain
    ``python -c`` child, not multiprocessing, which would re-run the caller's main script.
    Returns the model bytes, the number of sentences fed, and the trainer's error (or None)."""
    import pickle
    import subprocess

    job = pickle.dumps(([str(p) for p in paths], do_lower_case, keep_accents, seed, options))
    child = subprocess.Popen(python("-c", "from albert_edge.tokenizer import _trainer_child; _trainer_child()"),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=child_env())
    try:
        out, _ = child.communicate(job)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    if child.returncode != 0 or not out:
        raise TokenizerError(f"the sentencepiece trainer failed (exit code {child.returncode})")
    return pickle.loads(out)  # noqa: S301 (our own child's answer)


def _trainer_child() -> None:
    """The child of :func:`_train_in_child`: the job comes pickled on stdin, the answer goes
    pickled to stdout; signals are the parent's to handle."""
    import pickle
    import signal
    import sys

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    files, do_lower_case, keep_accents, seed, options = pickle.loads(sys.stdin.buffer.read())  # noqa: S301
    count = 0

    def sentences() -> Iterator[str]:
        nonlocal count
        for path in files:
            with open(path, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    for chunk in _chunks(normalize(line, do_lower_case, keep_accents), options["max_sentence_length"]):
                        count += 1
                        yield chunk

    model = io.BytesIO()
    spm.set_random_generator_seed(seed)
    try:
        spm.SentencePieceTrainer.train(sentence_iterator=sentences(), model_writer=model, **options)
        answer = (model.getvalue(), count, None)
    except RuntimeError as exc:
        answer = (b"", count, str(exc))
    sys.stdout.buffer.write(pickle.dumps(answer))
    sys.stdout.buffer.flush()


def _chunks(line: str, max_bytes: int) -> Iterator[str]:
    """A normalized line, cut at spaces into pieces the trainer accepts (it skips longer ones)."""
    if len(line.encode("utf-8")) <= max_bytes:
        if line:
            yield line
        return
    chunk: list[str] = []
    size = 0
    for word in line.split(" "):
        n = len(word.encode("utf-8")) + 1
        if chunk and size + n > max_bytes:
            yield " ".join(chunk)
            chunk, size = [], 0
        chunk.append(word)
        size += n
    if chunk:
        yield " ".join(chunk)


def _training_error(exc: RuntimeError, paths: list[Path], count: int, vocab_size: int) -> TokenizerError:
    where = paths[0].name if len(paths) == 1 else f"{len(paths)} files"
    if count == 0:
        return TokenizerError(f"no text to train the tokenizer on in {where}")
    too_high = re.search(r"Vocabulary size too high \((\d+)\).*<= (\d+)", str(exc))
    if too_high:
        return TokenizerError(f"vocab_size {vocab_size} is too large for the text in {where}: "
                              f"it yields at most {too_high.group(2)} pieces; use a smaller "
                              "vocab_size or more text")
    reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
    return TokenizerError(f"sentencepiece could not train on {where}: {reason}")


def find_spiece(path: str | os.PathLike) -> Path:
    """spiece.model in a checkpoint directory (or its only *.model file), or ``path`` itself."""
    path = Path(path)
    if path.is_file():
        return path
    if not path.is_dir():
        raise TokenizerError(f"{path} does not exist")
    if (path / SPIECE_NAME).is_file():
        return path / SPIECE_NAME
    models = sorted(path.glob("*.model"))
    if len(models) == 1:
        return models[0]
    found = ", ".join(m.name for m in models) or "none"
    raise TokenizerError(f"no {SPIECE_NAME} in {path} (*.model files: {found})")


def _load_processor(path: Path) -> spm.SentencePieceProcessor:
    if not path.is_file():
        raise TokenizerError(f"sentencepiece model {path} does not exist")
    sp = spm.SentencePieceProcessor()
    try:
        sp.load(str(path))
    except (RuntimeError, OSError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TokenizerError(f"{path} is not a sentencepiece model ({reason})") from None
    return sp


def _piece_types(proto: bytes) -> list[int]:
    """The type of each piece (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte),
    read from the model's protobuf bytes: sentencepiece's Python API has no is_user_defined."""
    types = []
    for field, value in _fields(proto):
        if field == 1:  # ModelProto.pieces
            types.append(next((v for f, v in _fields(value) if f == 3), 1))  # .type, default NORMAL
    return types


def _fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of each field of one protobuf message (the wire format, no schema)."""
    for number, value, _ in _field_spans(buf):
        yield number, value


def _field_spans(buf: bytes) -> Iterator[tuple[int, int | bytes, slice]]:
    """(field number, value, where the whole field lies in ``buf``: key and value) of each field
    of one protobuf message."""
    pos = 0
    while pos < len(buf):
        start = pos
        key, pos = _varint(buf, pos)
        wire = key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 2:
            size, pos = _varint(buf, pos)
            value, pos = buf[pos:pos + size], pos + size
        elif wire in (1, 5):
            value, pos = 0, pos + (8 if wire == 1 else 4)
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield key >> 3, value, slice(start, pos)


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        value |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if not byte & 0x80:
            return value, pos
