"""`albert-edge profile --remote` against a real OpenSSH server on 127.0.0.1 (the "device" is this
machine, reached as the current user with a throwaway key). Only 127.0.0.1 is ever contacted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from albert_edge.cli import main
from albert_edge.errors import install_line

from .conftest import CONFIG, FAST
from .sshd import MISSING, LoopbackSshd, free_port

pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")

SCRIPT = Path(sys.executable).with_name("albert-edge")


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    with LoopbackSshd(tmp_path_factory.mktemp("sshd")) as server:
        yield server


def remote_args(server, cache: Path, python: str = sys.executable, target: str | None = None) -> list[str]:
    return ["--remote", target or server.target, "--ssh-config", str(server.client_config),
            "--remote-dir", str(cache), "--remote-python", python]


def run(*args) -> object:
    return CliRunner().invoke(main, ["profile", *map(str, args)])


def one_line_error(result, *texts: str) -> str:
    """Exit 2 and, besides the progress lines a log gets ("remote HOST: ..."), one line."""
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("remote ")]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for text in texts:
        assert text in lines[0], lines[0]
    return lines[0]


def test_profiles_on_the_device_and_reuses_its_cache(sshd, onnx_file, tflite_file, tmp_path):
    cache = tmp_path / "cache"
    args = [onnx_file, tflite_file, *FAST, "--seq-len", "8", "--json", *remote_args(sshd, cache)]
    result = run(*args)
    assert result.exit_code == 0, result.output
    records = json.loads(result.stdout)
    assert [(r["file"], r["format"], r["seq_len"]) for r in records] == [
        (str(onnx_file), "onnx", 8), (str(tflite_file), "tflite", 8)]
    for r in records:
        assert r["host"] == sshd.target and r["estimated"] is False and r["scheme"] == "fp32"
        assert r["latency"]["p50"] > 0 and r["memory"]["peak_after_timed"] > 0
        # the device ran its own copy: content-addressed, with the manifest beside it
        held = cache / r["sha256"] / r["file_name"]
        assert held.read_bytes() == Path(r["file"]).read_bytes()
        assert (held.parent / "manifest.json").is_file()

    before = {p: p.stat().st_mtime_ns for p in cache.glob("*/model.*")}
    again = run(*args)
    assert again.exit_code == 0, again.output
    assert {p: p.stat().st_mtime_ns for p in cache.glob("*/model.*")} == before  # not copied twice
    assert len(json.loads(again.stdout)) == 2


def test_real_text_sends_the_tokenizer_and_text(sshd, onnx_file, spiece_model, tmp_path):
    text = tmp_path / "sentences.txt"
    text.write_text("the cat sat on the mat.\nshared weights are stored once.\n")
    result = run(onnx_file, *FAST, "--no-fixed", "--text", text, "--tokenizer", spiece_model,
                 "--max-sentences", "2", "--json", *remote_args(sshd, tmp_path / "cache"))
    assert result.exit_code == 0, result.output
    (record,) = json.loads(result.stdout)
    assert record["input_mode"] == "real-text" and record["host"] == sshd.target
    assert record["text"]["sentences"] == 2
    assert {p.name for p in (tmp_path / "cache").glob("*/*")} >= {"sentences.txt", spiece_model.name, "model.onnx"}


def test_hosts_run_in_parallel_and_a_failed_one_is_named(sshd, onnx_file, tmp_path):
    closed = f"127.0.0.1:{free_port()}"
    same_machine = f"127.0.0.1:{sshd.port}"  # the same device under a second name
    result = run(onnx_file, *FAST, "--seq-len", "8", "--json", *remote_args(sshd, tmp_path / "cache"),
                 "--remote", same_machine, "--remote", closed)
    line = one_line_error(result, closed, "cannot connect")
    assert sshd.target not in line and same_machine + ":" not in line.replace(closed, "")
    hosts = [r["host"] for r in json.loads(result.stdout)]
    assert hosts == [sshd.target, same_machine]  # the hosts that worked are still reported


def test_unreachable_host_is_one_line(sshd, onnx_file, tmp_path):
    target = f"{sshd.user}@127.0.0.1:{free_port()}"
    one_line_error(run(onnx_file, *FAST, *remote_args(sshd, tmp_path / "c", target=target)),
                   target, "Connection refused")


def test_failed_login_is_one_line(sshd, onnx_file, tmp_path):
    stranger = tmp_path / "stranger_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    config = tmp_path / "ssh_config"
    config.write_text(sshd.client_config.read_text().replace(str(sshd.dir / "client_key"), str(stranger)))
    result = run(onnx_file, *FAST, "--remote", sshd.target, "--ssh-config", config, "--remote-python", sys.executable)
    one_line_error(result, sshd.target, "Permission denied")


def test_device_without_albert_edge_says_what_to_install(sshd, onnx_file, tflite_file, tmp_path):
    bare = "/usr/bin/python3"
    probe = subprocess.run([bare, "-c", "import albert_edge"], capture_output=True, cwd="/") if Path(bare).is_file() else None
    if probe is None or probe.returncode == 0:
        pytest.skip(f"needs a Python without albert-edge at {bare}")
    result = run(onnx_file, tflite_file, *FAST, *remote_args(sshd, tmp_path / "c", python=bare))
    one_line_error(result, sshd.target, "albert-edge is not installed", install_line("onnx", "tflite"))
    missing = run(onnx_file, *FAST, *remote_args(sshd, tmp_path / "c", python="/nonexistent/python3"))
    one_line_error(missing, "/nonexistent/python3", "--remote-python")


def test_bad_host_spec_and_missing_ssh_config(onnx_file, tmp_path):
    one_line_error(run(onnx_file, "--remote", "-oProxyCommand=x"), "expected user@host")
    one_line_error(run(onnx_file, "--remote", "me@127.0.0.1", "--ssh-config", tmp_path / "nope"), "--ssh-config")


def _processes_mentioning(*texts: str) -> list[int]:
    """Processes whose command line holds every one of ``texts``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if all(t.encode() in cmdline for t in texts):
                found.append(int(entry.name))
    return found


