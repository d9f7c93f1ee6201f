"""Checking a .pte before it is moved in place: run it in ExecuTorch's runtime through
albert_edge.runtime.Session and read back what it stores with the device side's reader
(albert_edge.formats.pte_reader)."""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from albert_edge.errors import ConversionError

from albert_edge.formats.graph import INPUT_NAMES, GraphContents

from .native_logs import quiet_native

__all__ = ["PteSession", "read_contents", "verify_options", "check_lengths", "VERIFY_LENGTHS"]

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
            with quiet_native():  # ExecuTorch's cpuinfo lines as its thread pool starts
                self._session = Session(self.path)
        except RuntimeUnavailable as exc:
            raise ConversionError(f"cannot run {self.path.name}: {exc}") from None
        self.input_names = INPUT_NAMES
        count = len(self._session.outputs)
        self.output_names = tuple(output_names) if len(output_names) == count else tuple(f"output_{i}" for i in range(count))

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with quiet_native():
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
    longest = max((int(spec.shape[1]) for spec in contents.inputs), default=None)
    if any(d != "static" for d in contents.metadata["input_dynamism"]):
        # The file keeps upper bounds; the manifest names the dynamic axis as for .onnx files.
        contents.inputs, contents.outputs = ([dataclasses.replace(spec, shape=_sequence(spec.shape, longest))
                                              for spec in specs] for specs in (contents.inputs, contents.outputs))
    meta = contents.metadata
    contents.metadata = {**meta, "format_version": {"executorch_version": _version(),
                                                    "delegate_blocks": meta["delegates"],
                                                    "backends": meta["backends"],
                                                    "batch": int(contents.inputs[0].shape[0]) if contents.inputs else None,
                                                    "max_seq_len": longest}}
    return contents


def _sequence(shape: tuple, longest: int) -> tuple:
    return (shape[0], "sequence", *shape[2:]) if len(shape) > 1 and shape[1] == longest else tuple(shape)


def _version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("executorch")
    except metadata.PackageNotFoundError:
        return None


def check_lengths(seq_len: int, max_seq_len: int | None) -> None:
    """``convert``'s ``--max-seq-len`` is not below its ``--seq-len``, the length every file is
    verified at: the command checks it before anything is exported, :func:`verify_options`
    again for a call from Python. (:func:`.executorch.export` alone takes any pair: its ``seq_len`` is only the
    example's length.)"""
    if max_seq_len is None or isinstance(max_seq_len, bool) or not isinstance(max_seq_len, int):
        return
    if max_seq_len < 1:
        raise ConversionError(f"--max-seq-len ({max_seq_len}) is the longest input the .pte takes: give "
                              f"{seq_len if isinstance(seq_len, int) and seq_len > 0 else 'the --seq-len'} or more, "
                              "up to the model's max_position_embeddings")
    if isinstance(seq_len, int) and max_seq_len < seq_len:
        raise ConversionError(f"--max-seq-len ({max_seq_len}) is below --seq-len ({seq_len}): the .pte is built and "
                              f"verified at --seq-len; give --max-seq-len {seq_len} or more, or a --seq-len of "
                              f"{max_seq_len} or less")


def verify_options(model, path: Path, seq_len: int) -> dict[str, Any]:
    """What converters.verify needs to check a .pte: its session, its contents and the lengths
    (16, 32, 128 and the usual ones, up to the longest the file takes)."""
    contents = read_contents(path, tuple(model.output_names))
    top = contents.metadata["format_version"]["max_seq_len"] or model.config.max_position_embeddings
    check_lengths(seq_len, top)  # a file verified at a length it refuses: say which options, not "the input"
    lengths = tuple(sorted({T for T in (*VERIFY_LENGTHS, seq_len, top) if T <= top}))
    return {"session": PteSession(path, tuple(model.output_names)), "contents": contents, "seq_lens": lengths}
