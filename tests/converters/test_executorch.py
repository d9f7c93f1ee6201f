"""The ExecuTorch target: a .pte lowered to XNNPACK agrees with PyTorch at every length up to the
model's maximum when run in ExecuTorch's own runtime, stores each shared weight once, lowers the
encoder whole, and its int8 file stays close to the fp32 one."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from albert_edge.errors import ConversionError

from .conftest import tiny_model

pytest.importorskip("executorch.runtime")

from albert_edge.converters import executorch as pte  # noqa: E402
from albert_edge.converters.export import convert  # noqa: E402


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """model.pte and model.int8-dynamic.pte of the tiny base model, with their manifest."""
    model = tiny_model()
    out = tmp_path_factory.mktemp("pte") / "out"
    result = convert(model, out, targets=("executorch",), seq_len=16, scheme="int8-dynamic")
    return model, out, result


def _feeds(T: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, 99, size=(2, T), dtype=np.int64)
    mask = np.ones((2, T), dtype=np.int64)
    types = np.zeros((2, T), dtype=np.int64)
    if T > 2:
        mask[1, T - T // 3:] = 0
        types[:, T // 2:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


@pytest.mark.parametrize("T", [1, 7, 16, 32, 64])
def test_fp32_pte_matches_pytorch_at_every_length(converted, T):
    model, out, _ = converted
    session = pte.PteSession(out / "model.pte", model.output_names)
    feeds = _feeds(T, seed=T)
    got = session.run(feeds)
    with torch.no_grad():
        ref = model(*(torch.from_numpy(feeds[n]) for n in pte.INPUT_NAMES))
    for name, expected in zip(model.output_names, ref):
        assert got[name].shape == tuple(expected.shape)
        assert np.abs(got[name] - expected.numpy()).max() <= 1e-4, (name, T)


def test_manifest_records_parity_blocks_and_weights_once(converted):
    model, out, _ = converted
    manifest = json.loads((out / "manifest.json").read_text())
    entry = {f["name"]: f for f in manifest["files"]}["model.pte"]
    assert entry["format"] == "executorch" and entry["precision"] == "fp32"
    assert entry["parity"]["ok"] and {16, 32, 64} <= set(entry["parity"]["seq_lens"])
    assert max(entry["parity"]["max_abs_diff"].values()) <= 1e-4
    # The whole encoder is one XNNPACK block; the pooler (after a first-token select) another.
    assert entry["format_version"]["delegate_blocks"] == 2
    assert entry["format_version"]["batch"] == 1
    assert [i["name"] for i in entry["inputs"]] == ["input_ids", "attention_mask", "token_type_ids"]
    assert all(i["dtype"] == "int64" and i["shape"] == [1, "sequence"] for i in entry["inputs"])
    assert [o["name"] for o in entry["outputs"]] == list(model.output_names)
    weights = entry["weights"]
    assert weights["duplicates"] == [] and weights["within_bound"]
    # Each of the 2 shared layers' weights once, not once per layer application (L = 4).
    assert weights["stored_bytes"] < 1.05 * weights["model_param_bytes"]


def test_plain_lowering_falls_into_many_blocks():
    """What the export-time rewrites are for: lowered as it is, the tiny model is many blocks."""
    plain = pte.lower(tiny_model(), seq_len=16, friendly=False)
    assert plain.delegate_blocks > 10
    assert plain.outside_ops["native_layer_norm"] > 0


def test_int8_pte_is_close_to_fp32_and_smaller_in_weights(converted):
    model, out, _ = converted
    manifest = json.loads((out / "manifest.json").read_text())
    files = {f["name"]: f for f in manifest["files"]}
    entry = files["model.int8-dynamic.pte"]
    assert entry["precision"] == "int8-dynamic"
    assert entry["parity"]["parent"] == "model.pte"
    assert entry["parity"]["parent_sha256"] == files["model.pte"]["sha256"]
    assert min(entry["parity"]["cosine_mean"].values()) >= pte.MIN_COSINE
    # The int8 encoder is one XNNPACK block as in fp32, not one per layer application.
    assert entry["format_version"]["delegate_blocks"] == files["model.pte"]["format_version"]["delegate_blocks"] == 2
    assert entry["weights"]["stored_bytes"] < 0.7 * files["model.pte"]["weights"]["stored_bytes"]
    # Measured again here, not only read back: the int8 file against the fp32 one.
    fp32 = pte.PteSession(out / "model.pte", model.output_names).run(_feeds(32, 1))
    int8 = pte.PteSession(out / "model.int8-dynamic.pte", model.output_names).run(_feeds(32, 1))
    a, b = fp32["last_hidden_state"][0], int8["last_hidden_state"][0]
    cos = (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)
    assert cos.mean() >= 0.999
    assert not np.array_equal(a, b)  # it is really quantized


def test_int8_pte_stores_the_word_embeddings_as_int8(converted):
    model, out, _ = converted
    table = model.embeddings.word_embeddings.weight.detach().numpy().tobytes()
    stored = [w.data.tobytes() for w in pte.read_contents(out / "model.pte", model.output_names).weights]
    assert table in stored  # the fp32 file holds the fp32 table, once
    stored = [w.data.tobytes() for w in pte.read_contents(out / "model.int8-dynamic.pte", model.output_names).weights]
    assert table not in stored


def test_tied_mlm_decoder_keeps_one_table(tmp_path):
    """The decoder tied to the word embeddings reads the lookup's table: stored once in each file."""
    model = tiny_model(head="mlm")
    result = convert(model, tmp_path / "out", targets=("executorch",), seq_len=16, scheme="int8-dynamic")
    fp32, int8 = result.files
    assert fp32.entry.weights["duplicates"] == [] and fp32.entry.weights["within_bound"]
    assert max(fp32.entry.parity["max_abs_diff"].values()) <= 1e-4
    assert int8.entry.weights["duplicates"] == []
    assert int8.entry.parity["agreement"]["prediction_logits"] >= 0.9


