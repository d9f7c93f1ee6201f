"""Convert a checkpoint (or a model) to every asked target: each exporter writes its file in a
folder staged beside the output (:func:`albert_edge.files.staged`, the one staging of a
conversion), each file is verified against PyTorch, ``manifest.json`` is written last, and only
then does the folder take the output's place. An interrupted or failed conversion leaves nothing
that looks finished.

Beside the model files go the files an app reads with them (:mod:`.app_files`): the tokenizer
(spiece.model, the checkpoint's own) and a classifier's labels (labels.json), whose names are
checked before the first export."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from albert_edge.errors import ConversionError
from albert_edge.files import check_not_input, check_output_dir, staged

from albert_edge.formats import manifest as manifest_io
from albert_edge.exits import ExitRule
from albert_edge.tokenizer import MIN_SEQ_LEN

from . import app_files
from .adaptive import adaptive_model, adaptive_record
from .adaptive import check_targets as check_adaptive
from .outputs import head_of, select_outputs
from .result import ConversionResult, ConvertedFile
from . import targets as registry
from .targets import TARGETS, Target

__all__ = ["convert", "ConversionResult", "ConvertedFile", "TARGETS", "Target", "head_of", "select_outputs"]

log = logging.getLogger(__name__)


Step = Callable[[str, int, int], None]  # (what is starting, steps done, steps in all)


def convert(checkpoint_or_model, out_dir: str | os.PathLike, targets: Sequence[str] = ("onnx",),
            head: str | None = None, seq_len: int = 128, opset: int | None = None, force: bool = False, *,
            tokenizer=None, on_step: Step | None = None, outputs: Sequence[str] | None = None, keep: bool = True,
            adaptive: bool | ExitRule = False, **export_options: Any) -> ConversionResult:
    """Convert ``checkpoint_or_model`` (a checkpoint path or an albert-edge nn.Module) to each of
    ``targets`` in ``out_dir``, verified. ``tokenizer`` (AlbertTokenizer or spiece path) adds
    real sentences to the verification; by default a checkpoint directory's own spiece.model is
    used. ``opset`` is the ONNX opset (None: the exporter's ``DEFAULT_OPSET``). ``export_options`` go to the exporters that take them (``external_data_threshold``
    for ONNX). ``outputs`` keeps only those of the head's outputs in the files (see
    :func:`select_outputs`). ``keep``: what ``out_dir`` held that this conversion did not write
    again stays (and keeps its manifest entry, see :func:`_kept_entries`); False replaces the
    folder whole. ``adaptive`` writes a classifier trained with early exits as a file that stops
    when its exit rule says so (True: the rule the checkpoint records; an ExitRule: that one;
    :mod:`.adaptive`)."""
    start = time.perf_counter()
    wanted = _check_targets(targets)
    if adaptive is not False:
        check_adaptive([t.name for t in wanted], bool(export_options.get("static")))
    unknown = set(export_options) - {o for t in TARGETS.values() for o in t.options}
    if unknown:
        raise TypeError(f"convert() got unknown export options: {', '.join(sorted(unknown))}")
    for option in ("scheme", "max_seq_len", "layers", "static"):
        if option in export_options and not any(option in t.options for t in wanted):
            takers = [t.name for t in TARGETS.values() if option in t.options]
            named = " and ".join([", ".join(takers[:-1]), takers[-1]] if len(takers) > 1 else takers)
            raise ConversionError(f"--{option.replace('_', '-')} is for the {named} target"
                                  f"{'s' if len(takers) > 1 else ''}; targets given: {', '.join(t.name for t in wanted)}")
    _check_static(wanted, seq_len, bool(export_options.get("static")))
    if "scheme" in export_options:
        _check_scheme(export_options["scheme"], wanted)
    _check_head(head)
    if not isinstance(seq_len, int) or seq_len < 1:
        raise ConversionError(f"seq-len ({seq_len!r}) must be a positive integer")
    _check_opset(opset, wanted)
    _check_lengths(wanted, seq_len, export_options.get("max_seq_len"))
    out = Path(out_dir)
    check_not_input(out, [checkpoint_or_model if isinstance(checkpoint_or_model, (str, os.PathLike)) else None,
                          tokenizer if isinstance(tokenizer, (str, os.PathLike)) else None])
    check_output_dir(out, force)
    # The whole directory is assembled beside it and replaces it in one step, with what it held and
    # this conversion did not write again carried over: on a failure or an interrupt it is as it was.
    with staged(out, directory=True, keep=keep) as tmp:
        result = _convert_into(tmp, checkpoint_or_model, out, wanted, head=head, seq_len=seq_len, opset=opset,
                               tokenizer=tokenizer, step=on_step or (lambda *_: None), export_options=export_options,
                               outputs=outputs, keep=keep, adaptive=adaptive)
    result.seconds = time.perf_counter() - start
    return result


def _check_static(wanted: list[Target], seq_len: int, static: bool) -> None:
    """``--static`` with a target that writes dynamic-shape files only would write one beside the
    static files without a word; and a static file pads every input to ``seq_len``, which must hold
    [CLS], one id and [SEP]. Both refused before anything is written."""
    if not static:
        return
    dynamic = [t.name for t in wanted if "static" not in t.options]
    if dynamic:
        takers = [t.name for t in TARGETS.values() if "static" in t.options]
        raise ConversionError(f"--static is for the {', '.join(takers[:-1])} and {takers[-1]} targets, and "
                              f"{', '.join(dynamic)} writes dynamic-shape files only: convert {'it' if len(dynamic) == 1 else 'them'} in a run "
                              "of its own, without --static")
    if isinstance(seq_len, int) and not isinstance(seq_len, bool) and 0 < seq_len < MIN_SEQ_LEN:
        raise ConversionError(f"--seq-len {seq_len} is too short for a static file, which pads every input to "
                              f"--seq-len ids, [CLS] and [SEP] included: give {MIN_SEQ_LEN} or more (up to the "
                              "model's max_position_embeddings)")


def _check_lengths(wanted: list[Target], seq_len: int, max_seq_len: int | None) -> None:
    """Lengths that only fail together with a target, checked before the first export (each
    exporter checks its own again): a wrong pair found after another target's export would cost
    that export first, and a file built at a length it refuses would fail only in verification."""
    names = {t.name for t in wanted}
    if "executorch" in names:
        from .pte_check import check_lengths

        check_lengths(seq_len, max_seq_len)
    if "mediapipe" in names:
        from .mediapipe import check_seq_len

        check_seq_len(seq_len)


def _convert_into(tmp: Path, checkpoint_or_model, out: Path, wanted: list[Target], *, head: str | None,
                  seq_len: int, opset: int | None, tokenizer, step: Step, export_options: dict[str, Any],
                  outputs: Sequence[str] | None = None, keep: bool = True,
                  adaptive: bool | ExitRule = False) -> ConversionResult:
    """The conversion proper: load, export and verify each target in ``tmp``, then install."""
    steps = 1 + 2 * len(wanted) + 1
    step("load checkpoint", 0, steps)
    model, source = _load(checkpoint_or_model, head)
    model = select_outputs(model, outputs)
    config = model.config
    if seq_len > config.max_position_embeddings:
        raise ConversionError(
            f"seq-len {seq_len} is above the model's max_position_embeddings ({config.max_position_embeddings})"
        )
    if tokenizer is None and source.get("checkpoint"):
        tokenizer = _checkpoint_tokenizer(Path(source["checkpoint"]))
    app = app_files.plan(model, tokenizer, source, wanted)  # labels refused here, before any export
    if adaptive is not False:  # the classifier's app files (labels) stay those of the model inside
        model = adaptive_model(model, None if adaptive is True else adaptive)
        source = {**source, "adaptive": adaptive_record(model)}  # what quantize rebuilds it with, a report draws
    result = ConversionResult(out_dir=out, head=source["head"], notes=list(app.notes))
    for note in app.notes:  # the result and the manifest carry them; the CLI prints them
        log.info("%s", note)
    done = 1
    for target in wanted:
        given = {**({"opset": opset} if opset is not None else {}), **export_options}
        options = {k: v for k, v in given.items() if k in target.options}
        if "tokenizer" in target.options:  # an exporter that puts the tokenizer into the file
            options["tokenizer"] = tokenizer
        scheme = options.pop("scheme", None)
        converted, done = _convert_one(target, model, tmp, step, done, steps, seq_len=seq_len,
                                       tokenizer=tokenizer, options=options)
        result.files.append(converted)
        if scheme is not None:  # a quantized file beside the fp32 one, measured against it
            step(f"quantize {target.name} {scheme}", done, steps)
            options.pop("tokenizer", None)
            result.files.append(target.exporter().quantized(model, converted, tmp / target.quantized_name(scheme),
                                                            scheme, tokenizer=tokenizer, seq_len=seq_len, **options))
    step("write manifest", done, steps)
    result.app_files = app_files.write(tmp, app)
    result.manifest_path = _write_manifest(tmp, out, result, source, config, seq_len, keep)
    step("done", steps, steps)
    return result


def _check_targets(targets: Sequence[str]) -> list[Target]:
    names = [targets] if isinstance(targets, str) else list(targets)
    if not names:
        raise ConversionError(f"no target given; choose from {', '.join(TARGETS)}")
    return [registry.target(n) for n in dict.fromkeys(names)]


def _check_scheme(scheme: str, wanted: list[Target]) -> None:
    """A scheme a target does not make fails here, before anything is exported."""
    for each in wanted:
        if "scheme" in each.options:
            each.quantized_name(scheme)


def _check_head(head: str | None) -> None:
    from albert_edge.model import HEADS

    if head is not None and head not in HEADS:
        raise ConversionError(f"unknown head {head!r}; choose from {', '.join(HEADS)}")


def _check_opset(opset: int | None, wanted: list[Target]) -> None:
    """An opset the exporter cannot write fails here, before torch prints its graph."""
    if opset is None or all("opset" not in t.options for t in wanted):
        return
    from .onnx import MIN_OPSET

    newest = _newest_opset()
    if not isinstance(opset, int) or not MIN_OPSET <= opset <= newest:
        age = "too old" if isinstance(opset, int) and opset < MIN_OPSET else "too new for the installed exporter"
        raise ConversionError(f"opset {opset} is {age}: choose {MIN_OPSET} to {newest}")


def _newest_opset() -> int:
    import onnx

    newest = onnx.defs.onnx_opset_version()
    try:
        from torch.onnx._constants import ONNX_MAX_OPSET  # the TorchScript exporter's own limit

        newest = min(newest, ONNX_MAX_OPSET)
    except ImportError:
        pass
    return newest


def _load(checkpoint_or_model, head: str | None) -> tuple[Any, dict[str, Any]]:
    if isinstance(checkpoint_or_model, (str, os.PathLike)):
        from albert_edge import checkpoints
        from albert_edge.hub import resolve

        path = resolve(checkpoint_or_model)
        ckpt = checkpoints.load(path)
        checkpoints.check_float_weights(ckpt)
        model = checkpoints.model_from_checkpoint(ckpt, head)
        return model, {"checkpoint": str(path.resolve()), "format": ckpt.format, "head": head_of(model)}
    from albert_edge.model import CHOICE_HEADS, HEADS

    model = checkpoint_or_model
    if not isinstance(model, (*HEADS.values(), *CHOICE_HEADS.values())):
        raise ConversionError(f"cannot convert a {type(model).__name__}: give a checkpoint path or an albert-edge model")
    own = head_of(model)
    if head is not None and head != own:
        raise ConversionError(f"the model given is a {own!r} model, not {head!r}")
    return model.eval(), {"checkpoint": None, "format": "model", "head": own}


def _checkpoint_tokenizer(path: Path) -> Path | None:
    """The checkpoint's own spiece.model, if it has one."""
    directory = path if path.is_dir() else path.parent
    found = directory / "spiece.model"
    return found if found.is_file() else None


