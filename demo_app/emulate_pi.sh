#!/usr/bin/env bash
# An emulated Raspberry Pi 4 and Pi 5 (opt-in, not part of CI; slow): an arm64 Debian bookworm
# root file system (Python 3.11, as on Raspberry Pi OS bookworm) run through qemu-user-static and
# binfmt_misc, with the board's /proc/cpuinfo bound in and qemu emulating its CPU. For each board
# and interpreter, install.sh installs the demo with systemd start disabled and makes a classify
# request; then `albert-edge demo classify` and `fill-mask` run on the TFLite files,
# `demo serve` answers web requests from outside the root file system, and `albert-edge profile`
# measures one bundle file. Where install.sh refuses an interpreter on a board (tflite-runtime 2.14
# on a Pi 5), the refusal is what is checked. It checks that things load and answer, not speed.
#
#   sudo demo_app/emulate_pi.sh [--board pi4|pi5|all] BUNDLE_DIR
#
#   --board B   pi4: QEMU_CPU=cortex-a72 and a Pi 4 Model B's cpuinfo (4 x Cortex-A72, 0xd08);
#               pi5: QEMU_CPU=cortex-a76 and a Pi 5 Model B's cpuinfo (4 x Cortex-A76, 0xd0b,
#               fphp asimdhp asimddp); all: both, one after the other [default: all]
#
# Environment: ROOTFS (/var/tmp/albert-edge-pi/rootfs; made by debootstrap on first use and
# reused; remove it for a fresh one), MIRROR (the Debian mirror; default: the first `URIs:` of
# apt's deb822 sources, else the first `deb` line, comments ignored, else deb.debian.org),
# RUNTIMES ("tflite-runtime litert"), PORT (8799: the server started inside, asked from outside).
# Needs: debootstrap, qemu-user-static, curl, root, and binfmt_misc writable (a privileged
# container). Exit 0 when every step passed, 1 when one failed, 2 on bad usage.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; }
die() { echo "emulate_pi.sh: $*" >&2; exit 2; }
say() { echo "==> $*"; }

BOARD=all
BUNDLE=""
while [ $# -gt 0 ]; do
    case "$1" in
        --board) BOARD=${2:-}; shift 2 || die "--board needs pi4, pi5 or all" ;;
        --board=*) BOARD=${1#--board=}; shift ;;
        -h|--help) usage; exit 0 ;;
        -*) usage >&2; die "unknown option $1" ;;
        *) [ -z "$BUNDLE" ] || die "one BUNDLE_DIR only (got $BUNDLE and $1)"; BUNDLE=$1; shift ;;
    esac
done
case "$BOARD" in
    pi4|pi5) BOARDS=$BOARD ;;
    all) BOARDS="pi4 pi5" ;;
    *) die "--board must be pi4, pi5 or all (got '$BOARD')" ;;
esac
[ -n "$BUNDLE" ] || { usage >&2; die "BUNDLE_DIR is required"; }
BUNDLE=$(cd "$BUNDLE" 2>/dev/null && pwd) || die "$BUNDLE is not a directory"

ROOTFS=${ROOTFS:-/var/tmp/albert-edge-pi/rootfs}
RUNTIMES=${RUNTIMES:-tflite-runtime litert}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
QEMU=/usr/bin/qemu-aarch64-static
WORK=$(dirname "$ROOTFS")
SENTENCE="Create a new event loop and run the coroutine until it is complete."
PORT=${PORT:-8799}

[ "$(id -u)" -eq 0 ] || die "run as root (debootstrap, chroot and binfmt_misc need it)"
[ -f "$BUNDLE/bundle.json" ] || die "$BUNDLE is not a demo bundle"
command -v debootstrap >/dev/null || die "debootstrap is missing (apt install debootstrap)"
command -v curl >/dev/null || die "curl is missing (apt install curl)"
[ -x "$QEMU" ] || die "$QEMU is missing (apt install qemu-user-static)"

