#!/usr/bin/env bash
# CI: albert-edge as a device installs it: the wheel with the [tflite,onnx] extras (and [demo] for
# the web app), no torch and no tensorflow, driven through its `albert-edge` command.
#
# 1. The build environment ($PYTHON, default .venv/bin/python) makes a tiny demo bundle: ONNX and
#    TFLite files in fp32 and int8 with their manifests, the tokenizer and the labels.
# 2. A fresh environment ($DEVICE_ONLY_VENV, default .venv-deviceonly; emptied first, so nothing
#    from an earlier run is left in it) with Python 3.11 gets the wheel ($ALBERT_EDGE_WHEEL, default
#    `.`, this checkout built) with those extras and pytest, through pip's resolver, so the
#    wheel's own dependency list is what is tested; then tests/deviceonly runs the CLI on the files.
# Exits non-zero when either step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=common.sh
. .ci/common.sh
venv=${DEVICE_ONLY_VENV:-.venv-deviceonly}

scratch_files deviceonly

# Training and conversion logs go to the log file, shown only when the build fails.
quietly "$files.log" "$build_python" -m albert_edge demo bundle --preset tiny --threads 1 --out "$files/bundle" >/dev/null

python311_venv "$venv" --clear
pip_install "$venv" -c constraints.txt "$wheel[tflite,onnx,demo]" pytest
# The tests say it too; this is the one line to read when the whole run fails early.
for heavy in torch tensorflow; do
    if "$venv/bin/python" -c "import $heavy" 2>/dev/null; then
        echo "$heavy is installed in the device-only environment $venv: the device extras pulled it in" >&2
        exit 1
    fi
done
"$venv/bin/python" -c 'import albert_edge; print("albert_edge imported from", albert_edge.__file__)'

# --noconftest: tests/conftest.py's fixtures import torch, which this environment must not have.
# The venv's pytest script, not `python -m pytest`: the checkout must not be on sys.path.
echo "+ ALBERT_EDGE_DEVICE_ONLY_FILES=$files $venv/bin/pytest -q --noconftest tests/deviceonly"
ALBERT_EDGE_DEVICE_ONLY_FILES="$files" "$venv/bin/pytest" -q --noconftest -p no:cacheprovider tests/deviceonly
