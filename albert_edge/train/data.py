"""ALBERT's pretraining examples: sentence-order pairs and n-gram masking.

This follows ``create_pretraining_data.py`` of the original ALBERT code:

- A document's sentences are gathered into chunks of about ``max_seq_length - 3`` tokens (with
  probability ``short_seq_prob`` a shorter random target, so the model also sees short inputs).
  A chunk of two or more sentences is cut at a random sentence boundary into A and B; half of
  the pairs are swapped (B, A) and labelled 1, the others keep their order and are labelled 0 —
  the sentence-order prediction (SOP) task. A chunk of one sentence gives no pair.
- Masking picks whole-word n-grams, n in 1..``max_ngram`` with p(n) proportional to 1/n
  (for n <= 3: 6/11, 3/11, 2/11), until ``masked_lm_prob`` of the tokens (at most
  ``max_predictions``) are chosen. Each chosen token becomes [MASK] 80% of the time, a random
  piece 10%, and stays itself 10%.

Everything here is pure Python and draws from the ``random.Random`` it is given, so the same
seed always builds the same examples.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .tokens import Vocabulary

__all__ = ["Example", "MaskingOptions", "examples_from_document", "mask_tokens"]


@dataclass(frozen=True)
class MaskingOptions:
    """How pretraining examples are cut and masked (ALBERT's defaults)."""

    max_seq_length: int = 128
    masked_lm_prob: float = 0.15
    max_predictions: int = 20
    max_ngram: int = 3
    short_seq_prob: float = 0.1

    def __post_init__(self) -> None:
        from .errors import DataError

        if self.max_seq_length < 8:
            raise DataError(f"max_seq_length ({self.max_seq_length}) must be at least 8")
        if not 0.0 < self.masked_lm_prob < 1.0:
            raise DataError(f"masked_lm_prob ({self.masked_lm_prob}) must be in (0, 1)")
        if self.max_predictions < 1 or self.max_ngram < 1:
            raise DataError("max_predictions and max_ngram must be at least 1")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise DataError(f"short_seq_prob ({self.short_seq_prob}) must be in [0, 1]")


@dataclass(frozen=True)
class Example:
    """One pretraining input: ``[CLS] A [SEP] B [SEP]`` after masking."""

    input_ids: tuple[int, ...]
    len_a: int  # tokens of A, so segment A (type 0) is the first len_a + 2 ids
    positions: tuple[int, ...]  # masked positions, ascending
    labels: tuple[int, ...]  # the original ids at those positions
    sop_label: int  # 0: A then B as written, 1: swapped


def examples_from_document(sentences: list[list[int]], vocab: Vocabulary, opts: MaskingOptions,
                           rng: random.Random) -> list[Example]:
    """Sentence-order examples from one document, given as token ids per sentence."""
    max_tokens = opts.max_seq_length - 3  # room left by [CLS], [SEP], [SEP]
    target = max_tokens
    if rng.random() < opts.short_seq_prob:
        target = rng.randint(2, max_tokens)
    out: list[Example] = []
    chunk: list[list[int]] = []
    length = 0
    for i, sentence in enumerate(sentences):
        if sentence:
            chunk.append(sentence)
            length += len(sentence)
        if not chunk or (i < len(sentences) - 1 and length < target):
            continue
        if len(chunk) >= 2:
            a_end = rng.randint(1, len(chunk) - 1)
            a = [t for s in chunk[:a_end] for t in s]
            b = [t for s in chunk[a_end:] for t in s]
            swapped = rng.random() < 0.5
            if swapped:
                a, b = b, a
            _truncate_pair(a, b, max_tokens, rng)
            if a and b:
                out.append(_make_example(a, b, int(swapped), vocab, opts, rng))
        chunk, length = [], 0
    return out


def _truncate_pair(a: list[int], b: list[int], max_tokens: int, rng: random.Random) -> None:
    """Cut the longer of the two, from the front or the back at random, until they fit."""
    while len(a) + len(b) > max_tokens:
        longer = a if len(a) > len(b) else b
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def _make_example(a: list[int], b: list[int], sop_label: int, vocab: Vocabulary, opts: MaskingOptions,
                  rng: random.Random) -> Example:
    tokens = [vocab.cls_id, *a, vocab.sep_id, *b, vocab.sep_id]
    masked, positions, labels = mask_tokens(tokens, vocab, opts, rng)
    return Example(tuple(masked), len(a), tuple(positions), tuple(labels), sop_label)


def mask_tokens(tokens: list[int], vocab: Vocabulary, opts: MaskingOptions,
                rng: random.Random) -> tuple[list[int], list[int], list[int]]:
    """N-gram masking of whole words. Returns (masked tokens, positions, original ids)."""
    words: list[list[int]] = []  # token positions of each whole word, [CLS]/[SEP] excluded
    for i, tok in enumerate(tokens):
        if tok in (vocab.cls_id, vocab.sep_id):
            continue
        if words and not vocab.word_start[tok] and words[-1][-1] == i - 1:
            words[-1].append(i)
        else:
            words.append([i])
    budget = min(opts.max_predictions, max(1, round(len(tokens) * opts.masked_lm_prob)))
    weights = [1.0 / n for n in range(1, opts.max_ngram + 1)]
    starts = list(range(len(words)))
    rng.shuffle(starts)
    chosen: set[int] = set()
    out = list(tokens)
    for start in starts:
        if len(chosen) >= budget:
            break
        longest = min(opts.max_ngram, len(words) - start)
        n = rng.choices(range(1, longest + 1), weights=weights[:longest])[0]
        span = [i for w in words[start:start + n] for i in w]
        while n > 1 and len(chosen) + len(span) > budget:  # shrink the n-gram to fit the budget
            n -= 1
            span = [i for w in words[start:start + n] for i in w]
        if len(chosen) + len(span) > budget or chosen.intersection(span):
            continue
        for i in span:
            chosen.add(i)
            r = rng.random()
            if r < 0.8:
                out[i] = vocab.mask_id
            elif r >= 0.9:
                out[i] = rng.choice(vocab.replacement_ids)
    positions = sorted(chosen)
    return out, positions, [tokens[i] for i in positions]