def test_ctrl_c_stops_ssh_and_the_device_side(sshd, onnx_file, tmp_path):
    """A real process: Ctrl-C exits 130, and the profiler on the device stops when its connection
    goes (nothing running there names our cache directory a few seconds later)."""
    cache = tmp_path / "interrupt-cache"
    proc = subprocess.Popen([str(SCRIPT), "profile", str(onnx_file), "--threads", "1", "--seq-len", "8",
                             "--runs", "1000000", "--min-seconds", "600", *remote_args(sshd, cache)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not _processes_mentioning(str(cache), "albert_edge.profile._child"):
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        assert _processes_mentioning(str(cache), "albert_edge.profile._child"), "the device-side profiler never started"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    deadline = time.monotonic() + 15
    while _processes_mentioning(str(cache)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_mentioning(str(cache)) == []


def test_onnx_external_data_travels_with_the_model(tmp_path):
    from albert_edge.profile.remote import _data_files

    model = tmp_path / "big.onnx"
    model.write_bytes(b"\x08\x07")
    for name in ("big.onnx.data", "weights.bin", "unrelated.bin"):
        (tmp_path / name).write_bytes(b"0")
    assert _data_files(model) == [tmp_path / "big.onnx.data"]
    (tmp_path / "manifest.json").write_text(json.dumps(
        {"files": [{"name": "big.onnx", "data_files": [{"name": "weights.bin"}]}]}))
    assert _data_files(model) == [tmp_path / "big.onnx.data", tmp_path / "weights.bin"]


def test_a_conversion_with_app_files_profiles_on_the_device(sshd, spiece_model, tmp_path):
    """A real conversion's file: the device's manifest check finds the spiece.model it lists."""
    from albert_edge.converters.export import convert

    from .conftest import tiny_model

    convert(tiny_model(CONFIG), tmp_path / "conv", targets=("onnx",), tokenizer=spiece_model, seq_len=16)
    cache = tmp_path / "cache"
    result = run(tmp_path / "conv" / "model.onnx", *FAST, "--seq-len", "8", "--json", *remote_args(sshd, cache))
    assert result.exit_code == 0, result.output
    (record,) = json.loads(result.stdout)
    assert (cache / record["sha256"] / "spiece.model").read_bytes() == spiece_model.read_bytes()


def test_the_app_files_and_the_folder_travel_with_the_model(tmp_path):
    """The device checks a file with what its manifest lists as used with it (the app files, the
    transformers-js/ folder): those are copied too, under their names in the manifest."""
    from albert_edge.profile.remote import _used_with

    model = tmp_path / "model.transformers-js.onnx"
    model.write_bytes(b"\x08\x07")
    (tmp_path / "transformers-js" / "onnx").mkdir(parents=True)
    for name in ("spiece.model", "transformers-js/onnx/model_quantized.onnx", "unrelated.bin"):
        (tmp_path / name).write_bytes(b"0")
    assert _used_with(model) == []
    (tmp_path / "manifest.json").write_text(json.dumps(
        {"files": [{"name": model.name, "folder_files": [{"name": "transformers-js/onnx/model_quantized.onnx"},
                                                          {"name": "../outside.bin"}]}],
         "app_files": [{"name": "spiece.model"}, {"name": "labels.json"}]}))  # labels.json: not there
    assert _used_with(model) == ["spiece.model", "transformers-js/onnx/model_quantized.onnx"]


def test_an_interrupted_copy_never_looks_cached(tmp_path):
    """The device side of the copy (run here with this Python): a tar stream cut short leaves no
    file under its final name, and a whole one lands every file."""
    import io

    from albert_edge.profile.remote import _RECEIVE
    from albert_edge.profile.ssh import tar_stream

    model = tmp_path / "model.onnx"
    model.write_bytes(os.urandom(200_000))
    stream = io.BytesIO()
    tar_stream([(model, "abc/model.onnx")], stream)
    cache = tmp_path / "cache"
    cut = subprocess.run([sys.executable, "-c", _RECEIVE, str(cache)], input=stream.getvalue()[:100_000],
                         capture_output=True)
    assert cut.returncode != 0 and not (cache / "abc" / "model.onnx").exists()
    whole = subprocess.run([sys.executable, "-c", _RECEIVE, str(cache)], input=stream.getvalue(), capture_output=True)
    assert whole.returncode == 0, whole.stderr
    assert (cache / "abc" / "model.onnx").read_bytes() == model.read_bytes()
