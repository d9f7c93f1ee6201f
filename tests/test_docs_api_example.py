"""The Python API tour's example (docs/python-api.md) runs as written, on a small checkpoint of its own."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("tensorflow")

PAGE = Path(__file__).parents[1] / "docs" / "python-api.md"


def _example() -> str:
    section = PAGE.read_text(encoding="utf-8").split("# Python API", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_python_api_example_runs(tmp_path, spiece_model):
    from albert_edge import checkpoints
    from albert_edge.config import AlbertConfig
    from albert_edge.model import build_model

    config = AlbertConfig(vocab_size=400, embedding_size=16, hidden_size=32, num_hidden_layers=4, num_hidden_groups=2,
                          num_attention_heads=4, intermediate_size=64, max_position_embeddings=128)
    checkpoints.save(build_model(config, "mlm"), tmp_path / "run", spiece=spiece_model)
    result = subprocess.run([sys.executable, "-c", _example()], cwd=tmp_path, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert re.match(r"model\.int8-dynamic\.onnx: \d+\.\d\d MiB, .+ \d+\.\d\d%", lines[0]), lines
    assert "'prediction_logits': (1, 32, 400)" in lines[1], lines
    assert len(lines) == 4 and "onnxruntime p50" in lines[2] and "ai_edge_litert p50" in lines[3], lines
