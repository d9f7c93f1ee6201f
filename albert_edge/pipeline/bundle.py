"""Make the demo's model bundle on a workstation, from what albert-edge already does, with no
download: a tokenizer and a short pretraining on the builtin corpus (the MLM head the page's
fill-in-the-blank uses; made and cached by :mod:`.small`, the recipe the pipeline's default
shares), a topic classifier fine-tuned on labelled paragraphs of the same corpus
(``albert_edge.train.labelled``), conversion to ONNX and TFLite, int8 quantization of each file,
and the held-out accuracy of every file measured in its own runtime; then early exits trained on
the fine-tuned classifier with its backbone and final classifier frozen (``finetune --exits
frozen``: only the small exit heads learn, so the full-depth answers stay as they were) and the
classifier converted ``--adaptive`` (files that stop when the recorded exit rule says the answer
is settled), with their accuracy, agreement with the full depth and mean passes measured in their
own runtimes too.

This is the build side (torch, and tensorflow for TFLite): the server never imports this module,
and the build side is imported inside the functions only.

The bundle directory::

    bundle.json                what it is: sizes, training, held-out accuracy per file
    spiece.model               the tokenizer
    labels.json                the classifier's labels, in output order
    classifier/ mlm/           model.onnx, model.tflite, model.int8-dynamic.{onnx,tflite}, manifest.json,
                               and what an app reads beside them (convert writes them): spiece.model,
                               and in classifier/ labels.json
    classifier-adaptive/       the classifier with its exits: model.onnx, model.tflite (outputs logits
                               and passes), manifest.json, spiece.model, labels.json

It is made in ``.NAME.partial/`` beside it (:func:`partial_dir`), with ``pipeline.json`` recording
each finished step as the pipeline does (:mod:`.state`); the bundle is put in place only when
complete (:func:`albert_edge.files.staged`), and a build that was interrupted goes on from its
finished steps when run again.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from albert_edge.demo.engine import ADAPTIVE, ADAPTIVE_DIR, BUNDLE_FILE, LABELS_FILE, TASK_DIRS, Bundle, Engine, Variant
from albert_edge.errors import AlbertEdgeError
from albert_edge.files import atomic_write, check_output_dir, link_or_copy, missing_root, staged
from albert_edge.quantize.schemes import Scheme

from .classifier import fine_tune_topics
from .small import SmallRecipe, pretrained
from .state import STATE_NAME, PipelineError, State, digest

__all__ = ["PRESETS", "STEPS", "BundleOptions", "Progress", "make_bundle", "partial_dir", "held_out_accuracy",
           "recipe"]

log = logging.getLogger(__name__)

# Named sizes. "demo" is the bundle the README measures (about 10 minutes on two busy cores);
# "tiny" is for tests: it runs in seconds and its accuracy means nothing.
PRESETS: dict[str, dict[str, Any]] = {
    "demo": dict(
        config=dict(embedding_size=64, hidden_size=128, num_hidden_layers=4, num_hidden_groups=1,
                    num_attention_heads=4, intermediate_size=512, max_position_embeddings=128),
        vocab_size=4000, pretrain_steps=1200, pretrain_batch=32, pretrain_seq_len=64, lr=1e-2,
        finetune_epochs=4, finetune_lr=2e-4, seq_len=128, exit_epochs=2, exit_lr=1e-3,
    ),
    "tiny": dict(
        config=dict(embedding_size=8, hidden_size=16, num_hidden_layers=2, num_hidden_groups=1,
                    num_attention_heads=2, intermediate_size=32, max_position_embeddings=64),
        vocab_size=400, pretrain_steps=4, pretrain_batch=8, pretrain_seq_len=32, lr=1e-2,
        finetune_epochs=1, finetune_lr=1e-3, seq_len=32, exit_epochs=1, exit_lr=1e-3, max_train_examples=64,
        max_eval_examples=32,
    ),
}
SCHEME = {"onnx": Scheme.INT8_DYNAMIC, "tflite": Scheme.INT8_DYNAMIC}  # the int8 file made for each format
STEPS = ("tokenizer and pretraining", "labelled data", "fine-tuning", "converting the MLM",
         "converting the classifier", "quantizing", "held-out accuracy", "training the exits",
         "the adaptive classifier", "writing the bundle")


@dataclass(frozen=True)
class BundleOptions:
    out_dir: str
    preset: str = "demo"
    topics: tuple[str, ...] | None = None  # None: albert_edge.train.labelled.TOPICS
    threads: int | None = None  # torch threads (None: torch's choice)
    force: bool = False  # replace an existing bundle directory
    seed: int = 0
    overrides: dict[str, Any] = field(default_factory=dict)  # preset fields to change

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise AlbertEdgeError(f"unknown bundle preset {self.preset!r}; presets: {', '.join(PRESETS)}")
        unknown = set(self.overrides) - set(PRESETS[self.preset]) - {"max_train_examples", "max_eval_examples"}
        if unknown:
            raise AlbertEdgeError(f"unknown bundle setting(s): {', '.join(sorted(unknown))}")

    @property
    def settings(self) -> dict[str, Any]:
        return {**PRESETS[self.preset], **self.overrides}


@dataclass(frozen=True)
class Progress:
    """Where a build is: ``step`` (``STEPS[done]``) of ``total``; during training also the training
    step, its loss and the time left at the pace of the steps so far."""

    step: str
    done: int
    total: int
    reused: bool = False  # made by an earlier, interrupted build from the same inputs
    train_step: int | None = None
    train_steps: int | None = None
    loss: float | None = None
    seconds_left: float | None = None

    def __str__(self) -> str:
        line = f"[{self.done + 1}/{self.total}] {self.step}"
        if self.reused:
            return f"{line}: reused from the interrupted build"
        if self.train_step is not None:
            left = round(self.seconds_left or 0)
            line += (f": step {self.train_step}/{self.train_steps}, loss {self.loss:.3f}, "
                     f"{left // 60}m{left % 60:02d}s left")
        return line


def partial_dir(out_dir: str | Path) -> Path:
    """Where the build of ``out_dir`` keeps its finished steps until the bundle is complete."""
    out = Path(out_dir)
    return out.parent / f".{out.name}.partial"


def make_bundle(opts: BundleOptions, on_progress: Callable[[Progress], None] | None = None) -> dict[str, Any]:
    """Build the bundle into ``opts.out_dir``; returns what bundle.json says.

    Everything is made in :func:`partial_dir` beside it and put in place only when complete
    (:func:`albert_edge.files.staged`), so ``out_dir`` is never half a bundle. An interrupted
    build leaves its finished steps there with their record (``pipeline.json``: each step's
    inputs and options, the sha256 of its outputs); the next build of the same ``out_dir``
    reuses each step whose inputs are the same and whose outputs are intact, and redoes the
    others."""
    report = on_progress or (lambda _: None)
    out = Path(opts.out_dir)
    check_output_dir(out, force=True)  # a file, under a file, or not writable
    if out.is_dir() and any(out.iterdir()) and not opts.force:
        raise AlbertEdgeError(f"{out} already exists and is not empty (use --force to replace it)")
    work = partial_dir(out)
    if work.exists() and not (work / STATE_NAME).is_file() and (not work.is_dir() or any(work.iterdir())):
        # never ours to delete, --force or not
        raise AlbertEdgeError(f"{work} holds files a bundle build did not write; move it away or choose another --out")
    made = missing_root(work)
    try:
        state = State.open(work, force=True)  # a damaged record is started over
    except PipelineError as exc:  # the line names --out as given, not the build's directory beside it
        raise PipelineError(str(exc).replace(str(work), str(out))) from None
    try:
        info = _build(opts, state, report)
        report(Progress(STEPS[-1], len(STEPS) - 1, len(STEPS)))
        info["build_seconds"] = round(sum(record.get("seconds", 0) for record in state.steps.values()), 1)
        # the old bundle stays whole until the new one is in its place
        with staged(out, directory=True, keep=False) as staging:
            for item in (work / "bundle").iterdir():  # linked: the finished steps stay whole until then too
                if item.name != BUNDLE_FILE:
                    link_or_copy(item, staging / item.name)
            (staging / BUNDLE_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    except BaseException:
        if not state.steps:  # nothing to resume from
            shutil.rmtree(made or work, ignore_errors=True)
        raise
    shutil.rmtree(work, ignore_errors=True)
    return info


def recipe(opts: BundleOptions) -> SmallRecipe:
    """The pretraining of a bundle's MLM, as the shared small-model recipe (its cache key)."""
    s = opts.settings
    return SmallRecipe(vocab_size=s["vocab_size"], config=dict(s["config"]), steps=s["pretrain_steps"],
                       batch_size=s["pretrain_batch"], lr=s["lr"], max_seq_length=s["pretrain_seq_len"],
                       seed=opts.seed, eval_examples=200)