# The Debian mirror apt uses here: the first URIs: of a deb822 .sources file, else the first
# one-line `deb` entry; comment lines (a snapshot URL kept as a note, say) are never read.
debian_mirror() {
    local uri
    uri=$(grep -hE '^[[:space:]]*URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null \
          | sed -e 's/^[[:space:]]*URIs:[[:space:]]*//' | tr ' \t' '\n\n' | grep -E '^https?://' \
          | grep -v security | grep -E '/debian/?$' | head -1 || true)
    if [ -z "$uri" ]; then
        uri=$(grep -hE '^[[:space:]]*deb[[:space:]]' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
              | sed -e 's/\[[^]]*\]//' | awk '{print $2}' | grep -E '^https?://' \
              | grep -v security | grep -E '/debian/?$' | head -1 || true)
    fi
    echo "${uri:-http://deb.debian.org/debian}"
}

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
    MIRROR=${MIRROR:-$(debian_mirror)}
    say "debootstrap --arch=arm64 bookworm $ROOTFS ($MIRROR); this takes a while"
    mkdir -p "$ROOTFS"
    debootstrap --arch=arm64 --variant=minbase \
        --include=python3,python3-venv,python3-pip,ca-certificates,passwd,procps \
        bookworm "$ROOTFS" "$MIRROR"
fi

# The board's /proc/cpuinfo: the arm64 runtimes read it (the host's x86 one makes them fail under
# emulation), and so do install.sh (which interpreters this board can run) and the demo's page.
# One file is bound over /proc/cpuinfo and rewritten in place for each board.
cpuinfo() {
    local part features variant revision model code n
    case "$1" in
        pi4) part=0xd08; variant=0x0; revision=3; features="fp asimd evtstrm crc32 cpuid"
             code=c03114; model="Raspberry Pi 4 Model B Rev 1.4" ;;
        pi5) part=0xd0b; variant=0x4; revision=1
             features="fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp"
             code=c04170; model="Raspberry Pi 5 Model B Rev 1.0" ;;
    esac
    for n in 0 1 2 3; do
        printf 'processor\t: %d\nBogoMIPS\t: 108.00\nFeatures\t: %s\n' "$n" "$features"
        printf 'CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: %s\nCPU part\t: %s\nCPU revision\t: %s\n\n' \
            "$variant" "$part" "$revision"
    done
    printf 'Revision\t: %s\nSerial\t\t: 100000000000000a\nModel\t\t: %s\n' "$code" "$model"
}
qemu_cpu() { case "$1" in pi4) echo cortex-a72 ;; pi5) echo cortex-a76 ;; esac; }
CPUINFO="$WORK/cpuinfo"
cpuinfo pi4 > "$CPUINFO"

MOUNTS=()
SERVER=""
cleanup() {
    [ -z "$SERVER" ] || stop_server
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

summary() {  # one line out of an answer: the label or the filled-in text, the latency, and an adaptive file's passes
    python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(repr(d.get("label") or d.get("filled")), d["latency_ms"], "ms", d["model"], *(["passes", d["passes"], "of", d["max_passes"]] if d.get("passes") else []))' "$1" 2>/dev/null || head -c 200 "$1"
}
# Whether an answer of the default (adaptive) classifier says how many passes it ran.
has_passes() { python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); sys.exit(not (1 <= d.get("passes", 0) <= d.get("max_passes", 0)))' "$1"; }
# The last lines of a log, indented, for a step that failed.
log_tail() { echo "    --- last lines of $1:"; tail -n "${2:-15}" "$1" 2>/dev/null | sed 's/^/    | /'; }

QEMU_CPU=cortex-a72
inside() {
    chroot "$ROOTFS" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root LANG=C.UTF-8 QEMU_CPU="$QEMU_CPU" PIP_CERT=/etc/ssl/certs/host-ca-certificates.crt \
        PIP_DEFAULT_TIMEOUT=180 "$@"
}
as_service() { inside runuser -u albert-demo -- env HOME=/opt/albert-edge-demo "$@"; }
# The same, replacing this (sub)shell: started with &, $! is then runuser's own pid, not a subshell's.
exec_as_service() {
    exec chroot "$ROOTFS" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        LANG=C.UTF-8 QEMU_CPU="$QEMU_CPU" runuser -u albert-demo -- env HOME=/opt/albert-edge-demo "$@"
}
# Stop the server: the pid it reports (its own Python process), then runuser above it.
stop_server() {
    local pid
    pid=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["pid"])' "$WORK/status.json" 2>/dev/null || true)
    [ -z "$pid" ] || kill "$pid" 2>/dev/null || true
    [ -z "$SERVER" ] || kill "$SERVER" 2>/dev/null || true
    for _ in $(seq 1 30); do
        kill -0 "$SERVER" 2>/dev/null || break
        sleep 1
    done
    [ -z "$SERVER" ] || kill -9 "$SERVER" 2>/dev/null || true
    wait "$SERVER" 2>/dev/null || true
    SERVER=""
}
say "inside: $(inside uname -m), $(inside python3 --version)"

