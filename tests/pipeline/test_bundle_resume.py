"""`demo bundle` reports its progress (step, training loss, time left) and, after an interrupt,
goes on from the steps it finished: reused when made from the same inputs and intact, redone
otherwise; the bundle directory itself only ever appears complete."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from albert_edge.demo.engine import Bundle
from albert_edge.errors import AlbertEdgeError
from albert_edge.pipeline.bundle import STEPS, BundleOptions, make_bundle, partial_dir

REUSED = "reused from the interrupted build"


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """A pretraining cache of this module's own, so that its first build really trains."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(autouse=True)
def own_cache(cache, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))


def build(out: Path, stop_at: str | None = None, **options) -> list:
    """Build the tiny bundle into ``out``, with Ctrl-C as step ``stop_at`` starts; the progress
    reported."""
    seen = []

    def on_progress(p) -> None:
        seen.append(p)
        if p.step == stop_at and not p.reused:
            raise KeyboardInterrupt

    opts = BundleOptions(str(out), preset="tiny", threads=1, **options)
    if stop_at is None:
        make_bundle(opts, on_progress)
    else:
        with pytest.raises(KeyboardInterrupt):
            make_bundle(opts, on_progress)
    return seen


def reused(seen: list) -> list[str]:
    return [p.step for p in seen if p.reused]


def ran(seen: list) -> list[str]:
    return [p.step for p in seen if not p.reused and p.train_step is None]


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_training_progress_and_a_rerun_that_goes_on_from_the_finished_steps(tmp_path):
    out = tmp_path / "bundle"
    settings = dict(overrides={"pretrain_steps": 12})  # pretraining logs every 10 steps
    seen = build(out, stop_at=STEPS[3], **settings)
    training = [p for p in seen if p.train_step is not None]
    assert [(p.step, p.train_step, p.train_steps) for p in training] == [(STEPS[0], 10, 12), (STEPS[0], 12, 12),
                                                                         (STEPS[2], 2, 2)]
    assert all(p.loss > 0 for p in training)
    assert training[0].seconds_left > 0 and training[1].seconds_left == 0
    assert "step 10/12, loss " in str(training[0]) and str(training[0]).endswith("s left")
    assert not out.exists() and partial_dir(out).is_dir()  # never half a bundle

    seen = build(out, **settings)
    assert reused(seen) == list(STEPS[:3])
    assert ran(seen) == list(STEPS[3:])
    # nothing was trained again; the exits, trained after the interruption, train now
    assert {p.step for p in seen if p.train_step is not None} == {STEPS[7]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]

    whole = tmp_path / "whole"
    build(whole, **settings)
    assert files(out) == files(whole)
    info, whole_info = (json.loads((d / "bundle.json").read_text()) for d in (out, whole))
    assert {k: v for k, v in info.items() if k != "build_seconds"} == \
        {k: v for k, v in whole_info.items() if k != "build_seconds"}
    assert Bundle(out).info["labels"] == info["labels"]


def test_changed_options_and_damaged_steps_are_redone(tmp_path):
    out = tmp_path / "bundle"
    build(out, stop_at=STEPS[5])

    # another fine-tuning rate: fine-tuning and the classifier's conversion are redone, not the rest
    seen = build(out, stop_at=STEPS[5], overrides={"finetune_lr": 5e-3})
    assert reused(seen) == [STEPS[0], STEPS[1], STEPS[3]]
    assert ran(seen) == [STEPS[2], STEPS[4], STEPS[5]]

    (partial_dir(out) / "bundle" / "mlm" / "model.onnx").write_bytes(b"damaged")
    seen = build(out, overrides={"finetune_lr": 5e-3})
    assert reused(seen) == [STEPS[0], STEPS[1], STEPS[2], STEPS[4]]
    assert ran(seen) == [STEPS[3], *STEPS[5:]]
    assert Bundle(out).info["preset"] == "tiny" and not partial_dir(out).exists()


def test_other_exit_settings_redo_only_the_exits_and_the_adaptive_files(tmp_path):
    out = tmp_path / "bundle"
    build(out, stop_at=STEPS[-1])  # every step recorded, the bundle not yet in place
    seen = build(out, overrides={"exit_lr": 5e-3})
    assert reused(seen) == list(STEPS[:7]) and ran(seen) == list(STEPS[7:])
    assert json.loads((out / "bundle.json").read_text())["adaptive"]["max_passes"] == 2


def test_ctrl_c_on_the_command_then_the_same_command_goes_on(tmp_path, cache):
    out = tmp_path / "bundle"
    cmd = [sys.executable, "-m", "albert_edge", "demo", "bundle", "--out", str(out), "--preset", "tiny",
           "--threads", "1"]
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    for line in proc.stderr:  # not a terminal: one plain line per step
        if line.startswith(f"bundle [5/{len(STEPS)}] {STEPS[4]}"):
            proc.send_signal(signal.SIGINT)
            break
    rest = proc.communicate(timeout=300)[1]
    assert proc.returncode == 130, rest
    assert f"kept in {partial_dir(out)}: run the same command again" in rest
    assert not out.exists() and (partial_dir(out) / "pipeline.json").is_file()

    again = subprocess.run([*cmd, "--json"], capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 0, again.stderr
    said = [line for line in again.stderr.splitlines() if REUSED in line]
    assert said == [f"bundle [{i + 1}/{len(STEPS)}] {STEPS[i]}: {REUSED}" for i in range(4)]
    assert json.loads(again.stdout) == json.loads((out / "bundle.json").read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]


def test_a_partial_directory_the_build_did_not_write_is_left_alone(tmp_path):
    out = tmp_path / "bundle"
    theirs = partial_dir(out)
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    with pytest.raises(AlbertEdgeError, match="did not write"):
        make_bundle(BundleOptions(str(out), preset="tiny", force=True))
    assert (theirs / "notes.txt").read_text() == "mine" and not out.exists()
