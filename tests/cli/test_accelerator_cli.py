"""`profile --accelerator gpu` and `inspect --accelerator gpu` on LiteRT's GPU accelerator (Mesa's
lavapipe here): the records carry the accelerator, its placement and, on a software Vulkan device,
the warning that the timings mean nothing; inspect shows the placement as a table and in --json.

Bad input keeps the contract of tests/cli/test_bad_input.py: exit 2, exactly one line on stderr
naming the fix, nothing on stdout, nothing written. The table runs in-process through click's
CliRunner; one case runs as a real process. The GPU cases skip, with the reason, where there is no
Vulkan device; the no-Vulkan cases point Vulkan's loader at a missing driver file."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from albert_edge.cli import main
from albert_edge.runtime.accelerator import NO_VULKAN_FIX, vulkan_available
from albert_edge.runtime.accelerator import NO_CUDA, software_adapter, software_warning

from .bad_input import snapshot
from .test_bad_input import one_line

pytest.importorskip("ai_edge_litert.compiled_model")
pytestmark = pytest.mark.filterwarnings("ignore")

SCRIPT = Path(sys.executable).with_name("albert-edge")
N = 16
FAST = ["--threads", "1", "--runs", "5", "--min-seconds", "0", "--max-seconds", "0.5", "--warmup", "1"]
# the progress lines profile prints on stderr when it is not a terminal
PROGRESS = ("profiling ", "[profile ")


def _needs_vulkan() -> None:
    reason = vulkan_available()
    if reason is not None:
        pytest.skip(f"no Vulkan device for LiteRT's GPU accelerator: {reason} ({NO_VULKAN_FIX})")


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    """A tiny classifier: static.tflite ([1, N], `convert --static`), dynamic.tflite, model.onnx."""
    pytest.importorskip("torch")
    pytest.importorskip("tensorflow")
    from albert_edge.converters import onnx, tflite

    from ..converters.conftest import tiny_model

    root = tmp_path_factory.mktemp("accelerator-cli")
    model = tiny_model(head="classification")
    tflite.export(model, root / "static.tflite", seq_len=N, static=True)
    tflite.export(model, root / "dynamic.tflite", seq_len=N, layers="unrolled")
    onnx.export(model, root / "model.onnx", seq_len=N)
    return root


def _invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


# ------------------------------------------------------------------------------------ the GPU
def test_profile_records_the_accelerator_its_placement_and_the_warning(world):
    _needs_vulkan()
    result = _invoke("profile", str(world / "static.tflite"), "--accelerator", "gpu", "--seq-len", str(N), *FAST,
                     "--json")
    assert result.exit_code == 0, result.output
    (record,) = json.loads(result.stdout)
    assert record["accelerator"] == "gpu" and record["gpu_precision"] == "fp32" and record["provider"] == "gpu"
    assert record["runtime"] == "ai_edge_litert" and record["seq_len"] == N and record["latency"]["count"] >= 5
    placement = record["placement"]
    assert placement["all_on_gpu"] and placement["gpu_ops"] == placement["ops"] > 0 and placement["cpu_ops"] == 0
    assert placement["fallbacks"] == [] and placement["enforce_f32"] and placement["adapter"]
    warning = software_warning(placement["adapter"])
    if software_adapter(placement["adapter"]):  # lavapipe: the timing is flagged, not trusted
        assert record["warnings"][0] == warning and "mean nothing" in warning
        assert record["latency"]["quality"] == "unusable" and record["latency"]["quality_reasons"][0] == warning
    else:
        assert not any("software Vulkan device" in w for w in record["warnings"])


def test_profile_table_shows_the_accelerator(world):
    _needs_vulkan()
    result = _invoke("profile", str(world / "static.tflite"), "--accelerator", "gpu", "--gpu-precision", "fp16",
                     "--seq-len", str(N), *FAST)
    assert result.exit_code == 0, result.output
    assert "litert:gpu fp16" in result.stdout
    assert "GPU (fp16) static.tflite: " in result.stdout and " operators on the GPU, 0 on the CPU" in result.stdout


def test_a_cpu_profile_says_so(world):
    result = _invoke("profile", str(world / "dynamic.tflite"), "--seq-len", "8", *FAST, "--json")
    assert result.exit_code == 0, result.output
    (record,) = json.loads(result.stdout)
    assert record["accelerator"] == "cpu" and record["gpu_precision"] is None and record["placement"] is None


def test_inspect_shows_the_placement_as_a_table_and_in_json(world):
    _needs_vulkan()
    result = _invoke("inspect", str(world / "static.tflite"), "--accelerator", "gpu")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "GPU placement (LiteRT's GPU accelerator, float32 arithmetic)" in out
    for row in ("operators", "on the GPU", "on the CPU", "refused", "adapter", "runtime"):
        assert row in out
    data = json.loads(_invoke("inspect", str(world / "static.tflite"), "--accelerator", "gpu", "--json").stdout)
    gpu = data["gpu"]
    assert gpu["all_on_gpu"] and gpu["ops"] == gpu["gpu_ops"] > 0 and gpu["cpu_ops"] == 0 and not gpu["refused"]
    assert gpu["fallbacks"] == [] and gpu["adapter"] and gpu["runtime"].startswith("ai-edge-litert ")
    assert "gpu" not in json.loads(_invoke("inspect", str(world / "static.tflite"), "--json").stdout)


def test_inspect_shows_what_a_dynamic_file_leaves_on_the_cpu(world):
    """A dynamic file's shapes are worked out when LiteRT prepares it (so CompiledModel follows every
    resize); the GPU accelerator then takes some of its operators and leaves the shape arithmetic on the
    CPU, which inspect lists, pointing to the static file it takes whole."""
    _needs_vulkan()
    result = _invoke("inspect", str(world / "dynamic.tflite"), "--accelerator", "gpu")
    assert result.exit_code == 0, result.output
    assert "`convert --static` writes a file the accelerator takes whole" in " ".join(result.stdout.split())
    data = json.loads(_invoke("inspect", str(world / "dynamic.tflite"), "--accelerator", "gpu", "--json").stdout)
    gpu = data["gpu"]
    assert not gpu["all_on_gpu"] and gpu["cpu_ops"] > 0 and gpu["gpu_ops"] + gpu["cpu_ops"] == gpu["ops"]
    assert "SHAPE" in {f["op"] for f in gpu["fallbacks"]}


# -------------------------------------------------------------------------------- bad input
PROFILE = ["profile", "--seq-len", str(N), *FAST, "--append", "{scratch}/records.jsonl"]
CASES = {
    "dynamic file": (["{w}/dynamic.tflite", "--accelerator", "gpu"], "the GPU accelerator takes static-shape files "
                     "only: convert with a fixed length (`albert-edge convert --static`"),
    "longer than N": (["{w}/static.tflite", "--accelerator", "gpu", "--seq-len", "32"],
                      "--seq-len 32: this file takes 16 tokens ([1, 16] inputs), not 32: profile it at --seq-len 16, "
                      "or convert with --seq-len 32 --static"),
    "shorter than N": (["{w}/static.tflite", "--seq-len", "8"], "not 8: profile it at --seq-len 16, or convert with "
                       "--seq-len 8 --static"),
    "two rows": (["{w}/static.tflite", "--accelerator", "gpu", "--batch", "2"],
                 "--batch 2: this file takes one row ([1, 16] inputs): profile it at --batch 1"),
    "real text": (["{w}/static.tflite", "--text", "builtin", "--tokenizer", "{w}"],
                  "--text feeds sentences at their own lengths, and this file takes 16 tokens"),
    "as an app": (["{w}/static.tflite", "--accelerator", "gpu", "--as-app"], "--accelerator gpu: --as-app opens"),
    "mediapipe": (["{w}/static.tflite", "--accelerator", "gpu", "--mediapipe"], "--accelerator gpu: --mediapipe"),
    "ops": (["{w}/static.tflite", "--accelerator", "gpu", "--ops"], "--accelerator gpu: --ops breaks down CPU runs"),
    "delegate": (["{w}/static.tflite", "--accelerator", "gpu", "--delegate", "none"], "--delegate is a CPU setting"),
    "estimate": (["{w}/static.tflite", "--accelerator", "gpu", "--estimate", "pi4"],
                 "--accelerator gpu: --estimate scales CPU rooflines"),
    "onnx without CUDA": (["{w}/model.onnx", "--accelerator", "gpu"], NO_CUDA),
    "onnx on the GPU path": (["{w}/model.onnx", "--accelerator", "gpu"], "the GPU path of phones and Pis here is "
                             "LiteRT's, for .tflite files"),
}


def _fill(args: list[str], world: Path, scratch: Path) -> list[str]:
    return [a.format(w=world, scratch=scratch) for a in args]


def _case(world: Path, scratch: Path, args: list[str], message: str) -> str:
    before = snapshot(scratch, world)
    line = one_line(_invoke(*_fill(args, world, scratch)), 2, message)
    assert snapshot(scratch, world) == before, "an output changed or was left behind"
    return line


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_profile_bad_input_is_one_line(world, tmp_path, case):
    args, message = CASES[case]
    if case.startswith("onnx "):
        import onnxruntime

        if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
            pytest.skip("this onnxruntime build has CUDA")
    line = _case(world, tmp_path, [*PROFILE, *args], message)
    assert line.startswith("Error: ")


def test_static_file_without_seq_len_names_the_option_not_a_value(world, tmp_path):
    """Without --seq-len the message says so, and names no length the user did not type."""
    line = _case(world, tmp_path, ["profile", "{w}/static.tflite", *FAST, "--append", "{scratch}/records.jsonl"],
                 f"this file takes {N} tokens ([1, {N}] inputs), and without --seq-len profile measures 16,32,64,128: "
                 f"give --seq-len {N}")
    assert not re.search(r"--seq-len \d+:", line), line


def test_inspect_of_another_format_on_the_gpu_is_one_line(world, tmp_path):
    _case(world, tmp_path, ["inspect", "{w}/model.onnx", "--accelerator", "gpu"],
          "--accelerator gpu reports LiteRT's GPU accelerator on a .tflite, and this is a .onnx file")


@pytest.mark.parametrize("command", ["profile", "inspect"])
def test_no_vulkan_device_is_one_line(world, tmp_path, monkeypatch, command):
    nothing = str(tmp_path / "no_driver.json")
    monkeypatch.setenv("VK_ICD_FILENAMES", nothing)
    monkeypatch.setenv("VK_DRIVER_FILES", nothing)
    args = [*PROFILE, "{w}/static.tflite", "--accelerator", "gpu"] if command == "profile" else \
        ["inspect", "{w}/static.tflite", "--accelerator", "gpu"]
    line = _case(world, tmp_path / "scratch", args, "Error: no Vulkan device (")
    assert line.endswith(f"): {NO_VULKAN_FIX}")


def test_a_real_process_prints_one_line_and_exits_2(world, tmp_path):
    before = snapshot(world, tmp_path)
    done = subprocess.run([str(SCRIPT), "profile", str(world / "dynamic.tflite"), "--accelerator", "gpu",
                           "--seq-len", str(N), "--append", str(tmp_path / "records.jsonl")],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "NO_COLOR": "1"})
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith(PROGRESS)]
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "convert --static" in lines[0], done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert snapshot(world, tmp_path) == before
