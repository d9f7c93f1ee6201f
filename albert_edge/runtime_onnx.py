"""How albert_edge.runtime opens an .onnx file in onnxruntime: settings chosen for a small process.

Measured on an ALBERT-base-shape int8-dynamic file (V=30000, 11.6 MB), onnxruntime 1.31, x86,
2 threads: peak RSS (VmHWM) of a fresh process after one call at 32 and one at 128 tokens, the
median of 5 processes; `import numpy, onnxruntime` alone is 51.5 MiB of it.

- onnxruntime's defaults (optimizers on, memory pattern on):                       94.6 MiB
- memory pattern off (``enable_mem_pattern``): onnxruntime plans one activation block per
  input shape and keeps every block in its arena; off, tensors come from the arena one by one
  and their memory is reused across lengths. Latency unchanged at 16, 32 and 128 tokens:          90.3 MiB
- and a file optimized offline (:func:`albert_edge.quantize.ort_optimize.optimize_for_onnxruntime`,
  marked with :data:`OPTIMIZED_KEY`) opened with onnxruntime's optimizers off: the optimizer's
  working memory on a 1,200-node graph is never spent, and the 450-node graph it leaves is
  what is loaded. Outputs identical, latency unchanged:                                           85.2 MiB

The file is read by onnxruntime itself (a path, not bytes: bytes passed from Python are copied
once more). Prepacking stays on: without it a call at 32 tokens took 1.34x as long.
Standard library only, besides the ``ort`` module handed in.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["OPTIMIZED_KEY", "DISABLED_OPTIMIZERS", "read_metadata", "optimized_by", "session_options"]

# metadata_props key of a file whose graph onnxruntime has already optimized for the CPU
# execution provider; its value is the onnxruntime version that did it.
OPTIMIZED_KEY = "albert_edge.onnxruntime_optimized"

# onnxruntime's fused SkipLayerNormalization kernel took 0.28 ms per ALBERT-base layer where the
# Add + LayerNormalization it replaces take 0.08 ms (onnxruntime 1.31, x86, 2 threads, int8 and
# fp32 files alike), so that one fusion is left out.
DISABLED_OPTIMIZERS = ["SkipLayerNormFusion"]

# ModelProto field numbers (onnx.proto) and protobuf wire types.
_METADATA_PROPS = 14
_KEY, _VALUE = 1, 2
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5
_MAX_ENTRY = 1 << 20  # a metadata entry longer than this is not one we wrote


class _NotProtobuf(Exception):
    pass


def _varint(read) -> int:
    value, shift = 0, 0
    while True:
        byte = read(1)
        if not byte or shift > 63:
            raise _NotProtobuf
        value |= (byte[0] & 0x7F) << shift
        if byte[0] < 0x80:
            return value
        shift += 7


def _fields(f, end: int):
    """(field number, wire type, payload start, payload length) of each field up to ``end``,
    the file positioned after the field when the next one is asked for."""
    while f.tell() < end:
        key = _varint(f.read)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            _varint(f.read)
            continue
        size = {_FIXED64: 8, _FIXED32: 4}.get(wire)
        if size is None:
            if wire != _LENGTH:
                raise _NotProtobuf
            size = _varint(f.read)
        start = f.tell()
        if number == 0 or start + size > end:
            raise _NotProtobuf
        yield number, wire, start, size
        f.seek(start + size)


def read_metadata(path: str | os.PathLike) -> dict[str, str]:
    """``metadata_props`` of an .onnx file, read from its top-level fields only: the graph (nearly
    all of the file) is skipped over, so this costs a few small reads, whatever the file's size.
    ``{}`` for a file that is not a well-formed protobuf; onnxruntime says what is wrong with it."""
    out: dict[str, str] = {}
    try:
        with open(path, "rb") as f:
            end = os.fstat(f.fileno()).st_size
            for number, wire, start, size in _fields(f, end):
                if number != _METADATA_PROPS or wire != _LENGTH or size > _MAX_ENTRY:
                    continue
                entry = {n: f.read(s) for n, w, _, s in _fields(f, start + size) if w == _LENGTH}
                if _KEY in entry:
                    out[entry[_KEY].decode("utf-8", "replace")] = entry.get(_VALUE, b"").decode("utf-8", "replace")
    except (OSError, _NotProtobuf):
        return {}
    return out


def optimized_by(path: str | os.PathLike) -> str | None:
    """The onnxruntime version that optimized the file's graph offline, None when it was not."""
    return read_metadata(path).get(OPTIMIZED_KEY)


def session_options(ort, path: str | os.PathLike, num_threads: int | None = None, provider: str | None = None,
                    ops_trace: str | os.PathLike | None = None):
    """The ``ort.SessionOptions`` albert_edge.runtime opens ``path`` with (see the module's notes)."""
    options = ort.SessionOptions()
    cpu_only = provider is None or provider in ("cpu", "CPUExecutionProvider")
    done = cpu_only and optimized_by(Path(path)) is not None  # other providers optimize for their own kernels
    options.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_DISABLE_ALL if done
                                        else ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    options.enable_mem_pattern = False
    options.log_severity_level = 3
    if num_threads:
        options.intra_op_num_threads = int(num_threads)
        options.inter_op_num_threads = 1
    if ops_trace is not None:
        options.enable_profiling = True
        options.profile_file_prefix = str(ops_trace)
    return options
