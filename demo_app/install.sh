#!/usr/bin/env bash
# Install the albert-edge demo on Raspberry Pi OS bookworm (64-bit) as a systemd service:
# a venv with the device side (no torch, no tensorflow) and a TFLite / ONNX interpreter, the
# model bundle, a dedicated system user, and the unit albert-edge-demo.service.
#
#   sudo ./install.sh --bundle DIR [--source SPEC] [--runtime LIST] [--host H] [--port P] [--token T | --no-auth]
#                     [--no-start] [--dry-run]
#   sudo ./install.sh --uninstall
#
# Environment: PREFIX (/opt/albert-edge-demo), SERVICE_USER (albert-demo), PYTHON (python3),
# UNIT_DIR (/etc/systemd/system), SYSTEMCTL (systemctl; set it empty where systemd is not
# running, e.g. in a chroot: everything is installed, nothing is started), CPUINFO (/proc/cpuinfo:
# the file whose Features and Model lines tell a Raspberry Pi 5 / ARMv8.2 board).
set -euo pipefail

PREFIX=${PREFIX:-/opt/albert-edge-demo}
SERVICE_USER=${SERVICE_USER:-albert-demo}
PYTHON=${PYTHON:-python3}
UNIT_DIR=${UNIT_DIR:-/etc/systemd/system}
SYSTEMCTL=${SYSTEMCTL-systemctl}
CPUINFO=${CPUINFO:-/proc/cpuinfo}
UNIT=albert-edge-demo.service
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

BUNDLE=""
SOURCE=""
RUNTIME="litert,onnxruntime"
HOST=127.0.0.1
PORT=8000
TOKEN=""
NO_AUTH=0
START=1
CHECK=1
DRY_RUN=0
ACTION=install

usage() {
    cat <<EOF
Usage: sudo $0 --bundle DIR [options]      install (or update) the demo service
       sudo $0 --uninstall                 stop it and remove everything it installed

  --bundle DIR      the model bundle (made with 'albert-edge demo bundle --out DIR')
  --source SPEC     what pip installs albert-edge from: a wheel, a source directory, or a
                    requirement [default: the checkout this script is in, else 'albert-edge[demo]']
  --runtime LIST    interpreters, comma-separated: litert (ai-edge-litert), tflite-runtime
                    (tflite-runtime 2.14 with numpy<2; refused on a Raspberry Pi 5 or any
                    CPU with the ARMv8.2 dot-product extension), onnxruntime [default: $RUNTIME]
  --host H          address the page listens on [default: $HOST; 0.0.0.0 for the network]
  --port P          TCP port [default: $PORT]
  --token T         the token the page and API ask for (16+ letters, digits or -._~+/=), kept in
                    $PREFIX/demo.env for the service [default: on loopback none; on any other
                    address the one already in demo.env, else a new random one, printed at the end]
  --no-auth         ask for no token even off loopback (every machine on the network can use it)
  --no-start        install and enable nothing in systemd (same as SYSTEMCTL=)
  --no-check        skip the classify request made with the installed files
  --dry-run         run every check (bundle, Python, board, runtimes), print what would be
                    installed, and change nothing
  --uninstall       remove the service, $PREFIX and the user $SERVICE_USER
  --print-unit      print the unit as it would be installed, and change nothing
EOF
}

die() { echo "install.sh: $*" >&2; exit 2; }
say() { echo "==> $*"; }

while [ $# -gt 0 ]; do
    case "$1" in
        --bundle) BUNDLE=${2:?--bundle needs a directory}; shift 2 ;;
        --source) SOURCE=${2:?--source needs a value}; shift 2 ;;
        --runtime) RUNTIME=${2:?--runtime needs a value}; shift 2 ;;
        --host) HOST=${2:?--host needs a value}; shift 2 ;;
        --port) PORT=${2:?--port needs a value}; shift 2 ;;
        --token) TOKEN=${2:?--token needs a value}; shift 2 ;;
        --no-auth) NO_AUTH=1; shift ;;
        --no-start) START=0; shift ;;
        --no-check) CHECK=0; shift ;;
        --dry-run) DRY_RUN=1; shift ;;
        --uninstall) ACTION=uninstall; shift ;;
        --print-unit) ACTION=print-unit; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown option $1" ;;
    esac
