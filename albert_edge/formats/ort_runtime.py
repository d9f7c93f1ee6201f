"""The oldest onnxruntime that loads an .ort file, from what the file holds: its ONNX opset and
the (domain, operator, since-version) of each node, against a table of the first release that
has each. Measured by loading the files `convert --to ort` writes in each release (the CPU
provider of the full build; tests/ortoldest checks the claim in that release):

- onnxruntime 1.16.3 refuses an opset-20 graph ("No Op registered for Shape with domain_version
  of 20"); 1.17.0 loads it.
- 1.17.0 has no kernel for the ONNX Gelu of opset 20 ("Could not find an implementation for
  Gelu(20)"), which the int8 .ort keeps (its fp32 twin fuses it into onnxruntime's own BiasGelu);
  1.18.0 runs it.

Releases older than :data:`FLOOR` (what albert-edge[ort] installs at least) are not looked at; an
opset newer than the table knows (21 and up: not measured) gives None, as unknown.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["FLOOR", "OPSET_RUNTIME", "KERNEL_RUNTIME", "min_onnxruntime"]

FLOOR = "1.17.0"
# ONNX opset -> the first onnxruntime release that loads a graph of it.
OPSET_RUNTIME = {opset: FLOOR for opset in range(1, 21)}
# (domain, operator, since-version) -> the first release with a CPU kernel for it, where that is
# later than its opset's release.
KERNEL_RUNTIME = {("ai.onnx", "Gelu", 20): "1.18.0"}


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def min_onnxruntime(opset: int | None, nodes: Iterable[tuple[str, str, int]]) -> str | None:
    """The oldest onnxruntime release that loads a graph of ONNX ``opset`` whose nodes are
    ``nodes`` ((domain, operator, since-version); the ONNX domain as "ai.onnx"); None when the
    opset is not in the table."""
    if opset is None or opset not in OPSET_RUNTIME:
        return None
    needed = [OPSET_RUNTIME[opset], *(KERNEL_RUNTIME[n] for n in set(nodes) if n in KERNEL_RUNTIME)]
    return max(needed, key=_key)
