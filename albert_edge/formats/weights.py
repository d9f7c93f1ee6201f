"""Weights once, proven: read a model file back and find every weight stored more than once.

A duplicate is another stored tensor holding the same values as an earlier one: an exact byte
copy, a reshaped copy (same bytes, other shape), a transposed copy (an axis permutation, maybe
reshaped) or, failing those, the same multiset of values in another order. The search is linear
in the stored bytes: tensors are bucketed by dtype, size and an order-independent fingerprint
(integer sums of the raw values, which a transpose or reshape does not change), and only tensors
in the same bucket are compared. Imports no torch and no tensorflow.
"""

from __future__ import annotations

import itertools
import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from albert_edge.errors import ConversionError
from .kinds import Format, find, suffixes

from .graph import GraphContents, StoredTensor

__all__ = [
    "Duplicate", "WeightsReport", "analyze", "find_duplicates", "model_param_bytes", "model_format", "model_kind",
    "read_file",
    "inspect_file", "BOUND_FACTOR", "BOUND_SLACK", "unstored_position_bytes",
]

# Stored weight bytes may exceed the model's unique parameter bytes by this much: graph constants
# (shapes, axes, mask values) and format overhead, never a second copy of a real weight.
BOUND_FACTOR = 1.005
BOUND_SLACK = 64 * 1024

# Tensors smaller than this are shape vectors, axes and scalars, not weights: two equal ones are
# not a duplicated weight.
MIN_NUMEL = 8

_CHUNK = 1 << 20  # elements per step when fingerprinting, to bound temporary memory


@dataclass(frozen=True)
class Duplicate:
    """``name`` stores the values of ``original`` again (``kind`` says how), costing ``nbytes``."""

    name: str
    original: str
    kind: str  # "exact" | "reshaped" | "transposed" | "permuted"
    nbytes: int
    shape: tuple[int, ...] = ()
    original_shape: tuple[int, ...] = ()


@dataclass
class WeightsReport:
    """Stored vs unique weight bytes of one file, and the model's own unique parameter bytes."""

    format: str
    num_tensors: int  # weight tensors: stored tensors of MIN_NUMEL elements or more
    stored_bytes: int  # every stored tensor, graph constants included
    unique_bytes: int
    duplicates: list[Duplicate] = field(default_factory=list)
    model_param_bytes: int | None = None
    num_constants: int = 0  # smaller stored tensors: shapes, axes, scalars

    @property
    def bound_bytes(self) -> int | None:
        """The most stored bytes allowed for the model: 1.005 x unique parameter bytes + 64 KiB."""
        if self.model_param_bytes is None:
            return None
        return int(BOUND_FACTOR * self.model_param_bytes) + BOUND_SLACK

    @property
    def within_bound(self) -> bool | None:
        bound = self.bound_bytes
        return None if bound is None else self.stored_bytes <= bound

    @property
    def ok(self) -> bool:
        """No duplicate, and within the bound when the model is known."""
        return not self.duplicates and self.within_bound is not False

    def problems(self) -> list[str]:
        out = [f"{d.name} is a {d.kind} copy of {d.original} ({d.nbytes} bytes)" for d in self.duplicates]
        if self.within_bound is False:
            out.append(
                f"stored weight bytes {self.stored_bytes} exceed the bound {self.bound_bytes} "
                f"(1.005 x the model's {self.model_param_bytes} unique parameter bytes + 64 KiB)"
            )
        return out

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(bound_bytes=self.bound_bytes, within_bound=self.within_bound, ok=self.ok)
        return data


# -- reading files -------------------------------------------------------------------------------

def model_format(path: Path) -> str:
    """The format of the model file at ``path`` by its suffix; one clear line if it is not an
    model file that exists."""
    return model_kind(path).name


def model_kind(path: Path) -> Format:
    """:func:`model_format`'s Format entry."""
    kind = find(path)
    if kind is None:
        raise ConversionError(f"{path}: not a model file albert-edge reads (expected {', '.join(suffixes())})")
    if not path.is_file():
        raise ConversionError(f"{path}: no such file")
    return kind


def read_file(path: str | os.PathLike) -> GraphContents:
    """Read an .onnx, .ort, .tflite or .pte file back with the reader for its suffix."""
    path = Path(path)
    kind = model_kind(path)
    try:
        return kind.read(path)
    except ValueError as exc:
        raise ConversionError(str(exc)) from None


def inspect_file(path: str | os.PathLike, model=None) -> tuple[GraphContents, WeightsReport]:
    """Read ``path`` back and run the weights-once analysis on it, against ``model`` if given,
    else against the model's unique parameter bytes recorded in a manifest.json beside it."""
    contents = read_file(path)
    param_bytes = None if model is not None else _manifest_param_bytes(Path(path))
    return contents, analyze(contents, model, param_bytes=param_bytes)


def _manifest_param_bytes(path: Path) -> int | None:
    from . import manifest  # local: manifest imports this module's report types

    if not (path.parent / manifest.MANIFEST_NAME).is_file():
        return None
    try:
        entry = manifest.read(path.parent).file(path.name)
    except (ConversionError, KeyError):
        return None
    value = entry.weights.get("model_param_bytes")
    return int(value) if isinstance(value, (int, float)) else None


# -- the analysis ------------------------------------------------------------------------------

def model_param_bytes(model, itemsize: int | None = None) -> int:
    """Unique parameter bytes of a PyTorch model: each shared or tied ``nn.Parameter`` once
    (``named_parameters()`` yields each object once). ``itemsize`` overrides the element size,
    to compare with a file stored in another precision."""
    return sum(p.numel() * (itemsize or p.element_size()) for _, p in model.named_parameters())


