"""`albert-edge profile` end to end on tiny ONNX and TFLite files: real runtimes in real child
processes, through click's CliRunner and through a real subprocess."""

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

import albert_edge

from albert_edge.cli import main
from albert_edge.profile import ProfileSettings
from albert_edge.profile.job import ProfileJob

from .conftest import FAST

DATA = Path(__file__).parents[1] / "data"
# the progress lines profile prints on stderr when it is not a terminal
PROGRESS = ("profiling ", "[profile ")


def profile_json(*args) -> list[dict]:
    result = CliRunner().invoke(main, ["profile", *map(str, args), *FAST, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_both_formats_both_delegates(onnx_file, tflite_file):
    records = profile_json(onnx_file, tflite_file, "--seq-len", "8,16", "--delegate", "xnnpack,none")
    settings = [(r["format"], r["provider"], r["seq_len"]) for r in records]
    assert settings == [("onnx", "CPUExecutionProvider", 8), ("onnx", "CPUExecutionProvider", 16),
                        ("tflite", "xnnpack", 8), ("tflite", "xnnpack", 16),
                        ("tflite", "none", 8), ("tflite", "none", 16)]
    for r in records:
        assert r["schema"] == "albert-edge.profile/1" and r["estimated"] is False and r["scheme"] == "fp32"
        assert r["albert_edge_version"] == albert_edge.__version__
        assert r["runtime"] in ("onnxruntime", "ai_edge_litert") and r["runtime_version"] != "unknown"
        assert r["threads"] == 1 and r["batch"] == 1 and r["input_mode"] == "fixed"
        assert r["model"]["max_seq_len"] == 64 and r["model"]["dynamic"] is True
        lat = r["latency"]
        assert lat["count"] >= 5
        assert 0 < lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p95"] <= lat["p99"] <= lat["max"]
        assert r["load_ms"] > 0 and r["first_call_ms"] > 0
        mem = r["memory"]
        phases = ["before_load", "after_load", "after_first_call", "after_timed"]
        peaks = [mem["peak_before_load" if p == "before_load" else f"peak_{p}"] for p in phases]
        rss = [mem[f"{p}_rss"] for p in phases]
        assert all(peak >= now > 0 for peak, now in zip(peaks, rss))
        assert peaks == sorted(peaks)  # a high-water mark never goes down
        assert mem["after_load_rss"] > mem["before_load_rss"]  # loading a model costs memory
        assert r["device"]["cpu_cores"] == os.cpu_count() and "after" in r["device"]
        assert r["sha256"] and r["file_bytes"] == Path(r["file"]).stat().st_size


def test_ops_breakdown_per_layer_application(onnx_file, tflite_file):
    onnx, tflite = profile_json(onnx_file, tflite_file, "--seq-len", "16", "--ops", "--ops-runs", "7")
    ops = onnx["ops"]
    assert ops["available"] and ops["total_ms"] > 0
    assert {"MatMul", "Add"} <= {o["op"] for o in ops["op_types"]}
    # medians of the parts over calls need not add up to the median of the whole: where noise skews
    # each part's times (a busy machine, a tiny model), the sum of their medians falls below it (0.84
    # was seen on a loaded CI machine); an op type counted twice or a large one left out falls outside
    assert 0.6 < sum(o["share"] for o in ops["op_types"]) < 1.1
    # tiny: L=4 layers over G=2 groups, each group applied twice, in depth order
    assert [(o["group"], o["application"]) for o in ops["layers"]] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(0 < o["ms_low"] <= o["ms"] <= o["ms_high"] for o in ops["layers"])
    assert ops["kernels_union_ms"] <= ops["total_ms"] * 1.0001  # onnxruntime's CPU executor runs nodes in turn
    ops = tflite["ops"]  # LiteRT's profiler, XNNPACK operators and builtin kernels in execution order
    assert ops["available"] and ops["source"].startswith("LiteRT") and ops["total_ms"] > 0
    assert any(o["op"].startswith("Fully Connected") for o in ops["op_types"])
    assert {"GATHER", "RESHAPE"} <= {o["op"] for o in ops["op_types"]}  # builtin kernels beside XNNPACK's
    assert [(o["group"], o["application"]) for o in ops["layers"]] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert sum(o["ms"] for o in ops["layers"]) > 0 and "WHILE bodies" in ops["layers_from"]  # convert's default
    assert {o["part"] for o in ops["outside_layers"]} == {
        "before the layers (embeddings)", "after the layers (pooler, head)", "the layer loops' conditions (WHILE)"}
    assert any(o["node"].startswith("layer ") for o in ops["top_nodes"])
    for record in (onnx, tflite):  # the kernels set against the whole call and the unprofiled latency
        ops = record["ops"]
        assert ops["calls"] == 7 and ops["spread"] == "p10-p90 over 7 calls"
        assert all(o["share"] == round(o["ms"] / ops["total_ms"], 4) for o in ops["op_types"] + ops["layers"])
        assert ops["latency_p50_ms"] == record["latency"]["p50"] and ops["call_ms"] > 0
        assert ops["profiler_overhead_ms"] == pytest.approx(ops["call_ms"] - record["latency"]["p50"])
        inside = ops["kernels_union_ms"] or ops["total_ms"]
        if ops["outside_kernels_ms"] is None:
            assert "add up to more than the profiled call" in ops["reconcile_note"]
        else:
            assert inside <= ops["call_ms"] and ops["outside_kernels_ms"] >= 0


def test_as_app_measures_each_setting_also_with_the_runtimes_defaults(onnx_file, tflite_file):
    """--as-app adds, per setting, the file opened as an app opens it: a record of its own (its
    setting differs from Session's), the same outputs; the TFLite Interpreter with XNNPACK holds a
    loop file's shared weights once."""
    records = profile_json(onnx_file, tflite_file, "--seq-len", "16", "--as-app", "--ops", "--ops-runs", "3")
    assert [(r["format"], r["opened_as"]) for r in records] == [
        ("onnx", None), ("onnx", "app"), ("tflite", None), ("tflite", "app")]
    onnx, onnx_app, tflite, tflite_app = records
    assert tflite["weights_once"] and tflite_app["weights_once"]  # convert's loop form: once in the Interpreter too
    assert "Python API has no profiler" in tflite_app["ops"]["note"] and onnx_app["ops"]["available"]
    from albert_edge.profile.compare import setting_key

    assert setting_key(onnx) != setting_key(onnx_app) and setting_key(tflite) != setting_key(tflite_app)
    result = CliRunner().invoke(main, ["profile", str(onnx_file), "--seq-len", "16", "--as-app", *FAST])
    assert result.exit_code == 0 and "ort:cpu app" in result.output and "app: opened as an app" in result.output


@pytest.mark.parametrize("value", ["0", "-3"])
def test_ops_runs_must_be_positive(onnx_file, value):
    result = CliRunner().invoke(main, ["profile", str(onnx_file), "--ops", "--ops-runs", value])
    assert result.exit_code == 2 and "--ops-runs" in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


def test_ops_tflite_builtin_kernels_say_why_not(tflite_file):
    (record,) = profile_json(tflite_file, "--seq-len", "8", "--delegate", "none", "--ops")
    assert not record["ops"]["available"] and "always runs XNNPACK" in record["ops"]["note"]


def test_ops_of_an_unrolled_file_find_each_application(tmp_path):
    """An unrolled file (one subgraph) runs the same operators once per layer: each block of them
    is one application, found in the execution order."""
    pytest.importorskip("tensorflow")
    from albert_edge.converters.tflite import export as export_tflite

    from ..converters.conftest import tiny_model
    from .conftest import CONFIG

    path = export_tflite(tiny_model(CONFIG), tmp_path / "model.tflite", seq_len=16, layers="unrolled")
    (tmp_path / "manifest.json").write_text(json.dumps({"config": CONFIG.to_hf_dict()}))
    (record,) = profile_json(path, "--seq-len", "16", "--ops", "--ops-runs", "5")
    ops = record["ops"]
    assert ops["available"] and ops["layers_from"].startswith("execution order"), ops
    assert [(o["group"], o["application"]) for o in ops["layers"]] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert {o["part"] for o in ops["outside_layers"]} == {"before the layers (embeddings)",
                                                          "after the layers (pooler, head)"}
    assert any(o["node"].startswith("layer ") for o in ops["top_nodes"])


@pytest.mark.parametrize("order_of_layer_2", [None, [0, 1, 3, 2, 4, 5]])
def test_tflite_layer_blocks_by_their_operators(order_of_layer_2):
    """Four layers of the same operators (one layer's independent ops scheduled differently),
    between embedding and head operators: each block is one layer, however it is ordered."""
    from albert_edge.profile.tflite_ops import layer_blocks

    layer = ["FC", "FC", "Softmax", "Add", "GELU", "LN"]
    layers = [list(layer) for _ in range(4)]
    if order_of_layer_2:
        layers[2] = [layer[i] for i in order_of_layer_2]
    ops = ["GATHER", "Add", "LN", "FC"] + sum(layers, []) + ["SLICE", "FC", "TanH"]
    assert layer_blocks(ops, 4) == [(4, 10), (10, 16), (16, 22), (22, 28)]
    assert layer_blocks(ops, 3) is None  # nothing runs once per layer for three layers


def test_real_text_at_its_own_lengths(onnx_file, tflite_file, spiece_model):
    records = profile_json(onnx_file, tflite_file, "--text", DATA / "corpus.txt", "--tokenizer", spiece_model,
                           "--no-fixed", "--max-sentences", "20")
    for r in records:
        assert r["input_mode"] == "real-text" and r["seq_len"] is None and r["batch"] == 1
        text = r["text"]
        assert text["sentences"] == 20 and text["distinct_lengths"] > 3
        assert 3 <= text["tokens"]["min"] <= text["tokens"]["p50"] <= text["tokens"]["max"] <= 64
        assert r["latency"]["count"] >= 20  # every sentence at least once
        assert "shape_change_cost_p50_ms" in text["same_shape_again"]


def test_table_csv_and_append(onnx_file, tmp_path):
    csv_file, jsonl = tmp_path / "out.csv", tmp_path / "runs.jsonl"
    args = ["profile", str(onnx_file), "--seq-len", "8", *FAST, "--csv", str(csv_file), "--append", str(jsonl)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "model.onnx" in result.stdout and "ort:cpu" in result.stdout and "p90" in result.stdout
    lines = csv_file.read_text().splitlines()
    assert len(lines) == 2 and lines[0].startswith("file,file_name,sha256,format")
    result = CliRunner().invoke(main, args)  # the CSV exists now
    assert result.exit_code == 2 and "--force" in result.output
    assert CliRunner().invoke(main, [*args, "--force"]).exit_code == 0
    records = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert len(records) == 2 and all(r["seq_len"] == 8 for r in records)


def test_baseline_flags_an_injected_slowdown(onnx_file, tmp_path):
    records = profile_json(onnx_file, "--seq-len", "8")
    faster = [{**r, "latency": {**r["latency"], "p50": r["latency"]["p50"] / 5, "p90": r["latency"]["p90"] / 5,
                                "samples": [t / 5 for t in r["latency"]["samples"]], "quality": "good"}}
              for r in records]
    baseline = tmp_path / "old.json"
    baseline.write_text(json.dumps(faster))
    args = ["profile", str(onnx_file), "--seq-len", "8", *FAST, "--ci-target", "50", "--baseline", str(baseline)]
    result = CliRunner().invoke(main, [*args, "--json", "--fail-on-regression"])
    [new] = json.loads(result.stdout)
    c = new["baseline_comparison"]
    assert c["p50_ratio"] == pytest.approx(new["latency"]["p50"] / faster[0]["latency"]["p50"])
    if new["latency"]["quality"] != "good":  # other work on the machine: never a regression then
        assert c["verdict"] == "inconclusive" and not c["regression"] and result.exit_code == 0, result.output
        return
    assert c["verdict"] == "slower" and c["regression"] and c["p_value"] < 0.01 and c["p50_ratio_ci"][0] > 1.05
    assert result.exit_code == 1 and "regression" in result.stderr


def test_comparisons_print_their_interval_and_verdict(capsys):
    from albert_edge.cli._profile_print import print_comparisons
    from albert_edge.profile.compare import Comparison

    setting = {"format": "onnx", "provider": "CPUExecutionProvider", "threads": 1, "batch": 1, "seq_len": 8,
               "input_mode": "fixed"}
    print_comparisons([Comparison("m.onnx", setting, 1.31, 1.4, 1.0, "slower", "slower beyond 5% (p = 1e-09)",
                                   (1.28, 1.34), 1e-9),
                        Comparison("m.onnx", setting, 1.3, 1.3, 1.0, "inconclusive", "the new record's timing is noisy")],
                       Path("old.json"))
    out = " ".join(capsys.readouterr().out.split())
    assert out.count("REGRESSION") == 1 and "1e-09" in out and "1.280" in out and "95% interval" in out
    assert "slower: slower beyond 5%" in out and "inconclusive: the new record's timing is noisy" in out


def test_baseline_of_the_same_file_is_no_regression(onnx_file, tmp_path):
    """The same unchanged file measured twice: 'no change' or 'inconclusive', never 'slower'."""
    baseline = tmp_path / "old.json"
    baseline.write_text(json.dumps(profile_json(onnx_file, "--seq-len", "8")))
    result = CliRunner().invoke(main, ["profile", str(onnx_file), "--seq-len", "8", *FAST, "--baseline",
                                       str(baseline), "--threshold", "25", "--fail-on-regression"])
    assert result.exit_code == 0, result.output
    assert "threshold 25%" in result.stdout and "REGRESSION" not in result.stdout


@pytest.mark.parametrize("change, message", [
    (lambda r: {**r, "latency": "12.5"}, "record 1: 'latency' is a string ('12.5'), not an object (Latency) or null"),
    (lambda r: {**r, "memory": [1, 2]}, "record 1: 'memory' is a list, not an object (Memory) or null"),
    (lambda r: {**r, "latency": {**r["latency"], "p90": None}}, "record 1: 'latency.p90' is null, not a number"),
], ids=["latency-text", "memory-list", "p90-null"])
def test_a_baseline_of_wrong_types_is_refused_before_measuring(onnx_file, tmp_path, change, message):
    """A real process given a run that would take ten minutes: the baseline is read and refused
    first, in one line, so it ends at once (it used to measure, then fail with an internal error)."""
    record = profile_json(onnx_file, "--seq-len", "8")[0]
    baseline = tmp_path / "old.json"
    baseline.write_text(json.dumps([change(record)]))
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "albert_edge", "profile", str(onnx_file), "--seq-len", "8",
                           "--threads", "1", "--min-seconds", "600", "--baseline", str(baseline)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and message in proc.stderr
    assert f"{baseline}: {message.split(': ')[0]}" in proc.stderr and not proc.stdout
    assert time.monotonic() - start < 60


BAD = [
    (["{dir}/manifest.json"], "unknown model file type"),
    (["{dir}/junk.onnx"], "not an ONNX model"),
    (["{dir}/junk.tflite"], "not a TFLite model"),
    (["{dir}/missing.onnx"], "no such model file"),
    (["{dir}/model.onnx", "--seq-len", "128"], "above the model's maximum 64"),
    (["{dir}/model.onnx", "--threads", "0"], "--threads values must be 1 or more"),
    (["{dir}/model.onnx", "--threads", "-2"], "--threads values must be 1 or more"),
    (["{dir}/model.onnx", "--seq-len", "8,x"], "whole numbers"),
    (["{dir}/model.tflite", "--delegate", "gpu"], "delegate must be one of"),
    (["{dir}/model.onnx", "--seq-len", "8", "--provider", "cuda"], "CUDAExecutionProvider is not in this onnxruntime build"),
    (["{dir}/model.onnx", "--seq-len", "8", "--text", "builtin"], "--text needs --tokenizer"),
    (["{dir}/model.onnx", "{dir}/model.tflite", "--seq-len", "8", "--mediapipe"], "no file given has MediaPipe metadata"),
    (["{dir}/model.onnx", "--seq-len", "8", "--baseline", "{dir}/manifest.json"], "not profile results"),
]


@pytest.mark.parametrize("args, message", BAD, ids=[m for _, m in BAD])
def test_bad_input_is_one_line_and_exit_2(model_dir, args, message, tmp_path):
    (model_dir / "junk.onnx").write_bytes(b"not a model")
    (model_dir / "junk.tflite").write_bytes(b"not a model either")
    out = tmp_path / "out.csv"
    argv = ["profile", *(a.format(dir=model_dir) for a in args), *FAST, "--csv", str(out)]
    if "--threads" in args:
        argv = ["profile", *(a.format(dir=model_dir) for a in args), "--runs", "5", "--csv", str(out)]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith(PROGRESS)]
    assert message in result.stderr and len(lines) == 1, result.stderr
    assert "Traceback" not in result.output and not out.exists()


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_the_child_and_leaves_nothing(onnx_file, tmp_path, signum, code):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "albert_edge", "profile", str(onnx_file), "--seq-len", "8",
                             "--threads", "1", "--min-seconds", "60"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    workdir = _wait_for(lambda: next(tmp_path.glob("albert-edge-profile-*"), None))
    children = _wait_for(lambda: _children(proc.pid))
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code and "Interrupted" in err and "Traceback" not in err
    assert not workdir.exists() and not list(tmp_path.iterdir())
    assert all(not Path(f"/proc/{pid}").exists() for pid in children)


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _wait_for(probe, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


def test_profile_runs_without_torch_or_tensorflow(onnx_file, tflite_file, run_blocked):
    """The parent command and the child's measurement, each in an interpreter where importing
    torch or tensorflow fails, as on a Raspberry Pi."""
    result = run_blocked(f"""
        import json, sys
        from albert_edge.cli import main
        sys.argv = ["albert-edge", "profile", {str(onnx_file)!r}, {str(tflite_file)!r}, "--seq-len", "8",
                    *{FAST!r}, "--json"]
        try:
            main()
        except SystemExit as exit:
            assert not exit.code, exit.code
        finally:
            assert not attempts, attempts
    """)
    assert result.returncode == 0, result.stderr
    assert [r["format"] for r in json.loads(result.stdout)] == ["onnx", "tflite"]
    settings = ProfileSettings(seq_lens=(8,), batches=(2,), threads=(1,), delegates=("none",), runs=3, min_seconds=0,
                               max_seconds=0, warmup=0, max_sentences=1)
    job = ProfileJob(file=str(tflite_file), file_as_given=str(tflite_file), file_bytes=1, sha256="-", settings=settings,
                     threads=1, batch=2, seq_len=8, delegate="none", workdir=".")
    result = run_blocked(f"""
        from albert_edge.profile import _child
        code = _child.main([{job.to_json()!r}])
        leaked = [m for m in sys.modules if m.split(".")[0] in ("torch", "tensorflow", "onnxruntime")]
        assert code == 0 and not attempts and not leaked, (code, attempts, leaked)
    """)
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["batch"] == 2 and record["provider"] == "none" and record["latency"]["count"] == 3


def test_a_busy_machine_is_waited_for_seen_and_never_a_regression(onnx_file, tmp_path):
    """One other process keeps a core busy while a 1-thread measurement runs: --wait-quiet waits
    its full time for it in vain, the record names the other work and is judged noisy, and a
    comparison with a quiet-looking baseline of the same file is inconclusive, not a regression."""
    baseline = tmp_path / "old.json"
    quiet = [{**r, "latency": {**r["latency"], "quality": "good", "p50": r["latency"]["p50"] / 3,
                               "samples": [t / 3 for t in r["latency"]["samples"]]}}
             for r in profile_json(onnx_file, "--seq-len", "8")]
    baseline.write_text(json.dumps(quiet))
    busy = subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 60\nwhile time.time() < end: pass"])
    try:
        time.sleep(0.5)
        result = CliRunner().invoke(main, ["profile", str(onnx_file), "--seq-len", "8", *FAST, "--wait-quiet", "1",
                                           "--baseline", str(baseline), "--fail-on-regression", "--json"])
    finally:
        busy.kill()
        busy.wait()
    assert result.exit_code == 0, result.output
    [record] = json.loads(result.stdout)
    assert record["machine"]["before"]["waited_seconds"] >= 1.0 and record["machine"]["during"]["other_cores"] > 0.5
    assert any(w.startswith("machine busy: other work kept") for w in record["warnings"])
    assert record["latency"]["quality"] in ("noisy", "unusable")
    assert record["baseline_comparison"]["verdict"] == "inconclusive" and not record["baseline_comparison"]["regression"]


@pytest.mark.parametrize("option", ["--csv", "--calibration"])
def test_an_output_onto_an_input_or_a_foreign_file_is_refused_before_measuring(onnx_file, tmp_path, option):
    """--csv or --calibration naming the model file (--force or not), or a --calibration file that
    holds something else: one line, exit 2, nothing measured, the file untouched."""
    before = onnx_file.read_bytes()
    result = CliRunner().invoke(main, ["profile", str(onnx_file), *FAST, "--estimate", "pi4", option, str(onnx_file),
                                       "--force"])
    assert result.exit_code == 2 and f"{option} {onnx_file} is the input" in result.stderr, result.output
    assert onnx_file.read_bytes() == before and not result.stdout
    other = tmp_path / "records.json"
    other.write_text('[{"schema": "albert-edge.profile/1"}]')
    result = CliRunner().invoke(main, ["profile", str(onnx_file), *FAST, "--estimate", "pi4", "--calibration",
                                       str(other)])
    assert result.exit_code == 2 and "is not an albert-edge host calibration" in result.stderr, result.output
    assert other.read_text() == '[{"schema": "albert-edge.profile/1"}]'