def _convert_one(target: Target, model, tmp: Path, step: Step, done: int, steps: int, *,
                 seq_len: int, tokenizer, options: dict[str, Any]) -> tuple[ConvertedFile, int]:
    exporter = target.exporter()
    path = tmp / target.file_name
    step(f"export {target.name}", done, steps)
    t0 = time.perf_counter()
    exporter.export(model, path, seq_len=seq_len, **options)
    t1 = time.perf_counter()
    log.info("exported %s in %.1fs", target.file_name, t1 - t0)
    step(f"verify {target.name}", done + 1, steps)
    report = exporter.verify(model, path, seq_len, tokenizer)
    t2 = time.perf_counter()
    if not report.ok:
        raise report.error(f"{target.file_name} failed verification")
    entry = manifest_io.file_entry(path, report)
    if target.folder is not None:  # the folder written with the file: every reader checks it with the file
        entry.folder_files = manifest_io.folder_entries(tmp / target.folder)
    return ConvertedFile(target.file_name, path, target.name, t1 - t0, t2 - t1, report, entry), done + 2


def _write_manifest(tmp: Path, out: Path, result: ConversionResult, source: dict[str, Any], config,
                    seq_len: int, keep: bool = True) -> Path:
    """The manifest of the verified files in ``tmp``, which becomes ``out``. With ``keep``, entries
    of an earlier manifest of the same model are kept for the files not replaced (see _kept_entries)."""
    manifest_path = out / manifest_io.MANIFEST_NAME
    previous = _previous_manifest(manifest_path) if keep else None
    for f in result.files:
        f.path = out / f.name
    manifest = manifest_io.Manifest(source=source, config=config.to_hf_dict(), seq_len=seq_len,
                                    files=[f.entry for f in result.files], app_files=list(result.app_files),
                                    app_notes=list(result.notes))
    manifest.files += _kept_entries(previous, manifest, seq_len)
    manifest_io.write(manifest, tmp)
    for item in tmp.rglob("*"):  # temporary files are private; model files are for everyone to read
        os.chmod(item, 0o755 if item.is_dir() else 0o644)  # and a model folder (transformers-js/) to enter
    return manifest_path


