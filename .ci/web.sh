#!/usr/bin/env bash
# CI: albert-edge's files in the JavaScript runtimes apps use (tests/web): onnxruntime-node in Node,
# onnxruntime-web (WebAssembly) in headless Chromium.
#
# 1. `npm ci` in web/: exactly the packages of web/package-lock.json, from the npm registry, nothing
#    else. No dependency's install script runs: web/package.json's allowScripts denies the two there
#    are (onnxruntime-node's, which would fetch its CUDA provider from NuGet, and protobufjs's), and
#    for an npm that ignores allowScripts, ONNXRUNTIME_NODE_INSTALL=skip is onnxruntime-node's own
#    switch to skip that download (its CPU binding comes in the npm package).
# 2. tests/web with the build environment's pytest ($PYTHON's venv, default .venv: torch and the
#    converters make the files), where albert-edge is the built wheel (.ci/run installs it there;
#    with $ALBERT_EDGE_WHEEL set, albert_edge must not be imported from this checkout).
# MediaPipe Tasks for Web needs the [mobile] environment that builds its files: its test is
# tests/mobile/test_mediapipe_web.py, which .ci/mobile.sh runs with web/node_modules from here.
# Exits non-zero when a test fails, or when node (20 or newer) or npm is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=common.sh
. .ci/common.sh

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "node and npm are needed (Node.js 20 or newer); the web tests cannot run" >&2
    exit 1
fi
# shellcheck disable=SC2016  # JavaScript, not shell
node -e 'if (+process.versions.node.split(".")[0] < 20) {
  console.error(`node ${process.version} is too old: web/package.json needs 20 or newer`); process.exit(1); }'
echo "+ node $(node --version), npm $(npm --version)"

echo "+ (cd web && ONNXRUNTIME_NODE_INSTALL=skip npm ci --no-audit --no-fund)"
(cd web && ONNXRUNTIME_NODE_INSTALL=skip npm ci --no-audit --no-fund)

bin=$(dirname "$build_python")
"$build_python" - <<'EOF'
import os, sys
from pathlib import Path
import albert_edge

origin = Path(albert_edge.__file__).resolve()
print("albert_edge", origin)
if os.environ.get("ALBERT_EDGE_WHEEL") and origin.is_relative_to(Path.cwd().resolve() / "albert_edge"):
    sys.exit(f"albert_edge is imported from this checkout ({origin}), not from the built wheel")
EOF
# The venv's pytest script, not `python -m pytest`: the checkout must not be on sys.path.
echo "+ $bin/pytest -q -p no:cacheprovider tests/web"
"$bin/pytest" -q -p no:cacheprovider tests/web
