"""Operator counts, the device table and roofline estimates (`albert-edge profile --estimate`):
counts against figures worked out by hand from the config, estimates kept apart from
measurements, and the command's table with the host's error."""

from __future__ import annotations

import dataclasses
import json

import pytest
from click.testing import CliRunner

import albert_edge

from albert_edge.cli import main
from albert_edge.errors import RuntimeUnavailable
from albert_edge.profile import ProfileSettings, profile
from albert_edge.device.catalog import DEVICES, Device, UnknownDevice, device, host_device, parse_devices
from albert_edge.profile.calibration import Calibration
from albert_edge.profile.estimate import estimate, roofline_ms
from albert_edge.profile.opcount import GraphCount, OpCost, count

from .conftest import CONFIG, FAST

E, H, L, G, I = (CONFIG.embedding_size, CONFIG.hidden_size, CONFIG.num_hidden_layers, CONFIG.num_hidden_groups,
                 CONFIG.intermediate_size)

# A made-up machine with round figures, so roofline times can be worked out by hand.
ROUND = Device(name="round", title="round", cpu="test", cores=2, fp32_gflops=100.0, int8_gops=400.0,
               fp16_gflops=None, bandwidth_gbs=10.0, ram_gb=1.0, source="test figures")


def hand_macs(batch: int, seq: int) -> int:
    """One call of the base head: E -> H projection, then L layer applications (each shared
    group's weights are applied L/G times, and each application computes), then the pooler on
    [CLS]. Per application: Q, K, V and output projections 4*T*H*H, scores and context
    2*T*T*H (over all heads), feed-forward 2*T*H*I."""
    per_application = 4 * seq * H * H + 2 * seq * seq * H + 2 * seq * H * I
    return batch * (seq * E * H + L * per_application + H * H)


def matmul_weight_bytes() -> int:
    """fp32 bytes of the matrix-product weights one call reads: shared ones once per application."""
    return 4 * (E * H + L * (4 * H * H + 2 * H * I) + H * H)


def matmul_bias_bytes() -> int:
    """fp32 bytes of their biases (TFLite's FULLY_CONNECTED reads its bias itself; ONNX adds it apart)."""
    return 4 * (H + L * (4 * H + I + H) + H)


@pytest.fixture(scope="module")
def unrolled_file(tmp_path_factory):
    """The profile models' checkpoint as an unrolled file (convert --layers unrolled); model.tflite
    is the loop form convert writes by default, a WHILE per group."""
    pytest.importorskip("tensorflow")
    from albert_edge.converters.tflite import export as export_tflite

    from ..converters.conftest import tiny_model

    return export_tflite(tiny_model(CONFIG), tmp_path_factory.mktemp("unrolled") / "model.tflite", seq_len=16,
                         layers="unrolled")


@pytest.mark.parametrize("fmt", ["onnx", "tflite", "tflite-unrolled"])
@pytest.mark.parametrize(("batch", "seq"), [(1, 16), (2, 10)])
def test_macs_match_the_config_with_every_layer_application(model_dir, fmt, batch, seq, request):
    """Every layer application counted, whatever the file form: a loop file's body (which the
    interpreter's operator list leaves out) once per iteration."""
    assert L // G == 2  # the tiny config really shares: each group's weights serve two depths
    path = request.getfixturevalue("unrolled_file") if fmt == "tflite-unrolled" else model_dir / f"model.{fmt}"
    counted = count(path, batch, seq)
    assert counted.macs == hand_macs(batch, seq)
    assert set(counted.by_precision()) <= {"fp32", "int"}
    matmul_weights = sum(o.weight_bytes for o in counted.ops if o.macs)
    assert matmul_weights - matmul_weight_bytes() == (0 if fmt == "onnx" else matmul_bias_bytes())
    # the per-op breakdown adds up, and the attention products read no stored weight
    assert sum(row["macs"] for row in counted.by_op().values()) == counted.macs
    batched = [o for o in counted.ops if o.macs and o.weight_bytes == 0]
    assert len(batched) == 2 * L and sum(o.macs for o in batched) == batch * L * 2 * seq * seq * H


