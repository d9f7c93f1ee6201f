"""Damaged .tflite files give one clear line, never a crashed process.

tflite-runtime 2.14 segfaults on many damaged files (and no interpreter verifies the flatbuffer
before reading it), so ``Session`` checks the file's structure first (albert_edge.formats.tflite_check).
Every load here runs in its own child process, so a crash is a failed test and not a dead test
run; each is tried with this environment's interpreter and, where the tflite-runtime 2.14
environment that .ci/tflite214.sh makes is present, with tflite-runtime 2.14 too.
"""

from __future__ import annotations

import os
import random
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from albert_edge.formats import tflite_schema

ROOT = Path(__file__).parents[2]
TFLITE214 = Path(os.environ.get("TFLITE214_VENV", ROOT / ".venv-tflite214")) / "bin" / "python"
PYTHONS = [pytest.param(sys.executable, id="this-env"),
           pytest.param(str(TFLITE214), id="tflite-runtime-2.14", marks=pytest.mark.skipif(
               not TFLITE214.exists(), reason=f"no tflite-runtime 2.14 environment at {TFLITE214.parent.parent} "
                                              "(.ci/tflite214.sh makes it)"))]

# Loads the file with both delegates and runs it once: exit 0 when it ran, 2 with the one-line
# message on AlbertEdgeError, 3 on any other exception; a crash shows as a negative exit code.
LOAD = r"""
import sys
import numpy as np
from albert_edge.errors import AlbertEdgeError
from albert_edge.runtime import Session
try:
    for delegate in ("xnnpack", "none"):
        session = Session(sys.argv[1], num_threads=1, delegate=delegate)
        session.run({s.name: np.ones((1, 8), dtype=s.dtype) for s in session.inputs})
except AlbertEdgeError as exc:
    print(exc)
    sys.exit(2)
except Exception as exc:
    print(type(exc).__name__, exc)
    sys.exit(3)
"""


def load(python: str, path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([python, "-c", LOAD, str(path)], capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> bytes:
    from albert_edge.converters.tflite import export

    from ..converters.conftest import tiny_model
    from ..profile.conftest import CONFIG

    path = tmp_path_factory.mktemp("damaged") / "model.tflite"
    export(tiny_model(CONFIG), path, seq_len=16)
    return path.read_bytes()


def _put(raw: bytes, pos: int, fmt: str, value) -> bytes:
    out = bytearray(raw)
    struct.pack_into(fmt, out, pos, value)
    return bytes(out)


def _graph(raw: bytes):
    model = tflite_schema.Model.GetRootAs(raw)
    return model, model.Subgraphs(0)


def _largest_constant(raw: bytes):
    model, graph = _graph(raw)
    tensors = [graph.Tensors(i) for i in range(graph.TensorsLength())]
    return model, max(tensors, key=lambda t: model.Buffers(t.Buffer())._length(0, 1))  # data: a byte vector


def _op_with_code(raw: bytes):
    _, graph = _graph(raw)
    return next(op for op in (graph.Operators(i) for i in range(graph.OperatorsLength())) if op._at(0))


# name -> (how the good file is damaged, what the one line says)
CASES = {
    "empty": (lambda raw: b"", "not a TFLite model (0 bytes"),
    "truncated-header": (lambda raw: raw[:6], "not a TFLite model (6 bytes"),
    "truncated-half": (lambda raw: raw[: len(raw) // 2], "damaged TFLite file"),
    "truncated-last-byte": (lambda raw: raw[:-1], "damaged TFLite file"),
    "wrong-identifier": (lambda raw: raw[:4] + b"TFL2" + raw[8:], "identifier b'TFL2'"),
    "onnx-named-tflite": (lambda raw: b"\x08\x09\x12\x07pytorch" + raw[:64], "not a TFLite model (identifier"),
    "root-offset": (lambda raw: _put(raw, 0, "<I", len(raw) + 64), "model: table outside the file"),
    "model-vtable": (lambda raw: _put(raw, _graph(raw)[0]._pos, "<i", -(10 ** 6)), "model: vtable outside the file"),
    "tensor-vector-length": (lambda raw: _put(raw, _graph(raw)[1]._target(0), "<I", 0xFFFFFF00),
                             "a vector of 4294967040 runs past the end"),
    "operator-input-index": (lambda raw: _put(raw, _graph(raw)[1].Operators(0)._target(1) + 4, "<i", 10 ** 6),
                             "subgraph 0 operator 0: tensor 1000000 of"),
    "operator-code-index": (lambda raw: _put(raw, _op_with_code(raw)._at(0), "<I", 999), "operator code out of range"),
    "tensor-buffer-index": (lambda raw: _put(raw, _largest_constant(raw)[1]._at(2), "<I", 10 ** 6),
                            "buffer 1000000 of"),
    "tensor-shape": (lambda raw: _put(raw, _largest_constant(raw)[1]._target(0) + 4, "<i", -5),
                     "negative dimension in [-5, 8]"),
    "buffer-bytes": (lambda raw: _put(raw, (lambda m, t: m.Buffers(t.Buffer())._target(0))(*_largest_constant(raw)),
                                      "<I", 3200 - 8), "3192 bytes stored, its shape [400, 8] needs 12800"),
}


@pytest.mark.parametrize("python", PYTHONS)
@pytest.mark.parametrize("case", CASES)
def test_damage_gives_one_line(good, tmp_path, python, case):
    damage, says = CASES[case]
    path = tmp_path / "model.tflite"
    path.write_bytes(damage(good))
    result = load(python, path)
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr[-2000:])
    line = result.stdout.strip()
    assert "\n" not in line and str(path) in line and says in line, line


@pytest.mark.parametrize("python", PYTHONS)
def test_the_good_file_loads_and_runs(good, tmp_path, python):
    path = tmp_path / "model.tflite"
    path.write_bytes(good)
    result = load(python, path)
    assert result.returncode == 0, (result.stdout, result.stderr[-2000:])


@pytest.mark.parametrize("python", PYTHONS)
def test_random_damage_never_crashes(good, tmp_path, python):
    """Seeded random byte changes (tflite-runtime 2.14 crashed on 12 of 30 such files unchecked)."""
    rng = random.Random(1)
    outcomes = []
    for k in range(12):
        raw = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        path = tmp_path / f"random{k}.tflite"
        path.write_bytes(bytes(raw))
        result = load(python, path)
        outcomes.append(result.returncode)
        assert result.returncode >= 0, f"{path}: the process died with signal {-result.returncode}"
        if result.returncode == 2:
            assert len(result.stdout.strip().splitlines()) == 1
    assert outcomes.count(2) >= 6, outcomes  # most random damage is caught by the check


def test_cli_profile_one_line_exit_2(good, tmp_path):
    path = tmp_path / "model.tflite"
    path.write_bytes(good[: len(good) // 3])
    result = subprocess.run([sys.executable, "-m", "albert_edge", "profile", str(path), "--seq-len", "8",
                             "--runs", "1", "--min-seconds", "0"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "damaged TFLite file" in result.stderr
    lines = result.stderr.strip().splitlines()  # progress lines, then the error
    assert lines[-1].startswith("Error: ") and sum("damaged" in line for line in lines) == 1, result.stderr

