#!/usr/bin/env bash
# The environment benchmarks/peers.py builds two of its peers in: optimum's ONNX export and
# quantizer (optimum-cli export onnx / onnxruntime quantize --avx512_vnni), and transformers 4's
# TFAlbertModel -> TFLiteConverter (transformers 5 has no TensorFlow models). optimum pins its
# own transformers (4.x) range, so neither belongs in the build environment; both live in
# $PEERS_VENV (default .venv-peers), Python 3.11, made when missing (made afresh with --clear).
#
#     benchmarks/peer_envs.sh            # make .venv-peers (a few minutes, ~2 GB)
#     benchmarks/peer_envs.sh --clear    # make it afresh
#
# torch is the CPU build, from $TORCH_INDEX (default PyTorch's CPU index; an empty TORCH_INDEX
# takes torch from pip's configured index, e.g. a local mirror). The pins this environment shares
# with the build environment (torch, tensorflow, onnx, onnxruntime, safetensors) are read from
# constraints.txt; the others are the versions pip resolved for them with those.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source-path=SCRIPTDIR/..
. .ci/common.sh
venv=${PEERS_VENV:-.venv-peers}
torch_index=${TORCH_INDEX-https://download.pytorch.org/whl/cpu}

python311_venv "$venv" ${1:+"$1"}
mapfile -t shared < <(grep -E '^(torch|tensorflow|onnx|onnxruntime|safetensors)==' constraints.txt)
own=("optimum==2.1.0" "optimum-onnx[onnxruntime]==0.1.0" "transformers==4.57.6" "huggingface_hub==0.36.2"
     "tf-keras==2.21.0")
torch_pin=$(printf '%s\n' "${shared[@]}" | grep '^torch==')
if ! "$venv/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '${torch_pin#torch==}')" 2>/dev/null; then
    pip_install "$venv" "$torch_pin" ${torch_index:+--index-url "$torch_index"}
fi
pip_install "$venv" "${shared[@]}" "${own[@]}"
TF_USE_LEGACY_KERAS=1 TF_CPP_MIN_LOG_LEVEL=2 "$venv/bin/python" -c '
import optimum.exporters.onnx, optimum.onnxruntime, tensorflow as tf, tf_keras, torch, transformers
from transformers import TFAlbertModel
print("peers environment:", "transformers", transformers.__version__, "tensorflow", tf.__version__,
      "torch", torch.__version__)'
