"""Reading .pte files back without executorch: every stored weight once, shared layers stored once,
the same structure executorch's own deserializer sees, and one line for a damaged file."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from albert_edge.cli import main
from albert_edge.errors import ConversionError
from albert_edge.formats import pte_reader
from albert_edge.formats.graph import INPUT_NAMES
from albert_edge.formats.weights import inspect_file, model_param_bytes


@pytest.fixture(params=["xnnpack", "portable"])
def pte(request, pte_files) -> Path:
    return getattr(pte_files, request.param)


def test_each_weight_is_stored_once(pte, pte_files):
    contents, report = inspect_file(pte, model=pte_files.model)
    assert report.duplicates == []
    assert report.stored_bytes == report.unique_bytes
    # The tiny model's parameters are all distinct, so stored bytes are its parameter bytes plus
    # a few scalar constants (the mask value, ...), never a second copy of a layer.
    params = model_param_bytes(pte_files.model)
    assert params <= report.stored_bytes <= 1.01 * params
    assert report.ok


def test_an_int8_file_stores_each_weight_once(pte_int8, pte_files):
    """Each shared linear weight once in int8 (with its per-channel scales in float32), whatever
    number of layers and delegate blocks read it."""
    contents, report = inspect_file(pte_int8)
    assert report.duplicates == [] and report.stored_bytes == report.unique_bytes
    encoder = pte_files.model.model
    linear = [m.weight for m in encoder.modules() if isinstance(m, __import__("torch").nn.Linear)]
    by_dtype = contents.metadata["weight_bytes_by_dtype"]
    assert by_dtype["int8"] == sum(w.numel() for w in linear)  # one byte each, each matrix once
    scales = [w for w in contents.weights if w.name.endswith(".scales")]
    assert len(scales) == len(linear) and all(w.dtype == "float32" for w in scales)
    floats = report.stored_bytes - by_dtype["int8"]
    params = model_param_bytes(encoder) - 4 * sum(w.numel() for w in linear)
    assert floats <= 1.01 * (params + 4 * sum(w.shape[0] for w in linear))  # float params + scales


def test_inputs_outputs_and_dynamic_sequence(pte, pte_files):
    contents = pte_reader.read(pte)
    assert [s.name for s in contents.inputs] == list(INPUT_NAMES)
    assert all(s.dtype == "int64" and s.shape == (1, pte_files.max_seq_len) for s in contents.inputs)
    assert [(s.name, s.shape) for s in contents.outputs] == [("last_hidden_state", (1, pte_files.max_seq_len, 16))]
    assert contents.metadata["input_dynamism"] == ["dynamic bound"] * 3
    assert contents.metadata["methods"] == ["forward"]


def test_shared_layers_are_one_named_blob_read_by_several_delegate_blocks(pte_files):
    """The XNNPACK lowering puts each layer in delegate blocks of its own: the shared layer's
    weights are read by the blocks of every layer, and stored (and counted) once."""
    contents = pte_reader.read(pte_files.xnnpack)
    meta = contents.metadata
    assert meta["backends"] == {"XnnpackBackend": meta["delegates"]} and meta["delegates"] >= 4
    named = [w for w in contents.weights if w.consumers]  # named blobs carry their key
    assert len(named) == meta["named_data"] > 0
    assert len({w.consumers[0] for w in named}) == len(named)
    # 4 layers, 2 groups: every linear weight of the encoder is one of 2 x 6 blobs, each once.
    matrices = [w for w in named if w.data.ndim == 2]
    assert len(matrices) == 2 * 6 + 1  # + embedding_hidden_mapping_in
    assert meta["weight_bytes_by_location"]["named_data"] == sum(w.nbytes for w in named)


def test_the_reader_agrees_with_executorchs_deserializer(pte_files):
    serialize = pytest.importorskip("executorch.exir._serialize._program")
    raw = pte_files.xnnpack.read_bytes()
    theirs = serialize.deserialize_pte_binary(raw)
    ours = pte_reader.read(pte_files.xnnpack)
    program = theirs.program
    plan = program.execution_plan[0]
    assert len(plan.delegates) == ours.metadata["delegates"]
    named = {key: bytes(theirs.named_data.buffers[entry.buffer_index]) for key, entry in theirs.named_data.pte_data.items()}
    stored = {w.consumers[0]: w.data.tobytes() for w in ours.weights if w.consumers}
    assert stored.keys() == named.keys() and all(stored[k] == named[k] for k in named)
    # The constant segment: the same bytes under the same buffer indices (theirs keep each
    # buffer's alignment padding, ours end where the tensor ends).
    constants = {w.name: w.data.tobytes() for w in ours.weights if not w.consumers}
    assert len(constants) == len(program.constant_buffer) - 1
    for index, buffer in enumerate(program.constant_buffer[1:], 1):
        mine, stored = constants[f"forward.constant_{index}"], bytes(buffer.storage)
        assert stored[:len(mine)] == mine and len(stored) - len(mine) < 16


def test_inspect_json_and_table(pte_files):
    result = CliRunner().invoke(main, ["inspect", str(pte_files.xnnpack), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["format"] == "executorch"
    assert data["stored_bytes"] == data["unique_bytes"] and data["duplicates"] == []
    assert data["executorch"]["backends"]["XnnpackBackend"] == data["executorch"]["delegates"]
    assert [s["name"] for s in data["inputs"]] == list(INPUT_NAMES)
    assert data["precision"]["weight_bytes_by_dtype"] == {"float32": data["stored_bytes"]}
    table = CliRunner().invoke(main, ["inspect", str(pte_files.xnnpack)])
    assert table.exit_code == 0 and "ExecuTorch program" in table.output and "XnnpackBackend" in table.output


def test_info_describes_a_pte(pte_files):
    result = CliRunner().invoke(main, ["info", str(pte_files.portable), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["format"] == "executorch" and data["file_bytes"] == pte_files.portable.stat().st_size


def _damaged(good: Path, tmp_path: Path, case: str) -> Path:
    raw = bytearray(good.read_bytes())
    if case == "truncated":
        raw = raw[: len(raw) // 2]
    elif case == "wrong-magic":
        raw[4:8] = b"TFL3"
    elif case == "empty":
        raw = bytearray()
    elif case == "text":
        raw = bytearray(b"not a model at all\n" * 10)
    elif case == "header-past-end":
        raw[16:24] = (len(raw) * 4).to_bytes(8, "little")  # the segment base offset
    elif case == "root-offset":
        raw[0:4] = (len(raw) + 100).to_bytes(4, "little")
    out = tmp_path / f"{case}.pte"
    out.write_bytes(bytes(raw))
    return out


@pytest.mark.parametrize("case", ["truncated", "wrong-magic", "empty", "text", "header-past-end", "root-offset"])
def test_a_damaged_file_is_one_line_exit_2(pte_files, tmp_path, case):
    bad = _damaged(pte_files.xnnpack, tmp_path, case)
    with pytest.raises(ConversionError):
        inspect_file(bad)
    result = subprocess.run([sys.executable, "-m", "albert_edge", "inspect", str(bad)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad.name) in lines[0], result.stderr


def test_random_damage_never_crashes_the_reader(pte_files, tmp_path):
    """Bytes flipped anywhere in the program flatbuffer: read back, or one ValueError."""
    raw = pte_files.xnnpack.read_bytes()
    program_size = int.from_bytes(raw[16:24], "little")
    rng = random.Random(0)
    failed = 0
    for i in range(150):
        data = bytearray(raw)
        for _ in range(3):
            at = rng.randrange(8, program_size)
            data[at] = rng.randrange(256)
        path = tmp_path / f"flipped{i}.pte"
        path.write_bytes(bytes(data))
        try:
            pte_reader.read(path)
            pte_reader.read(path, weights=False)
        except ValueError as exc:
            failed += 1
            assert "\n" not in str(exc)
    assert failed > 0  # the damage was seen at least sometimes


def test_a_segment_outside_the_file_is_found_without_reading_the_weights(pte_files, tmp_path):
    raw = bytearray(pte_files.xnnpack.read_bytes())
    contents = pte_reader.read_program(pte_files.xnnpack)
    base, size = contents.segment_span(len(contents.program.segments()) - 1)
    cut = tmp_path / "cut.pte"
    cut.write_bytes(bytes(raw[: base + size // 2]))
    with pytest.raises(ValueError, match="truncated|runs past"):
        pte_reader.read(cut, weights=False)


def test_weights_are_typed_by_the_tensor_that_reads_them(pte_files):
    contents = pte_reader.read(pte_files.portable)
    word = contents.weights[0]  # the first constant: the word-embedding table (V, E)
    assert word.data.dtype == np.float32 and word.shape == (99, 8)
    table = pte_files.model.model.embeddings.word_embeddings.weight.detach().numpy()
    assert np.array_equal(word.data, table)
