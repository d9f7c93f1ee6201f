"""The timing rules and the baseline comparison, on numbers we choose."""

from __future__ import annotations

import time

import pytest

from albert_edge.profile import ProfileError, ProfileSettings, forward_args
import numpy as np

from albert_edge.profile.compare import compare, mann_whitney, ratio_interval
from albert_edge.profile.stats import block_spread, judge, latency, quantile_ci, time_until


def test_stopping_rule_needs_runs_and_seconds_then_a_narrow_interval():
    times, why = time_until(lambda: None, runs=7, min_seconds=0, max_seconds=0)
    assert len(times) >= 7 and why in ("interval", "budget")
    start = time.perf_counter()
    times, _ = time_until(lambda: time.sleep(0.001), runs=3, min_seconds=0.05, max_seconds=0.05)
    assert time.perf_counter() - start >= 0.05 and len(times) > 3 and min(times) >= 1.0
    # Calls that alternate between 1 and 3 ms never give a narrow p50 interval: the budget stops it.
    flip = iter(range(10**6))
    times, why = time_until(lambda: time.sleep(0.001 if next(flip) % 2 else 0.003), runs=10, min_seconds=0,
                            max_seconds=0.3, target=0.001)
    assert why == "budget" and 0.3 <= sum(times) / 1e3 < 0.6
    times, why = time_until(lambda: time.sleep(0.002), runs=10, min_seconds=0, max_seconds=5, target=0.5)
    assert why == "interval" and len(times) < 100  # steady calls: stops as soon as the interval is narrow


def test_latency_percentiles_intervals_and_block_spread():
    lat = latency([float(i) for i in range(1, 101)])
    assert (lat.count, lat.min, lat.max) == (100, 1.0, 100.0)
    assert lat.p50 == pytest.approx(50.5) and lat.p90 == pytest.approx(90.1) and lat.p99 == pytest.approx(99.01)
    # n = 100: the p50's 95% interval is the order statistics at ranks 50 -/+ 9.8 (0-based 40 and 60).
    assert lat.p50_ci == [41.0, 61.0] and lat.p90_ci == [85.0, 97.0]  # p90: ranks 90 -/+ 5.9
    assert lat.p50_ci_width == pytest.approx(20 / 50.5)
    assert lat.fastest_block_p50 == pytest.approx(10.5) and lat.samples == [float(i) for i in range(1, 101)]
    assert block_spread([1.0] * 50) == 0.0
    assert block_spread([1.0] * 40 + [1.2] * 10) == pytest.approx(0.2)  # the last block 20% slower
    assert block_spread([1.0] * 9) is None  # too few to say
    assert quantile_ci([1.0, 2.0, 3.0], 0.5) is None
    assert len(latency([1.0] * 10_000).samples) == 4000  # thinned evenly


def _steady(n=400, middle=10.0, sd=0.05, seed=0):
    return list(np.random.default_rng(seed).normal(middle, sd, n))


def test_judge_gives_the_known_verdicts():
    assert judge(latency(_steady())) == ("good", [])
    quality, why = judge(latency(_steady()), machine=["machine busy: other work kept 1.00 of 2 cores busy"])
    assert quality == "noisy" and why[0].startswith("machine busy")
    drifting = latency(_steady(200) + _steady(200, middle=12.0))  # the second half 20% slower
    assert judge(drifting)[0] == "noisy" and any("block medians differ" in r for r in judge(drifting)[1])
    held_up = latency([35.0 if i % 4 == 3 else t for i, t in enumerate(_steady())])  # every 4th call waited
    assert judge(held_up)[0] == "noisy" and any("held up" in r for r in judge(held_up)[1])
    assert judge(held_up, fixed_shape=False)[0] == "good"  # real text: long sentences are no noise
    assert judge(latency([1.0, 2.0, 3.0, 4.0, 5.0]))[0] == "unusable"  # too few calls
    wide = latency(list(np.random.default_rng(1).uniform(1, 30, 60)))
    assert judge(wide)[0] == "unusable" and any("interval" in r for r in judge(wide)[1])


def record(p50: float, p90: float, spread: float | None = 0.01, peak: int = 100, samples=None, quality="good",
           **setting) -> dict:
    base = {"file_name": "m.onnx", "sha256": "abc", "format": "onnx", "provider": "CPUExecutionProvider",
            "threads": 1, "batch": 1, "seq_len": 16, "input_mode": "fixed", "host": None}
    return {**base, **setting, "latency": {"p50": p50, "p90": p90, "block_spread": spread, "samples": samples,
                                           "quality": quality},
            "memory": {"peak_after_timed": peak}}


def timed(samples, quality="good", **kw) -> dict:
    t = np.asarray(samples)
    return record(float(np.median(t)), float(np.percentile(t, 90)), samples=list(t), quality=quality, **kw)


def test_mann_whitney_and_the_ratio_interval_on_known_sets():
    # Disjoint sets of 10: U = 0, the exact two-sided p is 2 / C(20, 10) = 1.1e-5; the normal
    # approximation with continuity correction gives 1.8e-4.
    assert mann_whitney(range(10), range(10, 20)) == pytest.approx(1.8e-4, rel=0.05)
    assert mann_whitney([5.0] * 30, [5.0] * 30) == 1.0  # all tied: nothing to tell apart
    assert mann_whitney(_steady(seed=1), _steady(seed=2)) > 0.01
    low, high = ratio_interval(_steady(middle=11.5, seed=1), _steady(seed=2))
    assert low < 1.15 < high and high - low < 0.01


def test_compare_gives_statistical_verdicts():
    old = timed(_steady(seed=1))
    [same] = compare([timed(_steady(seed=2))], [old])
    assert same.verdict == "no change" and not same.regression and same.p_value > 0.01
    [slow] = compare([timed(_steady(middle=11.5, seed=3))], [old])  # a real 15% slowdown
    assert slow.verdict == "slower" and slow.regression and slow.p_value < 1e-6
    assert slow.ratio_ci[0] > 1.05 and slow.p50_ratio == pytest.approx(1.15, rel=0.01)
    [fast] = compare([timed(_steady(middle=8.0, seed=3))], [old])
    assert fast.verdict == "faster" and not fast.regression
    [small] = compare([timed(_steady(middle=10.2, seed=3))], [old])  # 2% slower, significant, below threshold
    assert small.verdict == "no change" and small.p_value < 0.01
    [edge] = compare([timed(_steady(middle=10.2, seed=3))], [old], threshold=0.01)
    assert edge.verdict == "slower"  # the same 2% is a regression when the user asks for 1%
    [fat] = compare([timed(_steady(seed=2), peak=130)], [old])
    assert fat.regression and fat.memory_grew and fat.verdict == "no change"
    assert compare([timed(_steady(), threads=2)], [old]) == []  # a different setting
    [renamed] = compare([timed(_steady(middle=20.0), file_name="x.onnx")], [old])  # same sha256
    assert renamed.verdict == "slower"


def test_a_noisy_record_is_never_a_regression():
    old = timed(_steady(seed=1))
    for new, base in ((timed(_steady(middle=30.0), quality="noisy"), old),
                      (timed(_steady(middle=30.0)), timed(_steady(seed=1), quality="unusable"))):
        [c] = compare([new], [base])
        assert c.verdict == "inconclusive" and not c.regression and ("noisy" in c.why or "unusable" in c.why)
    [old_style] = compare([timed(_steady(middle=30.0))], [record(10.0, 10.0, quality=None)])  # no samples
    assert old_style.verdict == "inconclusive" and "no call times" in old_style.why


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
