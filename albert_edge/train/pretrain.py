"""ALBERT pretraining: masked LM (n-gram masking) + sentence-order prediction, from plain text.

``pretrain(options)`` runs the whole thing — one process or many under torchrun — and writes
the run directory::

    OUT/config.json, model.safetensors, spiece.model   the final model (Hugging Face format)
    OUT/checkpoint-NNNNNNN/                               resumable checkpoints (see ``state``)
    OUT/log.jsonl                                         one JSON object per log/eval/checkpoint

A resumed run (``resume=OUT`` or a checkpoint directory) restores weights, optimizer and the data
stream's position; dropout is seeded per step, so it gives the losses an uninterrupted run gives.
"""

from __future__ import annotations

import itertools
import json
import logging
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import checkpoints
from ..config import AlbertConfig
from ..errors import CheckpointError, ConfigError
from ..files import check_not_input, check_output_dir, missing_root, staged_dir
from ..model import AlbertForPreTraining, build_model
from . import state as st
from ..text import resolve_corpus
from .data import Example, MaskingOptions
from .distributed import DistContext, barrier, distributed, wrap
from .loop import JsonLog, Objective, RunOptions, autocast, run_field, step_seed, train_step
from .optim import build_optimizer, lr_factor, set_lr
from .stream import ExampleStream, StreamState, collate, held_out_examples
from .tokens import Vocabulary

__all__ = ["PretrainOptions", "PretrainResult", "PretrainObjective", "pretrain", "evaluate"]

log = logging.getLogger(__name__)

# Statistic sums the objective returns, in this order.
STATS = ("mlm_loss", "mlm_correct", "mlm_count", "sop_loss", "sop_correct", "sop_count", "tokens")


@dataclass(frozen=True)
class PretrainOptions(RunOptions):
    """Everything a pretraining run needs. ``batch_size`` is per process and micro-batch: the
    global batch of one optimizer step is batch_size x grad_accum x processes. ``force`` writes into
    an out_dir that holds files, never over another run's checkpoints. The optimizer and the
    machine are RunOptions' fields (LAMB at 2e-3 here)."""

    corpus: tuple[str, ...]
    tokenizer: str
    out_dir: str
    config: AlbertConfig
    steps: int = 10_000
    optimizer: str = run_field("lamb")
    lr: float = run_field(2e-3)
    warmup_steps: int | None = None  # None: 10% of steps
    masking: MaskingOptions = field(default_factory=MaskingOptions)
    chunk_documents: int = 1000
    holdout_every: int = 20
    eval_corpus: tuple[str, ...] = ()
    eval_examples: int = 1000
    eval_every: int = 500
    save_every: int = 1000
    keep_checkpoints: int = 2
    resume: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("steps", "eval_every", "save_every"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} ({getattr(self, name)}) must be at least 1")
        if self.masking.max_seq_length > self.config.max_position_embeddings:
            raise ConfigError(f"max_seq_length ({self.masking.max_seq_length}) is larger than the model's "
                              f"max_position_embeddings ({self.config.max_position_embeddings})")
        for name in ("holdout_every", "keep_checkpoints", "chunk_documents", "eval_examples"):
            if getattr(self, name) < (1 if name == "chunk_documents" else 0):
                raise ConfigError(f"{name} ({getattr(self, name)}) must be at least "
                                  f"{1 if name == 'chunk_documents' else 0}")
        if self.warmup_steps is not None and not 0 <= self.warmup_steps <= self.steps:
            raise ConfigError(f"warmup_steps ({self.warmup_steps}) must be in [0, steps={self.steps}]")

    @property
    def warmup(self) -> int:
        return self.steps // 10 if self.warmup_steps is None else self.warmup_steps


@dataclass
class PretrainResult:
    out_dir: Path
    step: int
    train: dict[str, float]  # the last logged training figures
    eval: dict[str, float]  # the last evaluation (empty when nothing is held out)
    model: AlbertForPreTraining | None = field(default=None, repr=False)  # this process's trained model


