"""What the profiler feeds a model: fixed-length batches of realistic ids, or real sentences at
their own lengths (a file that takes the text gets the text itself); and what a file accepts (its maximum sequence length, its vocabulary), read
from the manifest beside it and from its declared input shapes. Device side."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..formats.graph import INPUT_NAMES
from ..runtime.onnx_text import IDS_OUTPUT, TEXT_INPUT

__all__ = ["ModelLimits", "model_limits", "fixed_feeds", "text_feeds", "token_stats", "sentence_feeds",
           "text_of_length", "ids_counter", "packed_counter", "read_manifest", "CLS_ID", "SEP_ID", "FIRST_WORD_ID"]

# ALBERT's vocabularies put <pad> <unk> [CLS] [SEP] [MASK] at ids 0..4.
CLS_ID, SEP_ID, FIRST_WORD_ID = 2, 3, 5
# The vocabulary assumed when neither a manifest nor a tokenizer says (ids below it are valid for
# every ALBERT; the cost of a call does not depend on which ids it gets).
_FALLBACK_VOCAB = 99


@dataclass
class ModelLimits:
    """What a model file takes. ``max_seq_len`` is None when nothing says (the file is then run at
    the lengths asked for, and a failure names the length it failed at)."""

    max_seq_len: int | None = None
    max_seq_len_source: str | None = None  # "manifest" | "file entry" | "input shape"
    vocab_size: int | None = None
    scheme: str | None = None
    input_shape: list[Any] | None = None  # as the file declares it, e.g. ["batch", "sequence"] or [-1, -1]
    dynamic: bool | None = None  # batch and sequence length can change without re-converting

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def model_limits(path: str | os.PathLike, input_shape: tuple | None = None) -> ModelLimits:
    """Limits from ``manifest.json`` beside the file (config and file entry) and, when given, the
    runtime's declared input shape ((batch, sequence); a fixed int sequence dimension bounds it)."""
    path = Path(path)
    limits = ModelLimits()
    manifest = read_manifest(path.parent / "manifest.json")
    config = manifest.get("config") or {}
    if isinstance(config.get("max_position_embeddings"), int):
        limits.max_seq_len, limits.max_seq_len_source = config["max_position_embeddings"], "manifest"
    if isinstance(config.get("vocab_size"), int):
        limits.vocab_size = config["vocab_size"]
    entry = next((f for f in manifest.get("files") or [] if isinstance(f, dict) and f.get("name") == path.name), None)
    if entry:
        limits.scheme = entry.get("precision")
        bound = (entry.get("format_version") or {}).get("max_seq_len")  # a .pte converted with --max-seq-len
        if isinstance(bound, int) and not isinstance(bound, bool) and 0 < bound < (limits.max_seq_len or bound + 1):
            limits.max_seq_len, limits.max_seq_len_source = bound, "file entry"
    if input_shape is not None:
        limits.input_shape = list(input_shape)
        dims = list(input_shape)[:2]
        limits.dynamic = all(not isinstance(d, int) or d < 0 for d in dims)
        if len(dims) == 2 and isinstance(dims[1], int) and dims[1] > 0:
            if limits.max_seq_len is None or dims[1] < limits.max_seq_len:
                limits.max_seq_len, limits.max_seq_len_source = dims[1], "input shape"
    return limits


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest.json at ``path`` as a dict; empty when it is missing or unreadable (the file
    is then profiled from its own declared shapes)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def fixed_feeds(batch: int, seq_len: int, vocab_size: int | None, seed: int = 0) -> dict[str, np.ndarray]:
    """A (batch, seq_len) batch as a tokenizer makes one: ``[CLS] words [SEP]`` with random word
    ids from the vocabulary, attention mask all ones, one segment."""
    rng = np.random.default_rng(seed)
    high = max(FIRST_WORD_ID + 1, vocab_size or _FALLBACK_VOCAB)
    ids = rng.integers(FIRST_WORD_ID, high, size=(batch, seq_len), dtype=np.int64)
    ids[:, 0] = CLS_ID
    if seq_len > 1:
        ids[:, -1] = SEP_ID
    ones = np.ones((batch, seq_len), dtype=np.int64)
    return dict(zip(INPUT_NAMES, (ids, ones, np.zeros_like(ones))))


