"""A labelled file made from the builtin corpus, for trying fine-tuning with no download.

**Topic classification**: each paragraph of the builtin corpus that documents one of a few
standard-library areas is labelled with that area — by default ``asyncio``, ``decimal``,
``email`` and ``xml`` (``_pydecimal``'s and ``_decimal``'s docstrings count as ``decimal``).
The split into train and eval is by document, so no document has paragraphs on both sides.
The label is where the text comes from, not a human judgement, so it is real but noisy: some
paragraphs ("Return the value.") could belong to any area.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Sequence
from pathlib import Path

from ..text import builtin_documents
from .errors import DataError
from ..files import atomic_write

__all__ = ["TOPICS", "write_topic_dataset"]

TOPICS = ("asyncio", "decimal", "email", "xml")
_ALIASES = {"_pydecimal": "decimal", "pydecimal": "decimal"}


def write_topic_dataset(out_dir: str | os.PathLike, topics: Sequence[str] = TOPICS, eval_fraction: float = 0.2,
                        min_words: int = 5, seed: int = 0) -> tuple[Path, Path]:
    """Write ``train.jsonl`` and ``eval.jsonl`` ({"text": ..., "label": topic}) into ``out_dir``."""
    if not 0 < eval_fraction < 1:
        raise DataError(f"eval_fraction ({eval_fraction}) must be in (0, 1)")
    by_doc: list[list[dict]] = []
    for doc in builtin_documents():
        topic = _ALIASES.get(doc.module, doc.module)
        if topic in topics:
            rows = [{"text": p, "label": topic} for p in doc.paragraphs if len(p.split()) >= min_words]
            if rows:
                by_doc.append(rows)
    found = {rows[0]["label"] for rows in by_doc}
    missing = [t for t in topics if t not in found]
    if missing:
        raise DataError(f"the builtin corpus has no paragraphs for topic(s) {', '.join(missing)}")
    rng = random.Random(f"albert-edge/topics/{seed}")
    rng.shuffle(by_doc)
    n_eval = max(1, round(len(by_doc) * eval_fraction))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, docs in (("train", by_doc[n_eval:]), ("eval", by_doc[:n_eval])):
        rows = [row for doc in docs for row in doc]
        path = out / f"{name}.jsonl"
        atomic_write(path, "".join(json.dumps(r) + "\n" for r in rows))
        paths.append(path)
    return paths[0], paths[1]
