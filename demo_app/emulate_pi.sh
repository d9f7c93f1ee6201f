#!/usr/bin/env bash
# An emulated Raspberry Pi (opt-in, not part of CI; slow): an arm64 Debian bookworm root file
# system (Python 3.11, as on Raspberry Pi OS bookworm) run through qemu-user-static and
# binfmt_misc, with a Pi 4's /proc/cpuinfo. Inside it, install.sh installs the demo with
# systemd start disabled and makes a classify request; then `albert-edge demo classify` and
# `fill-mask` run on the TFLite files, and `demo serve` answers web requests, once with
# tflite-runtime 2.14 (numpy<2) and once with ai-edge-litert. It checks that things load and
# answer, not speed.
#
#   sudo demo_app/emulate_pi.sh BUNDLE_DIR
#
# Environment: ROOTFS (/var/tmp/albert-edge-pi/rootfs; made by debootstrap on first use and
# reused), MIRROR (the Debian mirror; default: the first one in apt's sources), RUNTIMES
# ("tflite-runtime litert"), PORT (8799: the server started inside, asked from outside).
# Needs: debootstrap, qemu-user-static, root, and binfmt_misc writable (a privileged container).
set -euo pipefail

BUNDLE=${1:?usage: $0 BUNDLE_DIR}
ROOTFS=${ROOTFS:-/var/tmp/albert-edge-pi/rootfs}
RUNTIMES=${RUNTIMES:-tflite-runtime litert}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
QEMU=/usr/bin/qemu-aarch64-static
WORK=$(dirname "$ROOTFS")
SENTENCE="Create a new event loop and run the coroutine until it is complete."

PORT=${PORT:-8799}

die() { echo "emulate_pi.sh: $*" >&2; exit 2; }
say() { echo "==> $*"; }

[ "$(id -u)" -eq 0 ] || die "run as root (debootstrap, chroot and binfmt_misc need it)"
[ -f "$BUNDLE/bundle.json" ] || die "$BUNDLE is not a demo bundle"
command -v debootstrap >/dev/null || die "debootstrap is missing (apt install debootstrap)"
[ -x "$QEMU" ] || die "$QEMU is missing (apt install qemu-user-static)"

# -- binfmt_misc: run aarch64 ELF files through qemu ---------------------------------------------
if [ ! -e /proc/sys/fs/binfmt_misc/register ]; then
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc \
        || die "cannot mount binfmt_misc (the container needs --privileged, or the host must mount it)"
fi
if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
    # F: the interpreter is opened now, so it works inside the chroot without a copy there.
    echo ':qemu-aarch64:M::\x7f\x45\x4c\x46\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00:\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff:/usr/bin/qemu-aarch64-static:OCF' \
        > /proc/sys/fs/binfmt_misc/register || die "cannot register qemu-aarch64 with binfmt_misc (read-only /proc/sys?)"
fi
say "binfmt_misc: $(head -2 /proc/sys/fs/binfmt_misc/qemu-aarch64 | tr '\n' ' ')"