def unstored_position_bytes(config, static_len: int, itemsize: int = 4) -> int:
    """The bytes of the position-embedding rows past ``static_len``, which a static-shape TFLite
    file of that length does not store: its graph reads ``position_embeddings[:static_len]``, a
    constant slice the TFLite converter folds into a stored (static_len, E) table."""
    return max(0, config.max_position_embeddings - static_len) * config.embedding_size * itemsize


def analyze(contents: GraphContents, model=None, *, param_bytes: int | None = None,
            min_numel: int = MIN_NUMEL, static_len: int | None = None) -> WeightsReport:
    """Stored bytes, unique bytes and duplicates of ``contents``; with ``model`` (or its
    ``param_bytes``) also the bound that stored bytes must stay within.

    ``static_len``: ``contents`` is a static-shape TFLite file of that length, so the model's
    unique bytes it should store are its parameters' less the position rows it has no use for
    (:func:`unstored_position_bytes`); every other weight counts in full, as for any file."""
    if param_bytes is None and model is not None:
        param_bytes = model_param_bytes(model)
        if static_len is not None:
            param_bytes -= unstored_position_bytes(model.config, static_len)
    duplicates = find_duplicates(contents.weights, min_numel=min_numel)
    stored = contents.stored_weight_bytes
    weights = sum(1 for t in contents.weights if t.data.size >= min_numel)
    return WeightsReport(
        format=contents.format,
        num_tensors=weights,
        num_constants=len(contents.weights) - weights,
        stored_bytes=stored,
        unique_bytes=stored - sum(d.nbytes for d in duplicates),
        duplicates=duplicates,
        model_param_bytes=param_bytes,
    )


def find_duplicates(weights: Sequence[StoredTensor], min_numel: int = MIN_NUMEL) -> list[Duplicate]:
    """Every tensor that repeats the values of an earlier one, in file order.

    Uniform tensors (all elements equal, like a zero bias or a LayerNorm's initial ones) and
    tensors under ``min_numel`` elements are skipped: equal values there say nothing about
    copying.
    """
    buckets: dict[tuple, list[StoredTensor]] = defaultdict(list)
    for tensor in weights:
        if tensor.data.size < min_numel:
            continue
        key = _fingerprint(tensor.data)
        if key is not None:
            buckets[key].append(tensor)
    found: list[Duplicate] = []
    for group in buckets.values():
        found.extend(_confirm_bucket(group))
    order = {t.name: i for i, t in enumerate(weights)}
    return sorted(found, key=lambda d: order.get(d.name, 0))


def _as_uint(data: np.ndarray) -> np.ndarray:
    """The raw values as unsigned integers of the same width, flat (bytes compare exactly,
    so -0.0 vs 0.0 and NaN payloads count as different values)."""
    data = np.ascontiguousarray(data)
    width = data.dtype.itemsize
    if width in (1, 2, 4, 8):
        return data.reshape(-1).view(f"<u{width}")
    return data.reshape(-1).view(np.uint8)


def _fingerprint(data: np.ndarray) -> tuple | None:
    """(dtype, size, sum, sum of squares) of the raw values, wrapping modulo 2**64: exact and
    independent of element order. None for uniform tensors."""
    u = _as_uint(data)
    if u.size == 0 or bool(np.all(u == u[0])):
        return None
    total = np.uint64(0)
    squares = np.uint64(0)
    with np.errstate(over="ignore"):
        for start in range(0, u.size, _CHUNK):
            chunk = u[start:start + _CHUNK].astype(np.uint64)
            total += chunk.sum(dtype=np.uint64)
            squares += (chunk * chunk).sum(dtype=np.uint64)
    return (data.dtype.str, int(data.size), int(total), int(squares))


def _confirm_bucket(group: list[StoredTensor]) -> list[Duplicate]:
    """Split a bucket of same-fingerprint tensors into classes of true copies; the first tensor
    of each class is the original, the others are its duplicates."""
    originals: list[StoredTensor] = []
    found: list[Duplicate] = []
    for tensor in group:
        for original in originals:
            kind = _copy_kind(original.data, tensor.data)
            if kind is not None:
                found.append(Duplicate(tensor.name, original.name, kind, tensor.nbytes, tensor.shape, original.shape))
                break
        else:
            originals.append(tensor)
    return found


def _copy_kind(a: np.ndarray, b: np.ndarray) -> str | None:
    """How ``b`` copies ``a`` (same dtype and size assumed), or None if it does not."""
    ua, ub = _as_uint(a), _as_uint(b)
    if np.array_equal(ua, ub):
        return "exact" if a.shape == b.shape else "reshaped"
    if _is_transpose(ua.reshape(a.shape), ub) or _is_transpose(ub.reshape(b.shape), ua):
        return "transposed"
    if np.array_equal(np.sort(ua), np.sort(ub)):
        return "permuted"
    return None


def _is_transpose(x: np.ndarray, flat: np.ndarray, max_ndim: int = 4) -> bool:
    """Whether some axis permutation of ``x``, read flat, equals ``flat``."""
    if not 2 <= x.ndim <= max_ndim:
        return False
    identity = tuple(range(x.ndim))
    return any(
        np.array_equal(np.ascontiguousarray(x.transpose(perm)).reshape(-1), flat)
        for perm in itertools.permutations(identity) if perm != identity
    )
