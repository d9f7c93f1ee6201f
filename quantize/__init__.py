"""albert_edge.quantize: int8 and fp16 ALBERT files, each shared weight quantized once, accuracy
measured against the fp32 parent on held-out real text.

One entry point::

    from albert_edge.quantize import QuantizeConfig, quantize
    result = quantize("out/model.onnx", QuantizeConfig("int8-dynamic", tokenizer="spiece.model"))

A .tflite file cannot be quantized in place: its graph is converted again from the model, which
the converters own. ``quantize()`` takes that builder as ``build=``;
:func:`albert_edge.converters.quantized.quantize_file` (what ``albert-edge quantize`` runs) passes
it, and is the one call for any format.

The schemes and their recipes are in :mod:`.schemes`; ``describe`` (for ``albert-edge
inspect``) says which weights a file keeps in float and why.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from albert_edge.errors import ConfigError, ConversionError, OutputError, user_message
from albert_edge.files import check_new_file, check_not_input
from albert_edge.runtime import Session

from .accuracy import AccuracyReport
from .checks import describe, float_weights
from .result import Builder, Companion, QuantizeResult
from .schemes import RECIPES, CalibrationMethod, QuantizeConfig, Recipe, Scheme, recipe_for, schemes_for

__all__ = [
    "quantize", "QuantizeConfig", "QuantizeResult", "Scheme", "CalibrationMethod", "Recipe", "RECIPES",
    "recipe_for", "schemes_for", "describe", "float_weights", "AccuracyReport", "default_out_path", "Builder",
    "Companion",
]

log = logging.getLogger(__name__)



def _build_onnx(*args, **kwargs):
    from .onnx import build  # onnx is imported only when an ONNX file is quantized

    return build(*args, **kwargs)


# The builders quantize() has of its own, by format; a .tflite's comes from the converters (build=).
_BUILDERS: dict[str, Builder] = {"onnx": _build_onnx}


def default_out_path(model_path: str | os.PathLike, recipe: Recipe) -> Path:
    """model.onnx -> model.int8-dynamic.onnx, beside it."""
    path = Path(model_path)
    return path.with_name(path.name[: -len(path.suffix)] + recipe.suffix)


def quantize(model_path: str | os.PathLike, config: QuantizeConfig,
             out_path: str | os.PathLike | None = None, *, force: bool = False, build: Builder | None = None,
             beside: Companion | None = None) -> QuantizeResult:
    """Quantize the fp32 file ``model_path`` (an .onnx or .tflite albert-edge converted) with
    ``config.scheme`` into ``out_path`` (default: beside it, named by the scheme).

    The file is written under a temporary name, loaded in its real runtime, checked to store
    each weight once and to keep no unintended float weight, measured against its parent, and
    only then renamed into place and added to the manifest beside it. An existing ``out_path``
    is replaced only with ``force`` (and only once the new file passed). When ``config.max_drop``
    is exceeded the file is not kept and ``result.kept`` is False. Bad input (not one of our
    files, a scheme the format lacks, text or tokenizer that do not fit) raises an
    AlbertEdgeError before anything is written.

    ``build`` writes the quantized file (:class:`Builder`); by default quantize's own builder for the
    format (ONNX). A .tflite needs the converters' (:func:`albert_edge.converters.quantized.quantize_file`
    passes it). ``beside`` (a :class:`Companion`) makes one more file from the checked one before
    anything is put in place (the CLI's ``--ort``: albert_edge.converters.ort.OrtTwin); its file and
    entry are installed with the quantized file's, or neither (``result.beside_path``).
    """
    from .accuracy import measure
    from .calibration import prepare
    from .checks import check_quantized
    from .record import check_destination, parity, record
    from .source import open_model_file

    start = time.perf_counter()
    if not isinstance(config, QuantizeConfig):
        raise ConfigError("config must be a QuantizeConfig")
    source = open_model_file(model_path)
    recipe = recipe_for(source.format, config.scheme)
    config.check_against(recipe)
    build = build or _BUILDERS.get(recipe.format)
    if build is None:
        raise ConfigError(f"{source.path.name}: a {recipe.format} file is converted again from its model to quantize it: "
                          "use albert_edge.converters.quantized.quantize_file (what `albert-edge quantize` runs)")
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

    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp{source.path.suffix}")
    try:
        built = build(source, tmp, recipe, config, text.calibration)
        notes = ([recipe.notes] if recipe.notes and recipe.notes not in built.notes else []) + built.notes
        sample = {k: v[:1] for k, v in text.evaluation[0].feeds.items()}
        check = check_quantized(tmp, source.path, built.kept_float, sample, float16=recipe.weights == "float16",
                                num_threads=config.num_threads)
        if not check.ok:
            more = f" (and {len(check.problems) - 1} more)" if len(check.problems) > 1 else ""
            raise ConversionError(f"{out.name} failed its checks: {check.problems[0]}{more}")
        accuracy = measure(Session(source.path, config.num_threads), Session(tmp, config.num_threads),
                           text.evaluation, source.head, text=text.described["evaluation"])
        kept = accuracy.passes(config.max_drop)
        figures = parity(source, out, recipe, accuracy, text.described, notes)
        check.accuracy = figures
        size = tmp.stat().st_size
        manifest_path = None
        also = []
        if kept and beside is not None:  # made and checked before either file is put in place
            entry = beside.make(tmp, _beside_staging(out, beside), out, source, recipe, figures)
            also.append((_beside_staging(out, beside), beside.target(out), entry))
        if kept:
            manifest_path = record(tmp, out, source, recipe, check, figures, also=also)
            if beside is not None:
                beside.after(out.parent)
        else:
            log.warning("%s: %s is %.4f, a drop of %.4f over --max-drop %.4f: not kept", out.name,
                        accuracy.headline[1], accuracy.headline[0], accuracy.drop, config.max_drop)
    except OSError as exc:  # a full disk, a file system gone read-only, ...
        reason = user_message(exc)
        if reason is None:
            raise
        raise OutputError(f"cannot write {out}: {reason}") from None
    finally:
        tmp.unlink(missing_ok=True)  # also on an interrupt (SIGTERM arrives as one)
        if beside is not None:
            _beside_staging(out, beside).unlink(missing_ok=True)
    return QuantizeResult(
        out_path=out, kept=kept, format=recipe.format, scheme=recipe.scheme.value, parent=source.path,
        parent_size=source.path.stat().st_size, size=size, accuracy=accuracy, check=check,
        notes=notes, calibration=text.described, max_drop=config.max_drop, manifest_path=manifest_path,
        seconds=time.perf_counter() - start,
        beside_path=beside.target(out) if kept and beside is not None else None,
    )


def _beside_staging(out: Path, beside) -> Path:
    target = beside.target(out)
    return target.with_name(f".{target.stem}.{os.getpid()}.tmp{target.suffix}")


def _check_out(out: Path, parent: Path, recipe: Recipe, force: bool) -> None:
    if out.suffix.lower() != parent.suffix.lower():
        raise ConfigError(f"--out {out} must end in {parent.suffix}: "
                          f"{recipe.format} schemes write {recipe.format} files")
    if out.resolve() == parent.resolve():
        raise ConfigError(f"--out {out} is the fp32 file itself; choose another name")
    check_new_file(out, force)  # a directory, an existing file without --force, under a file, not writable
    if not out.parent.is_dir():
        raise OutputError(f"--out {out}: directory {out.parent} does not exist")