done
[ -n "$SYSTEMCTL" ] || START=0
[[ "$PORT" =~ ^[0-9]+$ ]] && [ "$PORT" -ge 1 ] && [ "$PORT" -le 65535 ] || die "--port must be 1..65535"
[[ "$HOST" =~ ^[0-9A-Za-z.:-]+$ ]] || die "--host must be an address or a host name"
[ -z "$TOKEN" ] || [[ "$TOKEN" =~ ^[A-Za-z0-9._~+/=-]{16,256}$ ]] \
    || die "--token must be 16 to 256 letters, digits or -._~+/= (python3 -c 'import secrets; print(secrets.token_urlsafe())')"
[ -z "$TOKEN" ] || [ "$NO_AUTH" -eq 0 ] || die "give --token or --no-auth, not both"
case "$HOST" in 127.*|::1|localhost) LOOPBACK=1 ;; *) LOOPBACK=0 ;; esac

# The unit with this install's paths, user, address and port in place of the defaults.
render_unit() {
    sed -e "s#/opt/albert-edge-demo#$PREFIX#g" \
        -e "s#^User=albert-demo\$#User=$SERVICE_USER#" -e "s#^Group=albert-demo\$#Group=$SERVICE_USER#" \
        -e "s#--host 127.0.0.1 --port 8000#--host $HOST --port $PORT$([ "$NO_AUTH" -eq 1 ] && echo ' --no-auth')#" \
        -e "s#^Environment=\(.*\)#Environment=\1\n\# The token (ALBERT_EDGE_DEMO_TOKEN=...), when install.sh set one: root and the service read it.\nEnvironmentFile=-$PREFIX/demo.env#" \
        "$HERE/$UNIT"
}
if [ "$ACTION" = print-unit ]; then render_unit; exit 0; fi

[ "$(id -u)" -eq 0 ] || die "run as root (sudo $0 ...): it creates a user and a system service"

