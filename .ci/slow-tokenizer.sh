#!/usr/bin/env bash
# CI: albert-edge's tokenizer against transformers' sentencepiece-based (slow) AlbertTokenizer,
# the reference the original ALBERT was pretrained with. transformers 5 no longer has it, so this
# runs in its own environment ($SLOWTOK_VENV, default .venv-slowtok) with transformers 4, no torch,
# and albert-edge itself from $ALBERT_EDGE_WHEEL (the built wheel; default `.`, this checkout built).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=common.sh
. .ci/common.sh
venv=${SLOWTOK_VENV:-.venv-slowtok}
python311_venv "$venv"
mapfile -t base < <("$venv/bin/python" -c \
    'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"], sep="\n")')
pip_install "$venv" "transformers>=4.50,<5" pytest "${base[@]}"
install_wheel "$venv"
"$venv/bin/python" -c 'import albert_edge; print("albert_edge imported from", albert_edge.__file__)'
# --noconftest: tests/conftest.py's fixtures import torch, which this environment does not have.
# The venv's pytest script, not `python -m pytest`: the checkout must not be on sys.path.
echo "+ $venv/bin/pytest -q --noconftest tests/test_tokenizer_exact.py -k 'not hand_picked'"
"$venv/bin/pytest" -q --noconftest -p no:cacheprovider tests/test_tokenizer_exact.py -k "not hand_picked"
