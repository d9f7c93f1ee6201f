"""benchmarks/_harness.py on a trivial measurement: its child mode runs a function of a job in a
fresh process and hands back what it returned, rounds interleave the contestants in the order
they promise, the result file names where its figures come from, and no benchmark keeps a child
mode of its own."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"

# The trivial measurement: the job doubled, the process it ran in, and a line in a shared log per
# call, so the order the children ran in can be read back.
MEASUREMENT = '''
import os


def measure(job):
    with open(job["log"], "a") as log:
        log.write(job["key"] + "\\n")
    return {"key": job["key"], "twice": job["x"] * 2, "pid": os.getpid(),
            "omp": os.environ.get("OMP_WAIT_POLICY")}


def fail(job):
    raise RuntimeError("the measurement broke: " + job["why"])
'''


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # the benchmarks import each other by these names
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def harness():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield _module("_harness")
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.fixture
def measurement(tmp_path):
    """The trivial measurement's module, importable by the children (PYTHONPATH), and its log."""
    (tmp_path / "trivial_measurement.py").write_text(MEASUREMENT)
    return {"PYTHONPATH": str(tmp_path)}, tmp_path / "calls.log"


def test_the_child_mode_runs_the_function_in_a_fresh_process_and_returns_its_json(harness, measurement):
    env, log = measurement
    got = [harness.child("trivial_measurement:measure", {"key": "a", "x": 21, "log": str(log)}, "trivial", env=env)
           for _ in range(2)]
    assert [g["twice"] for g in got] == [42, 42]
    pids = {g["pid"] for g in got}
    assert len(pids) == 2 and os.getpid() not in pids  # a new process each time
    assert got[0]["omp"] == "PASSIVE"  # OpenMP threads do not spin between calls
    assert log.read_text().splitlines() == ["a", "a"]


def test_the_child_mode_from_the_command_line(measurement):
    """``python benchmarks/_harness.py --child MODULE:FUNCTION JOB``: the result is the last line."""
    env, log = measurement
    job = json.dumps({"key": "cli", "x": 5, "log": str(log)})
    done = subprocess.run([sys.executable, str(BENCHMARKS / "_harness.py"), "--child", "trivial_measurement:measure",
                           job], capture_output=True, text=True, env={**os.environ, **env}, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["twice"] == 10


def test_a_failed_child_stops_the_benchmark_saying_which_and_why(harness, measurement):
    env, _ = measurement
    with pytest.raises(SystemExit) as stopped:
        harness.child("trivial_measurement:fail", {"why": "on purpose"}, "the failing one", env=env)
    said = str(stopped.value)
    assert said.startswith("the failing one: child failed (1):")
    assert "RuntimeError: the measurement broke: on purpose" in said


def test_the_model_is_read_cold_and_stays_whole(harness, measurement, tmp_path):
    """A model file named to ``child`` is dropped from the page cache first, not changed."""
    env, log = measurement
    model = tmp_path / "model.bin"
    model.write_bytes(b"\x01" * 4096)
    harness.child("trivial_measurement:measure", {"key": "m", "x": 0, "log": str(log)}, "cold", model, env)
    assert model.read_bytes() == b"\x01" * 4096


def test_rounds_interleave_every_contestant_once_per_round(harness, measurement, capsys):
    env, log = measurement

    def one(key: str) -> dict:
        return harness.child("trivial_measurement:measure", {"key": key, "x": len(key), "log": str(log)}, key, env=env)

    got = harness.interleave(("a", "bb", "ccc"), 3, one, said=lambda key: f"measured {key}",
                             after_round=lambda r, so_far: f"round {r + 1} done, {len(so_far['a'])} of a")
    assert log.read_text().splitlines() == ["a", "bb", "ccc"] * 3
    assert {key: [g["twice"] for g in runs] for key, runs in got.items()} == {"a": [2] * 3, "bb": [4] * 3,
                                                                               "ccc": [6] * 3}
    assert len({g["pid"] for runs in got.values() for g in runs}) == 9  # every measurement in its own process
    err = capsys.readouterr().err.splitlines()
    assert err[:4] == ["round 1/3: measured a", "round 1/3: measured bb", "round 1/3: measured ccc",
                       "round 1 done, 1 of a"]
    assert err[-1] == "round 3 done, 3 of a" and len(err) == 12


def test_alternating_rounds_put_neither_of_two_first_every_time(harness, measurement):
    env, log = measurement
    harness.interleave(("exact", "buckets"), 4, lambda key: harness.child(
        "trivial_measurement:measure", {"key": key, "x": 0, "log": str(log)}, key, env=env), alternate=True)
    assert log.read_text().splitlines() == ["exact", "buckets", "buckets", "exact"] * 2


def test_the_spread_beside_the_median(harness):
    assert harness.median([3.0, 1.04, 2.0], 1) == 2.0
    assert harness.spread((x for x in [3.04, 1.06, 2.0]), 1) == [1.1, 3.0]


def test_the_result_file_names_command_commit_date_machine_and_versions(harness, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(BENCHMARKS / "trivial.py"), "--rounds", "3"])
    header = harness.start("trivial", versions=("pytest",))
    out = harness.write(tmp_path / "results" / "trivial.json", header, {"rows": [{"ratio": 1.5}]})
    assert sorted(p.name for p in out.parent.iterdir()) == ["trivial.json"]  # written whole, nothing left beside
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["benchmark"] == "trivial" and result["rows"] == [{"ratio": 1.5}]
    assert result["command"] == "python benchmarks/trivial.py --rounds 3"
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    assert result["commit"] == (head or None) and result["tree_changed"] in (True, False, None)
    assert result["date"][:2] == "20" and result["date"].endswith("+00:00")
    machine = result["machine"]
    assert {"platform", "python", "cpu", "load_at_start", "load_at_end"} <= set(machine)
    assert machine["cpu"]["cores"] == os.cpu_count() and isinstance(machine["cpu"]["flags"], list)
    assert list(result["versions"]) == ["albert-edge", "numpy", "pytest"]
    assert result["versions"]["pytest"] == pytest.__version__
    # the docs' renderer reads it as it reads every result file
    renderer = _module("render_results")
    assert renderer._source("trivial.json", result).startswith("From `benchmarks/results/trivial.json` (trivial, 20")


def test_no_benchmark_keeps_a_child_mode_of_its_own():
    own = sorted(p.name for p in BENCHMARKS.glob("*.py") if "--child" in p.read_text(encoding="utf-8"))
    assert own == ["_harness.py"]


@pytest.mark.parametrize("script", sorted(p.name for p in BENCHMARKS.glob("*.py")
                                          if p.name != "_harness.py" and "__main__" in p.read_text(encoding="utf-8")))
def test_every_benchmark_answers_help(script):
    """Each script imports cleanly and parses its options (the shared ones from the harness)."""
    done = subprocess.run([sys.executable, str(BENCHMARKS / script), "--help"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: ")
