"""`albert-edge profile --runtime node / chromium / web`: the small ALBERT's .onnx and .ort timed through
onnxruntime-node in a real Node and onnxruntime-web in a real headless Chromium, beside the native
onnxruntime, in the same records, table and report; and the refusals (a format the JavaScript
runtimes do not take, Node, Chromium or the npm packages missing), one line and exit 2 before
anything is measured."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from albert_edge.cli import main
from albert_edge.cli._profile_print import web_lines

from .conftest import SEQ
from .runtimes import NODE_MODULES, WEB, node_missing, package_missing

# A short run: the fixed length the files were converted at, a few calls past the warm-up.
SHORT = ["--seq-len", str(SEQ), "--runs", "20", "--min-seconds", "0.2", "--max-seconds", "1", "--warmup", "3"]
# The web runtimes on this machine: p50 within this factor of the native onnxruntime's, either way, on
# one thread. Threaded WebAssembly on a busy machine waits on its workers far longer (their threads
# spin for work beside the others'), so two threads are held to a wider bound above.
FACTOR = 20
THREADED_FACTOR = 200


def _web_missing() -> str | None:
    if shutil.which("chromium") is None and shutil.which("chromium-browser") is None:
        return "chromium is not installed (Debian: apt-get install chromium)"
    return node_missing() or package_missing("onnxruntime-node", "onnxruntime-web")


needs_web = pytest.mark.skipif(bool(_web_missing()), reason=_web_missing() or "")
needs_node = pytest.mark.skipif(bool(node_missing()), reason=node_missing() or "")


@pytest.fixture(scope="module", autouse=True)
def web_folder():
    """The checkout's web/ as the profiler's web folder: an installed albert-edge (the wheel, in CI)
    has none of its own, and this module profiles through it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ALBERT_EDGE_WEB_DIR", str(WEB))
        yield WEB


@pytest.fixture(scope="module")
def small_files(tmp_path_factory, small_checkpoint) -> dict[str, Path]:
    """``convert --to onnx --to ort --head base`` of albert-small-builtin, with its manifest."""
    from albert_edge.converters.export import convert

    out = tmp_path_factory.mktemp("small") / "base"
    convert(str(small_checkpoint), out, targets=("onnx", "ort"), head="base", seq_len=SEQ)
    return {"onnx": out / "model.onnx", "ort": out / "model.ort"}