def _build(opts: BundleOptions, state: State, report: Callable[[Progress], None]) -> dict[str, Any]:
    """Steps 1-7 in ``state.root``: each reused when its record says it was made from the same
    inputs and its outputs are intact, else made from scratch and recorded. Returns what
    bundle.json says."""
    return _Build(opts, state, report).run()


class _Build:
    """One build in the partial directory ``state.root``: where each step writes, and the steps.
    Each step's ``make`` takes the training-event callback and returns its outputs (what its
    record digests) and its context (what later steps and bundle.json read)."""

    def __init__(self, opts: BundleOptions, state: State, report: Callable[[Progress], None]) -> None:
        from albert_edge.tokenizer import SPIECE_NAME
        from albert_edge.train.labelled import TOPICS

        self.opts, self.state, self.report, self.s = opts, state, report, opts.settings
        work = self.work = state.root
        self.bundle, self.checkpoint, self.topics_dir, self.fine_dir = (work / "bundle", work / "pretrained",
                                                                        work / "topics", work / "finetune")
        self.exits_dir = work / "exits"
        self.train_file, self.eval_file = self.topics_dir / "train.jsonl", self.topics_dir / "eval.jsonl"
        self.spiece, self.labels_file = self.bundle / SPIECE_NAME, self.bundle / LABELS_FILE
        self.topics = tuple(opts.topics or TOPICS)

    def run(self) -> dict[str, Any]:
        s, opts, work, bundle = self.s, self.opts, self.work, self.bundle
        step = self.step
        pre = step(0, {"recipe": asdict(recipe(opts))}, self.pretrain)
        step(1, {"topics": self.topics, "seed": opts.seed,
                 "limits": [s.get("max_train_examples"), s.get("max_eval_examples")]}, self.labelled)
        fine = step(2, {**digest([self.checkpoint, self.topics_dir], work),
                        "settings": [s["finetune_epochs"], s["finetune_lr"], s["seq_len"], opts.seed]}, self.fine_tune)
        for index, (task, run, head) in enumerate((("mlm", self.checkpoint, "mlm"),
                                                   ("classifier", self.fine_dir, "classification"))):
            step(3 + index, {**digest([run, self.spiece], work), "seq_len": s["seq_len"]},
                 self.converted(task, run, head))
        fp32 = [bundle / folder / f"model.{fmt}" for folder in TASK_DIRS.values() for fmt in SCHEME]
        quantized_agreement = step(5, digest([*fp32, self.spiece], work), self.quantized)["quantized"]
        accuracy = step(6, digest([bundle / TASK_DIRS["classifier"], self.eval_file, self.labels_file], work),
                        lambda _: ([], held_out_accuracy(bundle, self.eval_file, fine["labels"], s["seq_len"])))
        exits = step(7, {**digest([self.fine_dir, self.topics_dir], work),
                         "settings": [s["exit_epochs"], s["exit_lr"], s["seq_len"], opts.seed]}, self.exits)
        adaptive = step(8, {**digest([self.exits_dir, self.spiece, bundle / TASK_DIRS["classifier"], self.eval_file,
                                      self.labels_file], work), "seq_len": s["seq_len"]}, self.adaptive)
        return {**self.info(pre, fine, accuracy, quantized_agreement), "adaptive": {**exits, **adaptive}}

    def step(self, index: int, inputs: dict[str, Any],
             make: Callable[[Callable[[dict], None]], tuple[list, dict]]) -> dict:
        """Step ``index``: reused when recorded from the same ``inputs`` with its outputs intact,
        else made and recorded. Its context either way."""
        name = STEPS[index]
        inputs = {k: v if isinstance(v, str) else json.dumps(v) for k, v in inputs.items()}
        if self.state.is_done(name, inputs):
            self.report(Progress(name, index, len(STEPS), reused=True))
            return self.state.steps[name]["context"]
        self.report(Progress(name, index, len(STEPS)))
        start = time.perf_counter()
        outputs, context = make(_training(self.report, name, index))
        self.state.record(name, inputs, digest(outputs, self.work), context=context,
                          seconds=round(time.perf_counter() - start, 1))
        return context

    def pretrain(self, on_event) -> tuple[list, dict]:
        opts = self.opts
        made, figures = pretrained(recipe(opts), f"demo-{opts.preset}", on_event=on_event, threads=opts.threads)
        shutil.copytree(made, _fresh(self.checkpoint))
        self.bundle.mkdir(exist_ok=True)
        shutil.copy2(self.checkpoint / self.spiece.name, self.spiece)
        return [self.checkpoint, self.spiece], {"eval": figures["eval"]}

    def labelled(self, _) -> tuple[list, dict]:
        from albert_edge.train.labelled import write_topic_dataset

        write_topic_dataset(_fresh(self.topics_dir), topics=self.topics, seed=self.opts.seed)
        _limit(self.train_file, self.s.get("max_train_examples"))
        _limit(self.eval_file, self.s.get("max_eval_examples"))
        return [self.topics_dir], {}

    def fine_tune(self, on_event) -> tuple[list, dict]:
        s, opts = self.s, self.opts
        fine = fine_tune_topics(self.checkpoint, self.topics_dir, _fresh(self.fine_dir), self.spiece,
                                epochs=s["finetune_epochs"], lr=s["finetune_lr"], seq_len=s["seq_len"], seed=opts.seed,
                                threads=opts.threads, on_event=on_event)
        labels = list(fine.model.config.label_names)
        atomic_write(self.labels_file, json.dumps(labels) + "\n")
        config = {k: v for k, v in asdict(fine.model.config).items() if k not in ("extra", "label_names")}
        return [self.fine_dir, self.labels_file], {"labels": labels, "config": config, "metrics": fine.metrics}

    def exits(self, on_event) -> tuple[list, dict]:
        """Early exits on the fine-tuned classifier, trained with everything else frozen; the exit
        rule is chosen on the held-out texts and recorded in the checkpoint."""
        s, opts = self.s, self.opts
        run = fine_tune_topics(self.fine_dir, self.topics_dir, _fresh(self.exits_dir), self.spiece,
                               epochs=s["exit_epochs"], lr=s["exit_lr"], seq_len=s["seq_len"], seed=opts.seed,
                               threads=opts.threads, exits=True, on_event=on_event)
        chosen = run.metrics["exits"]
        return [self.exits_dir], {
            "training": f"frozen: the fine-tuned classifier's exit heads only, {s['exit_epochs']} epoch(s)",
            "rule": chosen["rule"], "max_passes": chosen["passes"]}

    def adaptive(self, _) -> tuple[list, dict]:
        """The classifier with its exits as files that stop early (ONNX Loop, TFLite WHILE), and
        their held-out figures, each file run by the demo's engine in its own runtime."""
        from albert_edge.converters.export import convert

        folder = _fresh(self.bundle / ADAPTIVE_DIR)
        result = convert(str(self.exits_dir), folder, targets=("onnx", "tflite"), head="classification",
                         seq_len=self.s["seq_len"], tokenizer=self.spiece, adaptive=True)
        labels = json.loads(self.labels_file.read_text(encoding="utf-8"))
        figures = adaptive_figures(self.bundle, self.eval_file, labels, self.s["seq_len"])
        files = [folder / f.name for f in result.files] + [folder / a.name for a in result.app_files]
        return [*files, folder / "manifest.json"], {"held_out": figures}

    def converted(self, task: str, run: Path, head: str) -> Callable:
        def make(_) -> tuple[list, dict]:
            from albert_edge.converters.export import convert

            folder = _fresh(self.bundle / TASK_DIRS[task])
            result = convert(str(run), folder, targets=("onnx", "tflite"), head=head, seq_len=self.s["seq_len"],
                             tokenizer=self.spiece)
            # not manifest.json: quantizing adds to it
            return [folder / f.name for f in result.files] + [folder / a.name for a in result.app_files], {}
        return make

    def quantized(self, _) -> tuple[list, dict]:
        from albert_edge.converters.quantized import quantize_file
        from albert_edge.quantize import QuantizeConfig

        agreement = {}
        for task in TASK_DIRS:
            for fmt, scheme in SCHEME.items():
                result = quantize_file(self.bundle / TASK_DIRS[task] / f"model.{fmt}",
                                       QuantizeConfig(scheme, tokenizer=self.spiece, calibration=("builtin",),
                                                      num_samples=32, eval_samples=32), force=True)  # the bundle's own
                agreement[f"{task}/{result.out_path.name}"] = {
                    "agreement_with_fp32": result.accuracy.headline[0], "measure": result.accuracy.headline[1]}
        return [self.bundle / folder for folder in TASK_DIRS.values()], {"quantized": agreement}

    def info(self, pre: dict, fine: dict, accuracy: dict, quantized_agreement: dict) -> dict[str, Any]:
        """What bundle.json says (without the build time, which make_bundle adds)."""
        s = self.s
        return {
            "format_version": 1,
            "preset": self.opts.preset,
            "seq_len": s["seq_len"],
            "labels": fine["labels"],
            "config": fine["config"],
            "trained_on": {
                "tokenizer": f"sentencepiece unigram, {s['vocab_size']} pieces, on the builtin corpus "
                             "(Python standard-library docstrings)",
                "pretraining": f"{s['pretrain_steps']} steps x {s['pretrain_batch']} sequences of "
                               f"{s['pretrain_seq_len']} tokens, MLM + SOP, builtin corpus",
                "pretraining_eval": {k: round(v, 4) for k, v in pre["eval"].items() if k.endswith(("loss", "acc"))},
                "classifier": f"topic of a standard-library docstring paragraph ({', '.join(self.topics)}); "
                              "train/eval split by document (albert_edge.train.labelled)",
                "train_examples": _count_lines(self.train_file),
                "eval_examples": _count_lines(self.eval_file),
                "finetune_eval": {k: round(v, 4) if isinstance(v, float) else v for k, v in fine["metrics"].items()},
            },
            "held_out_accuracy": accuracy,
            "quantized_agreement": quantized_agreement,
        }