class PretrainObjective(Objective):
    """MLM over the masked positions only (the V-wide decoder runs on ~15% of the tokens) + SOP."""

    def __init__(self, model: AlbertForPreTraining):
        super().__init__()
        self.model = model

    def counts(self, batch: dict[str, Tensor]) -> Tensor:
        return torch.stack([(batch["mlm_labels"] != -100).sum(), torch.tensor(len(batch["sop_labels"]))]).float()

    def forward(self, batch: dict[str, Tensor], denominators: Tensor) -> tuple[Tensor, Tensor]:
        hidden, pooled = self.model.albert(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        selected = batch["mlm_labels"] != -100  # (B, T)
        targets = batch["mlm_labels"][selected]  # (N,)
        mlm_logits = self.model.predictions(hidden[selected]).float()  # (N, V)
        sop_logits = self.model.sop_classifier(pooled).float()  # (B, 2)
        mlm_loss = F.cross_entropy(mlm_logits, targets, reduction="sum")
        sop_loss = F.cross_entropy(sop_logits, batch["sop_labels"], reduction="sum")
        loss = mlm_loss / denominators[0] + sop_loss / denominators[1]
        stats = torch.stack([
            mlm_loss.detach(), (mlm_logits.argmax(-1) == targets).sum().float(),
            targets.new_tensor(len(targets)).float(),
            sop_loss.detach(), (sop_logits.argmax(-1) == batch["sop_labels"]).sum().float(),
            targets.new_tensor(len(batch["sop_labels"])).float(), batch["attention_mask"].sum().float(),
        ])
        return loss, stats


def _metrics(stats: Tensor) -> dict[str, float]:
    s = dict(zip(STATS, stats.tolist()))
    mlm_loss = s["mlm_loss"] / max(s["mlm_count"], 1)
    sop_loss = s["sop_loss"] / max(s["sop_count"], 1)
    return {"loss": mlm_loss + sop_loss, "mlm_loss": mlm_loss, "sop_loss": sop_loss,
            "mlm_acc": s["mlm_correct"] / max(s["mlm_count"], 1), "sop_acc": s["sop_correct"] / max(s["sop_count"], 1),
            "tokens": s["tokens"], "examples": s["sop_count"]}


def _total_loss(stats: Tensor) -> float:
    return _metrics(stats)["loss"]


@torch.no_grad()
def evaluate(objective: PretrainObjective, examples: list, vocab: Vocabulary, ctx: DistContext,
             batch_size: int, precision: str = "auto") -> dict[str, float]:
    """MLM and SOP loss/accuracy on ``examples``, split over the processes and summed."""
    from .distributed import all_reduce_sum

    was_training = objective.training
    objective.eval()
    mine = examples[ctx.rank::ctx.world_size]
    total = torch.zeros(len(STATS), device=ctx.device)
    for i in range(0, len(mine), batch_size):
        batch = {k: v.to(ctx.device) for k, v in collate(mine[i:i + batch_size], vocab.pad_id).items()}
        with autocast(ctx.device, precision):
            _, stats = objective(batch, objective.counts(batch).to(ctx.device).clamp(min=1))
        total += stats.float()
    all_reduce_sum(total, ctx)
    objective.train(was_training)
    metrics = _metrics(total.cpu())
    metrics["mlm_unigram_acc"] = unigram_baseline(examples)
    return metrics


def unigram_baseline(examples: list) -> float:
    """Masked-LM accuracy of always guessing the most frequent masked token of ``examples``
    themselves: the best any unigram-frequency guess can do on this set."""
    counts: dict[int, int] = {}
    for e in examples:
        for label in e.labels:
            counts[label] = counts.get(label, 0) + 1
    total = sum(counts.values())
    return max(counts.values()) / total if total else 0.0


def _run_identity(opts: PretrainOptions, vocab: Vocabulary, files: list[Path], world_size: int) -> dict[str, Any]:
    """What a resumed run must share with the checkpoint for its losses to be the same."""
    ident: dict[str, Any] = {f"config.{k}": v for k, v in opts.config.to_hf_dict().items()}
    ident.update({f"masking.{k}": v for k, v in asdict(opts.masking).items()})
    ident.update(
        # Files by name and size: a moved corpus still resumes, a changed one does not.
        tokenizer_sha256=vocab.sha256, corpus=[f"{p.name} ({p.stat().st_size} bytes)" for p in files],
        global_batch=opts.batch_size * opts.grad_accum * world_size, steps=opts.steps, optimizer=opts.optimizer,
        lr=opts.lr, weight_decay=opts.weight_decay, warmup_steps=opts.warmup, max_grad_norm=opts.max_grad_norm,
        seed=opts.seed, chunk_documents=opts.chunk_documents, holdout_every=opts.holdout_every,
    )
    return json.loads(json.dumps(ident))  # as it reads back from JSON (tuples become lists)


def pretrain(opts: PretrainOptions, on_event: Callable[[dict], None] | None = None) -> PretrainResult:
    """Pretrain (or resume pretraining) as ``opts`` says; returns the final step and metrics."""
    with distributed(opts.device, opts.threads) as ctx:
        return _pretrain(opts, ctx, on_event)


@dataclass
class _Run:
    """What the training loop works with, built and checked before anything is written."""

    vocab: Vocabulary
    stream: ExampleStream
    examples: Iterator[Example]
    eval_set: list[Example]
    model: AlbertForPreTraining
    objective: PretrainObjective
    wrapped: torch.nn.Module  # the objective, in DDP when there are several processes
    optimizer: torch.optim.Optimizer
    ident: dict[str, Any]
    start_step: int


def check_out(opts: PretrainOptions) -> Path:
    """Refuse, before any work, an --out that cannot be written, that is, holds or lies inside the
    corpus or tokenizer it reads (--force or not), that holds another run's checkpoints (a resume
    continues them), or that holds other files unless ``force``."""
    out = check_not_input(opts.out_dir, [*opts.corpus, *opts.eval_corpus, opts.tokenizer])
    if not opts.resume and st.has_checkpoints(out):
        raise CheckpointError(f"{out} already holds checkpoints of a run: continue it with --resume {out}, "
                              "or give another --out")
    return check_output_dir(out, opts.force or bool(opts.resume), what="files")


def _prepare(opts: PretrainOptions, ctx: DistContext) -> _Run:
    check_out(opts)
    barrier(ctx)  # every process looks at --out before the main one writes there
    vocab = Vocabulary(opts.tokenizer)
    vocab.check_matches(opts.config.vocab_size)
    files = resolve_corpus(opts.corpus)
    holdout = 0 if opts.eval_corpus else opts.holdout_every
    stream = ExampleStream(files, vocab, opts.masking, opts.seed, opts.chunk_documents, holdout)
    ident = _run_identity(opts, vocab, files, ctx.world_size)
    torch.manual_seed(opts.seed)  # the same initial weights on every process
    model = build_model(opts.config, "pretraining").train()
    start_step, optimizer_state = 0, None
    if opts.resume:
        start_step, optimizer_state = _restore(model, stream, ident, Path(opts.resume))
    model.to(ctx.device)
    optimizer = build_optimizer(model, opts.optimizer, opts.lr, opts.weight_decay)
    if optimizer_state is not None:
        optimizer.load_state_dict(optimizer_state)
    objective = PretrainObjective(model)
    eval_set: list[Example] = []
    if opts.eval_corpus or holdout:
        eval_files, every = (resolve_corpus(opts.eval_corpus), 1) if opts.eval_corpus else (files, holdout)
        eval_set = held_out_examples(eval_files, vocab, opts.masking, opts.seed, every, opts.eval_examples)
    examples: Iterator[Example] = iter(stream)
    if start_step < opts.steps:
        # Draw the first batch now: a corpus that gives no examples fails before anything is written.
        per_step = opts.batch_size * opts.grad_accum * ctx.world_size
        examples = itertools.chain([next(examples) for _ in range(per_step)], examples)
    return _Run(vocab, stream, examples, eval_set, model, objective, wrap(objective, ctx), optimizer, ident,
                start_step)


def _pretrain(opts: PretrainOptions, ctx: DistContext, on_event: Callable[[dict], None] | None) -> PretrainResult:
    run = _prepare(opts, ctx)
    out = Path(opts.out_dir)
    made = missing_root(out)
    try:
        return _run(opts, ctx, run, out, on_event)
    except BaseException:
        # A run that fails (or is interrupted) before its first checkpoint leaves no directory behind.
        if ctx.is_main and made is not None and not st.has_checkpoints(out):
            shutil.rmtree(made, ignore_errors=True)
        raise


def _run(opts: PretrainOptions, ctx: DistContext, run: _Run, out: Path,
         on_event: Callable[[dict], None] | None) -> PretrainResult:
    if ctx.is_main:
        out.mkdir(parents=True, exist_ok=True)
    emit = JsonLog(out / "log.jsonl" if ctx.is_main else None, on_event if ctx.is_main else None,
                   fresh=not opts.resume)
    emit({"event": "start", "step": run.start_step, "steps": opts.steps, "processes": ctx.world_size,
          "device": str(ctx.device), "params": sum(p.numel() for p in run.model.parameters()),
          "eval_examples": len(run.eval_set), "resumed_from": opts.resume})
    if not run.eval_set and (opts.eval_corpus or opts.holdout_every):
        log.warning("no held-out examples: evaluation is skipped (use --eval-corpus or --holdout-every)")
    train_metrics, eval_metrics = _loop(opts, ctx, run, emit)
    if ctx.is_main:
        with staged_dir(out) as staging:  # the final model's files arrive together
            st.export_model(run.model, staging, run.vocab.path)
        emit({"event": "end", "step": opts.steps, "path": str(out)})
    barrier(ctx)
    return PretrainResult(out, opts.steps, train_metrics, eval_metrics, run.model)


def _loop(opts: PretrainOptions, ctx: DistContext, run: _Run, emit: JsonLog) -> tuple[dict, dict]:
    """Steps ``run.start_step + 1 .. opts.steps``: train, log, evaluate and save as scheduled."""
    per_step = opts.batch_size * opts.grad_accum * ctx.world_size
    started = time.perf_counter()
    window, window_start = torch.zeros(len(STATS)), started
    train_metrics: dict[str, float] = {}
    eval_metrics: dict[str, float] = {}
    for step in range(run.start_step, opts.steps):
        batch = [next(run.examples) for _ in range(per_step)]
        # Micro-batch m of process r: slice (m * processes + r) of the global batch.
        starts = ((m * ctx.world_size + ctx.rank) * opts.batch_size for m in range(opts.grad_accum))
        micro = [collate(batch[lo:lo + opts.batch_size], run.vocab.pad_id) for lo in starts]
        lr = opts.lr * lr_factor(step, opts.warmup, opts.steps)
        set_lr(run.optimizer, lr)
        torch.manual_seed(step_seed(opts.seed, ctx.rank, step))
        result = train_step(run.wrapped, run.objective, run.optimizer, micro, ctx, opts.max_grad_norm,
                            opts.precision, _total_loss, step + 1)
        window += result.stats.cpu()
        done = step + 1
        if done % opts.log_every == 0 or done == opts.steps:
            train_metrics = _metrics(window)
            rate = train_metrics["tokens"] / max(time.perf_counter() - window_start, 1e-9)
            emit({"event": "train", "step": done, "epoch": run.stream.state().epoch, "lr": lr,
                  "grad_norm": result.grad_norm, **train_metrics, "tokens_per_s": rate,
                  "elapsed_s": time.perf_counter() - started})
            window.zero_()
        if run.eval_set and (done % opts.eval_every == 0 or done == opts.steps):
            eval_metrics = evaluate(run.objective, run.eval_set, run.vocab, ctx, opts.batch_size, opts.precision)
            emit({"event": "eval", "step": done, **eval_metrics})
        if done % opts.save_every == 0 or done == opts.steps:
            trainer_state = {"step": done, "stream": run.stream.state().to_dict(), "run": run.ident,
                             "train": train_metrics, "eval": eval_metrics}
            if ctx.is_main:
                path = st.save_training_checkpoint(opts.out_dir, done, run.model, run.optimizer, run.vocab.path,
                                                   trainer_state, opts.keep_checkpoints)
                emit({"event": "checkpoint", "step": done, "path": str(path)})
            barrier(ctx)
        if done % opts.log_every == 0:
            window_start = time.perf_counter()  # throughput counts training time, not evaluation or saving
    return train_metrics, eval_metrics


def _restore(model: AlbertForPreTraining, stream: ExampleStream, ident: dict[str, Any],
             resume: Path) -> tuple[int, dict]:
    directory = st.find_checkpoint(resume)
    saved = st.read_trainer_state(directory)
    st.check_same_run(saved.get("run", {}), ident, directory)
    ckpt = checkpoints.load(directory)
    if "pretraining" not in ckpt.heads:
        raise CheckpointError(f"{directory} has no pretraining head weights; it cannot be resumed")
    loaded = checkpoints.model_from_checkpoint(ckpt, "pretraining")
    model.load_state_dict(loaded.state_dict())
    stream.load_state(StreamState.from_dict(saved["stream"]))
    log.info("resuming from %s at step %d", directory, saved["step"])
    return int(saved["step"]), st.read_optimizer_state(directory)
