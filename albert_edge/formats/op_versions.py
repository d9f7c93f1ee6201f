"""Which TFLite runtime a .tflite file needs, from its operator versions.

A TFLite interpreter refuses a file as soon as one operator code names a version its kernels do
not register ("Didn't find op for builtin opcode 'FULLY_CONNECTED' version '12'"), whether or
not an operator uses it. Each (operator, version) pair first appeared in one TensorFlow release;
``RUNTIME_VERSIONS`` holds that table as data, as TensorFlow Lite's own
``tools/versioning/runtime_version.cc`` states it. Versions are TensorFlow's numbering, which
tflite-runtime shares (2.14.0 is the last tflite-runtime release); ai-edge-litert, its
successor, numbers its own releases and supports every version listed here.

Reading the operator codes needs only the standard library and numpy (``tflite_schema``), so
the checks here run on a device with nothing but tflite-runtime.
"""

from __future__ import annotations

import os
import struct
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from .identifiers import TFLITE
from .tflite_operators import RUNTIME_VERSIONS

__all__ = ["RUNTIME_VERSIONS", "TFLITE_RUNTIME_LAST", "OpVersion", "op_versions", "min_runtime", "runtime_for",
           "runtime_report", "too_new_for", "version_key"]

# The last tflite-runtime release: what pip installs on Raspberry Pi OS bookworm (Python 3.11).
TFLITE_RUNTIME_LAST = "2.14.0"

_NAMES = {code: name for name, (code, _) in RUNTIME_VERSIONS.items()} | {32: "CUSTOM"}
_CUSTOM = 32


def version_key(version: str) -> tuple[int, ...]:
    """'2.14' -> (2, 14, 0): runtime versions compared as numbers."""
    parts = [int(p) for p in version.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def _full(version: str) -> str:
    return ".".join(map(str, version_key(version)))


def runtime_for(op: str, version: int) -> str | None:
    """The first runtime that runs version ``version`` of builtin ``op``; None if the table does
    not know the pair (a newer operator version, a custom op)."""
    row = RUNTIME_VERSIONS.get(op)
    if row is None or not 1 <= version <= len(row[1].split()):
        return None
    first = row[1].split()[version - 1]
    return None if first == "-" else _full(first)


@dataclass(frozen=True)
class OpVersion:
    """One operator code of a file: which runtime its version needs and how many ops use it."""

    op: str
    version: int
    count: int
    min_runtime: str | None  # None: not in the table, no runtime known to run it

    def to_dict(self) -> dict:
        return {"op": self.op, "version": self.version, "count": self.count, "min_runtime": self.min_runtime}


def op_versions(model: str | os.PathLike | bytes | bytearray) -> list[OpVersion]:
    """Every operator code of a .tflite file (a path or its bytes), in the file's order.
    ValueError when the bytes are not a TFLite flatbuffer."""
    raw = bytes(model) if isinstance(model, (bytes, bytearray)) else Path(model).read_bytes()
    try:
        codes, counts = _read_codes(raw)
    except (struct.error, IndexError) as exc:
        raise ValueError(f"a damaged TFLite flatbuffer ({exc})") from None
    return [OpVersion(name, version, counts[i], None if name.startswith("CUSTOM:") else runtime_for(name, version))
            for i, (name, version) in enumerate(codes)]


def min_runtime(ops: list[OpVersion]) -> str | None:
    """The first runtime that has every operator version of ``ops``; None when one of them is
    not in the table (no known runtime is sure to load the file)."""
    if any(o.min_runtime is None for o in ops):
        return None
    return max((o.min_runtime for o in ops), key=version_key, default=_full("1.5"))


def too_new_for(ops: list[OpVersion], runtime: str) -> list[OpVersion]:
    """The operator codes that ``runtime`` (e.g. '2.14.0') cannot load."""
    limit = version_key(runtime)
    return [o for o in ops if o.min_runtime is None or version_key(o.min_runtime) > limit]


def _read_codes(raw: bytes) -> tuple[list[tuple[str, int]], Counter]:
    from .tflite_schema import Model

    if not TFLITE.found(raw):
        raise ValueError("not a TFLite flatbuffer (no TFL3 identifier)")
    model = Model.GetRootAs(raw, 0)
    codes = []
    for i in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(i)
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        if builtin == _CUSTOM:
            name = "CUSTOM:" + (code.CustomCode() or b"?").decode("utf-8", "replace")
        else:
            name = _NAMES.get(builtin, f"BUILTIN_{builtin}")
        codes.append((name, code.Version()))
    counts: Counter = Counter()
    for s in range(model.SubgraphsLength()):
        subgraph = model.Subgraphs(s)
        for o in range(subgraph.OperatorsLength()):
            counts[subgraph.Operators(o).OpcodeIndex()] += 1
    return codes, counts


def runtime_report(path: str | os.PathLike) -> dict:
    """For ``albert-edge inspect``: each operator code with the runtime it needs, the file's
    minimum runtime, and whether tflite-runtime 2.14 loads it."""
    ops = op_versions(path)
    return {
        "min_runtime": min_runtime(ops),
        "loads_in_tflite_runtime": {TFLITE_RUNTIME_LAST: not too_new_for(ops, TFLITE_RUNTIME_LAST)},
        "op_versions": [o.to_dict() for o in ops],
    }
