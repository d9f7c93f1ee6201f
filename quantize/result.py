"""What the writer of a quantized file hands back, and what ``quantize()`` returns."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .accuracy import AccuracyReport
from .checks import QuantCheck

if TYPE_CHECKING:
    from albert_edge.formats.manifest import FileEntry

    from .schemes import Recipe
    from .source import ModelFile

__all__ = ["Built", "Companion", "QuantizeResult"]


@dataclass
class Built:
    """A quantized model written to ``path``, the weights it keeps in float on purpose (tensor
    name -> reason) and notes on how it was made."""

    path: Path
    kept_float: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


class Companion(Protocol):
    """One more file made from a quantized file once it passed its checks, and installed with it
    or not at all (``quantize --ort``: converters.ort.OrtTwin, the .ort twin of an int8 .onnx)."""

    def check(self, recipe: Recipe) -> None:
        """Refuse, before any work, a scheme this companion cannot follow."""

    def target(self, out: Path) -> Path:
        """Where the companion of the quantized file ``out`` goes."""

    def make(self, staged_quantized: Path, staged: Path, out: Path, source: ModelFile, recipe: Recipe,
             figures: dict[str, Any]) -> FileEntry:
        """Write the companion of ``staged_quantized`` (to be installed as ``out``) at ``staged``;
        its manifest entry."""

    def after(self, directory: Path) -> None:
        """Anything written once both are in place (the reduced build's operator configs)."""


@dataclass
class QuantizeResult:
    """``kept`` is False when the file failed ``--max-drop``: then ``out_path`` does not exist."""

    out_path: Path
    kept: bool
    format: str
    scheme: str
    parent: Path
    parent_size: int
    size: int
    accuracy: AccuracyReport
    check: QuantCheck
    notes: list[str] = field(default_factory=list)
    calibration: dict[str, Any] = field(default_factory=dict)
    max_drop: float | None = None
    manifest_path: Path | None = None
    seconds: float = 0.0
    beside_path: Path | None = None  # the file quantize(beside=...) made beside it (--ort: the .ort twin)

    @property
    def failed_max_drop(self) -> bool:
        return not self.kept

    def to_dict(self) -> dict[str, Any]:
        value, what = self.accuracy.headline
        return {
            "out_path": str(self.out_path), "kept": self.kept, "format": self.format, "scheme": self.scheme,
            "parent": str(self.parent), "parent_size": self.parent_size, "size": self.size,
            "size_ratio": self.size / self.parent_size if self.parent_size else None,
            "headline": value, "headline_of": what, "drop": self.accuracy.drop, "max_drop": self.max_drop,
            "accuracy": self.accuracy.to_dict(), "check": self.check.summary(),
            "float_weights": [asdict(w) for w in self.check.float_weights],
            "calibration": self.calibration, "notes": list(self.notes),
            "manifest": str(self.manifest_path) if self.manifest_path else None,
            "beside": str(self.beside_path) if self.beside_path else None,
            "seconds": round(self.seconds, 3),
        }
