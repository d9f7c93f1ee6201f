"""Fine-tuning a pretrained ALBERT for classification, token classification or extractive QA.

``finetune(options)`` starts from a checkpoint's encoder (any head's checkpoint: a pretraining
run's output, an HF directory, an original TF checkpoint), adds a new head, trains on a labelled
file, evaluates after every epoch, and writes::

    OUT/config.json, model.safetensors, spiece.model   the fine-tuned model with its head (HF format)
    OUT/eval_results.json                                 the final figures and the baseline
    OUT/log.jsonl                                         one JSON object per log/eval record

It runs under torchrun like pretraining: each process trains its slice of every global batch;
evaluation runs on the main process.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import checkpoints
from ..errors import CheckpointError, ConfigError
from ..files import check_not_input, check_output_dir, staged_dir
from ..model import build_model
from . import metrics as M
from .distributed import DistContext, barrier, distributed, wrap
from .exits import EXIT_MODES, ExitObjective, choose_rule, freeze_for_exits, held_out_pass_logits, with_exits
from .finetune_data import TASKS, Columns, Feature, build_features, collate_features, label_names, read_records
from .loop import JsonLog, Objective, RunOptions, autocast, step_seed, train_step
from .optim import build_optimizer, lr_factor, set_lr
from .state import export_model
from .tokens import Vocabulary

__all__ = ["FinetuneOptions", "FinetuneResult", "finetune", "evaluate"]

log = logging.getLogger(__name__)

_MAX_ANSWER_TOKENS = 30


@dataclass(frozen=True)
class FinetuneOptions(RunOptions):
    """A fine-tuning run; ``force`` replaces what out_dir holds, never an input (the model being
    fine-tuned, its data). The optimizer and the machine are RunOptions' fields."""

    task: str
    train_file: str
    eval_file: str
    model: str  # checkpoint directory (HF, original TF, or a pretraining run's output)
    out_dir: str
    tokenizer: str | None = None  # default: the checkpoint's spiece.model
    epochs: int = 3
    warmup_ratio: float = 0.1
    max_seq_length: int = 128
    columns: Columns = field(default_factory=Columns)
    exits: str | None = None  # train early exits: "joint" or "frozen" (train.exits.EXIT_MODES)

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ConfigError(f"unknown task {self.task!r}; choose one of {', '.join(TASKS)}")
        super().__post_init__()
        if self.epochs < 1:
            raise ConfigError(f"epochs ({self.epochs}) must be at least 1")
        if not 0 <= self.warmup_ratio <= 1:
            raise ConfigError(f"warmup_ratio ({self.warmup_ratio}) must be in [0, 1]")
        if self.exits is not None:
            if self.exits not in EXIT_MODES:
                raise ConfigError(f"--exits {self.exits!r} is not one of {', '.join(EXIT_MODES)}")
            if self.task != "classification":
                raise ConfigError(f"--exits needs --task classification: early exits are classifiers of the "
                                  f"pooled text, and a {self.task} head has none")


@dataclass
class FinetuneResult:
    out_dir: Path
    steps: int
    metrics: dict[str, float]  # the last evaluation, with the baseline (main process only)
    model: nn.Module | None = field(default=None, repr=False)  # this process's trained model


class TaskObjective(Objective):
    """Cross-entropy for the task's head, divided by the global count of labelled items."""

    def __init__(self, model: nn.Module, task: str):
        super().__init__()
        self.model, self.task = model, task

    def counts(self, batch: dict[str, Tensor]) -> Tensor:
        if self.task == "token-classification":
            return (batch["labels"] != -100).sum().float().reshape(1)
        return torch.tensor([float(len(batch["input_ids"]))])

    def forward(self, batch: dict[str, Tensor], denominators: Tensor) -> tuple[Tensor, Tensor]:
        out = self.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        if self.task == "qa":
            start, end = (o.float() for o in out)
            loss_sum = (F.cross_entropy(start, batch["start_positions"], reduction="sum")
                        + F.cross_entropy(end, batch["end_positions"], reduction="sum")) / 2
            correct = ((start.argmax(-1) == batch["start_positions"])
                       & (end.argmax(-1) == batch["end_positions"])).sum()
            count = torch.tensor(float(len(start)), device=start.device)
        else:
            logits, labels = out.float(), batch["labels"]
            keep = labels != -100
            logits, labels = logits[keep], labels[keep]  # (N, C), (N,)
            loss_sum = F.cross_entropy(logits, labels, reduction="sum")
            correct = (logits.argmax(-1) == labels).sum()
            count = torch.tensor(float(len(labels)), device=logits.device)
        stats = torch.stack([loss_sum.detach(), correct.float(), count])
        return loss_sum / denominators[0], stats


