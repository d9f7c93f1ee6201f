"""The Pi install: the systemd unit passes `systemd-analyze verify` as install.sh renders it,
and install.sh refuses bad input with one line and exit 2 before changing anything. (The full
install runs in the emulated Pi, demo_app/emulate_pi.sh, not here.)"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import albert_edge.demo

DEMO = Path(albert_edge.demo.__file__).parent
INSTALL = DEMO / "install.sh"
ANALYZE = shutil.which("systemd-analyze") or ("/usr/bin/systemd-analyze" if Path("/usr/bin/systemd-analyze").exists()
                                              else None)


def install(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(INSTALL), *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def test_files_ship_with_the_package():
    for name in ("install.sh", "albert-edge-demo.service", "README.md", "static/index.html"):
        assert (DEMO / name).is_file(), name
    assert subprocess.run(["bash", "-n", str(INSTALL)]).returncode == 0


@pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed (apt install systemd)")
def test_unit_passes_systemd_analyze_verify(tmp_path):
    prefix = tmp_path / "opt"
    (prefix / "venv" / "bin").mkdir(parents=True)
    exe = prefix / "venv" / "bin" / "albert-edge"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    rendered = install("--print-unit", "--port", "8123", env={"PREFIX": str(prefix), "SERVICE_USER": "albert-demo"})
    assert rendered.returncode == 0, rendered.stderr
    unit = tmp_path / "albert-edge-demo.service"
    unit.write_text(rendered.stdout)
    text = rendered.stdout
    assert f"ExecStart={exe} demo serve {prefix}/bundle --host 127.0.0.1 --port 8123" in text
    for setting in ("User=albert-demo", "Restart=on-failure", "MemoryMax=", "NoNewPrivileges=yes",
                    "ProtectSystem=strict", "WantedBy=multi-user.target"):
        assert setting in text
    proc = subprocess.run([ANALYZE, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    own = [line for line in proc.stderr.splitlines() if unit.name in line]
    assert not own, own  # no unknown key, no ignored setting in our unit

    # The check has teeth: a relative ExecStart fails it.
    bad = tmp_path / "bad.service"
    bad.write_text(text.replace(f"ExecStart={prefix}", "ExecStart=opt"))
    assert subprocess.run([ANALYZE, "verify", str(bad)], capture_output=True, text=True).returncode != 0


@pytest.mark.parametrize("args, message", [
    (["--bundle", "/nonexistent/bundle"], "is not a demo bundle"),
    ([], "--bundle DIR is required"),
    (["--port", "70000"], "--port must be"),
    (["--host", "a;b"], "--host must be"),
    (["--frobnicate"], "unknown option"),
])
def test_bad_input_changes_nothing(tmp_path, args, message):
    if os.geteuid() != 0 and "--port" not in args and "--host" not in args and "--frobnicate" not in args:
        pytest.skip("the bundle checks come after the root check")
    proc = install(*args, env={"PREFIX": str(tmp_path / "prefix"), "UNIT_DIR": str(tmp_path / "units"),
                               "SYSTEMCTL": ""})
    assert proc.returncode == 2 and message in proc.stderr
    assert not (tmp_path / "prefix").exists() and not (tmp_path / "units").exists()


def test_runtime_names_are_checked(tiny_bundle, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root: install.sh checks the runtimes after the root check")
    proc = install("--bundle", str(tiny_bundle), "--runtime", "tensorflow",
                   env={"PREFIX": str(tmp_path / "prefix"), "UNIT_DIR": str(tmp_path / "units"), "SYSTEMCTL": ""})
    assert proc.returncode == 2 and "unknown runtime 'tensorflow'" in proc.stderr
    assert not (tmp_path / "prefix").exists()