def _training(report: Callable[[Progress], None], name: str, index: int) -> Callable[[dict], None]:
    """Training events (pretraining's and fine-tuning's log records) as progress: the step, its
    loss, and the time left at the pace of the steps since training started."""
    start: dict[str, Any] = {}

    def on_event(event: dict) -> None:
        if event.get("event") == "start":
            start.update(time=time.perf_counter(), step=event.get("step", 0), steps=event["steps"])
        elif event.get("event") == "train" and start:
            per_step = (time.perf_counter() - start["time"]) / max(event["step"] - start["step"], 1)
            report(Progress(name, index, len(STEPS), train_step=event["step"], train_steps=start["steps"],
                            loss=event["loss"], seconds_left=per_step * (start["steps"] - event["step"])))

    return on_event


def held_out_accuracy(bundle_dir: Path, eval_file: Path, labels: list[str], seq_len: int) -> dict[str, Any]:
    """Accuracy of every full-depth classifier file of the bundle on ``eval_file``, each run by the
    demo's own engine in its real runtime (the figures the README and the page quote)."""
    rows = _rows(eval_file)
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["label"]] = counts.get(row["label"], 0) + 1
    majority = max(counts.values()) / len(rows) if rows else 0.0
    engine = _engine(bundle_dir, labels, seq_len)
    result: dict[str, Any] = {"examples": len(rows), "majority_class": round(majority, 4)}
    for variant in engine.bundle.variants("classifier"):
        if not variant.adaptive:
            result[variant.key] = _accuracy(_answers(engine, variant, rows), rows)
    return result


