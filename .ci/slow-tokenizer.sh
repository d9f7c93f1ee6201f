#!/usr/bin/env bash
# CI: albert-edge's tokenizer against transformers' sentencepiece-based (slow) AlbertTokenizer,
# the reference the original ALBERT was pretrained with. transformers 5 no longer has it, so this
# runs in its own environment ($SLOWTOK_VENV, default .venv-slowtok) with transformers 4 and no torch.
set -euo pipefail
cd "$(dirname "$0")/.."

python311=${PYTHON311:-python3.11}
venv=${SLOWTOK_VENV:-.venv-slowtok}
if [ ! -x "$venv/bin/python" ]; then
    echo "+ $python311 -m venv $venv"
    "$python311" -m venv "$venv"
fi
mapfile -t base < <("$venv/bin/python" -c \
    'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"], sep="\n")')
echo "+ pip install transformers>=4.50,<5 pytest ${base[*]}"
"$venv/bin/python" -m pip install -q --disable-pip-version-check "transformers>=4.50,<5" pytest "${base[@]}"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e .
# --noconftest: tests/conftest.py's fixtures import torch, which this environment does not have.
echo "+ $venv/bin/python -m pytest -q --noconftest tests/test_tokenizer_exact.py -k 'not hand_picked'"
"$venv/bin/python" -m pytest -q --noconftest -p no:cacheprovider tests/test_tokenizer_exact.py -k "not hand_picked"