def text_feeds(text: str, tokenizer_path: str | os.PathLike, max_sentences: int,
               max_seq_len: int | None) -> tuple[list[dict[str, np.ndarray]], dict[str, Any]]:
    """Real sentences of ``text`` ("builtin" or a UTF-8 file), each tokenized at its own length
    (batch 1, no padding, truncated to ``max_seq_len``), and statistics of their token lengths."""
    from ..text import read_sentences
    from ..tokenizer import AlbertTokenizer, find_spiece

    sentences, sources = read_sentences([text])
    sentences = sentences[:max_sentences]
    tokenizer = AlbertTokenizer(find_spiece(tokenizer_path))
    encoded = [tokenizer.encode(s) for s in sentences]  # [CLS] ... [SEP]
    truncated = sum(bool(max_seq_len) and len(ids) > max_seq_len for ids in encoded)
    if max_seq_len:
        encoded = [ids if len(ids) <= max_seq_len else ids[:max_seq_len - 1] + [tokenizer.sep_id] for ids in encoded]
    feeds = []
    for ids in encoded:
        row = np.array([ids], dtype=np.int64)
        ones = np.ones_like(row)
        feeds.append(dict(zip(INPUT_NAMES, (row, ones, np.zeros_like(ones)))))
    stats = {"source": text, "files": sources, "sentences": len(feeds), "truncated": int(truncated),
             **token_stats([len(ids) for ids in encoded])}
    return feeds, stats


def token_stats(lengths: list[int]) -> dict[str, Any]:
    """Statistics of the sentences' token counts ([CLS] and [SEP] included)."""
    counts = np.array(lengths)
    return {"tokens": {"mean": float(counts.mean()), "min": int(counts.min()), "p50": float(np.median(counts)),
                       "p90": float(np.percentile(counts, 90)), "max": int(counts.max())},
            "distinct_lengths": int(np.unique(counts).size)}


# -- files that take the text (convert --to onnx-text): a call runs the tokenizer and the model --

def sentence_feeds(text: str, max_sentences: int) -> tuple[list[dict[str, np.ndarray]], dict[str, Any]]:
    """Real sentences of ``text`` ("builtin" or a UTF-8 file) as they are, one per call, for a
    file whose tokenizer is inside: its statistics say where they came from; the token counts are
    added once the file has tokenized them (:func:`token_stats`)."""
    from ..text import read_sentences

    sentences, sources = read_sentences([text])
    sentences = sentences[:max_sentences]
    return [_text_feed(s) for s in sentences], {"source": text, "files": sources, "sentences": len(sentences)}


def text_of_length(count, seq_len: int) -> tuple[dict[str, np.ndarray], int]:
    """A text that ``count`` (text -> its number of ids, [CLS] and [SEP] included, as the file's own
    tokenizer gives them) puts at exactly ``seq_len``: the first words of the builtin corpus, as
    many as fit, then short filler words. Returns the feed and how many counts finding it took;
    ValueError when no text comes out at that length."""
    from ..text import read_sentences

    words = " ".join(read_sentences(["builtin"])[0]).split()[: max(seq_len, 1)]
    calls = 0

    def length(text: str) -> int:
        nonlocal calls
        calls += 1
        return count(text)

    low, high = 0, len(words)  # the longest prefix of words that fits: length is monotone in the words
    while low < high:
        mid = (low + high + 1) // 2
        if length(" ".join(words[:mid])) <= seq_len:
            low = mid
        else:
            high = mid - 1
    text = " ".join(words[:low])
    have = length(text)
    for filler in ("a", "the", "I", "1"):  # a word the vocabulary holds whole adds one id
        while have < seq_len and length(f"{text} {filler}") == have + 1:
            text, have = f"{text} {filler}", have + 1
    if have != seq_len:
        raise ValueError(f"no text of the builtin corpus comes out at {seq_len} tokens (the nearest: {have})")
    return _text_feed(text), calls


def ids_counter(run):
    """``text_of_length``'s count for a file that reports its ids (``token_ids``): run it."""
    return lambda text: int(run(_text_feed(text))[IDS_OUTPUT].shape[1])


def packed_counter(path: str | os.PathLike, length: int):
    """``text_of_length``'s count for a MediaPipe file: the spiece.model packed in it (its
    normalizer inside) as sentencepiece runs it, plus [CLS] and [SEP], cut at the file's
    ``length``. Reads only the packed archive's entry, not the model."""
    import zipfile

    import sentencepiece as spm

    with zipfile.ZipFile(path) as archive:
        model = next(n for n in archive.namelist() if n.endswith(".model"))
        processor = spm.SentencePieceProcessor(model_proto=archive.read(model))
    return lambda text: min(len(processor.encode(text)) + 2, length)


def _text_feed(text: str) -> dict[str, np.ndarray]:
    return {TEXT_INPUT: np.array([text], dtype=object)}