def test_a_loop_file_is_counted_where_only_tflite_runtime_is_installed(model_dir, monkeypatch):
    """A device with tflite-runtime alone has no ai-edge-litert flatbuffer bindings: the WHILE
    bodies are read through the standard-library schema, to the same count."""
    import sys

    import ai_edge_litert

    with_bindings = count(model_dir / "model.tflite", 1, 16)
    monkeypatch.delattr(ai_edge_litert, "schema_py_generated", raising=False)
    monkeypatch.setitem(sys.modules, "ai_edge_litert.schema_py_generated", None)  # import fails
    stand_in = count(model_dir / "model.tflite", 1, 16)
    assert stand_in.macs == with_bindings.macs == hand_macs(1, 16)
    assert [(o.op, o.macs, o.weight_bytes) for o in stand_in.ops] == [
        (o.op, o.macs, o.weight_bytes) for o in with_bindings.ops]


def test_int8_onnx_with_fused_attention_counts_the_same_macs(tmp_path):
    """int8-dynamic .onnx files compute attention in one MultiHeadAttention node per layer and
    Q, K, V as one product: the count still matches the config, the attention products in fp32
    and every product with a weight in int8."""
    from albert_edge.converters.export import convert
    from albert_edge.quantize import QuantizeConfig, quantize

    from ..converters.conftest import tiny_model

    convert(tiny_model(CONFIG), tmp_path / "fp32", targets=("onnx",), head="base", seq_len=16)
    int8 = tmp_path / "model.int8.onnx"
    quantize(tmp_path / "fp32" / "model.onnx", QuantizeConfig("int8-dynamic", num_samples=4, eval_samples=4), int8)
    counted = count(int8, 1, 12)
    attention = [o for o in counted.ops if o.op == "MultiHeadAttention"]
    assert len(attention) == L  # the fusion really happened, once per layer application
    assert counted.macs == hand_macs(1, 12)
    assert sum(o.macs for o in attention) == L * 2 * 12 * 12 * H
    assert counted.by_precision()["int8"]["macs"] == hand_macs(1, 12) - sum(o.macs for o in attention)


def test_roofline_takes_the_slower_of_compute_and_memory():
    compute_bound = OpCost("mm", "MatMul", "fp32", macs=10**9, flops=0, weight_bytes=10**6, activation_bytes=0)
    memory_bound = OpCost("add", "Add", "fp32", macs=0, flops=10**6, weight_bytes=0, activation_bytes=10**9)
    int8 = OpCost("q", "MatMulInteger", "int8", macs=10**9, flops=0, weight_bytes=0, activation_bytes=0)
    counts = GraphCount(file="x.onnx", format="onnx", batch=1, seq_len=8, ops=(compute_bound, memory_bound, int8))
    # 2e9 ops at 100 GFLOP/s = 20 ms; 1e9 bytes at 10 GB/s = 100 ms; 2e9 int8 ops at 400 GOP/s = 5 ms
    assert roofline_ms(counts, ROUND) == pytest.approx(125.0)
    # one of two cores: half the compute peak, the same bandwidth
    assert roofline_ms(counts, ROUND, threads=1) == pytest.approx(40.0 + 100.0 + 10.0)


def test_device_table_is_complete_and_sourced():
    names = [d.name for d in DEVICES]
    assert len(set(names)) == len(names)
    assert {"pi3b", "pi4", "pi5", "jetson-nano", "jetson-orin-nano"} <= set(names)
    assert any(name.startswith("phone") for name in names)
    for d in DEVICES:
        assert d.cores > 0 and d.fp32_gflops > 0 and d.int8_gops >= d.fp32_gflops and d.bandwidth_gbs > 0
        assert d.ram_gb > 0 and d.source
    assert [d.name for d in parse_devices("pi5, pi4,pi5")] == ["pi5", "pi4"]
    assert parse_devices("all") == list(DEVICES)
    with pytest.raises(UnknownDevice, match="known devices: pi3b, pi4"):
        device("pi9")


def test_a_board_measuring_itself_uses_its_own_row():
    assert host_device({"board": "Raspberry Pi 4 Model B Rev 1.4"}).name == "pi4"
    assert host_device({"board": "NVIDIA Jetson Orin Nano Developer Kit"}).name == "jetson-orin-nano"
    host = host_device({"board": None, "cpu_model": "test cpu", "cpu_cores": 2, "ram_bytes": 2**30})
    assert host.name == "host" and host.fp32_gflops > 0 and host.bandwidth_gbs > 0 and "derived" in host.source


@pytest.fixture(scope="module")
def measured(onnx_file):
    return profile([onnx_file], ProfileSettings(seq_lens=(8, 16), threads=(1,), runs=5, min_seconds=0.0, warmup=1))


