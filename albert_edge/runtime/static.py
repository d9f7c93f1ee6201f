"""Static-shape files (``convert --static``): their ``[1, N]`` inputs take N tokens and one row,
whatever the runtime. Session refuses feeds of another shape in one line, on the CPU and on the GPU
alike, rather than padding them behind the caller's back: an app pads its text to N with
attention_mask 0, and a longer text needs a file converted for that length. Device side: standard
library only."""

from __future__ import annotations

import os
from collections.abc import Sequence

from ..errors import AlbertEdgeError

__all__ = ["StaticShapeMismatch", "static_length", "feed_problem", "length_problem"]


class StaticShapeMismatch(AlbertEdgeError, ValueError):
    """Feeds of a static-shape file that are not of its one shape."""


def static_length(shapes: Sequence[Sequence]) -> int | None:
    """N when every input shape is ``[1, N]`` with the same fixed N, else None (a dynamic file,
    or inputs that are not token rows, such as the text of an onnx-text file)."""
    lengths = set()
    for shape in shapes:
        dims = list(shape)
        if len(dims) != 2 or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims):
            return None
        if dims[0] != 1:
            return None
        lengths.add(dims[1])
    return lengths.pop() if len(lengths) == 1 else None


def length_problem(n: int, asked: int, instead: str | None = None) -> str | None:
    """Why a static file of ``n`` tokens cannot take ``asked`` tokens, naming the fix (``instead``
    first when given: what the caller can do with this file); None when it can."""
    if asked == n:
        return None
    fix = f"convert with --seq-len {asked} --static"
    if instead is None:
        instead = (f"pad or cut the text to {n}" if asked > n else
                   f"pad them to {n} (attention_mask 0 on the padding, as an app does)")
    return f"this file takes {n} tokens ([1, {n}] inputs), not {asked}: {instead}, or {fix}"


def feed_problem(path: str | os.PathLike, n: int, shapes: dict[str, tuple[int, ...]]) -> StaticShapeMismatch | None:
    """The error for feeds of ``shapes`` to the static file at ``path`` (``[1, n]`` inputs), or None."""
    name = os.path.basename(os.fspath(path))
    for feed, shape in shapes.items():
        if len(shape) != 2:
            return StaticShapeMismatch(f"{name}: this file takes [1, {n}] inputs, and {feed} is {list(shape)}")
        if shape[0] != 1:
            return StaticShapeMismatch(f"{name}: this file takes one row ([1, {n}] inputs), and {feed} has "
                                       f"{shape[0]}: run the rows one at a time")
        problem = length_problem(n, shape[1])
        if problem:
            return StaticShapeMismatch(f"{name}: {problem}")
    return None