@pytest.fixture(scope="module")
def measured(tmp_path_factory, small_files) -> tuple[str, list[dict]]:
    """The .onnx on 1 and 2 threads through all three runtimes: the table printed and the records
    appended (what `report` reads)."""
    jsonl = tmp_path_factory.mktemp("records") / "profile.jsonl"
    result = CliRunner().invoke(main, ["profile", str(small_files["onnx"]), "--runtime", "web", "--threads", "1,2",
                                       *SHORT, "--append", str(jsonl)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    return result.stdout, [json.loads(line) for line in jsonl.read_text().splitlines()]


def _version(package: str) -> str:
    return json.loads((NODE_MODULES / package / "package.json").read_text())["version"]


@needs_web
def test_records_of_node_and_chromium_beside_native(measured, record_property):
    _, records = measured
    by = {(r["runtime"], r["threads"]): r for r in records}
    assert sorted(by) == sorted((rt, t) for rt in ("onnxruntime", "onnxruntime-node", "onnxruntime-web")
                                for t in (1, 2)), sorted(by)
    figures = {}
    for (runtime, threads), r in by.items():
        lat = r["latency"]
        assert r["schema"] == "albert-edge.profile/1" and r["format"] == "onnx" and r["input_kind"] == "token ids"
        assert r["seq_len"] == SEQ and r["batch"] == 1 and r["input_mode"] == "fixed" and not r["estimated"]
        # Real call times: at least --runs of them, positive, with their intervals and verdict.
        assert lat["count"] >= 20 and len(lat["samples"]) == lat["count"] and min(lat["samples"]) > 0
        assert lat["p50_ci"][0] <= lat["p50"] <= lat["p50_ci"][1] and lat["p90_ci"] and lat["p99"] >= lat["p50"]
        assert lat["quality"] in ("good", "noisy", "unusable") and lat["stopped_by"] in ("interval", "budget")
        assert r["load_ms"] > 0 and r["first_call_ms"] > 0 and r["machine"]["during"]["seconds"] > 0
        native = by[("onnxruntime", threads)]["latency"]["p50"]
        assert native / FACTOR < lat["p50"] < native * (FACTOR if threads == 1 else THREADED_FACTOR), \
            (runtime, threads, lat["p50"], native)
        figures[f"{runtime} {threads} thr"] = {"p50 ms": lat["p50"], "p50 95% interval": lat["p50_ci"],
                                               "quality": lat["quality"]}
    node, web = by[("onnxruntime-node", 2)], by[("onnxruntime-web", 2)]
    assert node["runtime_version"] == _version("onnxruntime-node") and node["provider"] == "CPUExecutionProvider"
    assert web["runtime_version"] == _version("onnxruntime-web") and web["provider"] == "wasm"
    for threads in (1, 2):
        node, web = by[("onnxruntime-node", threads)], by[("onnxruntime-web", threads)]
        # Node: its own process's memory, read by Node at each phase; the peak at least the last reading.
        mem = node["memory"]
        assert 0 < mem["before_load_rss"] < mem["after_load_rss"] <= mem["peak_after_timed"]
        assert node["web"]["node"].startswith("v") and node["web"]["simd"] is None
        # Chromium: the SIMD build ran, the threads asked for were the threads it got (Web Workers
        # really started), and no memory figure is made up.
        w = web["web"]
        assert w["simd"] is True and w["wasm"] and all("simd" in name for name in w["wasm"]), w
        assert w["threads_asked"] == threads == w["threads"] and w["workers_started"] >= threads - 1, w
        assert w["cross_origin_isolated"] is True and "Chrome" in w["user_agent"]
        assert all(v is None for v in web["memory"].values()) and w["memory"] == "not measured"
        assert any("memory not measured in Chromium" in warning for warning in web["warnings"])
    record_property("figures", figures)
    print(json.dumps(figures, indent=1))


@needs_web
def test_table_shows_them_beside_native(measured):
    table, records = measured
    rows = [line for line in table.splitlines() if "model.onnx" in line and f"1x{SEQ}" in line]
    for runs_on in ("ort:cpu", "ort-node:cpu", "ort-web:wasm simd"):
        assert sum(f" {runs_on} " in row for row in rows) == 2, (runs_on, table)
    assert f"onnxruntime-web {_version('onnxruntime-web')} in headless Chromium: WebAssembly SIMD ran" in table
    assert f"onnxruntime-node {_version('onnxruntime-node')} in Node v" in table


@needs_web
def test_report_names_the_runtime(measured, tmp_path):
    _, records = measured
    jsonl = tmp_path / "profile.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = CliRunner().invoke(main, ["report", str(jsonl), "--out", str(tmp_path / "report"), "--no-charts"])
    assert result.exit_code == 0, result.output
    report = (tmp_path / "report" / "report.md").read_text()
    for runtime in ("onnxruntime-node, CPUExecutionProvider", "onnxruntime-web, wasm"):
        assert sum(f"| {runtime}, {t} thr |" in report for t in (1, 2)) == 2, (runtime, report)


@needs_web
def test_ort_file_through_node_and_chromium(small_files):
    result = CliRunner().invoke(main, ["profile", str(small_files["ort"]), "--runtime", "node,chromium",
                                       "--threads", "1", *SHORT, "--json"])
    assert result.exit_code == 0, result.output
    records = json.loads(result.stdout)
    assert [(r["runtime"], r["format"]) for r in records] == [("onnxruntime-node", "ort"), ("onnxruntime-web", "ort")]
    assert all(r["latency"]["p50"] > 0 and r["latency"]["count"] >= 20 for r in records)


@needs_web
def test_chromium_webgpu_names_webgpu_the_adapter_and_the_placement(small_files, record_property):
    """--runtime chromium-webgpu: onnxruntime-web's WebGPU provider in Chromium with a WebGPU adapter;
    the record says WebGPU, the adapter, where onnxruntime-web placed the nodes, and on a software
    adapter that its timings mean nothing for a GPU."""
    result = CliRunner().invoke(main, ["profile", str(small_files["onnx"]), "--runtime", "chromium-webgpu",
                                       "--threads", "1", *SHORT, "--json"])
    if "no WebGPU adapter" in result.output:
        pytest.skip("Chromium gives no WebGPU adapter here")
    assert result.exit_code == 0, result.output
    (r,) = json.loads(result.stdout)
    assert (r["runtime"], r["provider"], r["accelerator"]) == ("onnxruntime-web", "webgpu", "gpu"), r
    w = r["web"]
    assert w["adapter"]["vendor"] or w["adapter"]["architecture"], w
    assert w["placement"]["WebGpuExecutionProvider"] > 0, w
    assert r["latency"]["p50"] > 0 and r["latency"]["count"] >= 1
    software = [x for x in r["warnings"] if "fallback (software) adapter" in x]
    assert bool(software) == w["adapter"]["fallback"], r["warnings"]
    lines = web_lines([r])
    assert len(lines) == 1 and "on WebGPU: adapter" in lines[0] and "on WebGpu" in lines[0], lines
    record_property("figures", {"adapter": w["adapter"], "placement": w["placement"], "p50 ms": r["latency"]["p50"]})


def _refused(args: list[str], env: dict | None = None) -> str:
    """``albert-edge profile ARGS`` in a real process: exit 2, one line on stderr, no traceback,
    nothing measured (no record on stdout); the line."""
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "albert_edge", "profile", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr and not done.stdout.strip(), done.stderr
    assert "albert-edge-profile-" not in lines[0] and time.monotonic() - start < 60  # no working directory named
    return lines[0]


@needs_node
@pytest.mark.parametrize("suffix, head", [(".tflite", b"\0\0\0\0TFL3"), (".pte", b"\0\0\0\0ET12")])
def test_format_the_web_runtimes_do_not_take(tmp_path, suffix, head):
    model = tmp_path / f"model{suffix}"
    model.write_bytes(head + bytes(64))
    line = _refused([str(model), "--runtime", "node"])
    assert "--runtime node runs .onnx and .ort files" in line and "--runtime native" in line, line


def test_node_missing(tmp_path):
    (tmp_path / "model.onnx").write_bytes(b"\x08\x07")
    line = _refused([str(tmp_path / "model.onnx"), "--runtime", "web"], env={"PATH": str(tmp_path / "bin")})
    assert "node is not installed" in line, line


@needs_node
def test_chromium_missing(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "node").symlink_to(shutil.which("node"))
    (tmp_path / "model.onnx").write_bytes(b"\x08\x07")
    line = _refused([str(tmp_path / "model.onnx"), "--runtime", "chromium"], env={"PATH": str(bin_dir)})
    assert "no chromium is on PATH" in line, line


@needs_node
def test_node_modules_missing_names_npm_ci(tmp_path, small_files):
    web = tmp_path / "web"
    web.mkdir()
    for name in ("package.json", "package-lock.json", "profile-node.mjs", "profile-loop.mjs", "tensors.mjs"):
        shutil.copy(WEB / name, web / name)
    line = _refused([str(small_files["onnx"]), "--runtime", "node", "--web-dir", str(web)])
    assert f"onnxruntime-node not installed in {web / 'node_modules'}: cd {web} && npm ci" in line, line
    line = _refused([str(small_files["onnx"]), "--runtime", "node"], env={"ALBERT_EDGE_WEB_DIR": str(tmp_path)})
    assert f"{tmp_path} is not albert-edge's web/ folder" in line and "--web-dir" in line, line


@pytest.mark.skipif(bool(node_missing() or package_missing("onnxruntime-node")),
                    reason=node_missing() or package_missing("onnxruntime-node") or "")
def test_node_leaves_nothing_in_the_temporary_folder(small_files, tmp_path, monkeypatch):
    """onnxruntime-node writes an empty mat-debug-<pid>.log into its temporary folder on every run:
    the profiler gives Node a folder of its own inside the job's, removed with it."""
    import tempfile

    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read $TMPDIR again
    result = CliRunner().invoke(main, ["profile", str(small_files["onnx"]), "--runtime", "node", "--threads", "1",
                                       *SHORT, "--json"])
    assert result.exit_code == 0, result.output
    assert [r["runtime"] for r in json.loads(result.stdout)] == ["onnxruntime-node"]
    assert sorted(p.name for p in folder.iterdir()) == []
