"""The files albert-edge writes, on the runtime Raspberry Pi OS bookworm really has:
tflite-runtime 2.14 under numpy < 2, with no torch, tensorflow or ai-edge-litert installed.

Runs only where ALBERT_EDGE_TFLITE214_FILES names a directory that
``tests/device214/build_files.py`` filled in the build environment (.ci/tflite214.sh does
both); skipped otherwise. Each file is loaded through ``albert_edge.runtime.Session`` and its
outputs compared with the ones ai-edge-litert gave for the same file and with the fp32 file's.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

FILES_ENV = "ALBERT_EDGE_TFLITE214_FILES"
FILES = Path(os.environ[FILES_ENV]) if os.environ.get(FILES_ENV) else None

pytestmark = pytest.mark.skipif(
    FILES is None, reason=f"{FILES_ENV} is not set: .ci/tflite214.sh builds the files and the tflite-runtime 2.14 "
                          "environment these tests run in")

INDEX = json.loads((FILES / "index.json").read_text()) if FILES is not None else {"files": {}, "lengths": []}
LOADABLE = [name for name, f in INDEX["files"].items() if not name.endswith(".latest.tflite")]
REFUSED = [name for name in INDEX["files"] if name.endswith(".latest.tflite")]


@pytest.fixture(scope="module")
def references():
    with np.load(FILES / "references.npz") as data:
        return {key: data[key] for key in data.files}


def test_the_environment_is_a_bookworm_device():
    import tflite_runtime

    from albert_edge.runtime import Session  # noqa: F401  (the device side imports here)

    assert tflite_runtime.__version__ == "2.14.0"
    assert int(np.__version__.split(".")[0]) < 2
    for heavy in ("torch", "tensorflow", "ai_edge_litert", "onnxruntime"):
        assert heavy not in sys.modules, f"{heavy} was imported on the device side"
    assert LOADABLE and REFUSED, "the build step wrote no files"


def _feeds(references, seq):
    return {k.split("/")[-1]: v for k, v in references.items() if k.startswith(f"feeds/{seq}/")}


@pytest.mark.parametrize("name", LOADABLE)
def test_loads_and_matches_litert(name, references):
    from albert_edge.formats.op_versions import TFLITE_RUNTIME_LAST, op_versions, too_new_for
    from albert_edge.runtime import Session

    assert not too_new_for(op_versions(FILES / "files" / name), TFLITE_RUNTIME_LAST)
    session = Session(FILES / "files" / name)
    assert session.backend_name == "tflite_runtime"
    for seq in INDEX["lengths"]:
        got = session.run(_feeds(references, seq))
        for output in INDEX["files"][name]["outputs"]:
            litert = references[f"{name}/{seq}/{output}"]
            fp32 = references[f"model.tflite/{seq}/{output}"]
            value = got[output]
            assert value.shape == litert.shape and np.isfinite(value).all()
            # 2.14 may round differently from ai-edge-litert (other int8 kernels), but by no more
            # than the file's own quantization error, and it must not be further from fp32.
            quantization_error = float(np.abs(litert - fp32).max())
            assert float(np.abs(value - litert).max()) <= max(1e-3, quantization_error), (name, seq, output)
            assert float(np.abs(value - fp32).max()) <= 1.5 * quantization_error + 1e-3, (name, seq, output)
            assert np.mean(value.argmax(-1) == litert.argmax(-1)) >= 0.95


@pytest.mark.parametrize("name", REFUSED)
def test_newer_operator_versions_are_refused_and_flagged(name):
    """The --tflite-compat latest file: the table says 2.14 cannot load it, and 2.14 agrees."""
    from albert_edge.formats.op_versions import TFLITE_RUNTIME_LAST, op_versions, too_new_for
    from albert_edge.errors import RuntimeUnavailable
    from albert_edge.runtime import Session

    too_new = too_new_for(op_versions(FILES / "files" / name), TFLITE_RUNTIME_LAST)
    assert [(o.op, o.version) for o in too_new] == [("FULLY_CONNECTED", 12)]
    refusal = r"FULLY_CONNECTED.*need TFLite runtime 2\.17\.0, tflite_runtime is 2\.14\.0"
    with pytest.raises(RuntimeUnavailable, match=refusal):
        Session(FILES / "files" / name)


def test_tokenizer_gives_the_build_side_ids(references):
    from albert_edge.tokenizer import AlbertTokenizer

    encoded = AlbertTokenizer(FILES / INDEX["spiece"])(list(INDEX["sentences"]), max_length=INDEX["seq_len"],
                                                        padding="max_length")
    assert set(encoded) == {k.split("/")[1] for k in references if k.startswith("tokens/")}
    for key, value in encoded.items():
        np.testing.assert_array_equal(np.asarray(value), references[f"tokens/{key}"])


@pytest.mark.parametrize("name", LOADABLE[:2] + REFUSED)
def test_info_and_inspect_read_the_file(name):
    """With only tflite-runtime (no schema bindings), `info` reads the file and `inspect`
    reports the runtime it needs."""
    from click.testing import CliRunner

    from albert_edge.cli import main

    path = str(FILES / "files" / name)
    info = CliRunner().invoke(main, ["info", path])
    assert info.exit_code == 0, info.output
    assert "tflite" in info.output
    shown = CliRunner().invoke(main, ["inspect", "--json", path])
    assert shown.exit_code == 0, shown.output
    report = json.loads(shown.stdout)
    assert report["min_runtime"] == INDEX["files"][name]["min_runtime"]
    assert report["loads_in_tflite_runtime"] == {"2.14.0": name in LOADABLE}
