"""Labelled files for fine-tuning: CSV, TSV or JSON lines, turned into model inputs per task.

Columns (names configurable, see :class:`Columns`):

- ``classification``: ``text``, optional ``text_pair``, ``label`` (any string or number).
- ``token-classification``: ``tokens`` and ``tags``, one tag per word: JSON lists, or strings of
  space-separated words/tags in CSV/TSV. The tag goes on a word's first piece.
- ``qa`` (extractive, SQuAD-like): ``question``, ``context``, ``answer`` (its text) and optionally
  ``answer_start`` (character offset in the context; else its first occurrence is used).
  The context is cut to fit ``max_seq_length``; answers are predicted as whole words.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..tokenizer import pair_ids, truncate
from .errors import DataError
from .tokens import Vocabulary

__all__ = ["TASKS", "Columns", "Feature", "read_records", "label_names", "build_features", "collate_features"]

TASKS = ("classification", "token-classification", "qa")
_MAX_QUESTION = 64  # pieces of the question kept in a QA input


@dataclass(frozen=True)
class Columns:
    text: str = "text"
    text_pair: str = "text_pair"
    label: str = "label"
    tokens: str = "tokens"
    tags: str = "tags"
    question: str = "question"
    context: str = "context"
    answer: str = "answer"
    answer_start: str = "answer_start"


@dataclass
class Feature:
    """One model input. ``label`` is a class id (classification), a list with -100 on pieces
    that carry no tag (token-classification), or (start, end) token positions (qa)."""

    input_ids: list[int]
    token_type_ids: list[int]
    label: Any
    words: list[str] = field(default_factory=list)  # qa: the context's words
    word_of_token: dict[int, int] = field(default_factory=dict)  # qa: token position -> word
    answer: str = ""  # qa: the gold answer text


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a .csv, .tsv or .jsonl/.json (one object per line) file, as dicts."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"labelled file {path} does not exist")
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".tsv", ".jsonl", ".json"):
        raise DataError(f"{path}: unknown file type {suffix!r}; use .csv, .tsv or .jsonl")
    try:
        rows = _read_rows(path, suffix)
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} is not UTF-8 text (it holds the byte 0x{exc.object[exc.start]:02x}); "
                        "convert it to UTF-8") from None
    except csv.Error as exc:
        raise DataError(f"{path} is not a readable {suffix[1:].upper()} file: {exc}") from None
    if not rows:
        raise DataError(f"{path} holds no rows")
    return rows


def _read_rows(path: Path, suffix: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8", newline="") as fh:
        if suffix in (".csv", ".tsv"):
            return list(csv.DictReader(fh, delimiter="," if suffix == ".csv" else "\t"))
        rows = []
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path} line {n} is not JSON: {exc.msg}") from None
            if not isinstance(row, dict):
                raise DataError(f"{path} line {n} is not a JSON object")
            rows.append(row)
        return rows


def _need(row: dict, column: str, path: str, n: int) -> Any:
    if column not in row or row[column] is None:
        raise DataError(f"{path} row {n} has no column {column!r} (it has: {', '.join(map(str, row))})")
    return row[column]


def _words(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else str(value).split()


def label_names(task: str, rows: Sequence[dict], columns: Columns, path: str) -> tuple[str, ...]:
    """The label set of a training file, sorted (numerically when every label is a number)."""
    if task == "qa":
        return ()
    if task == "classification":
        found = {str(_need(r, columns.label, path, n)) for n, r in enumerate(rows, 1)}
    else:
        found = {t for n, r in enumerate(rows, 1) for t in _words(_need(r, columns.tags, path, n))}
    if len(found) < 2:
        raise DataError(f"{path} has {len(found)} distinct label(s); a classifier needs at least 2")
    numeric = all(re.fullmatch(r"-?\d+(\.\d+)?", x) for x in found)
    return tuple(sorted(found, key=(lambda x: (float(x), x)) if numeric else None))


def build_features(task: str, rows: Sequence[dict], vocab: Vocabulary, max_len: int,
                   labels: Sequence[str], columns: Columns, path: str) -> list[Feature]:
    """Model inputs for every row; raises DataError naming the row of any bad one."""
    if task not in TASKS:
        raise DataError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    index = {name: i for i, name in enumerate(labels)}
    build = {"classification": _classification, "token-classification": _tagging, "qa": _qa}[task]
    return [build(row, vocab, max_len, index, columns, path, n) for n, row in enumerate(rows, 1)]


def _pair_ids(vocab: Vocabulary, a: list[int], b: list[int] | None) -> tuple[list[int], list[int]]:
    return pair_ids(vocab.cls_id, vocab.sep_id, a, b)


def _label_id(value: Any, index: dict[str, int], path: str, n: int) -> int:
    if str(value) not in index:
        raise DataError(f"{path} row {n} has label {value!r}, which the training file does not have")
    return index[str(value)]


def _classification(row, vocab, max_len, index, columns, path, n) -> Feature:
    a = vocab.ids(str(_need(row, columns.text, path, n)))
    pair = row.get(columns.text_pair)
    b = vocab.ids(str(pair)) if pair not in (None, "") else None
    a, b = truncate(a, b, max_len - (2 if b is None else 3))
    ids, types = _pair_ids(vocab, a, b)
    return Feature(ids, types, _label_id(_need(row, columns.label, path, n), index, path, n))


def _tagging(row, vocab, max_len, index, columns, path, n) -> Feature:
    words = _words(_need(row, columns.tokens, path, n))
    tags = _words(_need(row, columns.tags, path, n))
    if len(words) != len(tags):
        raise DataError(f"{path} row {n} has {len(words)} tokens but {len(tags)} tags")
    ids, labels = [vocab.cls_id], [-100]
    for word, tag in zip(words, tags):
        pieces = vocab.ids(word) or [vocab.unk_id]
        if len(ids) + len(pieces) > max_len - 1:
            break  # words past the window are not trained on nor scored
        ids += pieces
        labels += [_label_id(tag, index, path, n)] + [-100] * (len(pieces) - 1)
    ids.append(vocab.sep_id)
    labels.append(-100)
    return Feature(ids, [0] * len(ids), labels)


def _qa(row, vocab, max_len, index, columns, path, n) -> Feature:
    question = str(_need(row, columns.question, path, n))
    context = str(_need(row, columns.context, path, n))
    answer = str(_need(row, columns.answer, path, n))
    start = _answer_start(row.get(columns.answer_start), context, answer, path, n)
    if start < 0 or context[start:start + len(answer)] != answer or not answer.strip():
        raise DataError(f"{path} row {n}: the answer {answer[:40]!r} is not in its context at that position")
    spans = [(m.start(), m.end()) for m in re.finditer(r"\S+", context)]
    first = next(i for i, (s, e) in enumerate(spans) if e > start)
    last = next(i for i, (s, e) in reversed(list(enumerate(spans))) if s < start + len(answer))
    q = vocab.ids(question)[:_MAX_QUESTION]
    ids, types = _pair_ids(vocab, q, None)  # [CLS] question [SEP], then the context as segment B
    word_of_token: dict[int, int] = {}
    first_token: dict[int, int] = {}
    last_token: dict[int, int] = {}
    for w, (s, e) in enumerate(spans):
        pieces = vocab.ids(context[s:e]) or [vocab.unk_id]
        if len(ids) + len(pieces) > max_len - 1:
            break
        first_token[w], last_token[w] = len(ids), len(ids) + len(pieces) - 1
        word_of_token.update((len(ids) + k, w) for k in range(len(pieces)))
        ids += pieces
        types += [1] * len(pieces)
    ids.append(vocab.sep_id)
    types.append(1)
    # An answer past the window points at [CLS]: trained as "no answer here", scored as a miss.
    label = (first_token[first], last_token[last]) if last in last_token else (0, 0)
    words = [context[s:e] for s, e in spans]
    return Feature(ids, types, label, words, word_of_token, answer)


def _answer_start(value: Any, context: str, answer: str, path: str, n: int) -> int:
    """The answer's character offset: the column's value (a whole number), or else the answer's
    first occurrence in the context."""
    if value in (None, ""):
        return context.find(answer)
    start = None
    if isinstance(value, int) and not isinstance(value, bool):
        start = value
    elif isinstance(value, float) and value.is_integer():
        start = int(value)
    elif isinstance(value, str) and value.strip().isdigit():
        start = int(value)
    if start is None or start < 0:
        raise DataError(f"{path} row {n}: answer_start {value!r} is not a character offset (a whole number >= 0)")
    return start


def collate_features(features: Sequence[Feature], task: str, pad_id: int) -> dict:
    """Features -> tensors padded to the longest: input_ids, attention_mask, token_type_ids and
    labels (B,) | labels (B, T) | start_positions, end_positions (B,)."""
    import torch

    B, T = len(features), max(len(f.input_ids) for f in features)
    input_ids = torch.full((B, T), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((B, T), dtype=torch.long)
    token_type_ids = torch.zeros((B, T), dtype=torch.long)
    for row, f in enumerate(features):
        n = len(f.input_ids)
        input_ids[row, :n] = torch.tensor(f.input_ids)
        attention_mask[row, :n] = 1
        token_type_ids[row, :n] = torch.tensor(f.token_type_ids)
    batch = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
    if task == "classification":
        batch["labels"] = torch.tensor([f.label for f in features], dtype=torch.long)
    elif task == "token-classification":
        labels = torch.full((B, T), -100, dtype=torch.long)
        for row, f in enumerate(features):
            labels[row, :len(f.label)] = torch.tensor(f.label)
        batch["labels"] = labels
    else:
        batch["start_positions"] = torch.tensor([f.label[0] for f in features], dtype=torch.long)
        batch["end_positions"] = torch.tensor([f.label[1] for f in features], dtype=torch.long)
    return batch
