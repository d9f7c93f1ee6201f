"""Read an ExecuTorch .pte file back: its methods and inputs, the operators it calls, its
delegate blocks, and every stored weight, once per stored blob.

Weights live in four places of a .pte, each read here: the legacy inline ``constant_buffer``,
the ``constant_segment`` (sub-offsets into one segment, referenced by a tensor's
``data_buffer_idx``), ``named_data`` (key -> segment: where ExecuTorch 1.x's XNNPACK lowering
puts each constant, keyed by the SHA-256 of its bytes) and the XNNPACK payload's own constant
data (older lowerings). A weight is named after the first tensor that reads it and given that
tensor's dtype and shape; a named blob no tensor describes is kept as raw bytes. Standard
library and numpy only (:mod:`.pte_schema`); no executorch.
"""

from __future__ import annotations

import json
import os
import struct
from collections import Counter
from pathlib import Path

import numpy as np

from .graph import INPUT_NAMES, GraphContents, StoredTensor, TensorSpec
from .identifiers import EXECUTORCH
from .pte_schema import (DATA_INLINE, DATA_SEGMENT, FILE_IDENTIFIER, SCALAR_TYPES, SHAPE_DYNAMISM, XNN_DATATYPES,
                         XNN_NODES, ExtendedHeader, Program, XNNGraph, XNNHeader)

__all__ = ["read", "read_program", "PteFile", "METHOD", "OUTPUT_NAMES", "XNNPACK"]

METHOD = "forward"  # the method albert-edge runs
XNNPACK = "XnnpackBackend"
# A .pte stores no tensor names: the inputs are the model's forward arguments in order
# (graph.INPUT_NAMES) and the outputs are named by how many there are.
OUTPUT_NAMES = {1: ("last_hidden_state",), 2: ("last_hidden_state", "pooler_output")}
_RAW = np.dtype(np.uint8)


class PteFile:
    """A .pte file: its program flatbuffer, its header, and its segments read on demand (so a
    check before running reads a few kilobytes, not the weights)."""

    def __init__(self, path: Path, whole: bool):
        self.path = path
        self.file_size = path.stat().st_size
        with path.open("rb") as fh:
            head = fh.read(64)
            if not EXECUTORCH.found(head):
                got = head[4:8] if len(head) >= 8 else b""
                raise ValueError(f"{path} is not an ExecuTorch program (no {FILE_IDENTIFIER.decode()} identifier"
                                 f"{f'; found {got!r}' if got else ''})")
            try:
                self.header = ExtendedHeader(head) if head[8:12] == ExtendedHeader.MAGIC else None
            except (ValueError, struct.error) as exc:
                raise ValueError(f"{path} is a damaged ExecuTorch program ({exc})") from None
            if self.header is not None:
                end = self.header.segment_base_offset + self.header.segment_data_size
                if self.header.program_size > self.file_size or end > self.file_size:
                    raise ValueError(f"{path} is truncated: its header says {max(end, self.header.program_size)} "
                                     f"bytes, the file has {self.file_size}")
            fh.seek(0)
            size = self.file_size if whole or self.header is None else self.header.program_size
            self.raw = fh.read(size)
        self._whole = whole or self.header is None
        try:
            self.program = Program.from_bytes(self.raw)
        except (IndexError, struct.error) as exc:
            raise ValueError(f"{path} is a damaged ExecuTorch program ({exc})") from None

    def read(self, start: int, size: int, what: str):
        """``size`` bytes at ``start`` of the file, bounds-checked."""
        if start < 0 or size < 0 or start + size > self.file_size:
            raise ValueError(f"{what} ({size} bytes at {start}) runs past the end of the {self.file_size}-byte file")
        if self._whole or start + size <= len(self.raw):
            return memoryview(self.raw)[start:start + size]
        with self.path.open("rb") as fh:
            fh.seek(start)
            return fh.read(size)

    def segment_span(self, index: int) -> tuple[int, int]:
        """(file offset, size) of segment ``index``, checked to lie within the file."""
        segments = self.program.segments()
        if not 0 <= index < len(segments):
            raise IndexError(f"segment {index} of {len(segments)}")
        if self.header is None:
            raise ValueError("segments without an eh00 header")
        start, size = self.header.segment_base_offset + segments[index].offset(), segments[index].size()
        if start + size > self.file_size:
            raise ValueError(f"segment {index} ({size} bytes at {start}) runs past the end of the "
                             f"{self.file_size}-byte file")
        return start, size

    def segment(self, index: int):
        """The bytes of segment ``index`` (weights, named data or a delegate payload)."""
        return self.read(*self.segment_span(index), f"segment {index}")

    def delegate_payload(self, delegate):
        ref = delegate.processed()
        if ref is None:
            raise ValueError("a delegate without its processed data")
        if ref.location() == DATA_INLINE:
            inline = self.program.backend_delegate_data()
            if not 0 <= ref.index() < len(inline):
                raise IndexError(f"inline delegate data {ref.index()} of {len(inline)}")
            span = inline[ref.index()].data()
            return self.read(*span, "inline delegate data") if span else memoryview(b"")
        if ref.location() == DATA_SEGMENT:
            return self.segment(ref.index())
        raise ValueError(f"a delegate's data at unknown location {ref.location()}")


