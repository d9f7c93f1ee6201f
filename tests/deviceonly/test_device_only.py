"""albert-edge as a Raspberry Pi installs it: the built wheel with the [tflite,onnx,demo] extras
only, no torch and no tensorflow, driven through the `albert-edge` command of that environment.

Runs only where ALBERT_EDGE_DEVICE_ONLY_FILES names a directory holding a demo bundle made on the
build side (``bundle/``: what `albert-edge demo bundle --preset tiny` writes); .ci/device_only.sh
makes both the files and the environment. Skipped otherwise. Every command runs as a child
process, in a scratch directory, exactly as a person on the device would type it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
from importlib.metadata import distribution, version
from pathlib import Path

import pytest

FILES_ENV = "ALBERT_EDGE_DEVICE_ONLY_FILES"
FILES = Path(os.environ[FILES_ENV]) if os.environ.get(FILES_ENV) else None

pytestmark = pytest.mark.skipif(
    FILES is None, reason=f"{FILES_ENV} is not set: .ci/device_only.sh builds the files and the device-only "
                          "environment (the wheel with [tflite,onnx,demo], no torch, no tensorflow) these tests run in")

BUNDLE = FILES / "bundle" if FILES is not None else Path("bundle")
ONNX = BUNDLE / "classifier" / "model.onnx"
TFLITE = BUNDLE / "classifier" / "model.int8-dynamic.tflite"
MLM_TFLITE = BUNDLE / "mlm" / "model.tflite"
# The console script pip installed beside this interpreter, not whatever `albert-edge` is on PATH.
CLI = Path(sys.executable).with_name("albert-edge")
BUILD_SIDE = ("torch", "tensorflow")
TEXT = "The event loop runs coroutines and schedules callbacks."


def albert_edge(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    """Run the installed `albert-edge` with ``args``; fail the test with its output unless it exits 0."""
    env = {**os.environ, "PYTHONSAFEPATH": "1", "OMP_NUM_THREADS": "1", "COLUMNS": "200", "NO_COLOR": "1"}
    done = subprocess.run([str(CLI), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)
    assert done.returncode == 0, f"albert-edge {' '.join(args)} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture()
def scratch(tmp_path) -> Path:
    return tmp_path


@pytest.fixture(scope="module")
def labels() -> list[str]:
    return json.loads((BUNDLE / "labels.json").read_text())


# -- the environment ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", BUILD_SIDE)
def test_the_build_side_is_not_installed(name):
    assert importlib.util.find_spec(name) is None, f"{name} is installed in the device-only environment"
    done = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True, timeout=60,
                          cwd="/", env={**os.environ, "PYTHONSAFEPATH": "1"})
    assert done.returncode != 0 and f"No module named '{name}'" in done.stderr, done.stderr


def test_the_device_side_engines_are_installed():
    for name in ("onnxruntime", "ai_edge_litert", "sentencepiece", "numpy", "starlette", "uvicorn"):
        assert importlib.util.find_spec(name) is not None, f"the wheel's extras did not bring {name}"


def test_albert_edge_is_the_installed_wheel():
    import albert_edge

    where = Path(albert_edge.__file__).resolve()
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    assert where.is_relative_to(site), f"albert_edge imported from {where}, not from {site}"
    for sub in ("runtime", "formats", "profile", "report", "demo"):
        spec = importlib.util.find_spec(f"albert_edge.{sub}")
        assert spec is not None and Path(spec.origin).resolve().is_relative_to(site), (sub, spec)
    direct_url = distribution("albert-edge").read_text("direct_url.json")
    if direct_url:
        assert not json.loads(direct_url).get("dir_info", {}).get("editable"), "albert-edge is an editable install"
    assert CLI.is_file(), f"no albert-edge console script at {CLI}"


def test_version(scratch):
    done = albert_edge("--version", cwd=scratch)
    assert done.stdout.strip() == f"albert-edge, version {version('albert-edge')}"


# -- reading files --------------------------------------------------------------------------------

@pytest.mark.parametrize("path", [ONNX, TFLITE], ids=["onnx", "tflite"])
def test_info_on_a_model_file(path, scratch):
    info = json.loads(albert_edge("info", "--json", str(path), cwd=scratch).stdout)
    assert info["kind"] == "model file"
    assert info["format"] == path.suffix[1:]
    assert info["file_bytes"] == path.stat().st_size
    assert {"input_ids", "attention_mask"} <= {i["name"] for i in info["inputs"]}
    assert [o["name"] for o in info["outputs"]] == ["logits"]

    text = albert_edge("info", str(path), cwd=scratch).stdout
    assert path.suffix[1:] in text and "file size" in text and f"{path.stat().st_size:,} bytes" in text


def test_info_on_a_conversion_output(scratch, labels):
    info = json.loads(albert_edge("info", "--json", str(BUNDLE / "classifier"), cwd=scratch).stdout)
    assert info["kind"] == "conversion output"
    names = {f["name"] for f in info["files"]}
    assert {"model.onnx", "model.tflite", "model.int8-dynamic.onnx", "model.int8-dynamic.tflite"} <= names
    assert sorted(info["config"]["label2id"]) == sorted(labels)


@pytest.mark.parametrize("path", [ONNX, TFLITE], ids=["onnx", "tflite"])
def test_inspect_keeps_weights_once(path, scratch):
    found = json.loads(albert_edge("inspect", "--json", str(path), cwd=scratch).stdout)
    assert found["format"] == path.suffix[1:]
    assert found["ok"] is True
    assert found["duplicates"] == []
    assert 0 < found["stored_bytes"] == found["unique_bytes"]
    assert found["ops"] and sum(found["ops"].values()) > 10
    by_dtype = found["precision"]["weight_bytes_by_dtype"]
    assert "float32" in by_dtype
    if "int8" in path.name:
        assert by_dtype.get("int8", 0) > 0

    text = albert_edge("inspect", str(path), cwd=scratch).stdout
    assert path.name in text and "input_ids" in text and "logits" in text


# -- measuring and reporting ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def profiled(tmp_path_factory) -> tuple[Path, list[dict]]:
    """One short profile of the ONNX and the int8 TFLite file, saved as `profile --json` prints it."""
    out = tmp_path_factory.mktemp("profile")
    done = albert_edge("profile", "--json", "--seq-len", "16", "--threads", "1", "--runs", "5", "--min-seconds", "0",
                       "--warmup", "1", str(ONNX), str(TFLITE), cwd=out)
    (out / "profile.json").write_text(done.stdout)
    return out / "profile.json", json.loads(done.stdout)


def test_profile_measures_both_formats(profiled):
    _, records = profiled
    assert [r["file"] for r in records] == [str(ONNX), str(TFLITE)]
    engines = {"onnx": ("onnxruntime", "onnxruntime"), "tflite": ("ai_edge_litert", "ai-edge-litert")}
    for record in records:
        runtime, package = engines[record["format"]]
        assert record["runtime"] == runtime and record["runtime_version"] == version(package)
        assert record["estimated"] is False
        assert (record["threads"], record["batch"], record["seq_len"]) == (1, 1, 16)
        assert record["latency"]["count"] >= 5
        assert 0 < record["latency"]["p50"] <= record["latency"]["p90"]
        assert record["load_ms"] > 0 and record["memory"]["after_load_rss"] > 0
        assert record["file_bytes"] == Path(record["file"]).stat().st_size
    assert records[1]["scheme"] == "int8-dynamic"


def test_report_from_the_profile_and_the_files(profiled, scratch):
    profile_json, records = profiled
    out = scratch / "report"
    done = albert_edge("report", "--out", str(out), str(profile_json), str(ONNX), str(TFLITE), cwd=scratch)
    assert "report.html" in done.stdout + done.stderr
    for name in ("report.md", "report.html", "report.json"):
        text = (out / name).read_text()
        assert ONNX.name in text and TFLITE.name in text, f"{name} does not name the files"
    report = json.loads((out / "report.json").read_text())
    assert [f["name"] for f in report["files"]] == [ONNX.name, TFLITE.name]
    assert all(f["duplicates"] == 0 for f in report["files"])
    rows = report["profile_rows"]
    assert [r["file_name"] for r in rows] == [ONNX.name, TFLITE.name]
    assert [r["p90_ms"] for r in rows] == [r["latency"]["p90"] for r in records]
    assert {s["kind"] for s in report["sources"]} >= {"profile", "model-file"}


# -- the demo ------------------------------------------------------------------------------------

def test_demo_classify(scratch, labels):
    answer = json.loads(albert_edge("demo", "classify", "--json", str(BUNDLE), TEXT, cwd=scratch).stdout)
    # the adaptive classifier, ONNX first (both engines are installed), with the passes it ran
    assert answer["model"] == "onnx-adaptive" and 1 <= answer["passes"] <= answer["max_passes"]
    assert answer["label"] in labels
    assert sorted(s["label"] for s in answer["scores"]) == sorted(labels)
    assert answer["label"] == max(answer["scores"], key=lambda s: s["score"])["label"]
    assert abs(sum(s["score"] for s in answer["scores"]) - 1) < 0.01
    assert answer["tokens"] > 2 and answer["latency_ms"] > 0 and answer["truncated"] is False

    text = albert_edge("demo", "classify", "--model", "tflite-int8", str(BUNDLE), TEXT, cwd=scratch).stdout
    first = text.strip().splitlines()[0]
    assert first.split()[0] in labels and "tflite-int8" in first


def test_demo_fill_mask(scratch):
    answer = json.loads(albert_edge("demo", "fill-mask", "--json", "--top-k", "3", str(BUNDLE),
                                    "The event [MASK] runs coroutines.", cwd=scratch).stdout)
    assert answer["model"] == "onnx-adaptive"  # the selected model; fill-mask has no exits, its MLM runs full depth
    (mask,) = answer["masks"]
    assert len(mask["predictions"]) == 3
    assert all(p["token"] and isinstance(p["id"], int) and 0 <= p["score"] <= 1 for p in mask["predictions"])
    assert "[MASK]" not in answer["filled"] and answer["filled"].endswith("runs coroutines.")

    text = albert_edge("demo", "fill-mask", "--model", "tflite-fp32", "--top-k", "2", str(BUNDLE),
                       "The event ___ runs coroutines.", cwd=scratch).stdout
    assert "tflite-fp32" in text and "runs coroutines." in text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post_json(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
        return json.loads(response.read())


def test_demo_serve_answers_a_classify_request(scratch, labels):
    env = {**os.environ, "PYTHONSAFEPATH": "1", "OMP_NUM_THREADS": "1", "COLUMNS": "200", "NO_COLOR": "1"}
    log = scratch / "serve.log"
    for _attempt in range(3):  # another process may take the free port before the server binds it
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        with log.open("w") as out:
            proc = subprocess.Popen([str(CLI), "demo", "serve", str(BUNDLE), "--host", "127.0.0.1", "--port", str(port),
                                     "--threads", "1"], stdout=out, stderr=subprocess.STDOUT, cwd=scratch, env=env)
        try:
            deadline = time.monotonic() + 60
            status = None
            while status is None and proc.poll() is None and time.monotonic() < deadline:
                try:
                    with urllib.request.urlopen(url + "/api/status", timeout=2) as response:
                        status = json.loads(response.read())
                except OSError:
                    time.sleep(0.2)
            if status is None and proc.poll() == 2 and "cannot listen" in log.read_text():
                continue
            assert status is not None, f"the server did not answer within 60 s:\n{log.read_text()}"
            assert f"albert-edge demo on {url}/" in log.read_text()
            answer = _post_json(url + "/api/classify", {"text": TEXT})
            assert answer["label"] in labels and answer["model"] == "onnx-adaptive"
            assert sorted(s["label"] for s in answer["scores"]) == sorted(labels)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # what a service manager's stop sends
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                    pytest.fail(f"the server did not stop within 15 s of SIGTERM:\n{log.read_text()}")
        assert proc.returncode == 0, f"the server exited {proc.returncode} on SIGTERM:\n{log.read_text()}"
        return
    pytest.fail(f"no free port could be listened on in 3 tries:\n{log.read_text()}")