def _init_model(opts: FinetuneOptions, labels: tuple[str, ...]) -> nn.Module:
    """The task's model (the task names are head names) with the checkpoint's encoder. Its head
    is kept only when the checkpoint was fine-tuned for the same task and labels; otherwise the
    head (and a pooler the checkpoint lacks) is freshly initialised with the run's seed."""
    ckpt = checkpoints.load(opts.model)
    checkpoints.check_float_weights(ckpt)  # integer weights would be copied silently into float parameters
    config = ckpt.config
    if labels:
        config = config.replace(num_labels=len(labels), label_names=labels)
    same_head = opts.task in ckpt.heads and (not labels or ckpt.config.label_names == labels)
    if opts.exits == "frozen" and not same_head:
        raise ConfigError(f"--exits frozen keeps {opts.model}'s classifier as it is, but it was not fine-tuned for "
                          "classification with these labels; fine-tune it first, or use --exits joint")
    if opts.exits:
        config = with_exits(config, opts.exits)
    torch.manual_seed(opts.seed)
    model = build_model(config, opts.task).train()
    fresh = []
    with torch.no_grad():
        for name, param in model.named_parameters():
            key = name.removeprefix("albert.")
            value = ckpt.state.get(key)
            encoder = name.startswith("albert.")
            if value is not None and value.shape == param.shape and (encoder or same_head):
                param.copy_(value)
            elif encoder and not key.startswith("pooler."):
                raise CheckpointError(f"{opts.model} has no tensor {key!r} of shape {list(param.shape)} "
                                      "for this model")
            else:
                fresh.append(key)
    if fresh:
        log.info("freshly initialised: %s", ", ".join(fresh))
    if opts.exits == "frozen":
        log.info("training the early exits only: %d weights", freeze_for_exits(model))
    return model


def finetune(opts: FinetuneOptions, on_event: Callable[[dict], None] | None = None) -> FinetuneResult:
    """Fine-tune as ``opts`` says; returns the final evaluation figures."""
    with distributed(opts.device, opts.threads) as ctx:
        return _finetune(opts, ctx, on_event)


def check_out(opts: FinetuneOptions) -> Path:
    """Refuse, before any work, an --out that is, holds or lies inside what the run reads (the
    --model being fine-tuned, the labelled files, the tokenizer), --force or not; one that would
    replace a model without ``force``; or one that cannot be written."""
    out = check_not_input(opts.out_dir, [opts.model, opts.train_file, opts.eval_file, opts.tokenizer])
    return check_output_dir(out, opts.force, what="a model")


def _finetune(opts: FinetuneOptions, ctx: DistContext, on_event: Callable[[dict], None] | None) -> FinetuneResult:
    out = check_out(opts)
    vocab = Vocabulary(opts.tokenizer or opts.model)
    rows = {"train": read_records(opts.train_file), "eval": read_records(opts.eval_file)}
    labels = label_names(opts.task, rows["train"], opts.columns, opts.train_file)
    paths = {"train": opts.train_file, "eval": opts.eval_file}
    feats = {k: build_features(opts.task, rows[k], vocab, opts.max_seq_length, labels, opts.columns, paths[k])
             for k in rows}
    model = _init_model(opts, labels)
    vocab.check_matches(model.config.vocab_size, f"checkpoint {opts.model}")
    if opts.max_seq_length > model.config.max_position_embeddings:
        raise ConfigError(f"max_seq_length ({opts.max_seq_length}) is larger than the model's "
                          f"max_position_embeddings ({model.config.max_position_embeddings})")
    model.to(ctx.device)
    # The whole output is written under a temporary name and moved in place at the end: a full
    # disk or an interrupt leaves no model directory without its tokenizer or results.
    with staged_dir(out) if ctx.is_main else contextlib.nullcontext() as staging:
        emit = JsonLog(staging / "log.jsonl" if ctx.is_main else None, on_event if ctx.is_main else None)
        final = _train(opts, ctx, model, feats, vocab, labels, emit)
        if ctx.is_main and opts.exits:
            final["exits"] = _record_exit_rule(model, feats["eval"], vocab, ctx, opts.batch_size)
            emit({"event": "exits", **final["exits"]})
        if ctx.is_main:
            export_model(model, staging, vocab.path)
            (staging / "eval_results.json").write_text(json.dumps({"task": opts.task, **final}, indent=2) + "\n")
            emit({"event": "end", "step": final["step"], "path": str(out)})
    barrier(ctx)
    return FinetuneResult(out, final.pop("step"), final, model)


