#!/usr/bin/env bash
# CI: Mesa's lavapipe, a Vulkan implementation on the CPU, for the tests that run LiteRT's GPU
# accelerator (libLiteRtWebGpuAccelerator.so of ai-edge-litert: WebGPU over Vulkan on Linux);
# tests/runtime/test_gpu_accelerator.py skips, saying why, where there is no Vulkan device.
#
# The accelerator takes Mesa 25 ("Selected adapter: llvmpipe ... backend=Vulkan") and refuses
# Debian 12's own Mesa 22.3 ("No adapters found"), so on Debian 12 (bookworm) Mesa comes from
# bookworm-backports, added as an apt source on the mirror this machine already uses for bookworm.
# Elsewhere the distribution's own mesa-vulkan-drivers is installed.
# Root with apt-get only; otherwise it says so and does nothing. Running it again changes nothing.
set -euo pipefail

packages=(mesa-vulkan-drivers libvulkan1)
backports_list=/etc/apt/sources.list.d/albert-edge-backports.sources

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "not root or no apt-get: Mesa's lavapipe is not installed; the GPU accelerator tests skip"
    exit 0
fi

# shellcheck source=/dev/null
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")

# bookworm_mirror: the Debian mirror (and its keyring) that apt reads bookworm from here, deb822
# or one-line sources; deb.debian.org and Debian's archive keyring when none says.
bookworm_mirror() {
    local found
    # One deb822 stanza at a time (a blank line or a new file ends one).
    found=$(awk 'function end() { if (suite && !done) { print uri, key; done = 1 } uri = key = ""; suite = 0 }
                 FNR == 1 || /^[[:space:]]*$/ { end() }
                 /^URIs:/ { uri = $2 } /^Signed-By:/ { key = $2 }
                 /^Suites:/ && / bookworm( |$)/ { suite = 1 }
                 END { end() }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
    if [ -z "$found" ] && [ -f /etc/apt/sources.list ]; then
        found=$(awk '$1 == "deb" && $3 == "bookworm" { print $2; exit }' /etc/apt/sources.list)
    fi
    echo "${found:-http://deb.debian.org/debian}"
}

has_backports() {
    grep -rqsE '(^|[[:space:]])bookworm-backports([[:space:]]|$)' /etc/apt/sources.list /etc/apt/sources.list.d/
}

# installed_mesa: the installed mesa-vulkan-drivers version, empty when none.
installed_mesa() {
    # Nothing (not an error) when the package is unknown to dpkg: this script runs under pipefail.
    { dpkg-query -W -f '${Status} ${Version}\n' mesa-vulkan-drivers 2>/dev/null || true; } \
        | awk '$3 == "installed" { print $4 }'
}

target=()
if [ "$codename" = bookworm ]; then
    target=(-t bookworm-backports)
    if ! has_backports; then
        read -r uri key <<<"$(bookworm_mirror)"
        echo "+ add bookworm-backports from $uri ($backports_list)"
        {
            echo "Types: deb"
            echo "URIs: $uri"
            echo "Suites: bookworm-backports"
            echo "Components: main"
            echo "Signed-By: ${key:-/usr/share/keyrings/debian-archive-keyring.gpg}"
        } >"$backports_list"
    fi
fi

version=$(installed_mesa)
if [ -n "$version" ] && { [ "$codename" != bookworm ] || [[ $version == *bpo12* ]]; }; then
    echo "Mesa's lavapipe is installed already: mesa-vulkan-drivers $version"
else
    echo "+ apt-get update && apt-get install ${target[*]} ${packages[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${target[@]}" "${packages[@]}" >/dev/null
fi

echo "installed:"
dpkg-query -W -f '  ${Package} ${Version}\n' "${packages[@]}"
if ! ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1; then
    echo "mesa-vulkan-drivers installed no lavapipe driver (/usr/share/vulkan/icd.d/lvp_icd*.json)" >&2
    exit 1
fi
echo "  lavapipe driver: $(ls /usr/share/vulkan/icd.d/lvp_icd*.json)"
