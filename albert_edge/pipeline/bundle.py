"""Make the demo's model bundle on a workstation, from what albert-edge already does, with no
download: a tokenizer and a short pretraining on the builtin corpus (the MLM head the page's
fill-in-the-blank uses; made and cached by :mod:`.small`, the recipe the pipeline's default
shares), a topic classifier fine-tuned on labelled paragraphs of the same corpus
(``albert_edge.train.labelled``), conversion to ONNX and TFLite, int8 quantization of each file,
and the held-out accuracy of every file measured in its own runtime.

This is the build side (torch, and tensorflow for TFLite): the server never imports this module,
and the build side is imported inside the functions only.

The bundle directory::

    bundle.json                what it is: sizes, training, held-out accuracy per file
    spiece.model               the tokenizer
    labels.json                the classifier's labels, in output order
    classifier/ mlm/           model.onnx, model.tflite, model.int8-dynamic.{onnx,tflite}, manifest.json
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from albert_edge.demo.engine import BUNDLE_FILE, LABELS_FILE, TASK_DIRS, Bundle, Engine
from albert_edge.errors import AlbertEdgeError
from albert_edge.files import atomic_write, check_output_dir, install, missing_root

from .small import SmallRecipe, pretrained

__all__ = ["PRESETS", "BundleOptions", "make_bundle", "held_out_accuracy", "recipe"]

log = logging.getLogger(__name__)

# Named sizes. "demo" is the bundle the README measures (about 10 minutes on two busy cores);
# "tiny" is for tests: it runs in seconds and its accuracy means nothing.
PRESETS: dict[str, dict[str, Any]] = {
    "demo": dict(
        config=dict(embedding_size=64, hidden_size=128, num_hidden_layers=4, num_hidden_groups=1,
                    num_attention_heads=4, intermediate_size=512, max_position_embeddings=128),
        vocab_size=4000, pretrain_steps=1200, pretrain_batch=32, pretrain_seq_len=64, lr=1e-2,
        finetune_epochs=4, finetune_lr=2e-4, seq_len=128,
    ),
    "tiny": dict(
        config=dict(embedding_size=8, hidden_size=16, num_hidden_layers=2, num_hidden_groups=1,
                    num_attention_heads=2, intermediate_size=32, max_position_embeddings=64),
        vocab_size=400, pretrain_steps=4, pretrain_batch=8, pretrain_seq_len=32, lr=1e-2,
        finetune_epochs=1, finetune_lr=1e-3, seq_len=32, max_train_examples=64, max_eval_examples=32,
    ),
}
SCHEME = {"onnx": "int8-dynamic", "tflite": "int8-dynamic"}  # the int8 file made for each format
Step = Callable[[str, int, int], None]  # (what, done, total)


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


_STEPS = ("tokenizer and pretraining (cached)", "labelled data", "fine-tuning", "converting the MLM",
          "converting the classifier", "quantizing", "held-out accuracy", "writing the bundle")


def make_bundle(opts: BundleOptions, on_step: Step | None = None) -> dict[str, Any]:
    """Build the bundle into ``opts.out_dir``; returns what bundle.json says. Everything is made
    in a temporary directory beside it and moved into place only when complete."""
    step = on_step or (lambda *_: None)
    out = Path(opts.out_dir)
    check_output_dir(out, force=True)  # a file, under a file, or not writable
    if out.is_dir() and any(out.iterdir()) and not opts.force:
        raise AlbertEdgeError(f"{out} already exists and is not empty (use --force to replace it)")
    made = missing_root(out.parent)
    out.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.build-", dir=out.parent))
    try:
        info = _build(opts, work, step)
        info["build_seconds"] = round(time.perf_counter() - start, 1)
        atomic_write(work / "bundle" / BUNDLE_FILE, json.dumps(info, indent=2) + "\n")
        install([(work / "bundle", out)])  # the old bundle stays whole until the new one is in place
    except BaseException:
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return info


def recipe(opts: BundleOptions) -> SmallRecipe:
    """The pretraining of a bundle's MLM, as the shared small-model recipe (its cache key)."""
    s = opts.settings
    return SmallRecipe(vocab_size=s["vocab_size"], config=dict(s["config"]), steps=s["pretrain_steps"],
                       batch_size=s["pretrain_batch"], lr=s["lr"], max_seq_length=s["pretrain_seq_len"],
                       seed=opts.seed, eval_examples=200)