def _epoch_order(n: int, length: int, seed: int, epoch: int) -> list[int]:
    """A shuffled pass over ``n`` examples, wrapped around to fill ``length`` slots."""
    order = list(range(n))
    random.Random(f"albert-edge/finetune/{seed}/{epoch}").shuffle(order)
    return [order[i % n] for i in range(length)]


def _train(opts: FinetuneOptions, ctx: DistContext, model: nn.Module, feats: dict[str, list[Feature]],
           vocab: Vocabulary, labels: tuple[str, ...], emit: JsonLog) -> dict:
    objective = ExitObjective(model, opts.exits == "frozen") if opts.exits else TaskObjective(model, opts.task)
    wrapped = wrap(objective, ctx)
    optimizer = build_optimizer(model, opts.optimizer, opts.lr, opts.weight_decay)
    per_step = opts.batch_size * opts.grad_accum * ctx.world_size
    steps_per_epoch = math.ceil(len(feats["train"]) / per_step)
    total = steps_per_epoch * opts.epochs
    warmup = int(total * opts.warmup_ratio)
    emit({"event": "start", "task": opts.task, "steps": total, "train_examples": len(feats["train"]),
          "eval_examples": len(feats["eval"]), "labels": list(labels), "processes": ctx.world_size})
    baseline = _baseline(opts.task, feats)
    window, window_examples, window_start = torch.zeros(3), 0, time.perf_counter()
    step, final = 0, {}
    for epoch in range(opts.epochs):
        order = _epoch_order(len(feats["train"]), steps_per_epoch * per_step, opts.seed, epoch)
        for s in range(steps_per_epoch):
            batch = [feats["train"][i] for i in order[s * per_step:(s + 1) * per_step]]
            starts = ((m * ctx.world_size + ctx.rank) * opts.batch_size for m in range(opts.grad_accum))
            micro = [collate_features(batch[lo:lo + opts.batch_size], opts.task, vocab.pad_id) for lo in starts]
            lr = opts.lr * lr_factor(step, warmup, total)
            set_lr(optimizer, lr)
            torch.manual_seed(step_seed(opts.seed, ctx.rank, step))
            result = train_step(wrapped, objective, optimizer, micro, ctx, opts.max_grad_norm, opts.precision,
                                _mean_loss, step + 1)
            window += result.stats.cpu()
            window_examples += len(batch)
            step += 1
            if step % opts.log_every == 0 or step == total:
                count = float(window[2].clamp(min=1))
                emit({"event": "train", "step": step, "epoch": epoch, "lr": lr, "loss": float(window[0]) / count,
                      "acc": float(window[1]) / count,
                      "examples_per_s": window_examples / max(time.perf_counter() - window_start, 1e-9)})
                window.zero_()
                window_examples, window_start = 0, time.perf_counter()
        if ctx.is_main:
            figures = evaluate(model, opts.task, feats["eval"], vocab, ctx.device, opts.batch_size, labels,
                               opts.precision)
            final = {"step": step, **figures, **baseline}
            emit({"event": "eval", "epoch": epoch + 1, **final})
        barrier(ctx)
    return final or {"step": step}


