"""The .ort files `convert --to ort` writes, on the oldest onnxruntime they claim: the latest of
the ``min_runtime`` their manifest records (albert_edge.formats.ort_runtime; 1.18.0 for the int8
file, 1.17.0 for the fp32 one, which pyproject's albert-edge[ort] allows at least).

Runs only where ALBERT_EDGE_ORT_OLDEST_FILES names a directory that
``tests/ortoldest/build_files.py`` filled in the build environment (.ci/ort_oldest.sh does both);
skipped otherwise. Each file is loaded through ``albert_edge.runtime.Session`` and its outputs
compared with the ones the build environment's onnxruntime gave for the same file.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

FILES_ENV = "ALBERT_EDGE_ORT_OLDEST_FILES"
FILES = Path(os.environ[FILES_ENV]) if os.environ.get(FILES_ENV) else None

pytestmark = pytest.mark.skipif(
    FILES is None, reason=f"{FILES_ENV} is not set: .ci/ort_oldest.sh builds the files and the oldest-onnxruntime "
                          "environment these tests run in")

INDEX = json.loads((FILES / "index.json").read_text()) if FILES is not None else {"files": {}, "lengths": []}
FP32_ATOL = 1e-4


@pytest.fixture(scope="module")
def references():
    with np.load(FILES / "references.npz") as data:
        return {key: data[key] for key in data.files}


def test_the_environment_has_the_oldest_onnxruntime_the_files_claim():
    import onnxruntime

    from albert_edge.runtime import Session  # noqa: F401  (the device side imports here)

    claims = [f["min_runtime"] for f in INDEX["files"].values()]
    assert None not in claims, INDEX["files"]
    assert max(claims, key=_key) == onnxruntime.__version__, (claims, onnxruntime.__version__)
    assert INDEX["reference_onnxruntime"] != onnxruntime.__version__
    for heavy in ("torch", "tensorflow"):
        assert heavy not in sys.modules, f"{heavy} was imported on the device side"


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def _feeds(references, seq):
    return {k.split("/")[-1]: v for k, v in references.items() if k.startswith(f"feeds/{seq}/")}


@pytest.mark.parametrize("name", list(INDEX["files"]))
def test_loads_and_gives_the_newer_onnxruntimes_outputs(name, references):
    from albert_edge.runtime import Session

    session = Session(FILES / "files" / name)
    assert session.backend_name == "onnxruntime"
    int8 = "int8" in name
    for seq in INDEX["lengths"]:
        got = session.run(_feeds(references, seq))
        for output in INDEX["files"][name]["outputs"]:
            want = references[f"{name}/{seq}/{output}"]
            assert got[output].shape == want.shape and np.isfinite(got[output]).all()
            diff = float(np.abs(got[output].astype(np.float64) - want).max())
            if int8:
                # Older int8 kernels may round a dynamically quantized input otherwise (measured on
                # the builtin model, 1.18.0 against 1.31.1: identical at 1 and 16 tokens, 0.024 at
                # 128 on logits up to 5.8, where int8 and fp32 differ by 0.036), but by no more than
                # the file's own quantization error; the same predictions.
                fp32 = references[f"model.ort/{seq}/{output}"]
                quantization_error = float(np.abs(want - fp32).max())
                assert diff <= max(1e-5, quantization_error), (seq, output, diff, quantization_error)
                assert np.mean(got[output].argmax(-1) == want.argmax(-1)) >= 0.99
            else:
                assert diff <= FP32_ATOL, (seq, output, diff)
