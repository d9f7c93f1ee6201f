"""What the parts of a demo bundle must agree on, checked when the bundle is opened and again
when each model file is loaded: labels.json names each of the classifier's outputs, the
tokenizer's ids fit the models' embedding tables, seq_len fits the models' position table, and
the classifier/ and mlm/ folders each hold a model of their own task. Each failure is one line
naming the part that is wrong. Device side only: manifests are plain JSON.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from albert_edge.errors import AlbertEdgeError
from albert_edge.formats.graph import TensorSpec
from albert_edge.formats.packed import check_packed
from albert_edge.labels import LabelError
from albert_edge.labels import check_labels as labels_checked

__all__ = ["BundleError", "MIN_SEQ_LEN", "check_labels", "check_seq_len", "read_manifest", "check_outputs",
           "check_packed_files"]

MIN_SEQ_LEN = 3  # [CLS], one piece, [SEP]
# The heads a conversion records in manifest.json, per task folder.
_HEADS = {"classifier": ("classification",), "mlm": ("mlm", "pretraining")}
_WHAT = {"classifier": "a classifier (one score per label)",
         "mlm": "a fill-mask (MLM) model (one score per vocabulary piece and token)"}
_RANK = {"classifier": 2, "mlm": 3}  # (batch, labels) and (batch, tokens, vocabulary)
_REMAKE = "make it again with `albert-edge demo bundle`"


class BundleError(AlbertEdgeError):
    """A bundle directory is missing, incomplete, not a demo bundle, or its parts disagree."""


def check_labels(data: Any, path: Path) -> list[str]:
    """labels.json's contents: a JSON list of label names that :func:`albert_edge.labels.check_labels`
    takes (non-empty, single-line, distinct strings)."""
    fix = (f"{path.name} must be a JSON list of label names (non-empty strings) in the order of the classifier's "
           f"outputs, e.g. [\"sports\", \"science\"]; {_REMAKE}")
    if not isinstance(data, list):
        raise BundleError(f"{path}: {fix}")
    try:
        return list(labels_checked(data, where=str(path), fix=fix))
    except LabelError as exc:
        raise BundleError(str(exc)) from None


def check_packed_files(path: Path) -> None:
    """A .tflite's packed tokenizer and labels (a MediaPipe file's) against its model, before it is
    loaded (:func:`albert_edge.formats.packed.check_packed`): a file MediaPipe cannot run is refused
    in one line, as the other parts are. Files of other formats, and without metadata, pass."""
    try:
        check_packed(path)
    except AlbertEdgeError as exc:
        raise BundleError(str(exc)) from None


def check_seq_len(value: Any, path: Path, max_positions: int | None) -> int:
    """bundle.json's seq_len: a whole number from MIN_SEQ_LEN to the models' max_position_embeddings."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise BundleError(f"{path} has no valid seq_len (a whole number of tokens); {_REMAKE}")
    if value < MIN_SEQ_LEN or (max_positions is not None and value > max_positions):
        limit = (f"to the model's max_position_embeddings ({max_positions})" if max_positions is not None
                 else "up")
        raise BundleError(f"{path}: seq_len {value} must be from {MIN_SEQ_LEN} {limit}; set it in that range")
    return value


def read_manifest(folder: Path, task: str) -> dict[str, Any]:
    """The manifest.json of a task folder, after checking that the folder holds a model of its
    task (a classifier in classifier/, an MLM in mlm/) and that its config gives the sizes the
    other parts are checked against."""
    path = folder / "manifest.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BundleError(f"{path} is missing: the bundle is not whole; {_REMAKE}") from None
    except (OSError, ValueError, RecursionError) as exc:
        raise BundleError(f"{path} cannot be read: {exc}") from None
    source = data.get("source") if isinstance(data, dict) else None
    config = data.get("config") if isinstance(data, dict) else None
    if not isinstance(source, dict) or not isinstance(config, dict):
        raise BundleError(f"{path} is not an albert-edge manifest (no source or config); {_REMAKE}")
    head = source.get("head")
    if head not in _HEADS[task]:
        raise BundleError(f"{folder} holds a model with the {head!r} head (says its manifest.json), not "
                          f"{_WHAT[task]}: {_swap_hint(task, head)}")
    for key in ("vocab_size", "max_position_embeddings"):
        value = config.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise BundleError(f"{path}: config {key} is {value!r}, not a positive whole number; {_REMAKE}")
    return data


def check_outputs(task: str, file: str, outputs: Sequence[TensorSpec], labels: Sequence[str],
                  labels_path: Path, vocab_size: int) -> None:
    """A model file's outputs against its task: the classifier gives (batch, one score per label),
    the MLM (batch, tokens, one score per piece of the tokenizer)."""
    if not outputs:
        raise BundleError(f"{file} has no outputs; {_REMAKE}")
    main = next((o for o in outputs if o.name == "logits"), outputs[0])  # what the engine reads
    shape = tuple(main.shape)
    if len(shape) != _RANK[task]:
        other = next((t for t, rank in _RANK.items() if rank == len(shape)), None)
        found = _WHAT[other] if other else f"a model whose output {main.name!r} has shape {list(shape)}"
        raise BundleError(f"{file} is {found}, not {_WHAT[task]}: {_swap_hint(task, other)}")
    last = shape[-1]
    if not isinstance(last, int) or last < 0:  # a dynamic axis: nothing to compare
        return
    if task == "classifier" and last != len(labels):
        raise BundleError(f"{labels_path} lists {len(labels)} label{'s' * (len(labels) != 1)} but {file} gives "
                          f"{last} scores: labels.json must name each of the classifier's outputs, in order")
    if task == "mlm" and last < vocab_size:
        raise BundleError(f"the tokenizer (spiece.model) has {vocab_size} pieces but {file} scores only {last}: "
                          "tokenizer and model do not match; put the model's own spiece.model in the bundle")


def _swap_hint(task: str, found: str | None) -> str:
    other = "mlm" if task == "classifier" else "classifier"
    if found in (other, *_HEADS[other]):
        return f"are the {task}/ and {other}/ folders swapped?"
    return f"put the {task} files in {task}/; {_REMAKE}"
