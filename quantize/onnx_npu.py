"""The word table of an int8 file for a phone's NPU: stored once as int8 with one scale per row,
as :func:`.onnx_graph.quantize_tied_table` stores it, but read by the tied MLM decoder through
``DequantizeLinear`` and a float Gemm instead of a run-time quantization of its input
(DynamicQuantizeLinear + MatMulInteger), operators NNAPI does not list: the decoder at the end
of the graph would be a second partition on the CPU. onnxruntime does not fold a
DequantizeLinear of an initializer, so the int8 table stays int8 in memory too."""

from __future__ import annotations

import logging

import onnx
from onnx import helper

from .onnx_graph import TiedTable, quantize_tied_table

__all__ = ["dequantized_tied_table"]

log = logging.getLogger(__name__)


def dequantized_tied_table(model: onnx.ModelProto, table: TiedTable) -> list[str]:
    """Store ``table`` once as int8 (V, E) with float scales (V,); its Gathers read int8 rows and
    their scales (as quantize_tied_table writes them) and its tied Gemms read
    ``DequantizeLinear(int8 table, scales, axis=0)`` under the table's own name. Returns the names
    of the nodes made and of the tied Gemms, for the quantizer to leave alone."""
    made = quantize_tied_table(model, TiedTable(table.name, table.gathers, ()))
    if not table.gemms:
        return made
    graph = model.graph
    qname, sname = f"{table.name}_int8", f"{table.name}_row_scale"
    dequantize = helper.make_node("DequantizeLinear", [qname, sname], [table.name], axis=0,
                                  name=f"{table.name}__dequantize")
    nodes = list(graph.node)
    first = next(i for i, n in enumerate(nodes) if n.name in table.gemms)
    nodes.insert(first, dequantize)
    del graph.node[:]
    graph.node.extend(nodes)
    log.info("the tied decoder reads %s through DequantizeLinear: %s", table.name, ", ".join(table.gemms))
    return [*made, dequantize.name, *table.gemms]
