"""Real text for quantization: read it, split it into sentences, keep a held-out part for the
accuracy check, and tokenize both parts into the batches the model takes.

Text files must be UTF-8 and hold some text; anything else is one clear error. ``builtin``
names the builtin English corpus of albert_edge.train (the standard library's documentation).
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from albert_edge.formats.graph import INPUT_NAMES
from albert_edge.errors import ConfigError, DataError, TokenizerError
from albert_edge.text import read_sentences

__all__ = ["TextSplit", "Batch", "Prepared", "prepare", "read_sentences", "split_text", "load_tokenizer",
           "text_batches", "random_batches", "short_texts", "MASK_FRACTION", "SHORT_SHARE"]

log = logging.getLogger(__name__)

MASK_FRACTION = 0.15  # of the real tokens in an evaluation batch, replaced by [MASK]
# Of the calibration and of the evaluation sentences, the share also sent alone as a short text
# (its first few words): what users send is often a question or a command of a few tokens.
SHORT_SHARE = 0.25
_SHORT_WORDS = (1, 2, 3, 4, 6)


@dataclass(frozen=True)
class TextSplit:
    """Sentences for calibration and, disjoint from them, for the accuracy check."""

    calibration: tuple[str, ...]
    evaluation: tuple[str, ...]
    sources: tuple[str, ...] = ()


@dataclass
class Batch:
    """Model inputs (int64, (B, T)) and, for MLM heads, the positions that were masked."""

    feeds: dict[str, np.ndarray]
    masked: np.ndarray | None = None  # bool (B, T)
    source: str = "text"

    @property
    def valid(self) -> np.ndarray:
        return self.feeds["attention_mask"].astype(bool)


def split_text(sentences: Sequence[str], num_calibration: int, num_eval: int, seed: int = 0,
               sources: Sequence[str] = ()) -> TextSplit:
    """Shuffle (seeded) and cut: the evaluation part first, calibration from the rest, so the
    accuracy is always measured on sentences the calibration never saw."""
    unique = list(dict.fromkeys(s.strip() for s in sentences if s.strip()))
    if len(unique) < 2:
        raise DataError(f"calibration text has {len(unique)} distinct sentence(s); need at least 2 "
                        "(some to calibrate on, others held out to measure accuracy)")
    random.Random(seed).shuffle(unique)
    n_eval = min(num_eval, max(1, len(unique) // 2))
    evaluation = unique[:n_eval]
    calibration = unique[n_eval:n_eval + num_calibration]
    return TextSplit(tuple(calibration), tuple(evaluation), tuple(sources))


def load_tokenizer(path: str | os.PathLike, vocab_size: int):
    """The AlbertTokenizer at ``path`` (a spiece.model or a directory holding one). Every id it
    gives must be in the model's vocabulary: fewer pieces than ``vocab_size`` is fine (a
    tokenizer trained on less text), more is not."""
    from albert_edge.tokenizer import AlbertTokenizer

    tok = AlbertTokenizer.from_dir(path)
    if tok.vocab_size > vocab_size:
        raise TokenizerError(f"tokenizer {tok.path} has {tok.vocab_size} pieces but the model's vocab_size "
                             f"is {vocab_size}: it gives ids the model does not have")
    return tok


def short_texts(sentences: Sequence[str]) -> list[str]:
    """The first 1 to 6 words of a SHORT_SHARE of ``sentences`` (at least one): texts of a few
    tokens, where a static file's padding is most of what it runs on."""
    count = max(1, round(len(sentences) * SHORT_SHARE)) if sentences else 0
    return [" ".join(s.split()[:_SHORT_WORDS[i % len(_SHORT_WORDS)]]) for i, s in enumerate(sentences[:count])]


def text_batches(tok, sentences: Sequence[str], seq_len: int, batch_size: int, *, mask_id: int | None = None,
                 pad_to_length: bool = False, seed: int = 0, pairs: bool = True) -> list[Batch]:
    """Tokenized batches of ``sentences``, two neighbouring sentences per row (a sentence pair,
    so both token types are exercised), or one per row without ``pairs``. With ``mask_id``
    about 15% of the real tokens become [MASK], and the batch records where."""
    rng = np.random.default_rng(seed)
    padding = "max_length" if pad_to_length else "longest"
    batches = []
    for start in range(0, len(sentences), batch_size):
        chunk = list(sentences[start:start + batch_size])
        firsts = chunk[0::2] if pairs else chunk
        seconds = chunk[1::2] if pairs else []
        seconds = seconds + [None] * (len(firsts) - len(seconds))
        rows = [tok(a, b, max_length=seq_len, padding=padding, truncation=True)
                for a, b in zip(firsts, seconds, strict=True)]
        feeds = _stack(rows, tok.pad_id)
        batches.append(_with_mask(feeds, rng, mask_id, special=(tok.cls_id, tok.sep_id, tok.pad_id)))
    return batches


