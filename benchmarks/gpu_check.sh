#!/usr/bin/env bash
# benchmarks/gpu_check.py on a machine with an NVIDIA GPU, in one command: a venv with albert-edge
# from this checkout, torch (the reference), onnx and onnxruntime-gpu with the CUDA and cuDNN
# libraries from PyPI, then the check itself. Options after -- go to gpu_check.py.
#
#   benchmarks/gpu_check.sh                          # a CUDA machine: PyPI's onnxruntime-gpu
#   benchmarks/gpu_check.sh --system-onnxruntime     # a Jetson: JetPack's onnxruntime-gpu, installed
#   benchmarks/gpu_check.sh --dry-run                # no GPU: the CPU onnxruntime, the CPU provider
#
# Exit status: gpu_check.py's (0 passed, 1 a check failed, 3 no usable CUDA provider); 2 bad
# options; 3 no NVIDIA GPU; 4 an install failed.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: benchmarks/gpu_check.sh [options] [-- gpu_check.py options]

  --venv DIR              the venv to make (or, with --no-install, to use); default WORK/venv
  --no-install            use --venv as it is: install nothing
  --system-onnxruntime    use the onnxruntime-gpu installed for the system Python (a Jetson's, from
                          NVIDIA's Jetson index): the venv sees system packages, installs no onnxruntime
  --onnxruntime-gpu VER   onnxruntime-gpu version (default: constraints.txt's onnxruntime version where
                          the driver runs CUDA 13, 1.26.0 where it runs CUDA 12)
  --tensorrt-libs         also try pip's tensorrt-cuNN-libs (10.x) for the TensorRT provider
  --torch-index-url URL   install torch from this index (e.g. PyTorch's CPU wheels) instead of PyPI
  --pip-cache DIR         pip's cache folder (default: pip's own)
  --work DIR              folder for the venv and the files (default: $TMPDIR/albert-edge-gpu-check)
  --dry-run               no GPU needed: the CPU onnxruntime from constraints.txt, --providers cpu
  -h, --help              this text
EOF
}

die() {
    local code=$1
    shift
    echo "gpu_check.sh: $*" >&2
    exit "$code"
}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
work="${TMPDIR:-/tmp}/albert-edge-gpu-check"
venv="" install=1 system_ort=0 tensorrt_libs=0 dry_run=0 ort_version="" torch_index="" pip_cache=""
while (($#)); do
    case $1 in
        --venv) venv=${2:?--venv needs a folder}; shift 2 ;;
        --no-install) install=0; shift ;;
        --system-onnxruntime) system_ort=1; shift ;;
        --onnxruntime-gpu) ort_version=${2:?--onnxruntime-gpu needs a version}; shift 2 ;;
        --tensorrt-libs) tensorrt_libs=1; shift ;;
        --torch-index-url) torch_index=${2:?--torch-index-url needs a URL}; shift 2 ;;
        --pip-cache) pip_cache=${2:?--pip-cache needs a folder}; shift 2 ;;
        --work) work=${2:?--work needs a folder}; shift 2 ;;
        --dry-run) dry_run=1; shift ;;
        -h | --help) usage; exit 0 ;;
        --) shift; break ;;
        *) die 2 "unknown option $1 (--help lists them)" ;;
    esac
done
venv=${venv:-$work/venv}
start=$SECONDS

# The GPU, and the CUDA major version its driver runs (nvidia-smi's header); a Jetson's JetPack
# may have no nvidia-smi, and runs the onnxruntime-gpu that NVIDIA built for it.
cuda_major=""
if ((!dry_run)); then
    if command -v nvidia-smi >/dev/null; then
        smi=$(nvidia-smi 2>&1) || die 3 "no NVIDIA GPU here: nvidia-smi says: ${smi%%$'\n'*}"
        cuda_major=$(sed -n 's/.*CUDA Version: *\([0-9]*\)\..*/\1/p' <<<"$smi" | head -n 1)
    elif [[ ! -e /etc/nv_tegra_release ]]; then
        die 3 "no NVIDIA GPU here: nvidia-smi not found (--dry-run runs the same steps on the CPU)"
    fi
    if ((!system_ort)) && [[ $(uname -m) != x86_64 ]]; then
        die 2 "PyPI has no onnxruntime-gpu for $(uname -m): install NVIDIA's build" \
            "(on a Jetson, from its Jetson index) and pass --system-onnxruntime"
    fi
fi

pinned_ort=$(sed -n 's/^onnxruntime==//p' "$root/constraints.txt")
pinned_torch=$(sed -n 's/^torch==//p' "$root/constraints.txt")
if ((dry_run)); then
    ort_spec=("onnxruntime==$pinned_ort")
elif ((system_ort)); then
    ort_spec=()
else
    if [[ -z $ort_version ]]; then
        # onnxruntime-gpu on PyPI is built for CUDA 13 from 1.27 on; 1.26.0 is its last CUDA 12 build.
        case ${cuda_major:-0} in
            1[3-9]) ort_version=$pinned_ort ;;
            12) ort_version=1.26.0 ;;
            *) die 3 "the driver runs CUDA ${cuda_major:-(unknown)}: onnxruntime-gpu on PyPI needs CUDA 12 or 13" \
                "(pass --onnxruntime-gpu VERSION to try another)" ;;
        esac
    fi
    ort_spec=("onnxruntime-gpu[cuda,cudnn]==$ort_version")
fi

py=$venv/bin/python
if ((install)); then
    venv_args=()
    ((system_ort)) && venv_args+=(--system-site-packages)
    python3 -m venv "${venv_args[@]}" "$venv" || die 4 "python3 -m venv $venv failed"
    pip=("$py" -m pip install --quiet --disable-pip-version-check --progress-bar off)
    [[ -n $pip_cache ]] && pip+=(--cache-dir "$pip_cache")
    if [[ -n $torch_index ]]; then
        "${pip[@]}" --index-url "$torch_index" "torch==$pinned_torch" || die 4 "torch from $torch_index did not install"
    fi
    # albert-edge's build side without tensorflow ([train]: torch, safetensors), onnx, and one
    # onnxruntime: the CPU and GPU wheels are one Python package and cannot share a venv.
    "${pip[@]}" -c "$root/constraints.txt" -e "${root}[train]" onnx "${ort_spec[@]}" \
        || die 4 "pip could not install albert-edge with ${ort_spec[*]:-the system onnxruntime} (see above)"
    if ((tensorrt_libs)); then
        # PyPI's tensorrt-cuNN-libs is a placeholder that fetches the libraries from NVIDIA's own
        # index; where that is out of reach TensorRT is recorded as not available.
        timeout 300 "${pip[@]}" "tensorrt-cu${cuda_major:-13}-libs>=10,<11" \
            || echo "gpu_check.sh: TensorRT's libraries did not install;" \
                "the TensorRT provider will be recorded as not available" >&2
    fi
fi
[[ -x $py ]] || die 2 "no Python at $py (make the venv, or leave out --no-install)"
"$py" -c "import onnxruntime" 2>/dev/null || die 3 "onnxruntime does not import in $venv"
setup=$((SECONDS - start))
echo "gpu_check.sh: venv ready in ${setup} s" >&2

args=(--work "$work/files" --setup-seconds "$setup")
((dry_run)) && args+=(--providers cpu)
status=0
"$py" "$here/gpu_check.py" "${args[@]}" "$@" || status=$?
echo "gpu_check.sh: $((SECONDS - start)) s in all" >&2
exit "$status"
