"""The built-in default of `albert-edge pipeline` with no SOURCE: two checkpoints made here, no
download.

- ``albert-base-v2-random``: the albert-base-v2 shape (V=30000, E=128, H=768, 12 layers sharing
  one set of weights) with random weights (seeded; every parameter nudged by noise so no zero
  bias or unit LayerNorm folds away). Its files have the real sizes and run at the real speed;
  its agreement figures mean nothing and the report leaves them out.
- ``albert-small-builtin``: a small ALBERT (V=4000, E=64, H=128, 4 layers) pretrained briefly
  on the builtin corpus with a tokenizer trained on it, so that the int8 and fp16 files'
  agreement with their fp32 parent is measured on real held-out text.

The trained one is cached under ``~/.cache/albert-edge/pipeline/`` keyed by its recipe and
the corpus it read, and verified by sha256 before reuse.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..files import atomic_write
from ..report import WEIGHTS_NOTE
from .state import PipelineError

__all__ = ["RANDOM_NAME", "SMALL_NAME", "SMALL_RECIPE", "DESCRIPTION", "make_random", "make_small", "cache_dir"]

log = logging.getLogger(__name__)

RANDOM_NAME = "albert-base-v2-random"
SMALL_NAME = "albert-small-builtin"
DESCRIPTION = (f"built-in default: {RANDOM_NAME} (the albert-base-v2 shape with random weights: sizes and latency) "
               f"and {SMALL_NAME} (V=4000, E=64, H=128, 4 layers, pretrained briefly on the builtin corpus: "
               "accuracy of the int8/fp16 files against fp32 on real text)")

# Everything that decides the small model's weights; the cache key is its hash.
SMALL_RECIPE: dict[str, Any] = {
    "vocab_size": 4000,
    "config": dict(vocab_size=4000, embedding_size=64, hidden_size=128, num_hidden_layers=4, num_hidden_groups=1,
                   num_attention_heads=4, intermediate_size=512, max_position_embeddings=128),
    "steps": 200, "batch_size": 32, "lr": 1e-2, "max_seq_length": 64, "seed": 0, "recipe_version": 1,
}


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "albert-edge" / "pipeline"


def make_random(out: Path, seed: int = 0) -> Path:
    """The albert-base-v2 shape with random weights, saved as a checkpoint in ``out`` with a
    note saying so (the report reads it)."""
    import torch

    from .. import checkpoints
    from ..config import AlbertConfig
    from ..model import build_model

    generator = torch.manual_seed(seed)
    model = build_model(AlbertConfig.preset("albert-base-v2"), "base")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.02)
    checkpoints.save(model, out)
    atomic_write(out / WEIGHTS_NOTE, json.dumps({"weights": "random-init", "seed": seed,
                                                 "shape": "albert-base-v2"}, indent=2) + "\n")
    return out


def make_small(out: Path, on_event: Callable[[dict], None] | None = None) -> tuple[Path, dict[str, Any]]:
    """The small pretrained ALBERT in ``out`` (a checkpoint with its spiece.model), from the cache
    when a verified copy of the same recipe is there. Returns (checkpoint, training figures)."""
    from ..text import builtin_corpus_path
    from ..formats.manifest import sha256_of

    corpus = builtin_corpus_path()
    key = hashlib.sha256(json.dumps({**SMALL_RECIPE, "corpus": sha256_of(corpus)}, sort_keys=True).encode()
                         ).hexdigest()[:16]
    cached = cache_dir() / f"{SMALL_NAME}-{key}"
    if not _verified(cached):
        log.info("training %s into %s", SMALL_NAME, cached)
        _train_small(cached, corpus, on_event)
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(cached / "checkpoint", out)
    figures = json.loads((cached / "cache.json").read_text(encoding="utf-8"))["figures"]
    return out, figures


def _verified(cached: Path) -> bool:
    from ..formats.manifest import sha256_of

    try:
        meta = json.loads((cached / "cache.json").read_text(encoding="utf-8"))
        return all(sha256_of(cached / "checkpoint" / name) == sha for name, sha in meta["files"].items())
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _train_small(cached: Path, corpus: Path, on_event) -> None:
    from ..config import AlbertConfig
    from ..formats.manifest import sha256_of
    from ..tokenizer import train_spiece
    from ..train.data import MaskingOptions
    from ..train.pretrain import PretrainOptions, pretrain

    r = SMALL_RECIPE
    cached.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{cached.name}.", dir=cached.parent))
    try:
        spiece = train_spiece([corpus], work / "tok", vocab_size=r["vocab_size"])
        opts = PretrainOptions(
            corpus=("builtin",), tokenizer=str(spiece), out_dir=str(work / "run"),
            config=AlbertConfig(**r["config"]), steps=r["steps"], batch_size=r["batch_size"], lr=r["lr"],
            seed=r["seed"], masking=MaskingOptions(max_seq_length=r["max_seq_length"]),
            eval_examples=500, eval_every=r["steps"], save_every=r["steps"], keep_checkpoints=1,
            log_every=10)
        result = pretrain(opts, on_event=on_event)
        checkpoint = work / "checkpoint"
        checkpoint.mkdir()
        for item in Path(result.out_dir).iterdir():
            if item.is_file() and item.name in ("config.json", "model.safetensors", "spiece.model"):
                shutil.copy2(item, checkpoint / item.name)
        if not (checkpoint / "model.safetensors").is_file():
            raise PipelineError(f"pretraining wrote no model.safetensors into {result.out_dir}")
        figures = {"step": result.step, "eval": result.eval, "train": result.train}
        meta = {"recipe": r, "figures": figures,
                "files": {p.name: sha256_of(p) for p in checkpoint.iterdir()}}
        (work / "cache.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        shutil.rmtree(work / "run")
        if cached.exists():
            shutil.rmtree(cached)
        os.replace(work, cached)
    finally:
        shutil.rmtree(work, ignore_errors=True)
