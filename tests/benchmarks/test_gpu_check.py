"""benchmarks/gpu_check.sh and gpu_check.py up to the point where they need a GPU: the dry run
(the CPU onnxruntime, the CPU provider) builds the tiny shape's three files, compares each with
PyTorch, profiles the static ones and writes the result file; without a CUDA provider or an NVIDIA
GPU each says so in one line and exits 3."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from albert_edge.profile.record import records_problem

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
SHELL = ROOT / "benchmarks" / "gpu_check.sh"
N = 32


def _module(name: str = "gpu_check"):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """The shell script on this venv (nothing installed), as a person runs it without a GPU."""
    work = tmp_path_factory.mktemp("gpu-check")
    out = work / "result.json"
    args = ["--dry-run", "--no-install", "--venv", sys.prefix, "--work", str(work),
            "--", "--shapes", "tiny", "--seq-len", str(N), "--profile-seconds", "0.3", "--out", str(out)]
    done = subprocess.run(["bash", str(SHELL), *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return work, out, json.loads(out.read_text()), done.stdout


def test_the_dry_run_writes_a_result_of_every_file_and_provider(dry_run):
    work, out, result, stdout = dry_run
    assert result["benchmark"] == "gpu_check" and result["dry_run"] is True and result["ok"] is True
    assert {"date", "commit", "machine", "versions", "seconds"} <= set(result)
    assert result["versions"]["onnxruntime"] and result["versions"]["torch"]
    assert result["providers"] == {"cpu": {"available": True}}
    assert "setup (venv, installs)" in result["seconds"] and result["seconds"]["total"] > 0
    files = {f["kind"]: f for f in result["files"]}
    assert list(files) == ["static-fp32", "static-fp16", "dynamic-fp32"]
    assert [files[k]["static_len"] for k in files] == [N, N, None]
    assert [files[k]["precision"] for k in files] == ["fp32", "fp16", "fp32"]
    assert all(f["stored_bytes"] == f["unique_bytes"] for f in files.values())  # weights once
    assert all("path" not in f for f in files.values())  # no folder of the machine it ran on
    checks = {c["kind"]: c for c in result["checks"]}
    assert list(checks) == list(files)
    for kind, check in checks.items():
        assert check["ok"] and check["problems"] == []
        assert check["providers_used"] == ["CPUExecutionProvider"]
        assert check["nodes"]["cpu"] > 10 and check["cpu_fallback_nodes"] == 0
        assert set(check["max_abs_diff"]) == {"last_hidden_state", "pooler_output"}
        limit = 1e-4 if files[kind]["precision"] == "fp32" else 5e-2
        assert max(check["max_abs_diff"].values()) < limit
        assert min(check["cosine"].values()) > 0.999
    # profile records of the static files only, their intervals carried over
    assert [(p["kind"], p["provider"], p["ok"]) for p in result["profiles"]] == [
        ("static-fp32", "cpu", True), ("static-fp16", "cpu", True)]
    for p in result["profiles"]:
        assert p["record_provider"] == "CPUExecutionProvider"
        assert p["p50_ci"][0] <= p["p50_ms"] <= p["p50_ci"][1] and p["p90_ms"] >= p["p50_ms"]
    records = [json.loads(line) for line in (out.parent / result["profile_records"]).read_text().splitlines()]
    assert records_problem(records) is None and len(records) == 2
    assert all(not Path(r["file"]).is_absolute() for r in records)
    # the printed table: a row per check
    assert [line.split()[:3] for line in stdout.splitlines()[1:4]] == [["tiny", k, "cpu"] for k in files]


def test_an_output_far_from_pytorch_fails_its_check(dry_run, tmp_path):
    """The comparison is real: the same file against a reference that is off fails, saying why."""
    work = dry_run[0]
    steps = _module("gpu_check_steps")
    reference = dict(np.load(work / "files" / "tiny" / "reference.npz"))
    reference["out:last_hidden_state"] = -reference["out:last_hidden_state"]
    np.savez(tmp_path / "reference.npz", **reference)
    row = steps.check_step({"path": str(work / "files" / "tiny" / "static" / "model.onnx"), "provider": "cpu",
                            "precision": "fp32", "file": "static/model.onnx",
                            "reference": str(tmp_path / "reference.npz"), "work": str(tmp_path)})
    assert row["ok"] is False
    assert row["cosine"]["last_hidden_state"] < 0 and row["cosine"]["pooler_output"] > 0.999
    assert [p.split(":")[0] for p in row["problems"]] == ["cosine to PyTorch below 0.9999"]


def test_without_a_cuda_provider_one_line_and_exit_3(tmp_path):
    """The CPU onnxruntime asked for CUDA: one line naming the fix, exit 3, nothing built or written."""
    done = subprocess.run([sys.executable, str(SCRIPT), "--shapes", "tiny", "--work", str(tmp_path),
                           "--out", str(tmp_path / "result.json")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 3
    assert done.stdout == "" and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "no usable CUDA execution provider" in done.stderr and "onnxruntime-gpu" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "result.json").exists() and not (tmp_path / "tiny").exists()


def test_the_shell_script_without_an_nvidia_gpu(tmp_path):
    """No nvidia-smi (and no Jetson): one line, exit 3, before any venv is made."""
    if Path("/etc/nv_tegra_release").exists():
        pytest.skip("a Jetson: its GPU needs no nvidia-smi")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("dirname", "sed", "head", "uname"):  # what the script calls before the GPU check
        (bin_dir / tool).symlink_to(subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip())
    env = {**os.environ, "PATH": str(bin_dir)}
    done = subprocess.run(["/bin/bash", str(SHELL), "--work", str(tmp_path / "w")], capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode == 3
    assert done.stderr.strip().splitlines() == [
        "gpu_check.sh: no NVIDIA GPU here: nvidia-smi not found (--dry-run runs the same steps on the CPU)"]
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("args, code, said", [
    (["--bogus"], 2, "unknown option --bogus"),
    (["--dry-run", "--no-install", "--venv", "/nonexistent"], 2, "no Python at /nonexistent/bin/python"),
])
def test_the_shell_script_refuses_bad_options_in_one_line(args, code, said):
    done = subprocess.run(["bash", str(SHELL), *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == code and said in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_the_python_part_refuses_cpu_beside_a_gpu_provider():
    done = subprocess.run([sys.executable, str(SCRIPT), "--providers", "cpu,cuda"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and "cpu alone" in done.stderr