def _timed(m, fastest: float, quality: str = "good"):
    """Measurement ``m`` as if its fastest block's median were ``fastest`` ms, judged ``quality``."""
    return dataclasses.replace(m, latency=dataclasses.replace(m.latency, fastest_block_p50=fastest, quality=quality))


def _rooflines(onnx_file, measured) -> dict[int, float]:
    return {m.seq_len: roofline_ms(count(onnx_file, 1, m.seq_len), ROUND, 1) for m in measured}


def test_estimates_are_labelled_and_scaled_by_the_host_calibration(onnx_file, measured):
    faster = dataclasses.replace(ROUND, name="faster", fp32_gflops=200.0, int8_gops=800.0, bandwidth_gbs=20.0)
    roof = _rooflines(onnx_file, measured)
    half = [_timed(m, roof[m.seq_len] / 0.5) for m in measured]  # the host at half its roofline
    records = estimate([onnx_file], [ROUND, faster], (8, 16), 1, half, host=ROUND)
    assert [(r.seq_len, r.estimate["device"]) for r in records] == [
        (8, "round"), (8, "faster"), (16, "round"), (16, "faster")]
    by_seq = {m.seq_len: m for m in measured}
    for r in records:
        e = r.estimate
        assert r.estimated is True and r.latency is None and r.memory is None and r.load_ms is None
        assert r.device["name"] == e["device"] and e["model"] == "roofline"
        assert e["efficiency"] == pytest.approx(0.5) and e["ms"] == pytest.approx(e["roofline_ms"] / 0.5)
        assert e["error"] == pytest.approx(0, abs=1e-9) and e["ms_range"] == pytest.approx([e["ms"], e["ms"]])
        assert e["calibration"]["observations"] == 2 and e["calibration"]["quality"] == "good"
        assert e["calibration"]["seq_lens"] == [8, 16] and "|CPUExecutionProvider|threads=1|" in e["calibration"]["class"]
        assert e["host_measured_ms"] == by_seq[r.seq_len].latency.p50  # this run's own p50, shown beside
        assert e["host_estimated_ms"] == pytest.approx(roof[r.seq_len] / 0.5) and e["host_error"] == pytest.approx(0)
    # same efficiency, twice every figure: half the time
    assert records[1].estimate["ms"] == pytest.approx(records[0].estimate["ms"] / 2)
    # An efficiency that differs by length: the fit (log-linear in MACs) meets each point, and
    # each left out is predicted by the other: |0.4 / 0.6 - 1| and |0.6 / 0.4 - 1|, the larger stated.
    uneven = [_timed(half[0], roof[8] / 0.4), _timed(half[1], roof[16] / 0.6)]
    e8 = estimate([onnx_file], [ROUND], (8,), 1, uneven, host=ROUND)[0].estimate
    assert e8["efficiency"] == pytest.approx(0.4) and e8["error"] == pytest.approx(0.5)
    assert e8["ms_range"] == pytest.approx([e8["ms"] * 0.5, e8["ms"] * 1.5])


def test_a_quiet_calibration_outranks_a_busy_one(onnx_file, measured, tmp_path):
    roof = _rooflines(onnx_file, measured)
    quiet = [_timed(m, roof[m.seq_len] / 0.5) for m in measured]
    busy = [_timed(m, roof[m.seq_len] / 0.2, "noisy") for m in measured]  # 2.5x slower: another job on the cores
    path = tmp_path / "calibration.json"
    estimate([onnx_file], [ROUND], (8, 16), 1, quiet, host=ROUND, calibration=Calibration.load(path, "h"))
    [later] = estimate([onnx_file], [ROUND], (8,), 1, busy, host=ROUND, calibration=Calibration.load(path, "h"))
    assert later.estimate["efficiency"] == pytest.approx(0.5) and later.estimate["calibration"]["quality"] == "good"
    assert later.estimate["host_error"] == pytest.approx(0.2 / 0.5 - 1)  # the busy run's own time, 2.5x off
    [alone] = estimate([onnx_file], [ROUND], (8,), 1, busy, host=ROUND)  # no calibration kept: on its own
    assert alone.estimate["efficiency"] == pytest.approx(0.2) and alone.estimate["calibration"]["quality"] == "noisy"
    [fresh] = estimate([onnx_file], [ROUND], (8,), 1, busy, host=ROUND,
                       calibration=Calibration.load(path, "h", fresh=True))
    assert fresh.estimate["efficiency"] == pytest.approx(0.2)
    kept = json.loads(path.read_text())
    assert kept["schema"] == "albert-edge.calibration/1" and [r["quality"] for c in kept["hosts"]["h"]["classes"].values()
                                                                for r in c] == ["noisy", "noisy"]
    path.write_text("{not json")
    assert Calibration.load(path, "h").classes == {}  # a damaged file: a new calibration, never a crash
    [fast] = estimate([onnx_file], [ROUND], (8,), 1, [_timed(m, roof[m.seq_len] / 3) for m in measured], host=ROUND)
    assert "faster than its roofline" in fast.estimate["efficiency_note"]