def read_program(path: str | os.PathLike, whole: bool = True) -> PteFile:
    """The .pte file at ``path``, its identifier and header checked; with ``whole`` False only
    its program flatbuffer is read. ValueError if it is not one."""
    return PteFile(Path(path), whole)


def read(path: str | os.PathLike, weights: bool = True) -> GraphContents:
    """What the .pte file at ``path`` holds. Raises ValueError if it is not a readable .pte.

    With ``weights`` False the weights are not read (``weights`` is empty) but everything else
    is, and every segment, named blob and constant is checked to lie within the file: the
    check run before a runtime sees the file, reading kilobytes."""
    pte = read_program(path, whole=weights)
    try:
        return _read(pte, weights)
    except (IndexError, ValueError, TypeError, OverflowError, UnicodeDecodeError, struct.error) as exc:
        # Flatbuffer accessors read lazily: a damaged file fails wherever it is first touched.
        raise ValueError(f"{path} is a damaged ExecuTorch program ({type(exc).__name__}: {exc})") from None


def _str(value: bytes | None) -> str:
    return value.decode("utf-8") if value else ""


def _read(pte: PteFile, load: bool = True) -> GraphContents:
    program = pte.program
    plans = {_str(p.name()): p for p in program.execution_plans()}
    if not plans:
        raise ValueError("no methods")
    plan = plans.get(METHOD) or next(iter(plans.values()))

    inputs = _specs(plan, plan.inputs(), INPUT_NAMES if len(plan.inputs()) == len(INPUT_NAMES) else None, "input")
    outputs = _specs(plan, plan.outputs(), OUTPUT_NAMES.get(len(plan.outputs())), "output")

    ops: Counter = Counter()
    names, dtypes = _program_tensors(program, plans.values())
    delegate_info, named_views, inline_weights = _delegates(pte, plans.values(), ops)
    if load:
        weights = _constant_buffers(pte, names, dtypes) + _constant_segment(pte, names, dtypes)
        weights += inline_weights + _named_data(pte, named_views)
    else:
        weights = []
        _check_segments(pte)
    for p in plans.values():
        operators = p.operators()
        for chain in p.chains():
            for instruction in chain.instructions():
                call = instruction.kernel_call()
                if call is not None and 0 <= call.op_index() < len(operators):
                    op = operators[call.op_index()]
                    ops[_str(op.name())] += 1

    metadata = {
        "program_version": int(program.version()),
        "methods": sorted(plans),
        "segments": len(program.segments()),
        "segment_bytes": sum(int(s.size()) for s in program.segments()),
        "named_data": len(program.named_data()),
        **delegate_info,
        "planned_bytes": sum(plan.non_const_buffer_sizes()),
        "input_dynamism": [SHAPE_DYNAMISM[d] if 0 <= d < 3 else str(d) for d in
                           (_tensor(plan, i).shape_dynamism() for i in plan.inputs() if _tensor(plan, i))],
        "weight_bytes_by_dtype": _by_dtype(weights),
        "weight_bytes_by_location": _by_location(weights),
    }
    return GraphContents(format="executorch", inputs=inputs, outputs=outputs, ops=ops,
                         weights=[w for w, _ in weights], metadata=metadata)


def _tensor(plan, index: int):
    if not 0 <= index < plan.values_length():
        raise IndexError(f"value {index} of {plan.values_length()}")
    return plan.value(index).tensor()


