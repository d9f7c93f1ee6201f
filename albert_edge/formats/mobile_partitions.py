"""How ONNX Runtime Mobile's NPU providers would split an .onnx file: NNAPI (Android) and Core ML
(iOS, in its MLProgram and NeuralNetwork forms), read by onnxruntime's own usability checker
(``python -m onnxruntime.tools.check_onnx_model_mobile_usability``).

The checker optimizes the file at onnxruntime's ``basic`` level (as ONNX Runtime Mobile does
before it assigns nodes to a provider), infers shapes, and groups the nodes each provider lists
as supported, with fixed-shape inputs, into partitions as onnxruntime's partitioner does. Every
partition boundary is a copy between the CPU and the accelerator: one partition covering every
node is what a static file is written for (``convert --static``). A node left out has one of
three reasons, the checker's: its operator is not in the provider's list, an input has a
dynamic shape, or an input's rank is above what the provider takes (Core ML: 5). The checker
also lists, for the operators it counts as supported, the conditions it did not check
(``caveats``).

Device side: onnx and onnxruntime are imported when a file is checked.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from albert_edge.errors import RuntimeUnavailable, optional_import

from .kinds import ONNX, find

__all__ = ["PROVIDERS", "Provider", "Unsupported", "Partitions", "PartitionReport", "mobile_partitions"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Provider:
    """An execution provider the checker knows: its name, the operator list it reads (a file
    shipped in onnxruntime.tools.mobile_helpers) and the highest input rank it takes."""

    name: str
    ops_file: str
    max_rank: int = 999


PROVIDERS = (
    Provider("NNAPI", "nnapi_supported_ops.md"),
    Provider("CoreML MLProgram", "coreml_supported_mlprogram_ops.md", max_rank=5),
    Provider("CoreML NeuralNetwork", "coreml_supported_neuralnetwork_ops.md", max_rank=5),
)

_REASONS = {
    "op": "operator not in the provider's list",
    "rank": "an input of rank above {max_rank}",
    "shape": "an input of dynamic shape",
}


@dataclass(frozen=True)
class Unsupported:
    """The nodes of one operator that a provider leaves to the CPU, and why (the checker's reason)."""

    op: str  # domain:op_type
    nodes: int
    reason: str


@dataclass(frozen=True)
class Partitions:
    """One provider's share of the file: ``partitions`` groups covering ``covered`` of ``nodes``."""

    provider: str
    partitions: int
    covered: int
    nodes: int
    sizes: tuple[int, ...]  # nodes in each partition
    unsupported: tuple[Unsupported, ...]
    caveats: tuple[str, ...]  # conditions of supported operators the checker does not check
    suitability: str  # the checker's verdict: YES, MAYBE or NO

    @property
    def coverage(self) -> float:
        return self.covered / self.nodes if self.nodes else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "coverage": round(self.coverage, 4)}


@dataclass
class PartitionReport:
    """Each provider's partitions of one .onnx file, as it is; and, for a file with dynamic-shape
    inputs, as they would be with those shapes fixed (``if_fixed``)."""

    path: Path
    onnxruntime: str
    nodes: int  # after onnxruntime's basic-level optimization
    dynamic_inputs: list[str]
    providers: list[Partitions] = field(default_factory=list)
    if_fixed: list[Partitions] = field(default_factory=list)

    def provider(self, name: str) -> Partitions:
        return next(p for p in self.providers if p.provider == name)

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "checker": f"onnxruntime {self.onnxruntime} usability_checker",
                "optimization": "basic", "nodes": self.nodes, "dynamic_inputs": self.dynamic_inputs,
                "providers": [p.to_dict() for p in self.providers],
                "if_fixed": [p.to_dict() for p in self.if_fixed]}


