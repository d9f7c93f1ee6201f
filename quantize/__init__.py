"""albert_edge.quantize: int8 and fp16 ALBERT files, each shared weight quantized once, accuracy
measured against the fp32 parent on held-out real text.

One entry point::

    from albert_edge.quantize import QuantizeConfig, quantize
    result = quantize("out/model.onnx", QuantizeConfig("int8-dynamic", tokenizer="spiece.model"))

A .tflite file cannot be quantized in place: its graph is converted again from the model, which
the converters own. They write it inside :func:`quantizing` (the steps of ``quantize()`` around
the one that writes the file), and quantize never calls back into them;
:func:`albert_edge.converters.quantized.quantize_file` (what ``albert-edge quantize`` runs) is the
one call for any format.

The schemes and their recipes are in :mod:`.schemes`; ``describe`` (for ``albert-edge
inspect``) says which weights a file keeps in float and why.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from albert_edge.errors import ConfigError, ConversionError, OutputError
from albert_edge.files import check_new_file, check_not_input, staged_files
from albert_edge.formats.manifest import MANIFEST_NAME
from albert_edge.runtime import Session

from .accuracy import AccuracyReport, measure
from .calibration import Prepared, prepare
from .checks import QuantCheck, check_quantized, describe, float_weights
from .gpu import gpu_run
from .record import check_destination, parity, record
from .source import ModelFile, open_model_file
from .static_text import for_static
from .result import Built, Companion, QuantizeResult
from .schemes import ADAPTIVE_SCHEMES, RECIPES, CalibrationMethod, QuantizeConfig, Recipe, Scheme, recipe_for, schemes_for

__all__ = [
    "quantize", "quantizing", "QuantizeJob", "QuantizeConfig", "QuantizeResult", "Scheme", "CalibrationMethod",
    "Recipe", "RECIPES", "recipe_for", "schemes_for", "describe", "float_weights", "AccuracyReport",
    "default_out_path", "Built", "Companion",
]

log = logging.getLogger(__name__)


def default_out_path(model_path: str | os.PathLike, recipe: Recipe) -> Path:
    """model.onnx -> model.int8-dynamic.onnx, beside it."""
    path = Path(model_path)
    return path.with_name(path.name[: -len(path.suffix)] + recipe.suffix)


def quantize(model_path: str | os.PathLike, config: QuantizeConfig,
             out_path: str | os.PathLike | None = None, *, force: bool = False,
             beside: Companion | None = None) -> QuantizeResult:
    """Quantize the fp32 .onnx ``model_path`` (a file albert-edge converted) with ``config.scheme``
    into ``out_path`` (default: beside it, named by the scheme).

    The file is written under a temporary name, loaded in its real runtime, checked to store
    each weight once and to keep no unintended float weight, measured against its parent, and
    only then renamed into place and added to the manifest beside it. An existing ``out_path``
    is replaced only with ``force`` (and only once the new file passed). When ``config.max_drop``
    is exceeded the file is not kept and ``result.kept`` is False. Bad input (not one of our
    files, a scheme the format lacks, text or tokenizer that do not fit) raises an
    AlbertEdgeError before anything is written; so does a .tflite, which the converters write
    (:func:`albert_edge.converters.quantized.quantize_file`).

    ``beside`` (a :class:`Companion`) makes one more file from the checked one before anything is
    put in place (the CLI's ``--ort``: albert_edge.converters.ort.OrtTwin); its file and entry are
    installed with the quantized file's, or neither (``result.beside_path``).
    """
    with _quantizing(model_path, config, out_path, force, beside, own=True) as job:
        from .onnx import build  # onnx is imported only when an ONNX file is quantized

        job.built = build(job.source, job.tmp, job.recipe, job.config, job.text.calibration)
    return job.result


def quantizing(model_path: str | os.PathLike, config: QuantizeConfig, out_path: str | os.PathLike | None = None,
               *, force: bool = False, beside: Companion | None = None) -> contextlib.AbstractContextManager[QuantizeJob]:
    """What :func:`quantize` does, around a file the caller writes (a .tflite, converted again from
    its model by the converters)::

        with quantizing(path, config, out) as job:
            job.built = write(job.source, job.tmp, job.recipe, job.config, job.text.calibration)
        result = job.result

    Every check of the input and the output runs before the block; the block writes the file at
    ``job.tmp`` and sets ``job.built`` (a :class:`Built`); when it ends, the file is checked,
    measured, recorded and put in place as :func:`quantize` says, and ``job.result`` is set."""
    return _quantizing(model_path, config, out_path, force, beside, own=False)


@dataclass
class QuantizeJob:
    """What :func:`quantizing` was asked, checked: the parent, the recipe, the output and the text;
    ``tmp`` (the temporary name the quantized file is written at) and ``built`` while it is made,
    ``result`` once it is done."""

    source: ModelFile
    config: QuantizeConfig
    recipe: Recipe
    out: Path
    text: Prepared
    tmp: Path | None = None
    built: Built | None = None
    result: QuantizeResult | None = None


@dataclass
class _Made:
    """The quantized file's checks and figures against its parent."""

    check: QuantCheck
    accuracy: AccuracyReport
    figures: dict[str, Any]
    notes: list[str]
    size: int
    kept: bool


@contextlib.contextmanager
def _quantizing(model_path: str | os.PathLike, config: QuantizeConfig, out_path: str | os.PathLike | None,
                force: bool, beside: Companion | None, own: bool) -> Iterator[QuantizeJob]:
    start = time.perf_counter()
    job = _prepare(model_path, config, out_path, force, beside, own)
    out = job.out
    staged = [out, out.parent / MANIFEST_NAME, *([beside.target(out)] if beside is not None else [])]
    with staged_files(staged) as (tmp, manifest_tmp, *beside_tmp):  # all put in place together, or none
        job.tmp = tmp
        yield job
        if job.built is None:
            raise RuntimeError(f"the writer of {out.name} set no job.built")
        made = _make(job, tmp)
        manifest_path = None
        if made.kept:
            also = []
            if beside is not None:  # made and checked before either file is put in place
                entry = beside.make(tmp, beside_tmp[0], out, job.source, job.recipe, made.figures)
                also.append((beside.target(out), entry))
            manifest_path = record(tmp, out, manifest_tmp, job.source, job.recipe, made.check, made.figures, also)
        else:
            tmp.unlink()
            accuracy = made.accuracy
            log.warning("%s: %s is %.4f, a drop of %.4f over --max-drop %.4f: not kept", out.name,
                        accuracy.headline[1], accuracy.headline[0], accuracy.drop, config.max_drop)
    if made.kept and beside is not None:
        beside.after(out.parent)
    job.result = QuantizeResult(
        out_path=out, kept=made.kept, format=job.recipe.format, scheme=job.recipe.scheme.value, parent=job.source.path,
        parent_size=job.source.path.stat().st_size, size=made.size, accuracy=made.accuracy, check=made.check,
        notes=made.notes, calibration=job.text.described, max_drop=config.max_drop, manifest_path=manifest_path,
        seconds=time.perf_counter() - start,
        beside_path=beside.target(out) if made.kept and beside is not None else None,
    )


def _prepare(model_path: str | os.PathLike, config: QuantizeConfig, out_path: str | os.PathLike | None,
             force: bool, beside: Companion | None, own: bool) -> QuantizeJob:
    """Every check of the input and the output, before any work: bad input raises here."""
    if not isinstance(config, QuantizeConfig):
        raise ConfigError("config must be a QuantizeConfig")
    source = open_model_file(model_path)
    recipe = recipe_for(source.format, config.scheme)
    config.check_against(recipe)
    if source.adaptive and recipe.scheme not in ADAPTIVE_SCHEMES:
        raise ConfigError(f"{source.path.name} is adaptive (convert --adaptive): {recipe.scheme} is for integer-only "
                          "accelerators, which take static files, and a file that stops early cannot be static; "
                          f"use --scheme {' or '.join(s.value for s in ADAPTIVE_SCHEMES)}")
    if own and not recipe.method:  # the ONNX quantizer's builders are quantize's own; a .tflite's are not
        raise ConfigError(f"{source.path.name}: a {recipe.format} file is converted again from its model to quantize "
                          "it: use albert_edge.converters.quantized.quantize_file (what `albert-edge quantize` runs)")
    out = Path(out_path) if out_path is not None else default_out_path(source.path, recipe)
    _check_out(out, source.path, recipe, force)
    if beside is not None:
        beside.check(recipe)
        check_new_file(beside.target(out), force)
        check_not_input(beside.target(out), [source.path, *config.calibration, config.tokenizer])
    check_not_input(out, [*config.calibration, config.tokenizer])  # a text or tokenizer given as --out
    check_destination(out, source)
    seq_len = config.seq_len or source.seq_len
    if seq_len > source.config.max_position_embeddings:
        raise ConfigError(f"seq_len {seq_len} is above the model's max_position_embeddings "
                          f"({source.config.max_position_embeddings})")
    text = prepare(config, source, recipe, seq_len)
    if source.entry.static_len:  # convert --static: inputs [1, N], so every row on its own, padded to N
        if seq_len > source.entry.static_len:
            raise ConfigError(f"--seq-len {seq_len} is above the {source.entry.static_len} tokens the static file "
                              f"{source.path.name} takes; give at most {source.entry.static_len}")
        text = for_static(text, source.entry.static_len)
    return QuantizeJob(source, config, recipe, out, text)


def _make(job: QuantizeJob, tmp: Path) -> _Made:
    """Check the file built at ``tmp`` (weights once, no unintended float weight) and measure it
    against its parent on the held-out text."""
    source, config, recipe, text, built = job.source, job.config, job.recipe, job.text, job.built
    notes = ([recipe.notes] if recipe.notes and recipe.notes not in built.notes else []) + built.notes
    sample = {k: v[:1] for k, v in text.evaluation[0].feeds.items()}
    check = check_quantized(tmp, source.path, built.kept_float, sample, float16=recipe.weights == "float16",
                            num_threads=config.num_threads)
    if not check.ok:
        more = f" (and {len(check.problems) - 1} more)" if len(check.problems) > 1 else ""
        raise ConversionError(f"{job.out.name} failed its checks: {check.problems[0]}{more}")
    accuracy = measure(Session(source.path, config.num_threads), Session(tmp, config.num_threads),
                       text.evaluation, source.head, text=text.described["evaluation"])
    figures = parity(source, job.out, recipe, accuracy, text.described, notes)
    if source.format == "tflite" and source.entry.static_len:  # a static file: for the GPU too
        figures["gpu"] = gpu_run(tmp, sample)
    check.accuracy = figures
    return _Made(check, accuracy, figures, notes, tmp.stat().st_size, accuracy.passes(config.max_drop))


def _check_out(out: Path, parent: Path, recipe: Recipe, force: bool) -> None:
    if out.suffix.lower() != parent.suffix.lower():
        raise ConfigError(f"--out {out} must end in {parent.suffix}: "
                          f"{recipe.format} schemes write {recipe.format} files")
    if out.resolve() == parent.resolve():
        raise ConfigError(f"--out {out} is the fp32 file itself; choose another name")
    check_new_file(out, force)  # a directory, an existing file without --force, under a file, not writable
    if not out.parent.is_dir():
        raise OutputError(f"--out {out}: directory {out.parent} does not exist")