def _specs(plan, indices: list[int], names: tuple[str, ...] | None, kind: str) -> list[TensorSpec]:
    specs = []
    for n, index in enumerate(indices):
        tensor = _tensor(plan, index)
        name = names[n] if names else f"{kind}_{n}"
        if tensor is None:  # a scalar or list argument
            specs.append(TensorSpec(name=name, dtype="object", shape=()))
            continue
        dtype = SCALAR_TYPES.get(tensor.scalar_type(), _RAW).name
        specs.append(TensorSpec(name=name, dtype=dtype, shape=tensor.sizes()))
    return specs


def _program_tensors(program, plans) -> tuple[dict[int, tuple[str, tuple]], dict[int, np.dtype]]:
    """For each constant buffer index, the name and shape of the first tensor that reads it
    (its fully qualified name where the file keeps one) and its dtype."""
    names: dict[int, tuple[str, tuple]] = {}
    dtypes: dict[int, np.dtype] = {}
    for plan in plans:
        plan_name = _str(plan.name())
        for i in range(plan.values_length()):
            tensor = plan.value(i).tensor()
            if tensor is None or tensor.allocation_info() is not None:
                continue  # not a tensor, or an activation the planner places in memory
            index = tensor.data_buffer_idx()
            if index > 0 and index not in names:
                extra = tensor.extra_tensor_info()
                fqn = _str(extra.fully_qualified_name()) if extra is not None else ""
                names[index] = (fqn or f"{plan_name}.constant_{index}", tensor.sizes())
                dtypes[index] = SCALAR_TYPES.get(tensor.scalar_type(), _RAW)
    return names, dtypes


def _typed(data, dtype: np.dtype, shape: tuple) -> np.ndarray:
    """``data`` (bytes as stored) as ``dtype`` and ``shape`` where they fit, else raw bytes.
    Storage may be longer than the tensor (a view's whole storage): every byte stays counted."""
    values = np.frombuffer(data, dtype=_RAW)
    if dtype.itemsize > 1 and values.size % dtype.itemsize:
        return values
    values = values.view(dtype)
    if shape and int(np.prod(shape, dtype=np.int64)) == values.size:
        values = values.reshape(shape)
    return values


def _constant_buffers(pte: PteFile, names, dtypes) -> list[tuple[StoredTensor, str]]:
    """Weights in the Program flatbuffer itself (older files; index 0 is reserved, empty)."""
    out = []
    for index, buffer in enumerate(pte.program.constant_buffers()):
        span = buffer.storage()
        if index == 0 or not span or not span[1]:
            continue
        name, shape = names.get(index, (f"constant_buffer_{index}", ()))
        data = pte.read(*span, f"constant buffer {index}")
        out.append((StoredTensor(name, _typed(data, dtypes.get(index, _RAW), shape)), "constant_buffer"))
    return out


def _constant_segment(pte: PteFile, names, dtypes) -> list[tuple[StoredTensor, str]]:
    """Weights in the constant segment: buffer i spans offsets[i] .. offsets[i+1] (the last one
    to the segment's end; index 0 is reserved, empty)."""
    sub = pte.program.constant_segment()
    offsets = sub.offsets() if sub is not None else []
    if not offsets:
        return []
    segment = pte.segment(sub.segment_index())
    ends = offsets[1:] + [len(segment)]
    out = []
    for index, (start, end) in enumerate(zip(offsets, ends)):
        if index == 0 or end <= start:
            continue
        if end > len(segment):
            raise ValueError(f"constant {index} ends at {end}, past its {len(segment)}-byte segment")
        name, shape = names.get(index, (f"constant_{index}", ()))
        dtype = dtypes.get(index, _RAW)
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize if shape or index in dtypes else end - start
        # Each buffer is padded to the segment's alignment: the padding is not a weight.
        data = segment[start:start + min(size, end - start)]
        out.append((StoredTensor(name, _typed(data, dtype, shape)), "constant_segment"))
    return out


def _delegates(pte: PteFile, plans, ops: Counter):
    """Every delegate block: backend ids, payload bytes, and for XNNPACK its graph's nodes (into
    ``ops``), the dtype and shape of each named constant it reads, and the constants it keeps
    in its own payload."""
    backends: Counter = Counter()
    payload_bytes = 0
    named: dict[str, tuple[np.dtype, tuple, str]] = {}
    inline: list[tuple[StoredTensor, str]] = []
    count = 0
    for plan in plans:
        for d, delegate in enumerate(plan.delegates()):
            count += 1
            backend = _str(delegate.id())
            backends[backend] += 1
            payload = pte.delegate_payload(delegate)
            payload_bytes += len(payload)
            if backend != XNNPACK:
                continue
            graph_name = f"{_str(plan.name())}.delegate_{d}"
            inline += _xnnpack(bytes(payload), graph_name, named, ops)
    info = {"delegates": count, "backends": dict(backends), "delegate_payload_bytes": payload_bytes}
    return info, named, inline


