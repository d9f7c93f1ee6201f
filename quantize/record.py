"""The manifest entry of a quantized file: written beside it, into the manifest of the model it
came from (same directory) or into a new manifest of the same source (another directory)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from albert_edge.formats import manifest as manifest_io
from albert_edge.errors import ConversionError

from .accuracy import AccuracyReport
from .checks import QuantCheck
from .schemes import Recipe
from .source import ModelFile

__all__ = ["check_destination", "parity", "record"]


def check_destination(out: Path, source: ModelFile) -> None:
    """Refuse, before any work, a destination whose manifest belongs to another model or whose
    name is one of the fp32 files there."""
    manifest_path = out.parent / manifest_io.MANIFEST_NAME
    if not manifest_path.is_file():
        return
    existing = manifest_io.read(manifest_path)
    if out.parent.resolve() != source.directory.resolve() and (
            existing.config != source.manifest.config or existing.source != source.manifest.source):
        raise ConversionError(f"{manifest_path} describes another model; write the quantized file beside "
                              f"{source.path.name} or into a directory of its own")
    for entry in existing.files:
        if entry.name == out.name and entry.precision == "fp32":
            raise ConversionError(f"{out} is an fp32 file of {manifest_path}; choose another --out")


def parity(source: ModelFile, out: Path, recipe: Recipe, accuracy: AccuracyReport,
           calibration: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """The figures the manifest keeps as the quantized file's parity: against its fp32 parent."""
    return {
        "against": "fp32 parent",
        "parent": os.path.relpath(source.path, out.parent),
        "parent_sha256": source.entry.sha256,
        "scheme": recipe.scheme.value,
        "weights": recipe.weights,
        "activations": recipe.activations,
        "max_abs_diff": {o.name: o.max_abs_diff for o in accuracy.outputs},
        "cosine_mean": {o.name: o.cosine_mean for o in accuracy.outputs if o.kind != "passes"},
        "agreement": {o.name: o.agreement for o in accuracy.outputs if o.agreement is not None},
        "accuracy": accuracy.to_dict(),
        "calibration": calibration,
        "notes": list(notes),
    }


class _Report:
    """What manifest.file_entry reads from a verification report."""

    def __init__(self, check: QuantCheck, figures: dict[str, Any]):
        self.contents, self.weights, self._figures, self._check = check.contents, check.weights, figures, check

    def parity(self) -> dict[str, Any]:
        return dict(self._figures, ok=self._check.ok, backend=self._check.backend)


def record(staged: Path, out: Path, manifest_staged: Path, source: ModelFile, recipe: Recipe, check: QuantCheck,
           figures: dict[str, Any], also: Sequence[tuple[Path, manifest_io.FileEntry]] = ()) -> Path:
    """Write at ``manifest_staged`` the manifest beside ``out`` with the entry of the checked file
    ``staged`` (to be installed as ``out``) added or replaced, and ``also``'s entries (where each
    file goes, its entry: the .ort twin); returns where the manifest goes. The caller installs it
    with the files (files.staged_files): an interrupt leaves all as they were, or all new."""
    entry = manifest_io.file_entry(staged, _Report(check, figures), name=out.name)
    entry.precision = recipe.scheme.value
    entry.weights = dict(entry.weights, **check.summary())
    manifest_path = out.parent / manifest_io.MANIFEST_NAME
    if manifest_path.is_file():
        manifest = manifest_io.read(manifest_path)
        names = {out.name, *(t.name for t, _ in also)}
        manifest.files = [f for f in manifest.files if f.name not in names] + [entry, *(e for _, e in also)]
    else:
        manifest = manifest_io.Manifest(source=dict(source.manifest.source), config=dict(source.manifest.config),
                                        files=[entry, *(e for _, e in also)], seq_len=source.seq_len)
    manifest_staged.write_text(manifest_io.to_text(manifest), encoding="utf-8")
    return manifest_path
