"""One ``verify()`` for every exported file: run it in its real runtime (onnxruntime, the TFLite
interpreter) through albert_edge.runtime, compare every output with PyTorch at several sequence
lengths, on random ids and on tokenized real sentences, and prove each weight is stored once.

A static-shape file (inputs ``[1, N]``) is compared at its one shape: one row of length N, real
sentences padded to N. A static .tflite is also run on LiteRT's GPU accelerator (float32
arithmetic) when this machine has a Vulkan device, and must agree with PyTorch there as on the
CPU: the accelerator can take every operator and still compute wrong values. Where there is no
Vulkan device the report says that the GPU check was not run, and why.

A file that fails is refused with a :class:`VerificationError` (a ConversionError: one line, exit
code 2) of the kind of its first problem: :class:`SignatureError`, :class:`ShapeError`,
:class:`OutputMatchError` (with the tolerance it broke), :class:`DuplicateWeightError`,
:class:`WeightBoundError`. Every target's tolerances are in one table, :data:`TOLERANCES`."""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from albert_edge.runtime import Session

from albert_edge.errors import ConversionError, RuntimeUnavailable
from albert_edge.formats.graph import INPUT_NAMES, GraphContents
from albert_edge.formats.manifest import static_length
from albert_edge.formats.weights import WeightsReport, analyze, read_file