def _xnnpack(payload: bytes, graph_name: str, named: dict, ops: Counter) -> list[tuple[StoredTensor, str]]:
    header = XNNHeader(payload)
    graph = XNNGraph.from_bytes(payload, header.flatbuffer_offset)
    for node in graph.xnodes():
        kind = node.kind()
        ops["xnnpack::" + (XNN_NODES[kind - 1] if 0 < kind <= len(XNN_NODES) else f"node_{kind}")] += 1
    constants = graph.constant_data()
    described: dict[int, tuple[np.dtype, tuple]] = {}
    scale_of: dict[int, int] = {}  # constant index of per-channel scales -> constant index of their weight
    for value in graph.xvalues():
        tensor = value.tensor_value()
        if tensor is not None and tensor.constant_buffer_idx() > 0:
            described.setdefault(tensor.constant_buffer_idx(), (XNN_DATATYPES.get(tensor.datatype(), _RAW),
                                                                tensor.dims()))
            quantized = value.quantized()
            scales = quantized.scales() if quantized is not None else None
            if scales is not None:
                described.setdefault(scales[0], (np.dtype(np.float32), (scales[1],)))
                scale_of[scales[0]] = tensor.constant_buffer_idx()
    out = []
    region = payload[header.constant_data_offset:header.constant_data_offset + header.constant_data_size]
    for index, constant in enumerate(constants):
        dtype, shape = described.get(index, (_RAW, ()))
        key = _str(constant.named_key())
        name = f"{graph_name}.constant_{index}"
        if index in scale_of:  # named after the weight they scale
            name = f"{graph_name}.constant_{scale_of[index]}.scales"
        if key:
            named.setdefault(key, (dtype, shape, name))
            continue
        start, size = constant.offset(), constant.size()
        if index == 0 or not size:
            continue
        if start + size > len(region):
            raise ValueError(f"an XNNPACK constant ({size} bytes at {start}) runs past its payload")
        out.append((StoredTensor(name, _typed(region[start:start + size], dtype, shape)), "delegate"))
    return out


def _named_data(pte: PteFile, described: dict) -> list[tuple[StoredTensor, str]]:
    """Each named blob once (the key is unique in a file), typed by the delegate tensor that
    reads it."""
    out = []
    for entry in pte.program.named_data():
        key = _str(entry.key())
        dtype, shape, first = described.get(key, (_RAW, (), ""))
        data = pte.segment(entry.segment_index())
        values = _typed(data, dtype, shape)
        out.append((StoredTensor(first or f"named.{key[:16]}", values, consumers=(key,)), "named_data"))
    return out


def _check_segments(pte: PteFile) -> None:
    """Every segment, named blob and constant lies within the file (without reading them)."""
    program = pte.program
    for index in range(len(program.segments())):
        pte.segment_span(index)
    for entry in program.named_data():
        pte.segment_span(entry.segment_index())
    sub = program.constant_segment()
    offsets = sub.offsets() if sub is not None else []
    if offsets:
        _, size = pte.segment_span(sub.segment_index())
        if any(o > size for o in offsets):
            raise ValueError(f"a constant starts past the end of its {size}-byte segment")


def _by_dtype(weights) -> dict[str, int]:
    totals: Counter = Counter()
    for tensor, _ in weights:
        totals[tensor.dtype] += tensor.nbytes
    return dict(totals.most_common())


def _by_location(weights) -> dict[str, int]:
    totals: Counter = Counter()
    for tensor, where in weights:
        totals[where] += tensor.nbytes
    return dict(totals)


def describe_outputs(pte: PteFile) -> dict:
    """The pytree specs ExecuTorch keeps of the method's inputs and outputs (JSON), for reports."""
    plan = next(iter(pte.program.execution_plans()), None)
    meta = plan.container_meta_type() if plan is not None else None
    if meta is None:
        return {}
    out = {}
    for key, value in (("inputs", meta.encoded_inp_str()), ("outputs", meta.encoded_out_str())):
        try:
            out[key] = json.loads(_str(value)) if value else None
        except json.JSONDecodeError:
            out[key] = None
    return out
