"""A classifier's labels: one name per output class, the names an app shows.

Every place that writes labels (the MediaPipe target's labels.txt, a conversion folder's and a
demo bundle's labels.json) or reads them (``inspect`` of a MediaPipe file, the report's snippets,
the demo) checks them here, with one rule: one label per output, each a non-empty, single-line
string (no line break: a labels.txt holds one per line), no two alike, not transformers'
``LABEL_0, LABEL_1, ...`` placeholders. What is refused names the label (its index and value) and the fix. Standard
library only: device side.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import AlbertEdgeError

__all__ = ["LabelError", "CONFIG_FIX", "LABELS_FILE", "check_labels", "check_task_labels", "is_placeholder",
           "labels_json"]

# How to fix the labels of a checkpoint (what convert reads).
CONFIG_FIX = "edit id2label in the checkpoint's config.json"
_PLACEHOLDER = re.compile(r"LABEL_\d+")
# The labels an app reads beside an ids-in file: a JSON list, label i naming output class i. JSON
# (not a labels.txt of lines) because every app platform parses it in one call and it holds any
# string as it is; the demo bundle's labels.json is the same file.
LABELS_FILE = "labels.json"


class LabelError(AlbertEdgeError, ValueError):
    """A classifier's labels cannot name its outputs."""


def is_placeholder(labels: Sequence[Any]) -> bool:
    """Whether ``labels`` are transformers' defaults, LABEL_0, LABEL_1, ... (no names given)."""
    return bool(labels) and all(isinstance(x, str) and _PLACEHOLDER.fullmatch(x) for x in labels)


def check_labels(labels: Sequence[Any], outputs: int | None = None, *, where: str = "the labels",
                 fix: str = CONFIG_FIX) -> tuple[str, ...]:
    """``labels`` unchanged (as a tuple of str) when they can name a classifier's ``outputs``
    classes; LabelError otherwise. ``where`` names what holds them in the message ("config.json
    id2label", "labels.json"), ``fix`` says how to mend them."""
    labels = tuple(labels)
    if not labels:
        raise LabelError(f"{where} names no label: a classifier needs one per output class; {fix}")
    if is_placeholder(labels):
        raise LabelError(f"{where} holds only placeholders (LABEL_0, LABEL_1, ...), not the names an app should "
                         f"show; {fix}")
    seen: dict[str, int] = {}
    for i, label in enumerate(labels):
        if not isinstance(label, str):
            raise LabelError(f"{where}: label {i} is {_json(label)}, not a string; {fix}")
        if not label.strip():
            raise LabelError(f"{where}: label {i} is empty ({label!r}); {fix}")
        if label.splitlines() != [label]:
            raise LabelError(f"{where}: label {i} ({label!r}) holds a line break (labels.txt holds one per line); "
                             f"{fix}")
        if label in seen:
            raise LabelError(f"{where} names {label!r} more than once (labels {seen[label]} and {i}): each class "
                             f"needs its own name; {fix}")
        seen[label] = i
    if outputs is not None and outputs != len(labels):
        raise LabelError(f"{where} names {len(labels)} label{'s' * (len(labels) != 1)} but the classifier has "
                         f"{outputs} output class{'es' * (outputs != 1)}: one label per class; {fix}")
    return labels


def check_task_labels(task: Mapping[str, Any] | None, outputs: Sequence[Mapping[str, Any]], file: str) -> None:
    """A MediaPipe text classifier file's packed labels (its TFLite metadata, as ``inspect``
    reads it: ``task``) against its output (``outputs[0]``, what MediaPipe reads by position):
    :func:`check_labels`, one label per class. Nothing to check in a file of another task."""
    if not task or task.get("task") != "TextClassifier":
        return
    shape = list(outputs[0].get("shape") or ()) if outputs else []
    classes = shape[-1] if shape and isinstance(shape[-1], int) and shape[-1] > 0 else None
    check_labels(task.get("labels") or (), classes, where=f"{file}: its packed labels.txt",
                 fix=f"convert the checkpoint again after you {CONFIG_FIX}")


def labels_json(labels: Sequence[str]) -> str:
    """The text of a :data:`LABELS_FILE` of checked ``labels``."""
    import json

    return json.dumps(list(labels), ensure_ascii=False) + "\n"


def _json(value: Any) -> str:
    import json

    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
