"""Test-only: write ExecuTorch .pte files of a tiny ALBERT the way `convert --to executorch` does
(torch.export with a dynamic sequence axis, lowered to XNNPACK). Imports torch and executorch;
callers skip with ``pytest.importorskip("executorch.exir")`` when they are missing."""

from __future__ import annotations

from pathlib import Path

import torch

from albert_edge.config import AlbertConfig
from albert_edge.model import build_model

__all__ = ["HiddenState", "export_pte", "tiny_pte_model"]


class HiddenState(torch.nn.Module):
    """(input_ids, attention_mask, token_type_ids) -> last_hidden_state: the .pte's one method."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids):
        out = self.model(input_ids, attention_mask, token_type_ids)
        return out[0] if isinstance(out, tuple) else out


def tiny_pte_model(config: AlbertConfig | None = None, seed: int = 0) -> HiddenState:
    """A tiny ALBERT (G < L, so layers really share weights) whose every parameter is distinct."""
    torch.manual_seed(seed)
    model = build_model(config or AlbertConfig.preset("tiny"), "base", add_pooling_layer=False)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return HiddenState(model).eval()


def export_pte(module: torch.nn.Module, out_path: Path, seq_len: int = 8, max_seq_len: int = 64,
               xnnpack: bool = True, int8: bool = False) -> Path:
    """Write ``module`` as a .pte with int64 inputs of shape (1, dynamic sequence); ``int8``:
    linear weights int8 per channel, activations quantized at run time (XNNPACK's dynamic scheme)."""
    from executorch.exir import to_edge_transform_and_lower

    ids = torch.randint(5, 50, (1, seq_len), dtype=torch.long)
    example = (ids, torch.ones_like(ids), torch.zeros_like(ids))
    seq = torch.export.Dim("sequence", min=2, max=max_seq_len)
    dynamic = {"input_ids": {1: seq}, "attention_mask": {1: seq}, "token_type_ids": {1: seq}}
    with torch.no_grad():
        if int8:
            module = _int8(module, example, dynamic)
        program = torch.export.export(module, example, dynamic_shapes=dynamic, strict=False)
    partitioner = []
    if xnnpack:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        partitioner = [XnnpackPartitioner()]
    et = to_edge_transform_and_lower(program, partitioner=partitioner).to_executorch()
    out_path = Path(out_path)
    out_path.write_bytes(et.buffer)
    return out_path


def _int8(module, example, dynamic):
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (XNNPACKQuantizer,
                                                                         get_symmetric_quantization_config)
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True,
                                                                                is_dynamic=True))
    graph = torch.export.export(module, example, dynamic_shapes=dynamic, strict=False).module()
    graph = prepare_pt2e(graph, quantizer)
    graph(*example)
    return convert_pt2e(graph)


def shared_layer_config():
    """Six layers sharing one set of weights big enough (1.8 MB) that packing it once per layer
    shows in a process's peak memory: what XNNPACK's weights cache saves."""
    return AlbertConfig(vocab_size=99, embedding_size=16, hidden_size=192, num_hidden_layers=6, num_hidden_groups=1,
                        num_attention_heads=3, intermediate_size=768, inner_group_num=1, max_position_embeddings=32)


def other_model_pte(out_path: Path) -> Path:
    """A .pte that is not an ALBERT: one float input."""
    from executorch.exir import to_edge_transform_and_lower

    module = torch.nn.Sequential(torch.nn.Linear(4, 3)).eval()
    program = torch.export.export(module, (torch.randn(2, 4),), strict=False)
    out_path = Path(out_path)
    out_path.write_bytes(to_edge_transform_and_lower(program).to_executorch().buffer)
    return out_path
