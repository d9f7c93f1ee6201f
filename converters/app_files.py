"""What an app needs beside a file that takes token ids: the tokenizer that makes them (the
checkpoint's spiece.model, copied as it is) and, for a classifier, the name of each output class
(labels.json, :data:`albert_edge.labels.LABELS_FILE`). :func:`plan` decides and checks them
before anything is exported; :func:`write` puts them in the conversion's directory with the
model files; manifest.json lists them (``app_files``, with size and sha256 like every file it
lists) and says why one is missing (``app_notes``): a checkpoint with no spiece.model, or a
classifier whose config.json names no class, converts all the same."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from albert_edge.errors import ConversionError
from albert_edge.formats import manifest as manifest_io
from albert_edge.labels import CONFIG_FIX, LABELS_FILE, check_labels, labels_json
from albert_edge.tokenizer import SPIECE_NAME

from .outputs import head_of

__all__ = ["AppFiles", "LABELLED_HEADS", "TOKENIZER_FILE", "plan", "write"]

TOKENIZER_FILE = SPIECE_NAME
# Heads whose output's last axis is the classes of config.json's id2label.
LABELLED_HEADS = ("classification", "token-classification")


@dataclass(frozen=True)
class AppFiles:
    """What :func:`write` puts beside the model files, and why anything is left out."""

    spiece: Path | None  # the sentencepiece model to copy as spiece.model
    labels: tuple[str, ...] | None  # checked class names, in output order
    notes: tuple[str, ...] = ()


def plan(model, tokenizer, source: dict, targets: Sequence) -> AppFiles:
    """The app files of ``model`` converted to ``targets``: ``tokenizer`` (a path or an
    AlbertTokenizer: the one the conversion verifies with, by default the checkpoint's own)
    and, for a classifier, its config's label names checked by
    :func:`albert_edge.labels.check_labels` (LabelError naming the label and the fix). A target
    that packs the labels into its file refuses a classifier with no names here, before any
    export."""
    notes = []
    spiece = _spiece(tokenizer)
    if spiece is None:
        where = f"{source['checkpoint']} has none" if source.get("checkpoint") else "no tokenizer was given"
        notes.append(f"no {TOKENIZER_FILE}: {where}; an app needs the model's sentencepiece tokenizer to make its "
                     f"token ids (put {TOKENIZER_FILE} beside the checkpoint's config.json and convert again)")
    head = head_of(model)
    if head not in LABELLED_HEADS:
        return AppFiles(spiece, None, tuple(notes))
    from_checkpoint = bool(source.get("checkpoint"))
    where = "the checkpoint's config.json id2label" if from_checkpoint else "the model's config (label_names)"
    fix = CONFIG_FIX if from_checkpoint else "set label_names in its AlbertConfig"
    names = model.config.label_names
    if names is None:  # no id2label, or only transformers' LABEL_0, LABEL_1, ...
        packing = [t.name for t in targets if t.labels]
        if packing and head == "classification":
            raise ConversionError(f"the {' and '.join(packing)} target needs label names: {where} names no class "
                                  f"(or only LABEL_0, LABEL_1, ...); {fix} to name each class as an app should "
                                  "show it")
        notes.append(f"no {LABELS_FILE}: {where} names no class (or only LABEL_0, LABEL_1, ...); {fix} to have "
                     "the names an app shows written")
        return AppFiles(spiece, None, tuple(notes))
    return AppFiles(spiece, check_labels(names, model.config.num_labels, where=where, fix=fix), tuple(notes))


def write(directory: Path, app: AppFiles) -> list[manifest_io.AppFile]:
    """Copy the tokenizer and write the labels into ``directory`` (the conversion's staging
    directory, put in place whole); their manifest entries."""
    spiece_path, labels_path = directory / TOKENIZER_FILE, directory / LABELS_FILE
    if app.spiece is not None:
        shutil.copyfile(app.spiece, spiece_path)  # as it is: the app's tokenizer is the checkpoint's
    if app.labels is not None:
        labels_path.write_text(labels_json(app.labels), encoding="utf-8")
    entries = []
    if app.spiece is not None:
        entries.append(manifest_io.app_file_entry(spiece_path, "tokenizer"))
    if app.labels is not None:
        entries.append(manifest_io.app_file_entry(labels_path, "labels"))
    return entries


def _spiece(tokenizer) -> Path | None:
    """The sentencepiece model file of ``tokenizer`` (a path to it or to its directory, or an
    AlbertTokenizer); None when there is none."""
    if tokenizer is None:
        return None
    from albert_edge.tokenizer import find_spiece

    return find_spiece(getattr(tokenizer, "path", tokenizer))