def _record_exit_rule(model: nn.Module, features: list[Feature], vocab: Vocabulary, ctx: DistContext,
                      batch_size: int) -> dict:
    """Choose the exit rule on the held-out examples and record it in the model's config."""
    pass_logits, labels = held_out_pass_logits(model, features, vocab.pad_id, ctx.device, batch_size)
    rule, rows = choose_rule(pass_logits, labels)
    chosen = next(row for row in rows if row["rule"] == rule.to_dict())
    figures = {k: chosen[k] for k in ("mean_passes", "agreement", "accuracy", "full_accuracy", "n")}
    curve = [{"kind": r["rule"]["kind"], "setting": r["rule"]["setting"],
              **{k: round(r[k], 4) for k in ("mean_passes", "agreement", "accuracy") if k in r}} for r in rows]
    # every candidate's figures too: what a report's speed/accuracy curve draws (albert_edge.report.adaptive)
    record = {**model.config.exit_training, "rule": rule.to_dict(), "held_out": figures, "curve": curve}
    model.config = model.config.replace(exits=json.dumps(record, sort_keys=True))
    return {"rule": rule.to_dict(), **figures, "passes": pass_logits.shape[1], "curve": rows}


def _mean_loss(stats: Tensor) -> float:
    return float(stats[0] / stats[2].clamp(min=1))


def _baseline(task: str, feats: dict[str, list[Feature]]) -> dict[str, float]:
    """The accuracy of always answering the training set's most frequent label (tag)."""
    if task == "classification":
        train, evaluation = ([f.label for f in feats[k]] for k in ("train", "eval"))
        return {"majority_acc": M.majority_accuracy(train, evaluation)}
    if task == "token-classification":
        train, evaluation = ([t for f in feats[k] for t in f.label if t != -100] for k in ("train", "eval"))
        return {"majority_acc": M.majority_accuracy(train, evaluation)}
    return {}


@torch.no_grad()
def evaluate(model: nn.Module, task: str, features: list[Feature], vocab: Vocabulary, device: torch.device,
             batch_size: int, labels: tuple[str, ...] = (), precision: str = "auto") -> dict[str, float]:
    """The task's figures on ``features``: accuracy + macro F1 (classification), accuracy + F1 over
    the non-"O" tags (token classification), exact match + F1 (qa)."""
    was_training = model.training
    model.eval()
    predicted: list = []
    for i in range(0, len(features), batch_size):
        chunk = features[i:i + batch_size]
        batch = {k: v.to(device) for k, v in collate_features(chunk, task, vocab.pad_id).items()}
        with autocast(device, precision):
            out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        if task == "classification":
            predicted += out.argmax(-1).tolist()
        elif task == "token-classification":
            keep = batch["labels"] != -100
            predicted += out.argmax(-1)[keep].tolist()
        else:
            predicted += [_best_span(f, s, e) for f, s, e in zip(chunk, out[0].float().cpu(), out[1].float().cpu())]
    model.train(was_training)
    if task == "classification":
        gold = [f.label for f in features]
        return {"acc": M.accuracy(predicted, gold), "macro_f1": M.macro_f1(predicted, gold, len(labels))}
    if task == "token-classification":
        gold = [t for f in features for t in f.label if t != -100]
        outside = labels.index("O") if "O" in labels else None
        return {"acc": M.accuracy(predicted, gold), "f1": M.tag_f1(predicted, gold, outside)}
    return M.squad_scores(predicted, [f.answer for f in features])


def _best_span(feature: Feature, start: Tensor, end: Tensor) -> str:
    """The context words of the best-scoring span (start <= end, at most 30 tokens)."""
    tokens = sorted(feature.word_of_token)
    best, best_score = (None, None), -math.inf
    top_starts = sorted(tokens, key=lambda t: -float(start[t]))[:20]
    top_ends = sorted(tokens, key=lambda t: -float(end[t]))[:20]
    for s in top_starts:
        for e in top_ends:
            if s <= e < s + _MAX_ANSWER_TOKENS and float(start[s] + end[e]) > best_score:
                best, best_score = (s, e), float(start[s] + end[e])
    if best[0] is None:
        return ""
    first, last = feature.word_of_token[best[0]], feature.word_of_token[best[1]]
    return " ".join(feature.words[first:last + 1])
