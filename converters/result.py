"""What a conversion hands back: each file written, verified, with its manifest entry; the files
an app reads beside them (tokenizer, labels) and why any is missing."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from albert_edge.formats import manifest as manifest_io

from .verify import VerifyReport

__all__ = ["ConvertedFile", "ConversionResult"]


@dataclass
class ConvertedFile:
    name: str
    path: Path
    format: str
    export_seconds: float
    verify_seconds: float
    report: VerifyReport
    entry: manifest_io.FileEntry


@dataclass
class ConversionResult:
    out_dir: Path
    files: list[ConvertedFile] = field(default_factory=list)
    manifest_path: Path | None = None
    head: str = "base"
    seconds: float = 0.0
    app_files: list[manifest_io.AppFile] = field(default_factory=list)  # spiece.model, labels.json
    notes: list[str] = field(default_factory=list)  # what an app will miss ("no spiece.model: ...")

    def to_dict(self) -> dict[str, Any]:
        return {
            "out_dir": str(self.out_dir),
            "manifest": str(self.manifest_path) if self.manifest_path else None,
            "head": self.head,
            "seconds": round(self.seconds, 3),
            "files": [
                {**asdict(f.entry), "path": str(f.path),
                 "export_seconds": round(f.export_seconds, 3), "verify_seconds": round(f.verify_seconds, 3)}
                for f in self.files
            ],
            "app_files": [{**asdict(a), "path": str(self.out_dir / a.name)} for a in self.app_files],
            "notes": list(self.notes),
        }
