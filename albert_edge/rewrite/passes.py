"""Graph rewrites as named passes, applied in order.

A :class:`Pass` is a name and a function from a graph to a graph: an ``onnx.ModelProto``, or a
TFLite :class:`albert_edge.formats.tflite_model.Model`. A recipe (an exporter's, a quantization
scheme's) lists its passes; :func:`run_passes` applies them in that order and logs each by name
at debug level. What a pass needs besides the graph (a head count, the fp32 weights, a list to
note what it did in) is bound when the recipe's list is made (:func:`in_place` and the pass
builders beside each rewrite), never read from global state.

A pass may change the graph it is given and return it, rather than a copy: a model's weights
are large, and nothing reads the graph a pass was given once it has run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

__all__ = ["Pass", "run_passes", "in_place"]

log = logging.getLogger(__name__)

G = TypeVar("G")


@dataclass(frozen=True)
class Pass(Generic[G]):
    """One named graph rewrite: ``run(graph)`` returns the rewritten graph."""

    name: str
    run: Callable[[G], G]

    def __call__(self, graph: G) -> G:
        return self.run(graph)


def run_passes(graph: G, passes: Sequence[Pass[G]]) -> G:
    """``graph`` rewritten by each of ``passes`` in turn."""
    for rewrite in passes:
        log.debug("pass: %s", rewrite.name)
        graph = rewrite.run(graph)
    return graph


def in_place(name: str, step: Callable[[G], Any], done: Callable[[Any], None] | None = None) -> Pass[G]:
    """The pass ``name`` of a rewrite that changes its graph in place (``step(graph)``); what
    ``step`` returns (how many nodes it changed, the tensors it rewrote) goes to ``done`` when one
    is given."""

    def run(graph: G) -> G:
        result = step(graph)
        if done is not None:
            done(result)
        return graph

    return Pass(name, run)
