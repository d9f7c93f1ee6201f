#!/usr/bin/env bash
# CI: the MediaPipe target (convert --to mediapipe) in an environment of its own, .venv-mobile
# ($MOBILE_VENV), and its tests (tests/mobile) run there.
#
# mediapipe 0.10.21 is the last release whose metadata writer imports (1.2's wheels lack
# mediapipe.tasks.cc); it needs protobuf < 5 and numpy < 2, which tensorflow 2.20 and newer (the
# build environment's 2.21) refuse. So this environment is the build side with tensorflow 2.19:
# Python 3.11, albert-edge[mobile,train,tflite] ($ALBERT_EDGE_WHEEL, default `.`, this checkout
# built), tensorflow 2.19.1 and pytest. In the main suite tests/mobile skip, saying so.
# The TFLite Task Library (tflite-support 0.4.4) needs protobuf < 4, which mediapipe refuses: it gets an
# environment of its own, .venv-tasklib ($TASKLIB_VENV), which tests/mobile/test_task_library.py
# runs each file in.
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
# constraints.txt pins the build environment's tensorflow 2.21, which this one cannot have:
# constraints-mobile.txt holds this one's pins, as the MediaPipe guide installs it (the guide puts the
# CPU build of torch first; here torch comes from the index this machine is given, as in the build
# environment). selenium drives headless Chromium for tests/mobile/test_mediapipe_web.py.
pip_install "$venv" -c constraints-mobile.txt "${wanted[@]}" tensorflow "pytest>=8" selenium
install_wheel "$venv"
"$venv/bin/python" -c 'import albert_edge, mediapipe; print("albert_edge", albert_edge.__file__, "mediapipe", mediapipe.__version__)'

tasklib=${TASKLIB_VENV:-.venv-tasklib}
python311_venv "$tasklib"
pip_install "$tasklib" "tflite-support==0.4.4" "numpy<2" "protobuf<4" "libusb-package==1.0.30.0"
# tflite-support's library links libusb-1.0, which a bare machine lacks: libusb-package's copy, under
# the name the loader looks for, reached through a wrapper that sets the library path.
tasklib=$(cd "$tasklib" && pwd)
usb=$("$tasklib/bin/python" -c 'import libusb_package, pathlib; print(pathlib.Path(libusb_package.__file__).parent)')
mkdir -p "$tasklib/libusb"
ln -sf "$usb/libusb-1.0.so" "$tasklib/libusb/libusb-1.0.so.0"
printf '#!/bin/sh\nLD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s" "$@"\n' \
    "$tasklib/libusb" "$tasklib/bin/python" >"$tasklib/bin/tasklib-python"
chmod +x "$tasklib/bin/tasklib-python"
"$tasklib/bin/tasklib-python" -c 'import tflite_support.task.text; print("tflite-support imported")'

# The venv's pytest script, not `python -m pytest`: the checkout must not be on sys.path.
echo "+ ALBERT_EDGE_TASKLIB_PYTHON=$tasklib/bin/tasklib-python $venv/bin/pytest -q tests/mobile"
ALBERT_EDGE_TASKLIB_PYTHON="$tasklib/bin/tasklib-python" TF_CPP_MIN_LOG_LEVEL=2 \
    "$venv/bin/pytest" -q -p no:cacheprovider tests/mobile
