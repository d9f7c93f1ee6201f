#!/usr/bin/env bash
# CI: the MediaPipe target (convert --to mediapipe) in an environment of its own, .venv-mobile
# ($MOBILE_VENV), and its tests (tests/mobile) run there.
#
# mediapipe 0.10.21 is the last release whose metadata writer imports (1.2's wheels lack
# mediapipe.tasks.cc); it needs protobuf < 5 and numpy < 2, which tensorflow 2.20 and newer (the
# build environment's 2.21) refuse. So this environment is the build side with tensorflow 2.19:
# Python 3.11, albert-edge[mobile,train,tflite] ($ALBERT_EDGE_WHEEL, default `.`, this checkout
# built), tensorflow 2.19.1 and pytest. In the main suite tests/mobile skip, saying so.
# Exits non-zero when a test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=common.sh
. .ci/common.sh
venv=${MOBILE_VENV:-.venv-mobile}

python311_venv "$venv"
# The extras' requirements, read from pyproject.toml so the list lives in one place.
mapfile -t wanted < <("$venv/bin/python" -c '
import tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = project["optional-dependencies"]
print(*project["dependencies"], *extras["mobile"], *extras["train"], *extras["tflite"], sep="\n")')
# constraints.txt pins the build environment's tensorflow 2.21, which this one cannot have: its other
# pins are given here.
pins=("tensorflow==2.19.1" "protobuf<5" "numpy<2" "torch==2.13.0" "ai-edge-litert==2.3.0" "sentencepiece==0.2.3"
      "safetensors==0.8.0" "huggingface_hub==2.4.0" "pytest>=8")
pip_install "$venv" "${wanted[@]}" "${pins[@]}"
install_wheel "$venv"
"$venv/bin/python" -c 'import albert_edge, mediapipe; print("albert_edge", albert_edge.__file__, "mediapipe", mediapipe.__version__)'

# The venv's pytest script, not `python -m pytest`: the checkout must not be on sys.path.
echo "+ $venv/bin/pytest -q tests/mobile"
TF_CPP_MIN_LOG_LEVEL=2 "$venv/bin/pytest" -q -p no:cacheprovider tests/mobile