__all__ = ["verify", "VerifyReport", "ParityCase", "GpuCheck", "SENTENCES", "INPUT_NAMES", "ATOL", "RTOL",
           "default_lengths", "Tolerance", "TOLERANCES", "VerificationError", "SignatureError", "ShapeError",
           "OutputMatchError", "WeightsError", "DuplicateWeightError", "WeightBoundError"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Tolerance:
    """How close a target's files must come. ``atol`` and ``rtol``: an fp32 file's outputs against
    PyTorch's (hidden states are compared absolutely; logits, whose size grows with the vocabulary
    and the checkpoint, may also differ by ``rtol`` of their magnitude). ``twin_atol``: a quantized
    file against the int8 .onnx it was made from (the same kernels, so only the order of float sums
    may differ). ``min_cosine``: the least cosine of an output the target's own check accepts (a
    quantized file against its fp32 parent, or a task's embeddings)."""

    atol: float = 1e-4
    rtol: float = 1e-4
    twin_atol: float | None = None
    min_cosine: float | None = None


# Every target's tolerances (converters.targets.TARGETS' names).
TOLERANCES: dict[str, Tolerance] = {
    "onnx": Tolerance(),
    "tflite": Tolerance(),
    "executorch": Tolerance(min_cosine=0.999),  # an int8 .pte on real text, against the fp32 .pte
    "ort": Tolerance(twin_atol=1e-5),
    "mediapipe": Tolerance(min_cosine=0.9999),  # probabilities within atol, embeddings by their cosine
    "onnx-text": Tolerance(twin_atol=1e-5),
    "transformers-js": Tolerance(min_cosine=0.98),  # the folder's int8 model, against PyTorch
}

# What verify() compares with unless told otherwise: every fp32 file's tolerances.
ATOL = TOLERANCES["onnx"].atol
RTOL = TOLERANCES["onnx"].rtol
HIDDEN_STATES = ("last_hidden_state", "pooler_output")

# Real text for the tokenized cases: pairs, numbers, punctuation, a long one that gets truncated.
SENTENCES = (
    ("The weather station on the hill reads its sensors once every minute.", None),
    ("In 2020, the mast bent but did not break.", "The wind reached 110 kilometres per hour."),
    ("Does ALBERT share its layers?", "Yes: twelve layers, one set of weights."),
    ("A short one.", None),
    (" ".join(["Phones, Raspberry Pis and Jetsons run the same small file."] * 12), None),
)


class VerificationError(ConversionError):
    """A file that failed a check against PyTorch or the weights-once read-back; the message
    names its first problem (and how many more). Each subclass is one kind of first problem."""


class SignatureError(VerificationError):
    """The file's inputs or outputs are not the ones albert-edge promises."""


class ShapeError(VerificationError):
    """An output of the file has another shape than PyTorch's."""

    def __init__(self, message: str, output: str | None = None, shape: list[int] | None = None,
                 expected: list[int] | None = None):
        super().__init__(message)
        self.output, self.shape, self.expected = output, shape, expected


class OutputMatchError(VerificationError):
    """An output of the file is further from the reference than its tolerance allows."""

    def __init__(self, message: str, output: str | None = None, max_abs_diff: float | None = None,
                 atol: float | None = None, rtol: float | None = None):
        super().__init__(message)
        self.output, self.max_abs_diff, self.atol, self.rtol = output, max_abs_diff, atol, rtol


class WeightsError(VerificationError):
    """The file's weights, read back, break weights-once."""


class DuplicateWeightError(WeightsError):
    """A weight is stored more than once in the file."""

    def __init__(self, message: str, name: str | None = None, original: str | None = None):
        super().__init__(message)
        self.name, self.original = name, original


class WeightBoundError(WeightsError):
    """The file stores more weight bytes than the model's unique parameters (with the slack allowed)."""


@dataclass(frozen=True)
class Problem:
    """One problem of a checked file: what it says, and the error it is when it comes first."""

    text: str
    error: Callable[[str], VerificationError]


def failure(problems: list[Problem], lead: str, more: bool = True) -> VerificationError:
    """The error of a file whose first problem is ``problems[0]``: ``lead: <its text>``, and with
    ``more`` how many more problems there are."""
    first = problems[0]
    extra = f" (and {len(problems) - 1} more problems)" if more and len(problems) > 1 else ""
    return first.error(f"{lead}: {first.text}{extra}")


def weights_problems(weights: WeightsReport) -> list[Problem]:
    """A weights read-back's problems (:meth:`WeightsReport.problems`: its duplicates, then the bound)."""
    texts = weights.problems()
    kinds = [functools.partial(DuplicateWeightError, name=d.name, original=d.original) for d in weights.duplicates]
    kinds += [WeightBoundError] * (len(texts) - len(kinds))
    return [Problem(text, kind) for text, kind in zip(texts, kinds)]


@dataclass(frozen=True)
class ParityCase:
    """One output on one batch: its largest absolute difference from PyTorch."""

    source: str  # "random" or "text"
    batch: int
    seq_len: int
    output: str
    max_abs_diff: float
    atol: float
    rtol: float
    ok: bool
    note: str = ""
    shapes: tuple[list[int], list[int]] | None = None  # the file's and PyTorch's, where they differ

    def problem(self, where: str = "", note: bool = True) -> Problem:
        """This failed case as a problem (``where``: on which engine, before the output's name;
        ``note``: with the case's note)."""
        text = (f"{where}{self.output} differs from PyTorch by {self.max_abs_diff:.3g} (atol {self.atol:g}, "
                f"rtol {self.rtol:g}) on {self.source} input of length {self.seq_len}"
                f"{' ' + self.note if note and self.note else ''}")
        if self.shapes is not None:
            return Problem(text, functools.partial(ShapeError, output=self.output, shape=self.shapes[0],
                                                   expected=self.shapes[1]))
        return Problem(text, functools.partial(OutputMatchError, output=self.output, max_abs_diff=self.max_abs_diff,
                                               atol=self.atol, rtol=self.rtol))


@dataclass
class GpuCheck:
    """A static .tflite run on LiteRT's GPU accelerator with float32 arithmetic: where its
    operators ran (the accelerator's own report) and how far its outputs are from PyTorch's; or,
    with ``ran`` False, why it was not run (no Vulkan device here)."""

    ran: bool
    reason: str | None = None
    placement: dict[str, Any] | None = None
    cases: list[ParityCase] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Outputs within the tolerance; a check that could not run does not fail a file."""
        return not self.ran or (bool(self.cases) and all(c.ok for c in self.cases))

    def problems(self) -> list[str]:
        return [p.text for p in self.typed_problems()]

    def typed_problems(self) -> list[Problem]:
        return [c.problem("on LiteRT's GPU accelerator ", note=False) for c in self.cases if not c.ok]

    def to_dict(self) -> dict[str, Any]:
        if not self.ran:
            return {"ran": False, "reason": self.reason}
        return {"ran": True, "enforce_f32": True, "placement": self.placement,
                "max_abs_diff": {c.output: c.max_abs_diff for c in self.cases},
                "atol": {c.output: c.atol for c in self.cases}, "rtol": {c.output: c.rtol for c in self.cases},
                "ok": self.ok}


@dataclass
class VerifyReport:
    path: Path
    format: str
    backend: str
    cases: list[ParityCase] = field(default_factory=list)
    io_problems: list[str] = field(default_factory=list)
    weights: WeightsReport | None = None
    contents: GraphContents | None = None
    tokenized: bool = False
    seconds: float = 0.0
    static_len: int | None = None  # N of a static-shape file ([1, N] inputs)
    gpu: GpuCheck | None = None  # a static .tflite on LiteRT's GPU accelerator

    @property
    def ok(self) -> bool:
        return (not self.io_problems and bool(self.cases) and all(c.ok for c in self.cases)
                and self.weights is not None and self.weights.ok and (self.gpu is None or self.gpu.ok))

    @property
    def max_abs_diff(self) -> dict[str, float]:
        """Largest difference per output over every case."""
        worst: dict[str, float] = {}
        for case in self.cases:
            worst[case.output] = max(worst.get(case.output, 0.0), case.max_abs_diff)
        return worst

    @property
    def seq_lens(self) -> list[int]:
        return sorted({c.seq_len for c in self.cases})

    def problems(self) -> list[str]:
        return [p.text for p in self.typed_problems()]

    def typed_problems(self) -> list[Problem]:
        """:meth:`problems`, each with the error it is when it comes first."""
        out = [Problem(text, SignatureError) for text in self.io_problems]
        out += [c.problem() for c in self.cases if not c.ok]
        if self.gpu is not None:
            out += self.gpu.typed_problems()
        if self.weights is not None:
            out += weights_problems(self.weights)
        return out

    def error(self, lead: str, more: bool = True) -> VerificationError:
        """The error that refuses this file (which is not :attr:`ok`): ``lead: <first problem>``,
        with ``more`` followed by how many more there are."""
        return failure(self.typed_problems(), lead, more)

    def parity(self) -> dict[str, Any]:
        """The figures the manifest keeps."""
        figures = {
            "max_abs_diff": self.max_abs_diff,
            "atol": {c.output: c.atol for c in self.cases},
            "rtol": {c.output: c.rtol for c in self.cases},
            "seq_lens": self.seq_lens,
            "cases": len(self.cases),
            "tokenized_text": self.tokenized,
            "backend": self.backend,
            "ok": self.ok,
        }
        if self.gpu is not None:
            figures["gpu"] = self.gpu.to_dict()
        return figures

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path), "format": self.format, "ok": self.ok, "parity": self.parity(),
            "problems": self.problems(), "weights": self.weights.to_dict() if self.weights else None,
            "seconds": round(self.seconds, 3),
        }


def default_lengths(seq_len: int, max_position_embeddings: int) -> tuple[int, ...]:
    """A single token, a short length, the built length and the longest the model takes."""
    return tuple(sorted({1, min(5, max_position_embeddings), seq_len, max_position_embeddings}))


def verify(model, path: str | os.PathLike, *, seq_len: int = 128, seq_lens: tuple[int, ...] | None = None,
           batch_size: int = 2, tokenizer=None, atol: float = ATOL, rtol: float = RTOL,
           num_threads: int | None = None, seed: int = 0, session=None,
           contents: GraphContents | None = None, gpu: bool = True) -> VerifyReport:
    """Check the model file at ``path`` against the PyTorch ``model`` it was made from.

    ``tokenizer`` is an AlbertTokenizer, something callable like it, or the path of a
    spiece.model (or a directory holding one); without one only random ids are used.
    ``seq_lens`` defaults to :func:`default_lengths` of ``seq_len``. ``session`` (something
    with ``input_names``, ``output_names``, ``format``, ``backend_name`` and ``run(feeds)``) and
    ``contents`` replace albert_edge.runtime.Session and the file reader, for a format whose
    exporter brings its own (the .pte, run with ExecuTorch's runtime).

    A static-shape file is run at its own shape only, batch 1 of its length; a static .tflite
    also on LiteRT's GPU accelerator where a Vulkan device is found (``gpu=False`` leaves that out),
    with the same tolerances (:class:`GpuCheck`). Its weights-once bound leaves out the position
    rows a static .tflite does not store (:func:`albert_edge.formats.weights.analyze`).
    """
    start = time.perf_counter()
    path = Path(path)
    # Each shared weight packed once (albert_edge.runtime.compiled): the Interpreter's XNNPACK packs
    # a copy per layer, which made verification the peak of a conversion (ALBERT-large TFLite
    # convert + verify: 2.48 GiB per layer, 1.50 GiB once).
    if session is None:
        session = Session(path, num_threads=num_threads, weights_once=True)
    report = VerifyReport(path=path, format=session.format, backend=session.backend_name)
    report.io_problems = _io_problems(session, tuple(model.output_names))
    report.contents = contents if contents is not None else read_file(path)
    static = report.static_len = static_length(path, report.contents)
    config = model.config
    if not report.io_problems:
        rng = np.random.default_rng(seed)
        if static is None:
            lengths = seq_lens or default_lengths(seq_len, config.max_position_embeddings)
            # Past the built length one row is enough to show the file still agrees there.
            batches = [("random", _random_batch(rng, config, batch_size if T <= seq_len else 1, T))
                       for T in lengths]
        else:  # its one shape: each row of a padded batch on its own
            batches = [("random", row) for row in _rows(_random_batch(rng, config, batch_size, static))]
        tok = _tokenizer(tokenizer, config.vocab_size)
        if tok is not None:
            report.tokenized = True
            text = _text_batches(tok, min(seq_len, config.max_position_embeddings), static)
            batches += [("text", b) for b in (text if static is None else [r for b in text for r in _rows(b)])]
        for source, feeds in batches:
            report.cases += _run_case(model, session, source, feeds, atol, rtol)
        if gpu and static is not None and report.format == "tflite":
            report.gpu = _gpu_check(model, path, _random_batch(rng, config, 2, static), atol, rtol)
    # a static .tflite stores the position rows of its length only
    report.weights = analyze(report.contents, model,
                             static_len=static if report.contents.format == "tflite" else None)
    report.seconds = time.perf_counter() - start
    log.info("verified %s in %.1fs: %s", path.name, report.seconds, "ok" if report.ok else "; ".join(report.problems()))
    return report


def _run_case(model, session, source: str, feeds: dict[str, np.ndarray], atol: float,
              rtol: float) -> list[ParityCase]:
    """One batch through PyTorch and through the file; one ParityCase per output."""
    got = session.run(feeds)
    return [_compare(source, feeds, name, expected, got[name], atol, rtol)
            for name, expected in _reference(model, feeds).items()]


def _reference(model, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """PyTorch's outputs for ``feeds``, by output name."""
    import torch

    with torch.no_grad():
        ref = model.eval()(*(torch.from_numpy(feeds[n]) for n in INPUT_NAMES))
    ref = ref if isinstance(ref, tuple) else (ref,)
    return {name: expected.numpy() for name, expected in zip(model.output_names, ref)}


def _rows(feeds: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """Each row of a batch as a batch of one."""
    return [{name: value[i:i + 1] for name, value in feeds.items()} for i in range(len(feeds["input_ids"]))]


def _gpu_check(model, path: Path, batch: dict[str, np.ndarray], atol: float, rtol: float) -> GpuCheck:
    """The static .tflite at ``path`` on LiteRT's GPU accelerator (float32 arithmetic), on the
    padded, two-segment row of ``batch``, against PyTorch; not run where there is no Vulkan device.
    A refusal or a crash of the accelerator fails the file (ConversionError)."""
    from albert_edge.runtime.accelerator import NoVulkanDevice, placed_run, vulkan_available

    missing = vulkan_available()
    if missing is not None:
        log.info("%s: GPU check not run: %s", path.name, missing)
        return GpuCheck(False, f"no Vulkan device: {missing}")
    feeds = _rows(batch)[-1]
    try:
        placement, got = placed_run(path, feeds, enforce_f32=True)
    except NoVulkanDevice as exc:
        return GpuCheck(False, str(exc))
    except RuntimeUnavailable as exc:
        raise ConversionError(f"{path.name} failed on LiteRT's GPU accelerator: {exc}") from None
    cases = [_compare("gpu", feeds, name, expected, got[name], atol, rtol)
             for name, expected in _reference(model, feeds).items()]
    where = {k: v for k, v in placement.to_dict().items() if k != "path"}  # a temporary name while verified
    return GpuCheck(True, placement=where, cases=cases)


def _io_problems(session, output_names: tuple[str, ...]) -> list[str]:
    problems = []
    if sorted(session.input_names) != sorted(INPUT_NAMES):
        problems.append(f"inputs are {', '.join(session.input_names)}; expected {', '.join(INPUT_NAMES)}")
    if sorted(session.output_names) != sorted(output_names):
        problems.append(f"outputs are {', '.join(session.output_names)}; expected {', '.join(output_names)}")
    return problems


def _random_batch(rng: np.random.Generator, config, batch: int, T: int) -> dict[str, np.ndarray]:
    """Random ids with a padded second row and two segments, so masks and types are exercised."""
    ids = rng.integers(0, config.vocab_size, size=(batch, T), dtype=np.int64)
    mask = np.ones((batch, T), dtype=np.int64)
    types = np.zeros((batch, T), dtype=np.int64)
    if T > 2:
        if batch > 1:
            mask[1, T - T // 3:] = 0
            ids[1, T - T // 3:] = config.pad_token_id
        if config.type_vocab_size > 1:
            types[:, T // 2:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def _tokenizer(tokenizer, vocab_size: int):
    if tokenizer is None or callable(tokenizer):
        return tokenizer
    try:
        from albert_edge.tokenizer import AlbertTokenizer
    except ImportError:
        log.warning("no tokenizer module: verifying on random ids only")
        return None
    tok = AlbertTokenizer.from_dir(tokenizer)
    tok.check_vocab_size(vocab_size)
    return tok


def _text_batches(tok, max_length: int, static: int | None = None) -> list[dict[str, np.ndarray]]:
    """Single sentences padded to the longest, and sentence pairs padded to ``max_length``; every
    row padded to ``static`` for a static-shape file."""
    singles = [a for a, b in SENTENCES if b is None]
    pairs = [(a, b) for a, b in SENTENCES if b is not None]
    return [
        tok(singles, max_length=static or max_length, padding="max_length" if static else "longest",
            truncation=True),
        tok([a for a, _ in pairs], [b for _, b in pairs], max_length=max_length, padding="max_length",
            truncation=True),
    ]


def _compare(source: str, feeds: dict[str, np.ndarray], name: str, expected: np.ndarray,
             got: np.ndarray, atol: float, rtol: float) -> ParityCase:
    rtol = 0.0 if name in HIDDEN_STATES else rtol
    batch, T = feeds["input_ids"].shape
    if got.shape != expected.shape:
        return ParityCase(source, batch, T, name, float("inf"), atol, rtol, False,
                          f"(shape {list(got.shape)}, PyTorch {list(expected.shape)})",
                          shapes=(list(got.shape), list(expected.shape)))
    diff = np.abs(got.astype(np.float64) - expected.astype(np.float64))
    ok = bool(np.all(diff <= atol + rtol * np.abs(expected)))
    return ParityCase(source, batch, T, name, float(diff.max()) if diff.size else 0.0, atol, rtol, ok)
