"""Every head quantizes: its outputs are compared with the right measure (cosine for hidden
states, label agreement for classifiers and spans, MLM top-1 for the tied decoder), and every
weight is stored once with no MatMul/Gemm/FULLY_CONNECTED left in float."""

from __future__ import annotations

import pytest
import torch

from albert_edge import checkpoints
from albert_edge.converters.export import convert
from albert_edge.model import build_model
from albert_edge.converters.quantized import quantize_file
from albert_edge.quantize import QuantizeConfig

from .conftest import CORPUS, small_config

AGREEMENT = {  # head -> {output: what its agreement measures}
    "base": {},
    "pretraining": {"prediction_logits": "MLM top-1", "sop_logits": "label"},
    "classification": {"logits": "label"},
    "token-classification": {"logits": "label"},
    "qa": {"start_logits": "label", "end_logits": "label"},
}


def _checkpoint(tmp_path, head: str, spiece):
    torch.manual_seed(2)
    model = build_model(small_config(num_labels=3), head)
    with torch.no_grad():  # trained-looking LayerNorms and biases, which the converters cannot fold away
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return checkpoints.save(model, tmp_path / f"{head}-ckpt", spiece=spiece), model


@pytest.mark.parametrize("head", list(AGREEMENT))
def test_onnx_heads(tmp_path, spiece_model, head):
    ckpt, model = _checkpoint(tmp_path, head, spiece_model)
    out = convert(ckpt, tmp_path / head, targets=("onnx",), seq_len=24).out_dir
    schemes = ("int8-dynamic", "int8-static") if head in ("classification", "qa") else ("int8-dynamic",)
    for scheme in schemes:
        config = QuantizeConfig(scheme, calibration=(str(CORPUS),), num_samples=16, eval_samples=16)
        result = quantize_file(out / "model.onnx", config)
        assert result.kept and result.check.ok, result.check.problems
        assert not result.check.float_weights
        assert all(len(c.stored_as) == 1 for c in result.check.copies)
        outputs = {o.name: o for o in result.accuracy.outputs}
        assert tuple(outputs) == model.output_names
        assert {n: o.agreement_of for n, o in outputs.items() if o.agreement_of} == AGREEMENT[head]
        assert min(o.cosine_mean for o in outputs.values()) > 0.98


def test_tflite_pretraining_head(tmp_path, spiece_model):
    """Tied decoder and SOP classifier together, full integer."""
    pytest.importorskip("tensorflow")
    ckpt, _ = _checkpoint(tmp_path, "pretraining", spiece_model)
    out = convert(ckpt, tmp_path / "pt", targets=("tflite",), seq_len=24).out_dir
    config = QuantizeConfig("int8-full", calibration=(str(CORPUS),), num_samples=8, eval_samples=8)
    result = quantize_file(out / "model.tflite", config)
    assert result.kept and result.check.ok, result.check.problems
    assert not result.check.float_weights  # full integer: even the 2 x 32 SOP weight
    assert all(len(c.stored_as) == 1 for c in result.check.copies)
    assert {o.name for o in result.accuracy.outputs} == {"prediction_logits", "sop_logits"}