def test_a_setting_not_measured_is_an_unscaled_roofline(onnx_file):
    record, on_all_cores = estimate([onnx_file], "pi4", (8,), 1, [], threads=(1, 8))
    assert (record.threads, on_all_cores.threads) == (1, 4)  # capped at the Pi 4's cores
    assert on_all_cores.estimate["roofline_ms"] < record.estimate["roofline_ms"]
    assert record.estimated and record.latency is None and record.estimate["host_figures"] is None
    assert record.estimate["efficiency"] is None and record.estimate["ms"] == record.estimate["roofline_ms"]
    assert "unscaled" in record.estimate["note"]


def test_cli_prints_estimates_with_their_range(onnx_file, tmp_path):
    calibration = tmp_path / "cal.json"
    result = CliRunner().invoke(main, ["profile", str(onnx_file), *FAST, "--seq-len", "8,16", "--estimate", "pi4",
                                       "--calibration", str(calibration)])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "estimate (roofline" in out and "NOT measured" in out and "host fit" in out and "leave-one-out" in out
    assert calibration.is_file()  # kept for the next run
    estimate_table = out[out.index("estimate (roofline"):]
    assert estimate_table.count("pi4") == 2 and "%" in estimate_table


def test_cli_json_keeps_measured_and_estimated_apart(onnx_file, tmp_path):
    result = CliRunner().invoke(main, ["profile", str(onnx_file), *FAST, "--seq-len", "8", "--estimate",
                                       "pi5,jetson-nano", "--json", "--calibration", str(tmp_path / "c.json")])
    assert result.exit_code == 0, result.output
    records = json.loads(result.stdout)
    assert [r["estimated"] for r in records] == [False, True, True]
    measured, *estimates = records
    assert measured["latency"]["p50"] > 0 and measured["estimate"] is None
    assert [r["estimate"]["device"] for r in estimates] == ["pi5", "jetson-nano"]
    assert all(r["latency"] is None and r["memory"] is None for r in estimates)
    assert all(r["estimate"]["host_measured_ms"] == measured["latency"]["p50"] for r in estimates)
    assert {r["albert_edge_version"] for r in records} == {albert_edge.__version__}


def test_cli_unknown_device_is_one_line_before_measuring(onnx_file):
    result = CliRunner().invoke(main, ["profile", str(onnx_file), "--estimate", "pi4,pi9"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()  # nothing measured or counted first: no progress lines
    assert len(lines) == 1 and "pi9" in lines[0] and "jetson-orin-nano" in lines[0]


def test_cli_lists_the_devices():
    result = CliRunner().invoke(main, ["profile", "--estimate", "list"])
    assert result.exit_code == 0, result.output
    for d in DEVICES:
        assert d.name in result.stdout and d.source[:20] in result.stdout


def test_counts_and_estimates_run_without_torch_or_tensorflow(run_blocked, model_dir):
    result = run_blocked(f"""
        from albert_edge.profile import remote
        from albert_edge.device.catalog import device
        from albert_edge.profile.estimate import estimate
        from albert_edge.profile.opcount import count
        print(count({str(model_dir / 'model.onnx')!r}, 1, 8).macs, count({str(model_dir / 'model.tflite')!r}, 1, 8).macs)
        print(attempts)
    """)
    assert result.returncode == 0, result.stderr
    macs, attempts = result.stdout.strip().splitlines()[-2:]
    assert macs == f"{hand_macs(1, 8)} {hand_macs(1, 8)}" and attempts == "[]"


def test_lengths_the_file_cannot_run_are_left_out(onnx_file):
    too_long = CONFIG.max_position_embeddings + 8
    records = estimate([onnx_file], "pi4", (8, too_long), 1, [], threads=(1,))
    assert [r.seq_len for r in records] == [8]
    with pytest.raises(RuntimeUnavailable, match=f"1 x {too_long}"):
        estimate([onnx_file], "pi4", (too_long,), 1, [], threads=(1,))