def test_model_is_unchanged_by_the_export():
    model = tiny_model()
    feeds = [torch.from_numpy(v) for v in _feeds(8, 3).values()]
    with torch.no_grad():
        before = model(*feeds)
    pte.lower(model, seq_len=8)
    with torch.no_grad():
        after = model(*feeds)
    assert all(torch.equal(x, y) for x, y in zip(before, after))
    assert not any(name.startswith("_ae") for name, _ in model.named_buffers())


def test_multiple_choice_head_is_refused(tmp_path):
    with pytest.raises(ConversionError, match="multiple-choice head"):
        convert(tiny_model(head="multiple-choice"), tmp_path / "out", targets=("executorch",))
    assert not (tmp_path / "out").exists()


def test_scheme_without_executorch_is_refused(tmp_path):
    with pytest.raises(ConversionError, match="--scheme is for the executorch, ort and onnx-text targets"):
        convert(tiny_model(), tmp_path / "out", targets=("onnx",), scheme="int8-dynamic")


@pytest.fixture(scope="module")
def bounded(tmp_path_factory):
    """model.pte of the tiny base model taking at most 20 tokens."""
    out = tmp_path_factory.mktemp("pte-bounded") / "out"
    convert(tiny_model(), out, targets=("executorch",), seq_len=16, max_seq_len=20)
    return out


def test_max_seq_len_bounds_the_file_and_what_it_plans(converted, bounded):
    from albert_edge.formats import pte_reader

    model, out, _ = converted
    short, full = (pte_reader.read(p, weights=False) for p in (bounded / "model.pte", out / "model.pte"))
    assert short.inputs[0].shape[1] == 20 and full.inputs[0].shape[1] == model.config.max_position_embeddings
    assert 0 < short.metadata["planned_bytes"] < full.metadata["planned_bytes"]
    entries = {m: json.loads((d / "manifest.json").read_text())["files"][0]["format_version"]["max_seq_len"]
               for m, d in (("short", bounded), ("full", out))}
    assert entries == {"short": 20, "full": model.config.max_position_embeddings}
    feeds = _feeds(20, seed=3)
    got = pte.PteSession(bounded / "model.pte", model.output_names).run(feeds)
    ref = pte.PteSession(out / "model.pte", model.output_names).run(feeds)
    for name in model.output_names:
        assert np.abs(got[name] - ref[name]).max() <= 1e-5, name


def test_input_longer_than_the_bound_is_one_clear_error(bounded):
    from albert_edge.errors import DataError
    from albert_edge.runtime import Session

    session = Session(bounded / "model.pte")
    with pytest.raises(DataError, match=r"21 tokens is more than this \.pte takes \(20\)"):
        session.run({k: v[:1] for k, v in _feeds(21, seed=4).items()})
    proc = subprocess.run([sys.executable, "-m", "albert_edge", "profile", str(bounded / "model.pte"), "--seq-len", "24"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "above the model's maximum 20 (the longest this file takes" in proc.stderr, proc.stderr


@pytest.mark.parametrize("value", [1, 10_000, True])
def test_max_seq_len_out_of_range_is_refused(value):
    with pytest.raises(ConversionError, match="max-seq-len .* must be an integer from 2"):
        pte.lower(tiny_model(), max_seq_len=value)


def test_max_seq_len_without_executorch_is_refused(tmp_path):
    with pytest.raises(ConversionError, match="--max-seq-len is for the executorch target"):
        convert(tiny_model(), tmp_path / "out", targets=("onnx",), max_seq_len=20)
    assert not (tmp_path / "out").exists()


def test_unknown_scheme_is_refused():
    with pytest.raises(ConversionError, match="unknown ExecuTorch scheme 'int4'"):
        pte.lower(tiny_model(), scheme="int4")


_NO_EXECUTORCH = textwrap.dedent("""
    import importlib.abc, sys

    class Blocked(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "executorch":
                raise ImportError(f"No module named {name!r}")
            return None

    sys.meta_path.insert(0, Blocked())
    from albert_edge.cli import main
    main()
""")


def test_missing_executorch_is_one_line_exit_2(tmp_path):
    from albert_edge import checkpoints

    ckpt = checkpoints.save(tiny_model(), tmp_path / "ckpt")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-c", _NO_EXECUTORCH, "convert", str(ckpt), "--to", "executorch",
                           "--seq-len", "16", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "executorch" in lines[0] and "Traceback" not in proc.stderr
    assert not out.exists()