status=0
RESULTS=()  # board runtime install classify fill-mask serve profile seconds
for board in $BOARDS; do
QEMU_CPU=$(qemu_cpu "$board")
cpuinfo "$board" > "$CPUINFO"
say "[$board] QEMU_CPU=$QEMU_CPU, $(inside grep -m1 'CPU part' /proc/cpuinfo | tr -s '\t ' ' '), $(inside grep -m1 '^Model' /proc/cpuinfo | tr -s '\t ' ' ')"
for rt in $RUNTIMES; do
    tag="$board/$rt"
    began=$SECONDS
    r_install=- r_classify=- r_fill=- r_serve=- r_profile=-
    say "[$tag] install.sh --runtime $rt (SYSTEMCTL empty: systemd is not running here)"
    log="$WORK/install-$board-$rt.log"
    set +e
    inside env SYSTEMCTL= bash /tmp/albert-edge-demo/install.sh --bundle /tmp/albert-edge-demo/bundle \
        --source "/tmp/albert-edge-demo/wheels/$WHEEL" --runtime "$rt" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    set -e
    if [ "$rc" -eq 2 ] && [ "$board" = pi5 ] && [ "$rt" = tflite-runtime ] && grep -q 'ARMv8.2' "$log"; then
        # Refused before anything was changed, with its reason: the expected answer on a Pi 5.
        say "[$tag] refused as expected: $(grep -m1 '^install.sh:' "$log")"
        inside test ! -e /opt/albert-edge-demo || { say "[$tag] FAILED: the refusal left /opt/albert-edge-demo"; status=1; }
        RESULTS+=("$board $rt refused - - - - - $((SECONDS - began))")
        continue
    elif [ "$rc" -ne 0 ]; then
        say "[$tag] FAILED: install.sh (exit $rc)"; log_tail "$log"; status=1; r_install=FAIL
    else
        r_install=ok
    fi
    inside /opt/albert-edge-demo/venv/bin/python -c \
        'import importlib.metadata as m; print("==> installed:", *(f"{p} {m.version(p)}" for p in ("numpy", "albert-edge") ), *(f"{p} {m.version(p)}" for p in ("tflite-runtime", "ai-edge-litert", "onnxruntime") if any(d.metadata["Name"] == p for d in m.distributions())))' || true
    # "classify": the default, the adaptive classifier, whose answer names the passes it ran.
    for args in "classify" "classify --model tflite-int8" "fill-mask --model tflite-int8" "classify --model tflite-fp32"; do
        read -r cmd model_opt model <<< "$args"
        text=$SENTENCE
        [ "$cmd" = fill-mask ] && text="Create a new event ___ and run the coroutine."
        out="$WORK/answer-$board-$rt.json"
        set +e
        as_service /opt/albert-edge-demo/venv/bin/albert-edge demo "$cmd" /opt/albert-edge-demo/bundle "$text" \
            ${model_opt:+"$model_opt" "$model"} --json > "$out" 2> "$out.err"
        rc=$?
        set -e
        if [ "$rc" -eq 0 ] && [ -z "$model_opt" ] && ! has_passes "$out"; then
            say "[$tag] FAILED: demo $cmd (the default, adaptive) gave no passes: $(head -c 200 "$out")"
            status=1; result=nopasses
        elif [ "$rc" -eq 0 ]; then
            say "[$tag] demo $cmd ${model:-(default)}: $(summary "$out")"; result=ok
        else
            say "[$tag] FAILED: demo $cmd $model (exit $rc$([ "$rc" -gt 128 ] && echo ", signal $((rc - 128))"))"
            log_tail "$out.err" 8; status=1; result="exit$rc"
        fi
        if [ "$cmd" = fill-mask ]; then r_fill=$result
        elif [ "$r_classify" = - ] || [ "$r_classify" = ok ]; then r_classify=$result; fi
    done

    say "[$tag] demo serve as the service would run it, and requests from outside the root file system"
    slog="$WORK/serve-$board-$rt.log"
    rm -f "$WORK/status.json"
    exec_as_service /opt/albert-edge-demo/venv/bin/albert-edge demo serve /opt/albert-edge-demo/bundle \
        --host 127.0.0.1 --port "$PORT" > "$slog" 2>&1 &
    SERVER=$!
    up=0
    for _ in $(seq 1 150); do
        if curl -sf "http://127.0.0.1:$PORT/api/status" > "$WORK/status.json"; then up=1; break; fi
        kill -0 "$SERVER" 2>/dev/null || break
        sleep 2
    done
    if [ "$up" -eq 1 ]; then
        ok=1
        for route in classify fill-mask; do
            text=$SENTENCE
            [ "$route" = fill-mask ] && text="Create a new event [MASK] and run the coroutine."
            if curl -sS -f -X POST -H 'Content-Type: application/json' -d "{\"text\": \"$text\"}" \
                    "http://127.0.0.1:$PORT/api/$route" > "$WORK/answer.json" 2> "$WORK/curl.err"; then
                say "[$tag] POST /api/$route: $(summary "$WORK/answer.json")"
                if [ "$route" = classify ] && ! has_passes "$WORK/answer.json"; then
                    ok=0; say "[$tag] FAILED: POST /api/classify (the default, adaptive) gave no passes"
                fi
            else
                ok=0
                if kill -0 "$SERVER" 2>/dev/null; then
                    say "[$tag] FAILED: POST /api/$route: $(tail -1 "$WORK/curl.err") $(head -c 200 "$WORK/answer.json")"
                else
                    wait "$SERVER" && rc=0 || rc=$?
                    say "[$tag] FAILED: POST /api/$route: the server died (exit $rc)"; log_tail "$slog"
                    break
                fi
            fi
        done
        if [ "$ok" -eq 1 ]; then
            curl -sf -o /dev/null "http://127.0.0.1:$PORT/" || { ok=0; say "[$tag] FAILED: GET /"; }
            if curl -sf "http://127.0.0.1:$PORT/api/status" > "$WORK/status.json"; then
                say "[$tag] /api/status: $(python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); c = s["models"]["classifier"]; print(s["model"], c["runtime"], c["runtime_version"], "weights_once", c["weights_once"], "rss", s["memory"]["rss"] // 2**20, "MiB", "board", s["device"]["board"], "cpu", s["device"]["cpu_model"])' "$WORK/status.json")"
            else
                ok=0; say "[$tag] FAILED: GET /api/status"; log_tail "$slog"
            fi
        fi
        [ "$ok" -eq 1 ] && r_serve=ok || { r_serve=FAIL; status=1; }
    else
        if kill -0 "$SERVER" 2>/dev/null; then
            say "[$tag] FAILED: demo serve did not answer within 300 s"
        else
            wait "$SERVER" && rc=0 || rc=$?
            say "[$tag] FAILED: demo serve exited (exit $rc) before it answered"
        fi
        log_tail "$slog"; status=1; r_serve=FAIL
    fi
    stop_server

    say "[$tag] albert-edge profile on the int8 classifier (seq 16, 1 thread, a few calls: it must run, not be fast)"
    plog="$WORK/profile-$board-$rt.log"
    set +e
    as_service /opt/albert-edge-demo/venv/bin/albert-edge profile \
        /opt/albert-edge-demo/bundle/classifier/model.int8-dynamic.tflite \
        --seq-len 16 --threads 1 --runs 5 --min-seconds 0 --warmup 1 > "$plog" 2>&1
    rc=$?
    set -e
    if [ "$rc" -eq 0 ]; then
        say "[$tag] profile:"; sed 's/^/    /' "$plog" | tail -n 8; r_profile=ok
    else
        say "[$tag] FAILED: albert-edge profile (exit $rc)"; log_tail "$plog"; status=1; r_profile="exit$rc"
    fi

    say "[$tag] install.sh --uninstall"
    if inside env SYSTEMCTL= bash /tmp/albert-edge-demo/install.sh --uninstall; then r_uninstall=ok
    else say "[$tag] FAILED: install.sh --uninstall"; status=1; r_uninstall=FAIL; fi
    RESULTS+=("$board $rt $r_install $r_classify $r_fill $r_serve $r_profile $r_uninstall $((SECONDS - began))")
done
done

echo
printf '%-5s %-15s %-8s %-9s %-9s %-6s %-8s %-9s %s\n' board runtime install classify fill-mask serve profile uninstall seconds
for row in "${RESULTS[@]}"; do
    # shellcheck disable=SC2086
    printf '%-5s %-15s %-8s %-9s %-9s %-6s %-8s %-9s %s\n' $row
done
echo
[ "$status" -eq 0 ] && say "emulated Pi ($BOARDS): every step passed" || say "emulated Pi ($BOARDS): some steps FAILED (see above)"
exit "$status"