def _build(opts: BundleOptions, work: Path, step: Step) -> dict[str, Any]:
    from albert_edge.converters.export import convert
    from albert_edge.quantize import QuantizeConfig, quantize
    from albert_edge.tokenizer import SPIECE_NAME
    from albert_edge.train.finetune import FinetuneOptions, finetune
    from albert_edge.train.labelled import TOPICS, write_topic_dataset

    s = opts.settings
    total = len(_STEPS)
    bundle = work / "bundle"
    bundle.mkdir()

    step(_STEPS[0], 0, total)
    pretrained_dir, pre = pretrained(recipe(opts), f"demo-{opts.preset}", threads=opts.threads)
    spiece = Path(shutil.copy2(pretrained_dir / SPIECE_NAME, bundle / SPIECE_NAME))

    step(_STEPS[1], 1, total)
    topics = tuple(opts.topics or TOPICS)
    train_file, eval_file = write_topic_dataset(work / "topics", topics=topics, seed=opts.seed)
    train_file = _limit(train_file, s.get("max_train_examples"))
    eval_file = _limit(eval_file, s.get("max_eval_examples"))

    step(_STEPS[2], 2, total)
    fine = finetune(FinetuneOptions(
        task="classification", train_file=str(train_file), eval_file=str(eval_file), model=str(pretrained_dir),
        out_dir=str(work / "finetune"), tokenizer=str(spiece), epochs=s["finetune_epochs"], lr=s["finetune_lr"],
        max_seq_length=s["seq_len"], seed=opts.seed, device="cpu", threads=opts.threads))
    labels = list(fine.model.config.label_names)
    atomic_write(bundle / LABELS_FILE, json.dumps(labels) + "\n")

    quantized: dict[str, dict] = {}
    for index, (task, run, head) in enumerate((("mlm", pretrained_dir, "mlm"),
                                               ("classifier", fine.out_dir, "classification"))):
        step(_STEPS[3 + index], 3 + index, total)
        convert(str(run), bundle / TASK_DIRS[task], targets=("onnx", "tflite"), head=head,
                seq_len=s["seq_len"], tokenizer=spiece)
    step(_STEPS[5], 5, total)
    for task in TASK_DIRS:
        for fmt, scheme in SCHEME.items():
            parent = bundle / TASK_DIRS[task] / f"model.{fmt}"
            result = quantize(parent, QuantizeConfig(scheme, tokenizer=spiece, calibration=("builtin",),
                                                     num_samples=32, eval_samples=32))
            quantized[f"{task}/{result.out_path.name}"] = {
                "agreement_with_fp32": result.accuracy.headline[0], "measure": result.accuracy.headline[1]}

    step(_STEPS[6], 6, total)
    accuracy = held_out_accuracy(bundle, eval_file, labels, s["seq_len"])

    step(_STEPS[7], 7, total)
    return {
        "format_version": 1,
        "preset": opts.preset,
        "seq_len": s["seq_len"],
        "labels": labels,
        "config": {k: v for k, v in asdict(fine.model.config).items() if k not in ("extra", "label_names")},
        "trained_on": {
            "tokenizer": f"sentencepiece unigram, {s['vocab_size']} pieces, on the builtin corpus "
                         "(Python standard-library docstrings)",
            "pretraining": f"{s['pretrain_steps']} steps x {s['pretrain_batch']} sequences of "
                           f"{s['pretrain_seq_len']} tokens, MLM + SOP, builtin corpus",
            "pretraining_eval": {k: round(v, 4) for k, v in pre["eval"].items() if k.endswith(("loss", "acc"))},
            "classifier": f"topic of a standard-library docstring paragraph ({', '.join(topics)}); "
                          "train/eval split by document (albert_edge.train.labelled)",
            "train_examples": _count_lines(train_file),
            "eval_examples": _count_lines(eval_file),
            "finetune_eval": {k: round(v, 4) if isinstance(v, float) else v for k, v in fine.metrics.items()},
        },
        "held_out_accuracy": accuracy,
        "quantized_agreement": quantized,
    }


def held_out_accuracy(bundle_dir: Path, eval_file: Path, labels: list[str], seq_len: int) -> dict[str, Any]:
    """Accuracy of every classifier file of the bundle on ``eval_file``, each run by the demo's own
    engine in its real runtime (the figures the README and the page quote)."""
    rows = [json.loads(line) for line in Path(eval_file).read_text(encoding="utf-8").splitlines() if line.strip()]
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["label"]] = counts.get(row["label"], 0) + 1
    majority = max(counts.values()) / len(rows) if rows else 0.0
    # Labels and seq_len are known before bundle.json exists: give them to the engine directly.
    engine = Engine(Bundle(Path(bundle_dir), info={"labels": labels, "seq_len": seq_len}))
    result: dict[str, Any] = {"examples": len(rows), "majority_class": round(majority, 4)}
    for variant in engine.bundle.variants("classifier"):
        engine.select(variant)
        correct = sum(engine.classify(row["text"])["label"] == row["label"] for row in rows)
        result[variant.key] = round(correct / len(rows), 4) if rows else None
    return result


def _limit(path: Path, n: int | None) -> Path:
    """Keep the first ``n`` lines (for the tiny test bundle)."""
    if n:
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        atomic_write(path, "".join(lines[::max(1, len(lines) // n)][:n]))  # every label, not the first few
    return path


def _count_lines(path: Path) -> int:
    return sum(1 for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip())
