"""The output targets of ``albert-edge convert``: one typed entry each, in one table that convert,
the pipeline, the CLI and the tests read.

An entry names the file it writes, the format it is read back and run as on the device side (the
name of an entry of :mod:`albert_edge.formats.kinds`, which holds its readers and engines), the pip
extra its exporter needs, the options it takes, and a loader whose import statement names its
exporter module. The loader runs on first
use (:class:`Lazy`), so listing the targets imports no exporter and no torch.

What the loader gives is an :class:`Exporter`: ``export`` writes the file, ``verify`` checks it
against PyTorch (every target ends in :func:`.verify.verify`; some give it the file's own session
or contents, or compare another model), and, where the target makes them at conversion
(``convert --scheme``), ``quantized`` writes a quantized twin beside the fp32 file.

Adding a target is one module with its ``export`` and one entry here;
tests/converters/test_targets.py checks that every entry is complete.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from albert_edge.errors import ConversionError
from albert_edge.quantize.schemes import AT_CONVERSION, Scheme

from .verify import VerifyReport, verify

__all__ = ["Target", "Exporter", "Lazy", "TARGETS", "target", "of_file", "model_files", "plain_verify"]

T = TypeVar("T")


class Lazy(Generic[T]):
    """A part imported on first use: ``load`` is a function whose import statement names the module,
    so a reader, an IDE and tests/test_layout.py can follow it; the import runs once."""

    def __init__(self, load: Callable[[], T]):
        self._load = load
        self._value: T | None = None

    def __call__(self) -> T:
        if self._value is None:
            try:
                self._value = self._load()
            except ImportError as exc:
                # A Ctrl-C while a compiled module initialises arrives as ImportError caused by it.
                if isinstance(exc.__cause__, KeyboardInterrupt):
                    raise exc.__cause__ from None
                raise
        return self._value


def plain_verify(model, path: Path, seq_len: int, tokenizer) -> VerifyReport:
    """The shared check, run through albert_edge.runtime.Session."""
    return verify(model, path, seq_len=seq_len, tokenizer=tokenizer)


@dataclass(frozen=True)
class Exporter:
    """A target's build-side functions.

    ``export(model, path, *, seq_len, **options)`` writes the file; ``verify(model, path, seq_len,
    tokenizer)`` checks it; ``quantized(model, converted, path, scheme, *, tokenizer, seq_len,
    **options)`` writes the ``scheme`` twin of the verified fp32 file (a ConvertedFile) at ``path``
    (:meth:`Target.quantized_name`, beside it), for each of the target's ``schemes``."""

    export: Callable[..., Path]
    verify: Callable[[Any, Path, int, Any], VerifyReport] = plain_verify
    quantized: Callable[..., Any] | None = None


@dataclass(frozen=True)
class Target:
    """One output format of ``convert``: ``model<suffix>``, read back and run as ``format``."""

    name: str
    suffix: str
    format: str  # onnx, ort, tflite or executorch: the formats.kinds entry the device side reads and runs it as
    extra: str  # the pip extra the exporter needs: albert-edge[extra]
    load: Lazy[Exporter] = field(compare=False, repr=False)
    options: tuple[str, ...] = ()  # convert() options the exporter takes, besides seq_len
    labels: bool = False  # the file packs a classifier's label names (a classifier without them is refused)
    schemes: tuple[Scheme, ...] = ()  # the quantized forms convert --scheme writes beside the file
    # What quantizes a file of this target afterwards (``albert-edge quantize``), with quantize()'s
    # arguments; None: albert_edge.quantize.quantize, which says why a file it cannot take is refused.
    quantizer: Lazy[Callable[..., Any]] | None = field(default=None, compare=False, repr=False)
    # A folder the exporter writes beside the file and apps load with it; the manifest lists each of
    # its files in the file's entry (``folder_files``), so every reader checks them with the file.
    folder: str | None = None

    @property
    def file_name(self) -> str:
        return "model" + self.suffix

    def quantized_name(self, scheme: Scheme | str) -> str:
        """The file of the ``scheme`` form: model.int8-dynamic.ort beside model.ort."""
        if scheme not in self.schemes:
            raise ConversionError(f"unknown {self.name} scheme {scheme!r}; choose from "
                                  f"{', '.join(map(str, self.schemes))}")
        return "model" + Scheme(scheme).file_suffix(self.suffix)

    def exporter(self) -> Exporter:
        """The exporter, imported now; one line naming the extra when it is not installed."""
        try:
            return self.load()
        except ImportError as exc:
            raise ConversionError(f"the {self.name} exporter is not available: {exc}") from None


# -- the exporters, each imported only when its target is asked for ------------------------------

def _onnx() -> Exporter:
    from . import onnx

    return Exporter(onnx.export)


