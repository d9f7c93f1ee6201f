"""What ``albert-edge inspect`` says about a file's precision: the bytes stored in each dtype,
every matrix product that reads a float weight and why, and where each weight of the fp32 parent
named in the manifest is stored. Device side."""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..errors import ConversionError
from .copies import weight_copies
from .float_weights import float_weights
from .kinds import by_name
from .weights import read_file

__all__ = ["describe"]


def describe(path: str | os.PathLike) -> dict[str, Any]:
    """For ``albert-edge inspect``: the bytes stored in each precision, what products read in
    float and why (the reasons the quantizer recorded in the manifest, else inferred), and, when
    the manifest names the fp32 parent beside it, where each parent weight is stored."""
    path = Path(path)
    entry = _manifest_entry(path)
    recorded = entry.weights.get("float_weights", []) if entry is not None else []
    floats = float_weights(path, {w["name"]: w["reason"] for w in recorded if "name" in w})
    contents = read_file(path)
    dtypes: dict[str, int] = defaultdict(int)
    for w in contents.weights:
        dtypes[w.dtype] += w.nbytes
    report: dict[str, Any] = {
        "weight_bytes_by_dtype": dict(dtypes),
        "float_weights": [asdict(w) for w in floats],
        "unexpected_float_weights": sum(not w.expected for w in floats),
    }
    parent = entry.parity.get("parent") if entry is not None and isinstance(entry.parity, dict) else None
    if parent and (path.parent / parent).is_file():
        copies = weight_copies(read_file(path.parent / parent),
                               path if by_name(contents.format).stores_quantization else contents)
        report["parent"] = parent
        report["weights_checked"] = len(copies)
        report["stored_more_than_once"] = {c.name: [n for n, _ in c.stored_as] for c in copies if len(c.stored_as) > 1}
    return report


def _manifest_entry(path: Path):
    """The entry of ``path`` in the manifest beside it, if there is one."""
    from . import manifest as manifest_io

    try:
        return manifest_io.read(path.parent).file(path.name)
    except (KeyError, ConversionError):  # no manifest, or it does not list the file
        return None