def mobile_partitions(path: str | os.PathLike, providers: tuple[Provider, ...] = PROVIDERS) -> PartitionReport:
    """Run onnxruntime's usability checker on the .onnx at ``path``: per provider, the partitions,
    the nodes they cover and the nodes left out, by operator, with the checker's reason.
    RuntimeUnavailable (one line) for a file the checker cannot read or without onnxruntime."""
    path = Path(path)
    if path.suffix == ".ort":
        raise RuntimeUnavailable(f"{path.name}: onnxruntime's mobile checker reads .onnx files only; check the "
                                 ".onnx this .ort was converted from (an .ort converted at the basic level, as "
                                 "`convert --to ort --static` does, has its graph)")
    if not path.is_file():
        raise RuntimeUnavailable(f"{path}: no such model file")
    kind = find(path)
    if kind is not None and kind is not ONNX:
        raise RuntimeUnavailable(f"{path.name}: --partitions shows how onnxruntime's NPU providers would split an "
                                 f".onnx, and this is a {path.suffix.lower()} file; inspect the .onnx of the same "
                                 "conversion (for a .tflite on a GPU: --accelerator gpu)")
    try:
        ort, checker, utils = _checker_modules()
    except ImportError as exc:
        raise RuntimeUnavailable(f"the NNAPI / Core ML partition check needs onnxruntime and onnx ({exc})") from None
    with tempfile.TemporaryDirectory(prefix=".albert-edge-partitions-") as tmp:
        optimized = Path(tmp) / "model.onnx"
        try:
            utils.optimize_model(path, optimized, use_external_initializers=True)
            model = utils.ModelProtoWithShapeInfo(optimized).model_with_shape_info
        except Exception as exc:  # onnxruntime and onnx raise their own types
            raise RuntimeUnavailable(f"{path.name}: onnxruntime's checker could not read it: "
                                     f"{str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}"
                                     ) from None
    dynamic, _ = checker.check_shapes(model.graph)
    report = PartitionReport(path, ort.__version__, len(model.graph.node), [v.name for v in dynamic])
    for provider in providers:
        report.providers.append(_partitions(checker, model, provider, fixed=True))
        if dynamic:
            report.if_fixed.append(_partitions(checker, model, provider, fixed=False))
    return report


def _checker_modules():
    """onnxruntime, its usability checker and its model utilities. ``onnxruntime.tools``' own
    ``__init__`` imports torch whenever torch is installed (for its PyTorch export helpers, which
    the checker does not use): the package is entered without running it, so checking a file
    never imports torch."""
    ort = optional_import("onnxruntime")
    if "onnxruntime.tools" not in sys.modules:
        spec = importlib.util.find_spec("onnxruntime.tools")
        if spec is None:
            raise ImportError("onnxruntime has no tools package")
        sys.modules["onnxruntime.tools"] = importlib.util.module_from_spec(spec)  # its __path__, not its __init__
    return (ort, optional_import("onnxruntime.tools.mobile_helpers.usability_checker"),
            optional_import("onnxruntime.tools.onnx_model_utils"))


def _partitions(checker, model, provider: Provider, fixed: bool) -> Partitions:
    """``provider``'s partitions by the checker; ``fixed``: nodes with a dynamic-shape input count
    as unsupported (False: as if every shape were fixed)."""
    ops = checker._SupportedOpsChecker(str(Path(checker.__file__).parent / provider.ops_file))
    info = checker.check_partitioning(model.graph, ops, fixed, provider.max_rank)
    grouped = {id(node) for group in info.supported_groups for node in group}
    left: dict[tuple[str, str], int] = {}
    for node in model.graph.node:
        if id(node) in grouped:
            continue
        op = f"{node.domain or 'ai.onnx'}:{node.op_type}"
        kind = "op" if op in info.unsupported_ops else "rank" if op in info.ops_with_unsupported_rank else "shape"
        key = (op, _REASONS[kind].format(max_rank=provider.max_rank))
        left[key] = left.get(key, 0) + 1
    unsupported = tuple(Unsupported(op, n, reason) for (op, reason), n in sorted(left.items(), key=lambda kv: -kv[1]))
    return Partitions(provider.name, info.num_partitions, info.num_supported_nodes, info.num_nodes,
                      tuple(len(g) for g in info.supported_groups), unsupported,
                      tuple(ops.get_caveats()), info.suitability().name)
