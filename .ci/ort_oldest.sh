#!/usr/bin/env bash
# CI: the .ort files `convert --to ort` writes, on the oldest onnxruntime they claim to load in.
#
# 1. The build environment ($PYTHON, default .venv/bin/python; its onnxruntime is constraints.txt's)
#    converts a small ALBERT with `--to ort --scheme int8-dynamic` and saves the outputs its
#    onnxruntime gives for each file (tests/ortoldest/build_files.py); index.json keeps each
#    .ort's min_runtime as the manifest records it (albert_edge.formats.ort_runtime).
# 2. A second environment ($ORT_OLDEST_VENV, default .venv-ort-oldest) with Python 3.11, numpy < 2,
#    onnxruntime at the latest of those claims, albert-edge's base dependencies only (no torch or
#    tensorflow) and albert-edge itself ($ALBERT_EDGE_WHEEL, the built wheel; default `.`, this
#    checkout built) loads each file through albert_edge.runtime.Session and compares
#    (tests/ortoldest/test_ort_oldest.py).
# Exits non-zero when either step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=common.sh
. .ci/common.sh
venv=${ORT_OLDEST_VENV:-.venv-ort-oldest}

scratch_files ort-oldest

# The build's log goes to the log file, shown only when the build fails.
quietly "$files.log" "$build_python" tests/ortoldest/build_files.py "$files"
oldest=$("$build_python" -c '
import json, sys
claims = [f["min_runtime"] for f in json.load(open(sys.argv[1]))["files"].values()]
if None in claims:
    sys.exit(f"a file claims no oldest onnxruntime: {claims}")
print(max(claims, key=lambda v: tuple(int(p) for p in v.split("."))))' "$files/index.json")

python311_venv "$venv"
# albert-edge's base dependencies, read from pyproject.toml so the list lives in one place.
mapfile -t base < <("$venv/bin/python" -c \
    'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"], sep="\n")')
# Not constrained by constraints.txt: it pins the build environment's onnxruntime.
pip_install "$venv" "numpy<2" "onnxruntime==$oldest" pytest "${base[@]}"
install_wheel "$venv"
"$venv/bin/python" -c 'import albert_edge, onnxruntime; print("albert_edge", albert_edge.__file__, "onnxruntime", onnxruntime.__version__)'

# --noconftest: tests/conftest.py's fixtures import torch, which this environment must not have.
# The venv's pytest script, not `python -m pytest`: the checkout must not be on sys.path.
echo "+ ALBERT_EDGE_ORT_OLDEST_FILES=$files $venv/bin/pytest -q --noconftest tests/ortoldest"
ALBERT_EDGE_ORT_OLDEST_FILES="$files" "$venv/bin/pytest" -q --noconftest -p no:cacheprovider tests/ortoldest
