#!/usr/bin/env bash
# CI: the device-side tests on tflite-runtime 2.14, the last tflite-runtime release and what pip
# installs on Raspberry Pi OS bookworm (Python 3.11, numpy < 2).
#
# 1. The build environment (torch, tensorflow, ai-edge-litert: $PYTHON, default .venv/bin/python)
#    converts and quantizes a small ALBERT with every TFLite scheme and saves ai-edge-litert's
#    outputs (tests/device214/build_files.py).
# 2. A second environment ($TFLITE214_VENV, default .venv-tflite214) with Python 3.11, numpy < 2,
#    tflite-runtime 2.14.0, albert-edge's base dependencies only (no torch, tensorflow,
#    onnxruntime or ai-edge-litert) and albert-edge itself ($ALBERT_EDGE_WHEEL, the built wheel;
#    default `.`, this checkout built) loads each file through albert_edge.runtime.Session and
#    compares (tests/device214/test_tflite214.py).
# Exits non-zero when either step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=common.sh
. .ci/common.sh
venv=${TFLITE214_VENV:-.venv-tflite214}

scratch_files tflite214

# TensorFlow's start-up log goes to the log file, shown only when the build fails.
quietly "$files.log" "$build_python" tests/device214/build_files.py "$files"

python311_venv "$venv"
# albert-edge's base dependencies, read from pyproject.toml so the list lives in one place.
mapfile -t base < <("$venv/bin/python" -c \
    'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"], sep="\n")')
pip_install "$venv" -c constraints.txt "numpy<2" "tflite-runtime==2.14.0" pytest "${base[@]}"
install_wheel "$venv"
"$venv/bin/python" -c 'import albert_edge; print("albert_edge imported from", albert_edge.__file__)'

# --noconftest: tests/conftest.py's fixtures import torch, which this environment must not have.
# The venv's pytest script, not `python -m pytest`: the checkout must not be on sys.path.
echo "+ ALBERT_EDGE_TFLITE214_FILES=$files $venv/bin/pytest -q --noconftest tests/device214"
ALBERT_EDGE_TFLITE214_FILES="$files" "$venv/bin/pytest" -q --noconftest -p no:cacheprovider tests/device214
