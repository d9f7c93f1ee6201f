"""`albert-edge pretrain` and `albert-edge finetune`: thin wrappers over albert_edge.train.

Both run as one process or under torchrun (see albert_edge.train.distributed); only the main
process draws the progress bar and prints the result.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import click

from ._output import elapsed, err_console, fmt_count, print_json, print_table, progress
from ._types import COUNT, POSITIVE_INT, force_option, threads_option

# One place for the switches both commands share.
_DEVICE = click.option("--device", default="auto", show_default=True,
                       help="'auto' (the GPU when there is one), 'cpu', 'cuda' or 'cuda:N'.")
_PRECISION = click.option("--precision", type=click.Choice(["auto", "bf16", "fp32"]), default="auto", show_default=True,
                          help="auto: bf16 autocast on a GPU, fp32 on CPU; bf16 autocasts on CPU too (fast on "
                               "CPUs with AVX512-BF16/AMX). Weights stay fp32.")
_THREADS = threads_option("CPU threads for torch, at least 1 [default: torch's choice]; on a busy machine 1 "
                          "is often fastest.")
_JSON = click.option("--json", "as_json", is_flag=True, help="Print the final figures as JSON.")
_LOG_EVERY = click.option("--log-every", default=10, show_default=True, type=POSITIVE_INT,
                          help="Log training figures every N steps.")


def _run_options(force_help: str):
    """--force (with what it replaces), --device, --precision, --threads and --json, in that order:
    the options every training command ends with."""
    def apply(command):
        for option in (_JSON, _THREADS, _PRECISION, _DEVICE, force_option(force_help)):  # innermost first
            command = option(command)
        return command
    return apply


def _is_main() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def _config_overrides(pairs: tuple[str, ...]) -> dict[str, Any]:
    from ..errors import ConfigError

    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set takes KEY=VALUE, not {pair!r}")
        try:
            out[key.strip()] = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            out[key.strip()] = value  # a bare word: a string (the config names what type it wants)
    return out


def _load_config(spec: str, pairs: tuple[str, ...]):
    from ..config import AlbertConfig, load_config
    from ..errors import ConfigError

    config = load_config(spec)
    overrides = _config_overrides(pairs)
    known = set(AlbertConfig.__dataclass_fields__) - {"extra"}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ConfigError(f"--set {unknown[0]}: not a config field (known: {', '.join(sorted(known))})")
    try:
        return config.replace(**overrides)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"--set: {exc}") from None


class _Bar:
    """The progress bar: step count, loss and accuracies, throughput; main process only. When
    stderr is not a terminal (a log file, CI) each logged step is one plain line instead."""

    def __init__(self, total: int, figures: tuple[str, ...], rate: str):
        self.figures, self.rate = figures, rate
        self.lines = _is_main() and not err_console.is_terminal
        self.progress = progress() if _is_main() and not self.lines else None
        self.task = None
        self.total = total
        self.start = time.monotonic()

    def __enter__(self):
        if self.progress is not None:
            self.progress.__enter__()
            self.task = self.progress.add_task("starting", total=self.total)
        return self

    def __exit__(self, *exc):
        if self.progress is not None:
            self.progress.__exit__(*exc)

    def __call__(self, record: dict) -> None:
        if record["event"] == "start":
            self.total = record["steps"]
            if self.progress is not None:
                self.progress.update(self.task, total=record["steps"], completed=record.get("step", 0))
        elif record["event"] == "train":
            parts = [f"loss {record['loss']:.3f}"]
            parts += [f"{name.replace('_acc', '')} {record[name]:.1%}" for name in self.figures if name in record]
            parts.append(f"{fmt_count(record[self.rate])} {self.rate.split('_')[0]}/s")
            if self.progress is not None:
                self.progress.update(self.task, completed=record["step"], description=" · ".join(parts))
            elif self.lines:
                click.echo(f"step {record['step']}/{self.total} · {' · '.join(parts)} · "
                           f"{elapsed(time.monotonic() - self.start)} elapsed", err=True)
        elif record["event"] == "eval" and self.lines:
            shown = " · ".join(f"{k} {v:.4f}" for k, v in record.items() if k.endswith(("loss", "acc", "f1", "exact")))
            click.echo(f"eval at step {record.get('step', '?')} · {shown} · "
                       f"{elapsed(time.monotonic() - self.start)} elapsed", err=True)


def _print_figures(title: str, figures: dict[str, Any], as_json: bool) -> None:
    if not _is_main():
        return
    if as_json:
        print_json(figures)
        return
    rows = [(k, f"{v:.4f}" if isinstance(v, float) else v) for k, v in figures.items()]
    print_table(title, ("figure", "value"), rows, right=(1,))


@click.command("pretrain")
@click.option("--corpus", multiple=True, required=True,
              help="Text file, directory of *.txt files, or 'builtin' (the standard library's docs); repeatable.")
@click.option("--tokenizer", required=True,
              help="spiece.model (or a directory holding it); its size must equal the config's vocab_size.")
@click.option("--out", "out_dir", required=True,
              help="Run directory: final model, checkpoint-* directories, log.jsonl.")
@click.option("--config", "config_spec", default="albert-base-v2", show_default=True,
              help="Preset name, config.json, or a checkpoint directory.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a config field, e.g. --set hidden_size=256 --set sharing=ffn; repeatable.")
@click.option("--steps", default=10_000, show_default=True, type=POSITIVE_INT, help="Optimizer steps.")
@click.option("--batch-size", default=32, show_default=True, type=POSITIVE_INT,
              help="Examples per process and micro-batch.")
@click.option("--grad-accum", default=1, show_default=True, type=POSITIVE_INT, help="Micro-batches per optimizer step.")
@click.option("--optimizer", type=click.Choice(["lamb", "adamw"]), default="lamb", show_default=True, help="Optimizer.")
@click.option("--lr", default=2e-3, show_default=True, help="Peak learning rate.")
@click.option("--weight-decay", default=0.01, show_default=True, help="Weight decay (not on biases and LayerNorms).")
@click.option("--warmup-steps", type=COUNT, default=None, help="Linear warmup steps [default: 10% of --steps].")
@click.option("--max-grad-norm", default=1.0, show_default=True, help="Clip the global gradient norm (0: no clipping).")
@click.option("--seed", default=0, show_default=True, help="Seed of the weights, the data and dropout.")
@click.option("--max-seq-length", default=128, show_default=True, type=click.IntRange(min=8),
              help="Tokens per example, [CLS] and [SEP]s included.")
@click.option("--masked-lm-prob", default=0.15, show_default=True, help="Share of tokens to predict.")
@click.option("--max-predictions", default=20, show_default=True,
              help="At most this many predicted tokens per example.")
@click.option("--max-ngram", default=3, show_default=True, help="Longest masked n-gram, in words.")
@click.option("--short-seq-prob", default=0.1, show_default=True, help="Probability of a shorter random target length.")
@click.option("--chunk-documents", default=1000, show_default=True, type=POSITIVE_INT,
              help="Documents read and shuffled together.")
@click.option("--holdout-every", default=20, show_default=True, type=COUNT,
              help="Hold out every Nth document for evaluation (0: none).")
@click.option("--eval-corpus", multiple=True, help="Evaluate on these texts instead of held-out documents; repeatable.")
@click.option("--eval-examples", default=1000, show_default=True, type=COUNT, help="Evaluation examples.")
@click.option("--eval-every", default=500, show_default=True, type=POSITIVE_INT,
              help="Evaluate every N steps (and at the end).")
@click.option("--save-every", default=1000, show_default=True, type=POSITIVE_INT,
              help="Write a resumable checkpoint every N steps (and at the end).")
@click.option("--keep-checkpoints", default=2, show_default=True, type=COUNT,
              help="Keep the newest N checkpoints (0: all).")
@_LOG_EVERY
@click.option("--resume", default=None,
              help="Continue from a run directory (its newest checkpoint) or a checkpoint-* directory; "
                   "the other options must be those of the interrupted run.")
@_run_options("--out holds files (a finished model, log.jsonl; another run's checkpoints are never replaced)")
def pretrain_command(corpus, tokenizer, out_dir, config_spec, overrides, steps, batch_size, grad_accum, optimizer, lr,
                     weight_decay, warmup_steps, max_grad_norm, seed, max_seq_length, masked_lm_prob, max_predictions,
                     max_ngram, short_seq_prob, chunk_documents, holdout_every, eval_corpus, eval_examples, eval_every,
                     save_every, keep_checkpoints, log_every, resume, force, device, precision, threads, as_json):
    """Pretrain ALBERT (masked LM with n-gram masking + sentence-order prediction) on plain text.

    Documents are blank-line separated; the final model lands in OUT as a Hugging Face
    directory. Runs under torchrun for DistributedDataParallel.
    """
    from ..train.data import MaskingOptions
    from ..train.pretrain import PretrainOptions, pretrain

    opts = PretrainOptions(
        corpus=corpus, tokenizer=tokenizer, out_dir=out_dir, config=_load_config(config_spec, overrides),
        steps=steps, batch_size=batch_size, grad_accum=grad_accum, optimizer=optimizer, lr=lr,
        weight_decay=weight_decay, warmup_steps=warmup_steps, max_grad_norm=max_grad_norm, seed=seed,
        masking=MaskingOptions(max_seq_length, masked_lm_prob, max_predictions, max_ngram, short_seq_prob),
        chunk_documents=chunk_documents, holdout_every=holdout_every, eval_corpus=eval_corpus,
        eval_examples=eval_examples, eval_every=eval_every, save_every=save_every,
        keep_checkpoints=keep_checkpoints, log_every=log_every, resume=resume, device=device, precision=precision,
        threads=threads, force=force,
    )
    with _Bar(steps, ("mlm_acc", "sop_acc"), "tokens_per_s") as bar:
        result = pretrain(opts, on_event=bar)
    figures = {"out_dir": str(result.out_dir), "step": result.step,
               **{f"train_{k}": v for k, v in result.train.items() if k.endswith(("loss", "acc"))},
               **{f"eval_{k}": v for k, v in result.eval.items() if k.endswith(("loss", "acc"))}}
    _print_figures("pretraining", figures, as_json)


@click.command("finetune")
@click.option("--task", type=click.Choice(["classification", "token-classification", "qa"]), required=True,
              help="The head to train.")
@click.option("--train", "train_file", required=True, help="Labelled training file (.csv, .tsv or .jsonl).")
@click.option("--eval", "eval_file", required=True, help="Labelled evaluation file (.csv, .tsv or .jsonl).")
@click.option("--model", required=True, help="Pretrained checkpoint directory (e.g. a pretrain run's OUT).")
@click.option("--out", "out_dir", required=True, help="Where to write the fine-tuned model and eval_results.json.")
@click.option("--tokenizer", default=None, help="spiece.model [default: the one in --model].")
@click.option("--epochs", default=3, show_default=True, type=POSITIVE_INT, help="Passes over the training file.")
@click.option("--batch-size", default=32, show_default=True, type=POSITIVE_INT,
              help="Examples per process and micro-batch.")
@click.option("--grad-accum", default=1, show_default=True, type=POSITIVE_INT, help="Micro-batches per optimizer step.")
@click.option("--optimizer", type=click.Choice(["adamw", "lamb"]), default="adamw", show_default=True,
              help="Optimizer.")
@click.option("--lr", default=1e-4, show_default=True, help="Peak learning rate.")
@click.option("--weight-decay", default=0.01, show_default=True, help="Weight decay (not on biases and LayerNorms).")
@click.option("--warmup-ratio", default=0.1, show_default=True, help="Share of the steps spent warming up.")
@click.option("--max-grad-norm", default=1.0, show_default=True, help="Clip the global gradient norm (0: no clipping).")
@click.option("--seed", default=0, show_default=True, help="Seed of the new head, the order of examples and dropout.")
@click.option("--max-seq-length", default=128, show_default=True, type=click.IntRange(min=8),
              help="Tokens per input, [CLS] and [SEP]s included.")
@click.option("--text-column", default="text", show_default=True, help="classification: the text.")
@click.option("--text-pair-column", default="text_pair", show_default=True,
              help="classification: optional second text.")
@click.option("--label-column", default="label", show_default=True, help="classification: the label.")
@click.option("--tokens-column", default="tokens", show_default=True, help="token-classification: the words.")
@click.option("--tags-column", default="tags", show_default=True, help="token-classification: one tag per word.")
@click.option("--question-column", default="question", show_default=True, help="qa: the question.")
@click.option("--context-column", default="context", show_default=True, help="qa: the passage holding the answer.")
@click.option("--answer-column", default="answer", show_default=True, help="qa: the answer's text.")
@click.option("--answer-start-column", default="answer_start", show_default=True,
              help="qa: the answer's character offset (optional column).")
@click.option("--exits", type=click.Choice(["joint", "frozen"]), default=None,
              help="classification: also train an early exit after every pass, so a converted file can stop "
                   "when its answer is settled. joint: the whole model on PABEE's depth-weighted loss; frozen: "
                   "only the exits, from a --model fine-tuned for these labels (its answers stay as they were). "
                   "The exit rule is chosen on --eval and recorded in the model.")
@_LOG_EVERY
@_run_options("--out holds a model, even the --model being fine-tuned (files not written again are kept)")
def finetune_command(task, train_file, eval_file, model, out_dir, tokenizer, epochs, batch_size, grad_accum, optimizer,
                     lr, weight_decay, warmup_ratio, max_grad_norm, seed, max_seq_length, text_column,
                     text_pair_column, label_column, tokens_column, tags_column, question_column, context_column,
                     answer_column, answer_start_column, exits, log_every, force, device, precision, threads,
                     as_json):
    """Fine-tune a pretrained ALBERT on a labelled CSV/TSV/JSONL file and report eval figures."""
    from ..train.finetune import FinetuneOptions, finetune
    from ..train.finetune_data import Columns

    columns = Columns(text_column, text_pair_column, label_column, tokens_column, tags_column, question_column,
                      context_column, answer_column, answer_start_column)
    opts = FinetuneOptions(
        task=task, train_file=train_file, eval_file=eval_file, model=model, out_dir=out_dir, tokenizer=tokenizer,
        epochs=epochs, batch_size=batch_size, grad_accum=grad_accum, optimizer=optimizer, lr=lr,
        weight_decay=weight_decay, warmup_ratio=warmup_ratio, max_grad_norm=max_grad_norm, seed=seed,
        max_seq_length=max_seq_length, columns=columns, log_every=log_every, device=device, precision=precision,
        threads=threads, force=force, exits=exits,
    )
    with _Bar(1, ("acc",), "examples_per_s") as bar:
        result = finetune(opts, on_event=bar)
    figures = {"out_dir": str(result.out_dir), "steps": result.steps, **result.metrics}
    if "exits" in figures and not as_json:  # the chosen rule in a line; --json keeps every setting's figures
        figures["exits"] = _exit_line(figures["exits"])
    _print_figures(f"fine-tuning ({task})", figures, as_json)


def _exit_line(exits: dict[str, Any]) -> str:
    from ..exits import ExitRule

    return (f"{ExitRule.from_dict(exits['rule'])}: {exits['mean_passes']:.2f} of {exits['passes']} passes, "
            f"{exits['agreement']:.1%} as at full depth")


COMMANDS: list = [pretrain_command, finetune_command]