def _previous_manifest(path: Path) -> manifest_io.Manifest | None:
    if not path.is_file():
        return None
    try:
        return manifest_io.read(path)
    except ConversionError as exc:
        log.warning("replacing an unreadable manifest: %s", exc)
        return None


def _kept_entries(previous: manifest_io.Manifest | None, new: manifest_io.Manifest, seq_len: int
                  ) -> list[manifest_io.FileEntry]:
    """What ``convert --force`` keeps of the manifest it replaces: the entries of files it did
    not write, when the manifest describes the same model (source, config, sequence length).
    A quantized file whose fp32 parent was rewritten with different bytes loses its entry: its
    figures were measured against a file that no longer exists (quantize it again). A manifest
    of another model is replaced whole; its files stay on disk, unlisted."""
    if previous is None:
        return []
    same = (_plain(previous.source) == _plain(new.source) and _plain(previous.config) == _plain(new.config)
            and previous.seq_len == seq_len)
    written = {e.name: e for e in new.files}
    if not same:
        others = [e.name for e in previous.files if e.name not in written]
        if others:
            log.warning("the previous manifest described another model; no longer listed: %s", ", ".join(others))
        return []
    kept = []
    for entry in previous.files:
        if entry.name in written:
            continue
        parent = written.get(str((entry.parity or {}).get("parent", "")))
        if parent is not None and entry.parity.get("parent_sha256") != parent.sha256:
            log.warning("%s: its fp32 parent %s was replaced; its manifest entry is dropped (quantize again)",
                        entry.name, parent.name)
            continue
        kept.append(entry)
    return kept


def _plain(value: Any) -> Any:
    """As the value reads back from JSON (tuples become lists, keys become strings)."""
    return json.loads(json.dumps(value, default=str))