# -- the root file system ------------------------------------------------------------------------
if [ ! -x "$ROOTFS/usr/bin/python3" ]; then
    if [ -z "${MIRROR:-}" ]; then
        MIRROR=$(grep -hoE 'https?://[^ ]+/debian/?' /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null \
                 | grep -v security | head -1 || true)
        MIRROR=${MIRROR:-http://deb.debian.org/debian}
    fi
    say "debootstrap --arch=arm64 bookworm $ROOTFS ($MIRROR); this takes a while"
    mkdir -p "$ROOTFS"
    debootstrap --arch=arm64 --variant=minbase \
        --include=python3,python3-venv,python3-pip,ca-certificates,passwd,procps \
        bookworm "$ROOTFS" "$MIRROR"
fi

# A Raspberry Pi 4 Model B's /proc/cpuinfo (4 x Cortex-A72, CPU part 0xd08): the arm64 runtimes
# read it, and the host's x86 one makes them fail under emulation.
CPUINFO="$WORK/cpuinfo-pi4"
{
    for n in 0 1 2 3; do
        printf 'processor\t: %d\nBogoMIPS\t: 108.00\nFeatures\t: fp asimd evtstrm crc32 cpuid\n' "$n"
        printf 'CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0xd08\nCPU revision\t: 3\n\n'
    done
    printf 'Revision\t: c03114\nSerial\t\t: 100000000000000a\nModel\t\t: Raspberry Pi 4 Model B Rev 1.4\n'
} > "$CPUINFO"

MOUNTS=()
cleanup() {
    for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do umount -l "${MOUNTS[$i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
bind() { mount "$@"; MOUNTS+=("${@: -1}"); }
bind -t proc proc "$ROOTFS/proc"
bind --bind "$CPUINFO" "$ROOTFS/proc/cpuinfo"
bind -t sysfs sys "$ROOTFS/sys"
bind --bind /dev "$ROOTFS/dev"
bind -t devpts devpts "$ROOTFS/dev/pts"
cp /etc/resolv.conf "$ROOTFS/etc/resolv.conf"
# pip inside trusts what the host trusts (a proxy's certificate authority, if there is one).
cp /etc/ssl/certs/ca-certificates.crt "$ROOTFS/etc/ssl/certs/host-ca-certificates.crt"

say "building the albert-edge wheel and copying it, install.sh and the bundle into the root file system"
STAGE="$ROOTFS/tmp/albert-edge-demo"
rm -rf "$STAGE" && mkdir -p "$STAGE/wheels"
python3 -m pip wheel --quiet --no-deps -w "$STAGE/wheels" "$REPO" >/dev/null
WHEEL=$(basename "$(ls "$STAGE"/wheels/albert_edge-*.whl | head -1)")
cp -r "$BUNDLE" "$STAGE/bundle"
cp "$REPO/demo_app/install.sh" "$REPO/demo_app/albert-edge-demo.service" "$STAGE/"

summary() {  # one line out of an answer: the label or the filled-in text, and the latency
    python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(repr(d.get("label") or d.get("filled")), d["latency_ms"], "ms", d["model"])' "$1" 2>/dev/null || head -c 200 "$1"
}

inside() {
    chroot "$ROOTFS" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root LANG=C.UTF-8 QEMU_CPU=cortex-a72 PIP_CERT=/etc/ssl/certs/host-ca-certificates.crt \
        PIP_DEFAULT_TIMEOUT=180 "$@"
}
say "inside: $(inside uname -m), $(inside python3 --version), $(inside grep -m1 'CPU part' /proc/cpuinfo)"

status=0
for rt in $RUNTIMES; do
    say "[$rt] install.sh --runtime $rt (SYSTEMCTL empty: systemd is not running here)"
    if ! inside env SYSTEMCTL= bash /tmp/albert-edge-demo/install.sh --bundle /tmp/albert-edge-demo/bundle \
            --source "/tmp/albert-edge-demo/wheels/$WHEEL" --runtime "$rt"; then
        say "[$rt] FAILED: install.sh"; status=1
    fi
    inside /opt/albert-edge-demo/venv/bin/python -c \
        'import importlib.metadata as m; print("==> installed:", *(f"{p} {m.version(p)}" for p in ("numpy", "albert-edge") ), *(f"{p} {m.version(p)}" for p in ("tflite-runtime", "ai-edge-litert", "onnxruntime") if any(d.metadata["Name"] == p for d in m.distributions())))'
    for args in "classify --model tflite-int8" "fill-mask --model tflite-int8" "classify --model tflite-fp32"; do
        read -r cmd model_opt model <<< "$args"
        text=$SENTENCE
        [ "$cmd" = fill-mask ] && text="Create a new event ___ and run the coroutine."
        if inside runuser -u albert-demo -- /opt/albert-edge-demo/venv/bin/albert-edge demo "$cmd" \
                /opt/albert-edge-demo/bundle "$text" "$model_opt" "$model" --json > "$WORK/answer.json"; then
            say "[$rt] demo $cmd $model: $(summary "$WORK/answer.json")"
        else
            say "[$rt] FAILED: demo $cmd $model"; status=1
        fi
    done
    say "[$rt] demo serve as the service would run it, and requests from outside the root file system"
    inside runuser -u albert-demo -- /opt/albert-edge-demo/venv/bin/albert-edge demo serve \
        /opt/albert-edge-demo/bundle --port "$PORT" > "$WORK/serve-$rt.log" 2>&1 &
    up=0
    for _ in $(seq 1 150); do
        if curl -sf "http://127.0.0.1:$PORT/api/status" > "$WORK/status.json"; then up=1; break; fi
        sleep 2
    done
    if [ "$up" -eq 1 ]; then
        ok=1
        for route in classify fill-mask; do
            text=$SENTENCE
            [ "$route" = fill-mask ] && text="Create a new event [MASK] and run the coroutine."
            curl -sf -X POST -H 'Content-Type: application/json' -d "{\"text\": \"$text\"}" \
                "http://127.0.0.1:$PORT/api/$route" > "$WORK/answer.json" || ok=0
            say "[$rt] POST /api/$route: $(summary "$WORK/answer.json")"
        done
        curl -sf -o /dev/null "http://127.0.0.1:$PORT/" || ok=0
        curl -sf "http://127.0.0.1:$PORT/api/status" > "$WORK/status.json" || ok=0
        say "[$rt] /api/status: $(python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); c = s["models"]["classifier"]; print(s["model"], c["runtime"], c["runtime_version"], "weights_once", c["weights_once"], "rss", s["memory"]["rss"] // 2**20, "MiB", "board", s["device"]["board"], "cpu", s["device"]["cpu_model"])' "$WORK/status.json")"
        [ "$ok" -eq 1 ] || { say "[$rt] FAILED: a web request"; status=1; }
        kill "$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["pid"])' "$WORK/status.json")" || true
    else
        say "[$rt] FAILED: demo serve did not answer within 300 s: $(tail -3 "$WORK/serve-$rt.log")"; status=1
    fi
    wait || true
    say "[$rt] install.sh --uninstall"
    inside env SYSTEMCTL= bash /tmp/albert-edge-demo/install.sh --uninstall || status=1
done
[ "$status" -eq 0 ] && say "emulated Pi: every step passed" || say "emulated Pi: some steps FAILED (see above)"
exit "$status"
