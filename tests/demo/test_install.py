"""The Pi install: the systemd unit passes `systemd-analyze verify` as install.sh renders it,
install.sh refuses bad input with one line and exit 2 before changing anything, and it picks the
interpreters by board (read from CPUINFO): tflite-runtime 2.14 is refused on a Raspberry Pi 5 /
ARMv8.2 CPU. (The full install runs in the emulated Pi, demo_app/emulate_pi.sh, not here.)"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import albert_edge.demo

DEMO = Path(albert_edge.demo.__file__).parent
INSTALL = DEMO / "install.sh"
EMULATE = DEMO / "emulate_pi.sh"
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


def cpuinfo(features: str | None, part: str, model: str | None) -> str:
    """An arm64 /proc/cpuinfo of four cores (no Features line when features is None)."""
    core = "".join(
        f"processor\t: {n}\nBogoMIPS\t: 108.00\n" + (f"Features\t: {features}\n" if features is not None else "")
        + f"CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: {part}\nCPU revision\t: 1\n\n"
        for n in range(4))
    return core + (f"Revision\t: c04170\nSerial\t\t: 100000000000000a\nModel\t\t: {model}\n" if model else "")


PI4 = cpuinfo("fp asimd evtstrm crc32 cpuid", "0xd08", "Raspberry Pi 4 Model B Rev 1.4")
PI5 = cpuinfo("fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp",
              "0xd0b", "Raspberry Pi 5 Model B Rev 1.0")
PI5_MODEL_ONLY = cpuinfo(None, "0xd0b", "Raspberry Pi 5 Model B Rev 1.0")  # a kernel that lists no Features
NEOVERSE_N1 = cpuinfo("fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop "
                      "asimddp ssbs", "0xd0c", None)  # an ARMv8.2 server, no Raspberry Pi model string
X86 = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R)\nflags\t\t: fpu sse sse2 avx2 avx512_vnni\n\n"


@pytest.fixture
def board(tmp_path):
    """install.sh's environment with a fake /proc/cpuinfo and a fake bundle; nothing of it is real."""
    if os.geteuid() != 0:
        pytest.skip("needs root: install.sh checks the board after the root check")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "bundle.json").write_text("{}")
    (bundle / "spiece.model").write_bytes(b"")
    # Should install.sh go past its checks, it meets these first and stops: no user is created here.
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name in ("useradd", "userdel", "runuser"):
        (stubs / name).write_text("#!/bin/sh\necho \"$0 must not run in this test\" >&2\nexit 97\n")
        (stubs / name).chmod(0o755)

    def run(text: str, *args: str) -> subprocess.CompletedProcess:
        info = tmp_path / "cpuinfo"
        info.write_text(text)
        return install("--bundle", str(bundle), *args,
                       env={"CPUINFO": str(info), "PREFIX": str(tmp_path / "prefix"),
                            "UNIT_DIR": str(tmp_path / "units"), "SYSTEMCTL": "",
                            "SERVICE_USER": "albert-edge-test-nobody",
                            "PATH": f"{stubs}:{os.environ.get('PATH', '/usr/bin:/bin')}"})
    yield run
    assert not (tmp_path / "prefix").exists() and not (tmp_path / "units").exists()


@pytest.mark.parametrize("text", [PI5, PI5_MODEL_ONLY, NEOVERSE_N1], ids=["pi5", "pi5-model-only", "neoverse-n1"])
@pytest.mark.parametrize("runtime", ["tflite-runtime", "litert,tflite_runtime,onnxruntime"])
def test_armv82_board_refuses_tflite_runtime(board, text, runtime):
    """tflite-runtime 2.14 dies with SIGSEGV on the int8 files on a dot-product CPU (emulated Pi 5,
    demo_app/README.md): install.sh says so in one line and stops before changing anything."""
    proc = board(text, "--runtime", runtime)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("install.sh: note:")]
    assert len(lines) == 1, lines
    assert "tflite-runtime 2.14" in lines[0] and "--runtime litert" in lines[0]
    assert ("asimddp" in lines[0]) == (text is not PI5_MODEL_ONLY)
    assert "creating" not in proc.stdout


@pytest.mark.parametrize("text, runtime, wanted, unwanted", [
    (PI5, None, ["ai-edge-litert", "onnxruntime"], ["tflite-runtime"]),       # the default on a Pi 5
    (PI5, "litert", ["ai-edge-litert"], ["tflite-runtime", "onnxruntime"]),
    (PI4, "tflite-runtime", ["tflite-runtime==2.14.*", "numpy<2"], ["ai-edge-litert"]),  # a Pi 4 keeps it
    (PI4, None, ["ai-edge-litert", "onnxruntime"], ["tflite-runtime"]),
    (X86, "tflite-runtime", ["tflite-runtime==2.14.*"], []),                 # no Features line at all
], ids=["pi5-default", "pi5-litert", "pi4-tflite-runtime", "pi4-default", "x86-tflite-runtime"])
def test_runtime_choice_by_board(board, text, runtime, wanted, unwanted):
    proc = board(text, "--dry-run", *(["--runtime", runtime] if runtime else []))
    assert proc.returncode == 0, proc.stderr
    plan = [line for line in proc.stdout.splitlines() if "dry run: would install" in line]
    assert len(plan) == 1, proc.stdout
    for name in wanted:
        assert name in plan[0]
    for name in unwanted:
        assert name not in plan[0]
    assert ("ARMv8.2" in proc.stdout) == (text is PI5 and "litert" in (runtime or "litert"))


def test_emulate_pi_usage():
    """emulate_pi.sh explains itself and refuses a board it does not emulate, before needing root."""
    help_ = subprocess.run(["bash", str(EMULATE), "--help"], capture_output=True, text=True, timeout=30)
    assert help_.returncode == 0 and "--board pi4|pi5|all" in help_.stdout and "BUNDLE_DIR" in help_.stdout
    for args, message in ((["--board", "pi6", "bundle"], "--board must be pi4, pi5 or all"),
                          ([], "BUNDLE_DIR is required"), (["--frobnicate"], "unknown option")):
        proc = subprocess.run(["bash", str(EMULATE), *args], capture_output=True, text=True, timeout=30)
        assert proc.returncode == 2 and message in proc.stderr, (args, proc.stderr)
    assert subprocess.run(["bash", "-n", str(EMULATE)]).returncode == 0


def test_the_token_lives_in_an_environment_file_and_no_auth_is_on_the_command_line(tmp_path):
    env = {"PREFIX": str(tmp_path / "opt"), "SERVICE_USER": "albert-demo"}
    text = install("--print-unit", "--host", "0.0.0.0", env=env).stdout
    assert f"EnvironmentFile=-{tmp_path / 'opt'}/demo.env" in text  # the token never in the world-readable unit
    assert "--no-auth" not in text
    text = install("--print-unit", "--host", "0.0.0.0", "--no-auth", env=env).stdout
    assert "--host 0.0.0.0 --port 8000 --no-auth\n" in text


@pytest.mark.parametrize("args, words", [
    (("--token", "short"), "--token must be 16 to 256"),
    (("--token", "a" * 20 + "$(id)"), "--token must be 16 to 256"),
    (("--token", "a" * 20, "--no-auth"), "not both"),
])
def test_a_bad_token_is_refused_before_anything_changes(tmp_path, args, words):
    proc = install("--bundle", str(tmp_path), *args, env={"PREFIX": str(tmp_path / "opt")})
    assert proc.returncode == 2 and words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "opt").exists()
