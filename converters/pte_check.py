"""Checking a .pte before it is moved in place: run it in ExecuTorch's runtime through
albert_edge.runtime.Session, read back what it stores with the device side's reader
(albert_edge.formats.pte_reader), and measure an int8 .pte against its fp32 parent on real text."""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from albert_edge.errors import ConversionError

from albert_edge.formats.graph import INPUT_NAMES, GraphContents

__all__ = ["PteSession", "read_contents", "verify_options", "quantized_file", "VERIFY_LENGTHS", "MIN_COSINE"]

log = logging.getLogger(__name__)

VERIFY_LENGTHS = (1, 5, 16, 32, 128)  # besides the built length and the longest


class PteSession:
    """A .pte run by albert_edge.runtime.Session (ExecuTorch's C++ runtime, as a phone app runs
    it), with the interface converters.verify needs: names, and ``run(feeds)`` on batches of any
    size (one row at a time: the program's batch is 1)."""

    format = "executorch"
    backend_name = "executorch (XNNPACK)"

    def __init__(self, path: str | os.PathLike, output_names: tuple[str, ...]):
        from albert_edge.errors import RuntimeUnavailable
        from albert_edge.runtime import Session

        self.path = Path(path)
        try:
            self._session = Session(self.path)
        except RuntimeUnavailable as exc:
            raise ConversionError(f"cannot run {self.path.name}: {exc}") from None
        self.input_names = INPUT_NAMES
        count = len(self._session.outputs)
        self.output_names = tuple(output_names) if len(output_names) == count else tuple(f"output_{i}" for i in range(count))

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        rows = [list(self._session.run({n: np.ascontiguousarray(feeds[n][b:b + 1], dtype=np.int64)
                                        for n in INPUT_NAMES}).values())
                for b in range(feeds["input_ids"].shape[0])]
        return {name: np.concatenate([r[i] for r in rows]) for i, name in enumerate(self.output_names)}


def read_contents(path: str | os.PathLike, output_names: tuple[str, ...]) -> GraphContents:
    """What the .pte stores, read back by the device side's reader (albert_edge.formats.pte_reader,
    as inspect reads it), with the head's output names and what the manifest records of it."""
    from albert_edge.formats import pte_reader

    contents = pte_reader.read(path)
    if len(output_names) == len(contents.outputs):
        contents.outputs = [dataclasses.replace(spec, name=name) for spec, name in zip(contents.outputs, output_names)]
    if any(d != "static" for d in contents.metadata["input_dynamism"]):
        # The file keeps upper bounds; the manifest names the dynamic axis as for .onnx files.
        longest = max(int(spec.shape[1]) for spec in contents.inputs)
        contents.inputs, contents.outputs = ([dataclasses.replace(spec, shape=_sequence(spec.shape, longest))
                                              for spec in specs] for specs in (contents.inputs, contents.outputs))
    meta = contents.metadata
    contents.metadata = {**meta, "format_version": {"executorch_version": _version(),
                                                    "delegate_blocks": meta["delegates"],
                                                    "backends": meta["backends"],
                                                    "batch": int(contents.inputs[0].shape[0]) if contents.inputs else None}}
    return contents


def _sequence(shape: tuple, longest: int) -> tuple:
    return (shape[0], "sequence", *shape[2:]) if len(shape) > 1 and shape[1] == longest else tuple(shape)


def _version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("executorch")
    except metadata.PackageNotFoundError:
        return None


def verify_options(model, path: Path, seq_len: int) -> dict[str, Any]:
    """What converters.verify needs to check a .pte: its session, its contents and the lengths
    (16, 32, 128 and the usual ones, up to the model's maximum)."""
    top = model.config.max_position_embeddings
    lengths = tuple(sorted({T for T in (*VERIFY_LENGTHS, seq_len, top) if T <= top}))
    return {"session": PteSession(path, tuple(model.output_names)),
            "contents": read_contents(path, tuple(model.output_names)), "seq_lens": lengths}


# -- the int8 file, measured against its fp32 parent ------------------------------------------

MIN_COSINE = 0.999  # mean cosine of every output against the fp32 .pte on real text


