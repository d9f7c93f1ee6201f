"""The builtin topic task's classifier with early exits, as the demo bundle and the pipeline's
built-in default make it: a pretrained small ALBERT fine-tuned on labelled paragraphs of the
builtin corpus (:mod:`albert_edge.train.labelled`), then its exits trained with the backbone and
the final classifier frozen (``finetune --exits frozen``), the exit rule chosen on the held-out
texts and recorded in the checkpoint.

The pipeline's copy is made once per recipe and cached beside the small model it starts from
(``$XDG_CACHE_HOME/albert-edge/pipeline/``, each file checked by sha256 before reuse), with the
held-out texts (``held-out.txt``, one per line) that the pipeline profiles it on.
Build side: torch, imported inside the functions.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import AlbertEdgeError
from ..files import staged
from .small import CHECKPOINT_FILES, SmallRecipe, cache_dir, pretrained, verified

__all__ = ["ClassifierRecipe", "fine_tune_topics", "topic_classifier", "HELD_OUT"]

log = logging.getLogger(__name__)

HELD_OUT = "held-out.txt"  # in the cached checkpoint: the held-out texts, one per line


@dataclass(frozen=True)
class ClassifierRecipe:
    """Everything that decides the classifier's weights past its pretrained start."""

    epochs: int = 3
    lr: float = 2e-4
    seq_len: int = 128
    exit_epochs: int = 2
    exit_lr: float = 1e-3
    batch_size: int = 32
    seed: int = 0
    recipe_version: int = 1


def fine_tune_topics(start: Path, topics: Path, out: Path, spiece: Path, *, epochs: int, lr: float, seq_len: int,
                     seed: int, threads: int | None, exits: bool = False, batch_size: int = 32,
                     on_event: Callable[[dict], None] | None = None):
    """``finetune`` of ``start`` on the topic task in ``topics`` (train.jsonl, eval.jsonl) into
    ``out``; with ``exits``, only the early exits of a fine-tuned classifier train. Its result."""
    from ..train.finetune import FinetuneOptions, finetune

    return finetune(FinetuneOptions(
        task="classification", train_file=str(topics / "train.jsonl"), eval_file=str(topics / "eval.jsonl"),
        model=str(start), out_dir=str(out), tokenizer=str(spiece), epochs=epochs, lr=lr, batch_size=batch_size,
        max_seq_length=seq_len, seed=seed, device="cpu", threads=threads, exits="frozen" if exits else None),
        on_event=on_event)


def topic_classifier(recipe: ClassifierRecipe, base: SmallRecipe, base_name: str, name: str,
                     on_event: Callable[[dict], None] | None = None,
                     threads: int | None = None) -> tuple[Path, dict[str, Any]]:
    """The classifier with exits fine-tuned from ``base`` (pretrained, cached as ``base_name``):
    the cached checkpoint directory, from the cache when a verified copy is there, else trained
    now; and its figures (fine-tuning's and the exits' held-out metrics)."""
    start, _ = pretrained(base, base_name, on_event, threads)
    key = json.dumps({"recipe": dataclasses.asdict(recipe), "start": start.parent.name}, sort_keys=True)
    cached = cache_dir() / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"
    if not verified(cached):
        log.info("fine-tuning %s (and its early exits) into %s", name, cached)
        _train(recipe, start, cached, on_event, threads)
    return cached / "checkpoint", json.loads((cached / "cache.json").read_text(encoding="utf-8"))["figures"]


def _train(r: ClassifierRecipe, start: Path, cached: Path, on_event, threads: int | None) -> None:
    from ..formats.manifest import sha256_of
    from ..train.labelled import write_topic_dataset

    spiece = start / "spiece.model"
    with staged(cached, directory=True, keep=False) as work:
        train, held_out = write_topic_dataset(work / "topics", seed=r.seed)
        settings = dict(seq_len=r.seq_len, seed=r.seed, threads=threads, batch_size=r.batch_size, on_event=on_event)
        fine = fine_tune_topics(start, work / "topics", work / "fine", spiece, epochs=r.epochs, lr=r.lr, **settings)
        run = fine_tune_topics(work / "fine", work / "topics", work / "exits", spiece, epochs=r.exit_epochs,
                               lr=r.exit_lr, exits=True, **settings)
        checkpoint = work / "checkpoint"
        checkpoint.mkdir()
        for item in (work / "exits").iterdir():
            if item.is_file() and item.name in CHECKPOINT_FILES:
                shutil.copy2(item, checkpoint / item.name)
        if not (checkpoint / "model.safetensors").is_file():
            raise AlbertEdgeError(f"fine-tuning wrote no model.safetensors into {work / 'exits'}")
        texts = [json.loads(line)["text"] for line in held_out.read_text(encoding="utf-8").splitlines() if line]
        (checkpoint / HELD_OUT).write_text("".join(t.replace("\n", " ") + "\n" for t in texts), encoding="utf-8")
        metrics = {k: v for k, v in fine.metrics.items() if k != "exits"}
        figures = {"fine_tuning": {**metrics, "epochs": r.epochs}, "exits": run.metrics["exits"],
                   "examples": {"train": _lines(train), "held_out": len(texts)}}
        meta = {"recipe": dataclasses.asdict(r), "figures": figures,
                "files": {p.name: sha256_of(p) for p in checkpoint.iterdir()}}
        (work / "cache.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        for done in ("topics", "fine", "exits"):
            shutil.rmtree(work / done)


def _lines(path: Path) -> int:
    return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