def random_batches(vocab_size: int, seq_len: int, count: int, batch_size: int, *, mask_id: int | None = None,
                   seed: int = 0) -> list[Batch]:
    """Random ids with padded rows and two segments: the fallback when no tokenizer is known."""
    rng = np.random.default_rng(seed)
    batches = []
    for start in range(0, count, batch_size):
        B = min(batch_size, count - start)
        ids = rng.integers(min(5, vocab_size - 1), vocab_size, size=(B, seq_len), dtype=np.int64)
        mask = np.ones((B, seq_len), dtype=np.int64)
        types = np.zeros((B, seq_len), dtype=np.int64)
        for row in range(1, B, 2):
            cut = int(rng.integers(seq_len // 2, seq_len))
            mask[row, cut:] = 0
            ids[row, cut:] = 0
        types[:, seq_len // 2:] = 1
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        batch = _with_mask(feeds, rng, mask_id, special=(0,))
        batch.source = "random ids"
        batches.append(batch)
    return batches


def _stack(rows: list[dict[str, np.ndarray]], pad_id: int) -> dict[str, np.ndarray]:
    width = max(r["input_ids"].shape[1] for r in rows)
    out = {}
    for name in INPUT_NAMES:
        fill = pad_id if name == "input_ids" else 0
        out[name] = np.stack([np.pad(r[name][0], (0, width - r[name].shape[1]), constant_values=fill) for r in rows])
    return out


def _with_mask(feeds: dict[str, np.ndarray], rng: np.random.Generator, mask_id: int | None,
               special: Sequence[int]) -> Batch:
    if mask_id is None:
        return Batch(feeds)
    ids = feeds["input_ids"].copy()
    candidates = feeds["attention_mask"].astype(bool) & ~np.isin(ids, list(special))
    masked = candidates & (rng.random(ids.shape) < MASK_FRACTION)
    for row in range(ids.shape[0]):  # every row masks at least one token when it can
        if not masked[row].any() and candidates[row].any():
            masked[row, rng.choice(np.flatnonzero(candidates[row]))] = True
    ids[masked] = mask_id
    return Batch({**feeds, "input_ids": ids}, masked=masked)


@dataclass
class Prepared:
    """Calibration batches (empty for schemes that need none), held-out evaluation batches, and
    a description of both for the manifest."""

    calibration: list[Batch]
    evaluation: list[Batch]
    described: dict


def prepare(config, source, recipe, seq_len: int) -> Prepared:
    """The batches a quantization needs, from ``config`` (text files, tokenizer, sample counts),
    for the model ``source`` and the scheme's ``recipe``. Real text needs a tokenizer: the one
    given, or the spiece.model beside the source checkpoint; without one, only schemes that
    need no calibration run, measured on random ids (and the description says so)."""
    spiece = config.tokenizer or _checkpoint_spiece(source)
    mlm = "prediction_logits" in source.output_names
    vocab = source.config.vocab_size
    if not spiece:
        if recipe.calibration:
            raise ConfigError(f"{recipe.format} {recipe.scheme.value} needs real text: give --calibration "
                              "TEXT_FILES and --tokenizer SPIECE")
        if config.calibration:
            raise ConfigError("--calibration needs --tokenizer SPIECE (the source checkpoint has no spiece.model)")
        evaluation = random_batches(vocab, seq_len, config.eval_samples, config.batch_size,
                                    mask_id=4 if mlm and vocab > 4 else None, seed=config.seed)
        return Prepared([], evaluation, {
            "evaluation": f"{config.eval_samples} rows of random ids (no tokenizer: pass --tokenizer to measure "
                          "on real text)", "calibration": None, "method": None, "seq_len": seq_len})
    tok = load_tokenizer(spiece, vocab)
    sentences, sources = read_sentences(config.calibration or ("builtin",))
    split = split_text(sentences, config.num_samples, config.eval_samples, seed=config.seed, sources=sources)
    if recipe.calibration and not split.calibration:
        raise DataError("the calibration text is too short: every sentence went to the held-out evaluation set")
    # An MLM head is run on text with [MASK] tokens, where its logits are largest: calibrating
    # without them clips exactly the predictions that matter.
    mask_id = tok.mask_id if mlm else None
    calibration = (_with_short(tok, split.calibration, seq_len, config.batch_size, mask_id=mask_id,
                               pad_to_length=True, seed=config.seed + 1) if recipe.calibration else [])
    evaluation = _with_short(tok, split.evaluation, seq_len, config.batch_size, mask_id=mask_id, seed=config.seed)
    names = ", ".join(Path(s).name for s in sources)
    return Prepared(calibration, evaluation, {
        "evaluation": f"{len(split.evaluation)} held-out sentences of {names}",
        "calibration": f"{len(split.calibration)} sentences of {names}" if recipe.calibration else None,
        "method": config.calibration_method.value if recipe.calibration else None,
        "tokenizer": str(tok.path), "seq_len": seq_len,
    })


def _with_short(tok, sentences: Sequence[str], seq_len: int, batch_size: int, **options) -> list[Batch]:
    """The batches of ``sentences`` in pairs, then of their :func:`short_texts` one per row."""
    return (text_batches(tok, sentences, seq_len, batch_size, **options)
            + text_batches(tok, short_texts(sentences), seq_len, batch_size, pairs=False, **options))


def _checkpoint_spiece(source) -> Path | None:
    """The spiece.model of the checkpoint the file was converted from, if it has one."""
    if source.checkpoint is None:
        return None
    directory = source.checkpoint if source.checkpoint.is_dir() else source.checkpoint.parent
    found = directory / "spiece.model"
    return found if found.is_file() else None
