"""A small ALBERT pretrained on the builtin corpus with a tokenizer trained on it, made once per
recipe and cached: the pipeline's built-in ``albert-small-builtin`` and the demo bundle's MLM
(which the bundle's classifier is fine-tuned from) both come from here.

The cache is ``$XDG_CACHE_HOME/albert-edge/pipeline/`` (default ``~/.cache``), one directory per
recipe and corpus (named by their hash), each file checked by sha256 before it is reused.
Build side: torch, imported inside the functions.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import AlbertEdgeError
from ..files import cache_root, staged

__all__ = ["SmallRecipe", "PIPELINE_RECIPE", "cache_dir", "pretrained", "copy_checkpoint", "copied", "verified"]

log = logging.getLogger(__name__)

CHECKPOINT_FILES = ("config.json", "model.safetensors", "spiece.model")


@dataclass(frozen=True)
class SmallRecipe:
    """Everything that decides the small model's weights and figures; the cache key is its hash."""

    vocab_size: int
    config: dict[str, Any] = field(default_factory=dict)  # AlbertConfig fields (vocab_size set from above)
    steps: int = 200
    batch_size: int = 32
    lr: float = 1e-2
    max_seq_length: int = 64
    seed: int = 0
    eval_examples: int = 500
    recipe_version: int = 2

    def key(self, corpus_sha256: str) -> str:
        text = json.dumps({**dataclasses.asdict(self), "corpus": corpus_sha256}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


# The pipeline's albert-small-builtin: V=4000, E=64, H=128, 4 layers (one shared group), 200 steps.
PIPELINE_RECIPE = SmallRecipe(
    vocab_size=4000,
    config=dict(embedding_size=64, hidden_size=128, num_hidden_layers=4, num_hidden_groups=1,
                num_attention_heads=4, intermediate_size=512, max_position_embeddings=128),
    steps=200,
)


def cache_dir() -> Path:
    return cache_root() / "pipeline"


def pretrained(recipe: SmallRecipe, name: str, on_event: Callable[[dict], None] | None = None,
               threads: int | None = None) -> tuple[Path, dict[str, Any]]:
    """The checkpoint directory (config.json, model.safetensors, spiece.model) of ``recipe``, from
    the cache when a verified copy is there, else trained now and cached; and its training
    figures (step, eval, train). ``name`` names the cache entry."""
    from ..formats.manifest import sha256_of
    from ..text import builtin_corpus_path

    corpus = builtin_corpus_path()
    cached = cache_dir() / f"{name}-{recipe.key(sha256_of(corpus))}"
    if not verified(cached):
        log.info("training %s into %s", name, cached)
        _train(recipe, cached, corpus, on_event, threads)
    figures = json.loads((cached / "cache.json").read_text(encoding="utf-8"))["figures"]
    return cached / "checkpoint", figures


def copy_checkpoint(recipe: SmallRecipe, name: str, out: Path,
                    on_event: Callable[[dict], None] | None = None) -> tuple[Path, dict[str, Any]]:
    """:func:`pretrained`, copied into ``out`` (replaced). Returns (out, training figures)."""
    checkpoint, figures = pretrained(recipe, name, on_event)
    return copied(checkpoint, out), figures


def copied(cached: Path, out: Path) -> Path:
    """``out`` replaced by a copy of the cached checkpoint directory ``cached``."""
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(cached, out)
    return out


def verified(cached: Path) -> bool:
    """Whether the cache entry ``cached`` is whole: every file its cache.json lists, unchanged."""
    from ..formats.manifest import sha256_of

    try:
        meta = json.loads((cached / "cache.json").read_text(encoding="utf-8"))
        return all(sha256_of(cached / "checkpoint" / name) == sha for name, sha in meta["files"].items())
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _train(r: SmallRecipe, cached: Path, corpus: Path, on_event, threads: int | None) -> None:
    from ..config import AlbertConfig
    from ..formats.manifest import sha256_of
    from ..tokenizer import train_spiece
    from ..train.data import MaskingOptions
    from ..train.pretrain import PretrainOptions, pretrain

    with staged(cached, directory=True, keep=False) as work:  # an entry that failed its check is replaced whole
        spiece = train_spiece([corpus], work / "tok", vocab_size=r.vocab_size, seed=r.seed)
        config = AlbertConfig.preset("albert-base-v2").replace(**{**r.config, "vocab_size": r.vocab_size})
        opts = PretrainOptions(
            corpus=("builtin",), tokenizer=str(spiece), out_dir=str(work / "run"), config=config, steps=r.steps,
            batch_size=r.batch_size, lr=r.lr, seed=r.seed, masking=MaskingOptions(max_seq_length=r.max_seq_length),
            eval_examples=r.eval_examples, eval_every=r.steps, save_every=r.steps, keep_checkpoints=1, log_every=10,
            device="cpu", threads=threads)
        result = pretrain(opts, on_event=on_event)
        checkpoint = work / "checkpoint"
        checkpoint.mkdir()
        for item in Path(result.out_dir).iterdir():
            if item.is_file() and item.name in CHECKPOINT_FILES:
                shutil.copy2(item, checkpoint / item.name)
        if not (checkpoint / "model.safetensors").is_file():
            raise AlbertEdgeError(f"pretraining wrote no model.safetensors into {result.out_dir}")
        figures = {"step": result.step, "eval": result.eval, "train": result.train}
        meta = {"recipe": dataclasses.asdict(r), "figures": figures,
                "files": {p.name: sha256_of(p) for p in checkpoint.iterdir()}}
        (work / "cache.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        shutil.rmtree(work / "run")
