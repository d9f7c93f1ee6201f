"""One profiling child's whole input, :class:`ProfileJob`: a model file x one setting, planned by
the parent (:func:`albert_edge.profile.runner.plan`), sent to the child as JSON
(:meth:`ProfileJob.to_json` / :meth:`ProfileJob.from_json`), and the source of the record's own
fields (:meth:`ProfileJob.record`). What is measured (timing, inputs, operators) is the
:class:`~albert_edge.profile.settings.ProfileSettings` the job carries, declared once there.
Device side: standard library only."""

from __future__ import annotations

import dataclasses
import json
import time
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .record import ProfileRecord
from .settings import ProfileSettings

__all__ = ["ProfileJob", "MEDIAPIPE", "PASSES"]

MEDIAPIPE = "mediapipe"  # ProfileJob.engine of a file run through MediaPipe Tasks, the text in
PASSES = "passes"  # the output of an adaptive file (convert --adaptive): the passes each input ran
# The readings of albert_edge.device.describe() taken again after the timed calls.
_AFTER = ("temperatures", "throttled", "cpu_freq_khz", "governor")


@dataclass(frozen=True)
class ProfileJob:
    """A model file x one setting, as one child measures it. ``engine`` says what opens the file:
    None for albert-edge's ``runtime.Session``, ``record.APP`` for the runtime's own API with its
    defaults, :data:`MEDIAPIPE` for MediaPipe Tasks (``task`` on a file of ``input_shape``), or a
    web runtime ("node", "chromium": :mod:`albert_edge.profile.web`, from ``settings.web_dir``)."""

    file: str  # the resolved path
    file_as_given: str
    file_bytes: int
    sha256: str
    settings: ProfileSettings  # runs, seconds, warm-up, text, tokenizer, --ops: what every child of the run does
    threads: int
    batch: int
    seq_len: int | None  # None: real text (settings.text)
    # The file takes the text (convert --to onnx-text, its tokenizer inside): each call is fed the text.
    takes_text: bool = False
    provider: str | None = None  # an onnxruntime execution provider; None for other files
    delegate: str | None = None  # a TFLite delegate ("xnnpack" | "none")
    engine: str | None = None
    accelerator: str = "cpu"  # "gpu": LiteRT's GPU accelerator or onnxruntime's CUDA provider
    gpu_precision: str = "fp32"  # on the GPU: "fp32" | "fp16"
    task: str | None = None  # MediaPipe: "TextClassifier" | "TextEmbedder"
    input_shape: tuple[int, ...] | None = None  # MediaPipe: the file's input shape (it pads every text to it)
    workdir: str | None = None  # the child's own temporary directory (set as it starts)
    machine_before: dict[str, Any] | None = None  # other work on the machine just before the child started

    @property
    def path(self) -> Path:
        return Path(self.file)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), default=str)

    @classmethod
    def from_json(cls, text: str) -> ProfileJob:
        """The job a :meth:`to_json` wrote."""
        return _build(cls, json.loads(text))

    def record(self, *, before: dict[str, Any], after: dict[str, Any], during: dict[str, Any] | None,
               threads: int | None = None, **measured: Any) -> ProfileRecord:
        """The record of this job: the file and the shape from the job, the device as it was
        ``before`` and ``after`` the calls, the other work ``during`` them, the ``threads`` the
        runtime ran (the job's unless given), and the ``measured`` fields."""
        from .. import __version__

        return ProfileRecord(
            albert_edge_version=__version__, file=self.file_as_given, file_name=self.path.name,
            file_bytes=self.file_bytes, sha256=self.sha256, threads=self.threads if threads is None else threads,
            batch=self.batch, seq_len=self.seq_len, input_mode="fixed" if self.seq_len is not None else "real-text",
            device={**before, "after": {k: after[k] for k in _AFTER}},
            machine={"before": self.machine_before, "during": during},
            created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **measured)


def _build(cls: type, data: dict[str, Any]) -> Any:
    """``cls`` (a dataclass) from the JSON of its ``asdict``: tuples, paths and nested dataclasses
    are made again from their fields' types."""
    hints = typing.get_type_hints(cls)
    return cls(**{f.name: _revived(hints[f.name], data[f.name]) for f in dataclasses.fields(cls) if f.name in data})


def _revived(kind: Any, value: Any) -> Any:
    if value is None:
        return None
    union = isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union
    for arm in typing.get_args(kind) if union else (kind,):
        if dataclasses.is_dataclass(arm) and isinstance(value, dict):
            return _build(arm, value)
        if arm is Path:
            return Path(value)
        if typing.get_origin(arm) is tuple and isinstance(value, list):
            return tuple(value)
    return value
