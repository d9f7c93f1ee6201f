# Sourced by the CI scripts that test the device side in an environment of their own: the
# settings they share. Run from the checkout's root.
#
# Python never puts the current directory (this checkout) on sys.path: `python -m`/`-c` here and
# in the tests' child processes import the installed albert_edge, not the source tree.
export PYTHONSAFEPATH=1

# The build environment (torch, tensorflow, ai-edge-litert) that makes the files to test.
build_python=${PYTHON:-}
if [ -z "$build_python" ]; then
    if [ -x .venv/bin/python ]; then build_python=.venv/bin/python; else build_python=python; fi
fi
python311=${PYTHON311:-python3.11}
# albert-edge as it is installed: the built wheel, or this checkout built when run by hand.
wheel=${ALBERT_EDGE_WHEEL:-.}

# python311_venv DIR [--clear]: DIR as a Python 3.11 virtual environment, made when it is missing
# (made afresh with --clear).
python311_venv() {
    if [ "${2:-}" = --clear ] || [ ! -x "$1/bin/python" ]; then
        echo "+ $python311 -m venv ${2:+$2 }$1"
        "$python311" -m venv ${2:+"$2"} "$1"
    fi
    "$1/bin/python" -c 'import sys; assert sys.version_info[:2] == (3, 11), f"{sys.executable} is not Python 3.11"'
}

# quietly LOG COMMAND...: run COMMAND with its standard error in LOG (logs of TensorFlow, training,
# conversion), shown only when it fails.
quietly() {
    local log=$1
    shift
    echo "+ $*"
    if ! "$@" 2>"$log"; then
        cat "$log" >&2
        return 1
    fi
}

# pip_install VENV ARGS...: `pip install -q ARGS` in VENV, the command echoed first. pip's warnings
# about find-links locations that a machine's pip configuration names but that do not exist are
# left out of its output, so that a failure's own message is what shows.
pip_install() {
    local venv=$1
    shift
    echo "+ pip install $*"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "$@" \
        2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2)
}

# install_wheel VENV: albert-edge itself ($wheel) into VENV, without its dependencies.
# --force-reinstall: the environment is kept between runs, and a wheel of the same version would
# otherwise leave the earlier build in place.
install_wheel() {
    pip_install "$1" --no-deps --force-reinstall "$wheel"
}

# scratch_files NAME: $files as a new temporary folder for the files a stage makes (its log beside
# it, $files.log), both removed when the script exits.
scratch_files() {
    files=$(mktemp -d "${TMPDIR:-/tmp}/albert-edge-$1.XXXXXX")
    trap 'rm -rf "$files" "$files.log"' EXIT
}