def _tflite() -> Exporter:
    from . import tflite

    return Exporter(tflite.export)


def _executorch() -> Exporter:
    from . import executorch

    def check(model, path: Path, seq_len: int, tokenizer) -> VerifyReport:  # its own session: ExecuTorch's runtime
        return verify(model, path, seq_len=seq_len, tokenizer=tokenizer,
                      **executorch.verify_options(model, path, seq_len))

    return Exporter(executorch.export, check, executorch.quantized_file)


def _ort() -> Exporter:
    from . import ort

    def check(model, path: Path, seq_len: int, tokenizer) -> VerifyReport:  # its contents from our .ort reader
        return verify(model, path, seq_len=seq_len, tokenizer=tokenizer, **ort.verify_options(model, path, seq_len))

    return Exporter(ort.export, check, ort.quantized_file)


def _mediapipe() -> Exporter:
    from . import mediapipe

    def check(model, path: Path, seq_len: int, tokenizer) -> VerifyReport:  # the file holds the task's one output
        return plain_verify(mediapipe.verified_model(model), path, seq_len, tokenizer)

    return Exporter(mediapipe.export, check)


def _onnx_text() -> Exporter:
    from . import onnx_text

    # The file takes text, not ids: it checks itself against the model on real sentences.
    return Exporter(onnx_text.export, onnx_text.verify_file, onnx_text.quantized_file)


def _transformers_js() -> Exporter:
    from . import transformers_js

    # The file is the fp32 model of a folder transformers.js loads; the folder is checked with it.
    return Exporter(transformers_js.export, transformers_js.check)


# -- the quantizers of converted files, imported only when a file is quantized ------------------

def _quantize_onnx() -> Callable[..., Any]:
    from albert_edge.quantize import quantize

    return quantize


def _quantize_tflite() -> Callable[..., Any]:
    from . import tflite_quantized  # a .tflite is converted again from its model

    return tflite_quantized.quantize


TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("onnx", ".onnx", "onnx", "convert", Lazy(_onnx), options=("opset", "external_data_threshold", "static"),
           quantizer=Lazy(_quantize_onnx)),
    Target("tflite", ".tflite", "tflite", "convert", Lazy(_tflite), options=("layers", "static"),
           quantizer=Lazy(_quantize_tflite)),
    Target("executorch", ".pte", "executorch", "convert-executorch", Lazy(_executorch),
           options=("scheme", "max_seq_len"), schemes=AT_CONVERSION["executorch"]),
    # ONNX Runtime's own format, what ONNX Runtime Mobile loads.
    Target("ort", ".ort", "ort", "convert", Lazy(_ort), options=("opset", "scheme", "static"),
           schemes=AT_CONVERSION["ort"]),
    # A .tflite with TFLite metadata and the tokenizer inside, for MediaPipe Tasks (albert-edge[mobile]).
    Target("mediapipe", ".mediapipe.tflite", "tflite", "mobile", Lazy(_mediapipe), options=("tokenizer",),
           labels=True, quantizer=Lazy(_quantize_tflite)),
    # An .onnx whose input is the text: the tokenizer is a node (onnxruntime-extensions, albert-edge[onnx-text]).
    Target("onnx-text", ".text.onnx", "onnx", "onnx-text", Lazy(_onnx_text), options=("tokenizer", "opset", "scheme"),
           schemes=AT_CONVERSION["onnx-text"]),
    # A folder for transformers.js (config.json, tokenizer.json, onnx/model.onnx and model_quantized.onnx)
    # beside its fp32 file, which the manifest lists (converters.transformers_js).
    Target("transformers-js", ".transformers-js.onnx", "onnx", "convert", Lazy(_transformers_js),
           options=("tokenizer", "opset"), folder="transformers-js"),
)}


def target(name: str) -> Target:
    """The target called ``name``; one line listing the targets when there is none."""
    found = TARGETS.get(name)
    if found is None:
        raise ConversionError(f"unknown target {name!r}; choose from {', '.join(TARGETS)}")
    return found


def model_files(folder: Path) -> list[Path]:
    """The model files of any target in ``folder`` (``model`` and a target's suffix, quantized ones
    too), sorted; none when there is no such folder."""
    suffixes = tuple(t.suffix for t in TARGETS.values())
    return sorted(p for p in folder.glob("model*") if p.suffix in suffixes) if folder.is_dir() else []


def of_file(path: str | Path) -> Target:
    """The target whose file ``path`` is, by its suffix (the longest that fits: model.text.onnx is
    onnx-text's, not onnx's)."""
    name = Path(path).name
    for t in sorted(TARGETS.values(), key=lambda t: -len(t.suffix)):
        if name.endswith(t.suffix):
            return t
    raise ConversionError(f"{path}: not a file of any target ({', '.join(t.suffix for t in TARGETS.values())})")