uninstall() {
    if [ "$START" -eq 1 ] && [ -f "$UNIT_DIR/$UNIT" ]; then
        "$SYSTEMCTL" disable --now "$UNIT" || true
    fi
    rm -f "$UNIT_DIR/$UNIT"
    [ "$START" -eq 1 ] && "$SYSTEMCTL" daemon-reload || true
    case "$PREFIX" in
        /|/usr|/usr/*|/etc|/etc/*|/home|/root|"") die "refusing to remove PREFIX=$PREFIX" ;;
    esac
    rm -rf "$PREFIX"
    if id -u "$SERVICE_USER" >/dev/null 2>&1; then userdel "$SERVICE_USER"; fi
    say "removed $UNIT, $PREFIX and the user $SERVICE_USER"
}

if [ "$ACTION" = uninstall ]; then uninstall; exit 0; fi

# -- checks before anything is changed ----------------------------------------------------------
[ -n "$BUNDLE" ] || { usage >&2; die "--bundle DIR is required"; }
[ -f "$BUNDLE/bundle.json" ] && [ -f "$BUNDLE/spiece.model" ] \
    || die "$BUNDLE is not a demo bundle (no bundle.json / spiece.model); make one with 'albert-edge demo bundle'"
command -v "$PYTHON" >/dev/null || die "$PYTHON not found (sudo apt install python3)"
"$PYTHON" -c 'import ensurepip, venv' 2>/dev/null || die "the venv module is missing (sudo apt install python3-venv)"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || die "Python 3.10 or newer is needed"
case "$(uname -m)" in
    aarch64|arm64) ;;
    *) echo "install.sh: note: this is $(uname -m), not a 64-bit Raspberry Pi OS; installing anyway" >&2 ;;
esac

if [ -z "$SOURCE" ]; then
    if [ -f "$HERE/../pyproject.toml" ] && grep -q '^name = "albert-edge"' "$HERE/../pyproject.toml"; then
        SOURCE=$(cd "$HERE/.." && pwd)
    else
        SOURCE='albert-edge[demo]'
    fi
fi
REQUIREMENTS=()
for rt in ${RUNTIME//,/ }; do
    case "$rt" in
        litert|ai-edge-litert) REQUIREMENTS+=("ai-edge-litert") ;;
        tflite-runtime|tflite_runtime) REQUIREMENTS+=("tflite-runtime==2.14.*" "numpy<2") ;;
        onnxruntime|onnx) REQUIREMENTS+=("onnxruntime") ;;
        *) die "unknown runtime '$rt' (litert, tflite-runtime, onnxruntime)" ;;
    esac
done
[ ${#REQUIREMENTS[@]} -gt 0 ] || die "--runtime names no interpreter"

# An ARMv8.2 board (a Raspberry Pi 5's Cortex-A76): the dot-product extension in the CPU's
# Features, or a Pi 5 model string. tflite-runtime 2.14's aarch64 wheel crashes there with
# SIGSEGV on the int8 files (seen under qemu -cpu cortex-a76; see demo_app/README.md), so the demo
# would die on its first request: it gets ai-edge-litert, which runs every file there.
armv82_board() {  # prints why this is one, or fails
    local features model
    features=$(grep -m1 -iE '^features[[:space:]]*:' "$CPUINFO" 2>/dev/null | cut -d: -f2- || true)
    model=$(grep -m1 -iE '^model[[:space:]]*:' "$CPUINFO" 2>/dev/null | cut -d: -f2- | sed 's/^[[:space:]]*//' || true)
    if [ -z "$model" ] && [ "$CPUINFO" = /proc/cpuinfo ] && [ -r /proc/device-tree/model ]; then
        model=$(tr -d '\0' < /proc/device-tree/model)
    fi
    if [[ " $features " == *" asimddp "* ]]; then
        echo "${model:-this CPU} has the ARMv8.2 dot-product extension (asimddp in $CPUINFO)"
    elif [[ "$model" == *"Raspberry Pi 5"* ]]; then
        echo "$model is an ARMv8.2 board (Cortex-A76)"
    else
        return 1
    fi
}
if board=$(armv82_board); then
    if [[ " ${RUNTIME//,/ } " =~ \ (tflite-runtime|tflite_runtime)\  ]]; then
        die "tflite-runtime 2.14 crashes (SIGSEGV) on the int8 files here: $board; use --runtime litert (ai-edge-litert runs every file on it)"
    fi
    case " ${RUNTIME//,/ } " in
        *" litert "*|*" ai-edge-litert "*) say "$board: its TFLite files run with ai-edge-litert" ;;
    esac
fi
if [ "$DRY_RUN" -eq 1 ]; then
    say "dry run: would install $SOURCE with ${REQUIREMENTS[*]} into $PREFIX/venv, the bundle $BUNDLE, the user $SERVICE_USER and $UNIT_DIR/$UNIT"
    exit 0
fi

# -- user, venv, bundle -------------------------------------------------------------------------
if ! id -u "$SERVICE_USER" >/dev/null 2>&1; then
    say "creating the system user $SERVICE_USER"
    useradd --system --user-group --home-dir "$PREFIX" --no-create-home --shell /usr/sbin/nologin "$SERVICE_USER"
