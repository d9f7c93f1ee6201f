"""The timing rules and the baseline comparison, on numbers we choose."""

from __future__ import annotations

import time

import pytest

from albert_edge.profile import ProfileError, ProfileSettings, forward_args
from albert_edge.profile.compare import compare
from albert_edge.profile.stats import block_spread, latency, time_calls


def test_stopping_rule_needs_both_runs_and_seconds():
    assert len(time_calls(lambda: None, runs=7, min_seconds=0)) == 7
    start = time.perf_counter()
    times = time_calls(lambda: time.sleep(0.001), runs=3, min_seconds=0.05)
    assert time.perf_counter() - start >= 0.05 and len(times) > 3 and min(times) >= 1.0


def test_latency_percentiles_and_block_spread():
    lat = latency([float(i) for i in range(1, 101)])
    assert (lat.count, lat.min, lat.max) == (100, 1.0, 100.0)
    assert lat.p50 == pytest.approx(50.5) and lat.p90 == pytest.approx(90.1) and lat.p99 == pytest.approx(99.01)
    assert block_spread([1.0] * 50) == 0.0
    assert block_spread([1.0] * 40 + [1.2] * 10) == pytest.approx(0.2)  # the last block 20% slower
    assert block_spread([1.0] * 9) is None  # too few to say


def record(p50: float, p90: float, spread: float | None = 0.01, peak: int = 100, **setting) -> dict:
    base = {"file_name": "m.onnx", "sha256": "abc", "format": "onnx", "provider": "CPUExecutionProvider",
            "threads": 1, "batch": 1, "seq_len": 16, "input_mode": "fixed", "host": None}
    return {**base, **setting, "latency": {"p50": p50, "p90": p90, "block_spread": spread},
            "memory": {"peak_after_timed": peak}}


def test_compare_marks_only_what_exceeds_the_noise():
    [same] = compare([record(1.03, 1.04)], [record(1.0, 1.0)])
    assert not same.regression and same.noise == 0.05
    [slow] = compare([record(1.3, 1.5)], [record(1.0, 1.0)])
    assert slow.regression and slow.p90_ratio == pytest.approx(1.5)
    [noisy] = compare([record(1.3, 1.3, spread=0.4)], [record(1.0, 1.0)])
    assert not noisy.regression and noisy.noise == 0.4  # both runs said they were this noisy
    [fat] = compare([record(1.0, 1.0, peak=130)], [record(1.0, 1.0)])
    assert fat.regression and fat.memory_ratio == pytest.approx(1.3)
    assert compare([record(1.0, 1.0, threads=2)], [record(1.0, 1.0)]) == []  # a different setting
    [renamed] = compare([record(2.0, 2.0, file_name="x.onnx")], [record(1.0, 1.0)])  # same sha256
    assert renamed.regression


def test_settings_are_checked_and_forwarded():
    with pytest.raises(ProfileError, match="threads must be positive"):
        ProfileSettings(threads=(0,))
    with pytest.raises(ProfileError, match="delegate must be one of"):
        ProfileSettings(delegates=("gpu",))
    with pytest.raises(ProfileError, match=r"ops_runs \(0\)"):
        ProfileSettings(ops_runs=0)
    settings = ProfileSettings(seq_lens=(8, 16), threads=(1, 4), ops=True, ops_runs=7, min_seconds=0.5)
    args = forward_args(settings)
    assert args[:2] == ["--seq-len", "8,16"] and "--ops" in args and args[args.index("--threads") + 1] == "1,4"
    assert args[args.index("--ops-runs") + 1] == "7"
    from albert_edge.cli.profile import profile

    params = profile.make_context("profile", ["m.onnx", *args]).params  # the command accepts them all
    assert (params["seq_len"], params["threads"], params["ops"], params["ops_runs"], params["min_seconds"]) == (
        "8,16", "1,4", True, 7, 0.5)