def adaptive_figures(bundle_dir: Path, eval_file: Path, labels: list[str], seq_len: int) -> dict[str, Any]:
    """Of each adaptive classifier file, on ``eval_file``, run by the demo's engine in its own
    runtime: its accuracy, its agreement (top-1) with the full-depth fp32 file of its format, and
    the passes it ran (mean, and the count of each)."""
    rows = _rows(eval_file)
    engine = _engine(bundle_dir, labels, seq_len)
    result: dict[str, Any] = {"examples": len(rows)}
    for variant in (v for v in ADAPTIVE if v in engine.bundle.variants("classifier")):
        answers = _answers(engine, variant, rows)
        full = _answers(engine, Variant(variant.format, "fp32"), rows)
        passes = [a["passes"] for a in answers]
        result[variant.key] = {
            "accuracy": _accuracy(answers, rows),
            "agreement_with_full_depth": round(sum(a["label"] == f["label"] for a, f in zip(answers, full))
                                               / len(rows), 4) if rows else None,
            "mean_passes": round(sum(passes) / len(passes), 3) if passes else None,
            "passes": {str(n): passes.count(n) for n in sorted(set(passes))},
        }
    return result


def _rows(eval_file: Path) -> list[dict]:
    return [json.loads(line) for line in Path(eval_file).read_text(encoding="utf-8").splitlines() if line.strip()]


def _engine(bundle_dir: Path, labels: list[str], seq_len: int) -> Engine:
    # Labels and seq_len are known before bundle.json exists: give them to the engine directly.
    return Engine(Bundle(Path(bundle_dir), info={"labels": labels, "seq_len": seq_len}))


def _answers(engine: Engine, variant: Variant, rows: list[dict]) -> list[dict]:
    engine.select(variant)
    return [engine.classify(row["text"]) for row in rows]


def _accuracy(answers: list[dict], rows: list[dict]) -> float | None:
    return round(sum(a["label"] == row["label"] for a, row in zip(answers, rows)) / len(rows), 4) if rows else None


def _fresh(path: Path) -> Path:
    """``path``, with what an earlier, unfinished attempt at its step left there removed."""
    if path.exists():
        shutil.rmtree(path)
    return path


def _limit(path: Path, n: int | None) -> Path:
    """Keep the first ``n`` lines (for the tiny test bundle)."""
    if n:
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        atomic_write(path, "".join(lines[::max(1, len(lines) // n)][:n]))  # every label, not the first few
    return path


def _count_lines(path: Path) -> int:
    return sum(1 for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip())