fi
mkdir -p "$PREFIX"
say "creating the venv $PREFIX/venv (a fresh one: it holds exactly the runtimes asked for)"
"$PYTHON" -m venv --clear "$PREFIX/venv"
PIP=("$PREFIX/venv/bin/python" -m pip --disable-pip-version-check --no-input)
# A wheel or a directory gets the [demo] extra here; a requirement names it itself.
if [ -d "$SOURCE" ] || [ -f "$SOURCE" ]; then SPEC="$SOURCE[demo]"; else SPEC="$SOURCE"; fi
say "pip install $SPEC ${REQUIREMENTS[*]}"
"${PIP[@]}" install "$SPEC" "${REQUIREMENTS[@]}"
if "$PREFIX/venv/bin/python" -c 'import torch' 2>/dev/null || "$PREFIX/venv/bin/python" -c 'import tensorflow' 2>/dev/null; then
    echo "install.sh: note: torch or tensorflow is in the venv; the demo does not need them" >&2
fi

say "copying the bundle to $PREFIX/bundle"
rm -rf "$PREFIX/bundle.new"
cp -r "$BUNDLE" "$PREFIX/bundle.new"
rm -rf "$PREFIX/bundle"
mv "$PREFIX/bundle.new" "$PREFIX/bundle"
chown -R root:"$SERVICE_USER" "$PREFIX"
chmod -R u=rwX,g=rX,o= "$PREFIX"

# -- the token ----------------------------------------------------------------------------------
# Off loopback the service asks for a token (see 'albert-edge demo serve --help'): the one given,
# else the one kept from an earlier install, else a new one. It lives in demo.env, which root and
# the service's group can read, never in the unit (world-readable) or on a command line.
ENV_FILE="$PREFIX/demo.env"
if [ -z "$TOKEN" ] && [ "$NO_AUTH" -eq 0 ] && [ "$LOOPBACK" -eq 0 ]; then
    if [ -f "$ENV_FILE" ]; then TOKEN=$(sed -n 's/^ALBERT_EDGE_DEMO_TOKEN=//p' "$ENV_FILE"); fi
    [ -n "$TOKEN" ] || TOKEN=$("$PYTHON" -c 'import secrets; print(secrets.token_urlsafe(24))')
fi
if [ -n "$TOKEN" ]; then
    say "writing the token to $ENV_FILE"
    (umask 077; printf 'ALBERT_EDGE_DEMO_TOKEN=%s\n' "$TOKEN" > "$ENV_FILE.tmp")
    chown root:"$SERVICE_USER" "$ENV_FILE.tmp"
    chmod 640 "$ENV_FILE.tmp"
    mv "$ENV_FILE.tmp" "$ENV_FILE"
else
    rm -f "$ENV_FILE"
fi

# -- the unit -----------------------------------------------------------------------------------
say "writing $UNIT_DIR/$UNIT"
mkdir -p "$UNIT_DIR"
render_unit > "$UNIT_DIR/$UNIT.tmp"
mv "$UNIT_DIR/$UNIT.tmp" "$UNIT_DIR/$UNIT"
chmod 644 "$UNIT_DIR/$UNIT"

if [ "$CHECK" -eq 1 ]; then
    say "checking: a classify request with the installed files, as $SERVICE_USER"
    runuser -u "$SERVICE_USER" -- env HOME="$PREFIX" "$PREFIX/venv/bin/albert-edge" demo classify \
        "$PREFIX/bundle" "Return the decimal value rounded to the context's precision."
fi

if [ "$START" -eq 1 ]; then
    "$SYSTEMCTL" daemon-reload
    "$SYSTEMCTL" enable --now "$UNIT"
    say "running: http://$HOST:$PORT/  (journalctl -u $UNIT to follow it)"
else
    say "installed; systemd was not asked to start it (SYSTEMCTL empty or --no-start)."
    say "start it with: systemctl daemon-reload && systemctl enable --now $UNIT"
fi
if [ -n "$TOKEN" ]; then
    say "the page wants its token: open it once as http://<this machine>:$PORT/#token=$TOKEN"
    say "(the page keeps it; the token is in $ENV_FILE, change it with --token)"
fi
