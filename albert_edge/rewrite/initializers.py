"""Initializers of an ONNX graph: drop the ones nothing reads."""

from __future__ import annotations

from .passes import Pass, in_place

__all__ = ["drop_unused_initializers", "remove_initializers", "graph_outputs", "DROP_UNUSED_INITIALIZERS"]


def graph_outputs(graph) -> set[str]:
    return {o.name for o in graph.output}


def drop_unused_initializers(graph) -> None:
    used = {name for node in graph.node for name in node.input} | graph_outputs(graph)
    remove_initializers(graph, {t.name for t in graph.initializer} - used)


def remove_initializers(graph, names: set[str]) -> None:
    """Drop these initializers (and their graph inputs, which files of IR version < 4 carry).
    Deleted by index: rebuilding the list would copy every weight."""
    if not names:
        return
    for field in (graph.initializer, graph.input):
        for i in reversed([i for i, v in enumerate(field) if v.name in names]):
            del field[i]


DROP_UNUSED_INITIALIZERS: Pass = in_place("drop unused initializers", lambda model: drop_unused_initializers(model.graph))
