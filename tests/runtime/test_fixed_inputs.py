"""A .tflite whose inputs alone are fixed at (1, N) over a graph that still resizes (what
`convert --to mediapipe` writes for MediaPipe's fixed-length text tasks) is not a static file:
Session runs it at other batches and lengths, as the converter's verification does; a
`convert --static` file takes its one shape only."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")

from albert_edge.config import AlbertConfig  # noqa: E402
from albert_edge.converters import tflite  # noqa: E402
from albert_edge.converters.mediapipe import _fixed_length  # noqa: E402
from albert_edge.formats.tflite_reader import has_dynamic_tensor  # noqa: E402
from albert_edge.model import build_model  # noqa: E402
from albert_edge.runtime import Session  # noqa: E402
from albert_edge.runtime.static import StaticShapeMismatch  # noqa: E402

N = 16


def _feeds(batch: int, T: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"input_ids": rng.integers(5, 99, size=(batch, T)).astype(np.int32),
            "attention_mask": np.ones((batch, T), np.int32), "token_type_ids": np.zeros((batch, T), np.int32)}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    model = build_model(AlbertConfig.preset("tiny"), "base").eval()
    root = tmp_path_factory.mktemp("fixed")
    dynamic = tflite.export(model, root / "dynamic.tflite", seq_len=N, layers="unrolled")
    fixed = root / "fixed.tflite"
    fixed.write_bytes(bytes(_fixed_length(bytearray(dynamic.read_bytes()), N)))
    static = tflite.export(model, root / "static.tflite", seq_len=N, static=True)
    return {"fixed": fixed, "static": static}


def test_fixed_inputs_over_a_resizable_graph_run_other_shapes(files):
    assert has_dynamic_tensor(files["fixed"])
    session = Session(files["fixed"])
    assert session.static_len is None
    out = session.run(_feeds(2, 8))
    assert out["last_hidden_state"].shape[:2] == (2, 8)


def test_a_static_file_takes_its_one_shape_only(files):
    assert not has_dynamic_tensor(files["static"])
    session = Session(files["static"])
    assert session.static_len == N
    assert session.run(_feeds(1, N))["last_hidden_state"].shape[:2] == (1, N)
    with pytest.raises(StaticShapeMismatch, match="one row"):
        session.run(_feeds(2, N))


def test_profile_takes_fixed_inputs_over_a_resizable_graph_at_any_length(files):
    """profile's check of a static file's length leaves such a file alone (a MediaPipe task file is
    profiled at every --seq-len and on --text), and still holds a convert --static file to N."""
    from albert_edge.formats.kinds import TFLITE
    from albert_edge.profile.runner import _static_len

    assert _static_len(files["fixed"], TFLITE) is None
    assert _static_len(files["static"], TFLITE) == N