class _QuantizedReport:
    """What manifest.file_entry reads: the int8 file's contents, weights and its parity, which
    is against the fp32 parent (as for files ``albert-edge quantize`` writes)."""

    def __init__(self, contents: GraphContents, weights, figures: dict[str, Any]):
        self.contents, self.weights, self._figures = contents, weights, figures

    def parity(self) -> dict[str, Any]:
        return self._figures


def quantized_file(model, parent, tmp: Path, scheme: str, *, tokenizer=None, seq_len: int = 128):
    """Write ``model`` with ``scheme`` beside its verified fp32 .pte ``parent`` (a
    converters.export.ConvertedFile) in ``tmp``, check that it stores each weight once, and
    measure it against the parent, both run in ExecuTorch, on held-out real text (the builtin
    corpus, with ``tokenizer``; random ids without one). Raises ConversionError when the mean
    cosine of an output is under MIN_COSINE. Returns its ConvertedFile."""
    from albert_edge.formats import manifest as manifest_io
    from albert_edge.formats.weights import analyze

    from .executorch import SCHEMES, export
    from .export import ConvertedFile

    recipe = SCHEMES.get(scheme)
    if scheme is None or recipe is None:
        raise ConversionError(f"unknown ExecuTorch scheme {scheme!r}; choose from {', '.join(s for s in SCHEMES if s)}")
    path = tmp / ("model" + recipe.suffix)
    t0 = time.perf_counter()
    export(model, path, seq_len=seq_len, scheme=scheme)
    t1 = time.perf_counter()
    names = tuple(model.output_names)
    contents = read_contents(path, names)
    weights = analyze(contents, model)
    accuracy, text = _accuracy(model, parent.path, path, tokenizer, seq_len)
    figures = {
        "against": "fp32 parent", "parent": parent.name, "parent_sha256": parent.entry.sha256, "scheme": scheme,
        "weights": recipe.weights, "activations": recipe.activations,
        "max_abs_diff": {o.name: o.max_abs_diff for o in accuracy.outputs},
        "cosine_mean": {o.name: o.cosine_mean for o in accuracy.outputs},
        "agreement": {o.name: o.agreement for o in accuracy.outputs if o.agreement is not None},
        "accuracy": accuracy.to_dict(), "calibration": {"evaluation": text, "method": None},
        "backend": PteSession.backend_name, "ok": True,
    }
    problems = weights.problems()
    low = [o for o in accuracy.outputs if o.cosine_mean < MIN_COSINE]
    problems += [f"{o.name} mean cosine {o.cosine_mean:.5f} to the fp32 file is under {MIN_COSINE}" for o in low]
    if problems:
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        raise ConversionError(f"{path.name} failed its checks: {problems[0]}{more}")
    entry = manifest_io.file_entry(path, _QuantizedReport(contents, weights, figures))
    entry.precision = scheme
    report = _QuantizedReport(contents, weights, figures)
    return ConvertedFile(path.name, path, "executorch", t1 - t0, time.perf_counter() - t1, report, entry)


def _accuracy(model, parent: Path, path: Path, tokenizer, seq_len: int):
    """quantize.accuracy.measure of the two files on held-out builtin text (or random ids)."""
    from albert_edge.quantize.accuracy import measure
    from albert_edge.quantize.calibration import load_tokenizer, random_batches, split_text, text_batches
    from albert_edge.text import read_sentences

    config = model.config
    names = tuple(model.output_names)
    length = min(seq_len, config.max_position_embeddings)
    mask_id = 4 if "prediction_logits" in names and config.vocab_size > 4 else None
    if tokenizer is None:
        batches = random_batches(config.vocab_size, length, 32, 8, mask_id=mask_id, seed=0)
        text = "32 rows of random ids (no tokenizer: give one to measure on real text)"
    else:
        tok = tokenizer if callable(tokenizer) else load_tokenizer(tokenizer, config.vocab_size)
        sentences, _ = read_sentences(("builtin",))
        split = split_text(sentences, 0, 64, seed=0)
        batches = text_batches(tok, split.evaluation, length, 8, mask_id=tok.mask_id if mask_id else None, seed=0)
        text = f"{len(split.evaluation)} held-out sentences of the builtin corpus"
    head = _head_name(model)
    return measure(PteSession(parent, names), PteSession(path, names), batches, head, text=text), text


def _head_name(model) -> str:
    from .export import head_of

    return head_of(model)
