"""`albert-edge pipeline` on a tiny checkpoint, through the CLI: every step once, a re-run that
skips what is up to date (and redoes what changed), --only/--skip, and a directory that is not
a pipeline's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from albert_edge.cli import main

FAST = ["--seq-len", "16", "--profile-seq-len", "8,16", "--runs", "2", "--min-seconds", "0", "--threads", "1",
        "--to", "onnx", "--scheme", "int8-dynamic"]


def pipeline(*args) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["pipeline", *map(str, args)])
    return result.exit_code, result.output


def statuses(*args) -> dict[str, str]:
    result = CliRunner().invoke(main, ["pipeline", *map(str, args), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)  # (progress lines go to stderr)
    return {s["step"]: s["status"] for s in data["steps"]}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    import torch

    from albert_edge import checkpoints
    from albert_edge.config import AlbertConfig
    from albert_edge.model import build_model

    torch.manual_seed(0)
    return checkpoints.save(build_model(AlbertConfig.preset("tiny"), "base"), tmp_path_factory.mktemp("p") / "ckpt")


@pytest.fixture(scope="module")
def ran(tmp_path_factory, checkpoint) -> Path:
    out = tmp_path_factory.mktemp("pipeline") / "out"
    code, output = pipeline(checkpoint, "--out", out, *FAST)
    assert code == 0, output
    assert "report of ckpt: " in output and str(out / "ckpt" / "report" / "report.html") in output
    return out


def test_every_step_ran(ran):
    model = ran / "ckpt"
    assert {p.name for p in (model / "files").iterdir()} >= {"model.onnx", "model.int8-dynamic.onnx", "manifest.json"}
    records = json.loads((model / "profile.json").read_text())
    assert {(r["file_name"], r["seq_len"]) for r in records} == {
        (f, n) for f in ("model.onnx", "model.int8-dynamic.onnx") for n in (8, 16)}
    report = json.loads((model / "report" / "report.json").read_text())
    assert report["profile"] == records
    assert {f["name"] for f in report["files"]} == {"model.onnx", "model.int8-dynamic.onnx"}
    assert report["context"]["model"] == "ckpt"
    state = json.loads((ran / "pipeline.json").read_text())
    assert set(state["steps"]) == {f"ckpt/{s}" for s in ("convert", "quantize", "profile", "report")}


def test_rerun_skips_what_is_up_to_date_and_redoes_what_changed(ran):
    assert statuses("--out", ran, *FAST, *_source(ran)) == {
        "checkpoint": "given", "convert": "skipped (up to date)", "quantize": "skipped (up to date)",
        "profile": "skipped (up to date)", "report": "skipped (up to date)"}
    # a changed output is not trusted: profile runs again, and the report that reads it
    profile = ran / "ckpt" / "profile.json"
    profile.write_text(profile.read_text().replace('"threads": 1', '"threads": 1 '))
    assert statuses("--out", ran, *FAST, *_source(ran)) == {
        "checkpoint": "given", "convert": "skipped (up to date)", "quantize": "skipped (up to date)",
        "profile": "ran", "report": "ran"}


def test_a_file_the_manifest_no_longer_vouches_for_is_made_again(ran):
    from albert_edge.formats.manifest import read, write

    files = ran / "ckpt" / "files"
    manifest = read(files)
    manifest.files = [e for e in manifest.files if e.name != "model.int8-dynamic.onnx"]
    write(manifest, files)
    steps = statuses("--out", ran, *FAST, "--skip", "profile,report", *_source(ran))
    assert steps["convert"] == "skipped (up to date)" and steps["quantize"] == "ran"
    assert read(files).file("model.int8-dynamic.onnx")


def _source(out: Path) -> list[str]:
    return [json.loads((out / "pipeline.json").read_text())["source"]["source"]]


def test_only_and_skip(ran):
    assert statuses("--out", ran, *FAST, "--only", "report", *_source(ran))["convert"] == "left out"
    steps = statuses("--out", ran, *FAST, "--skip", "profile,report", *_source(ran))
    assert steps["profile"] == steps["report"] == "left out"


@pytest.mark.parametrize("args, message", [
    (["--only", "deploy"], "steps are checkpoint, convert, quantize, profile, report"),
    (["--only", "report", "--skip", "profile"], "not both"),
    (["--profile-seq-len", "64"], "beyond the conversion's --seq-len"),
    (["--scheme", "int8-full"], "scheme 'int8-full' is not available for onnx"),
    # A selection that selects nothing is a mistake, not "every step".
    (["--only", ","], "Invalid value for '--only': ',' names no step; give one or more of checkpoint, convert"),
    (["--only", ""], "Invalid value for '--only': '' names no step"),
    (["--only", " , ,"], "names no step"),
    (["--skip", ","], "Invalid value for '--skip': ',' names no step"),
    (["--skip", ""], "Invalid value for '--skip': '' names no step"),
])
def test_bad_options(tmp_path, checkpoint, args, message):
    code, output = pipeline(checkpoint, "--out", tmp_path / "out", *FAST, *args)
    assert code == 2 and message in output and len(output.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("option", ["--only", "--skip"])
def test_an_empty_selection_is_refused_in_a_real_process(tmp_path, checkpoint, option):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "albert_edge", "pipeline", str(checkpoint), "--out",
                           str(tmp_path / "out"), *FAST, option, ","], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and not proc.stdout
    assert proc.stderr.strip().splitlines() == [f"Error: Invalid value for '{option}': ',' names no step; give one "
                                                "or more of checkpoint, convert, quantize, profile, report, "
                                                "comma-separated (or leave the option out) (see 'albert-edge "
                                                "pipeline --help')"]
    assert not (tmp_path / "out").exists()


def test_a_users_directory_is_left_alone(tmp_path, checkpoint):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    code, output = pipeline(checkpoint, "--out", out, *FAST)
    assert code == 2 and "did not write" in output and "--force" in output
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_missing_source(tmp_path):
    code, output = pipeline(tmp_path / "nothing", "--out", tmp_path / "out")
    assert code == 2 and "no such checkpoint" in output


def test_default_small_model_is_cached_keyed_and_verified(tmp_path, monkeypatch):
    """The built-in default's trained model: trained once, reused while its files verify, trained
    again when the cached copy was altered or the recipe changed."""
    import dataclasses

    from albert_edge.pipeline import default, small

    monkeypatch.setattr(small, "cache_dir", lambda: tmp_path / "cache")
    tiny = dataclasses.replace(small.PIPELINE_RECIPE, vocab_size=300, steps=2, batch_size=4, max_seq_length=32,
                               config=dict(embedding_size=8, hidden_size=16, num_hidden_layers=2, num_hidden_groups=1,
                                           num_attention_heads=2, intermediate_size=32, max_position_embeddings=32))
    monkeypatch.setattr(default, "PIPELINE_RECIPE", tiny)
    trained = []
    real_train = small._train
    monkeypatch.setattr(small, "_train", lambda *a: (trained.append(1), real_train(*a))[1])

    ckpt, figures = default.make_small(tmp_path / "a")
    assert {p.name for p in ckpt.iterdir()} >= {"config.json", "model.safetensors", "spiece.model"}
    assert figures["step"] == 2 and len(trained) == 1
    default.make_small(tmp_path / "b")
    assert len(trained) == 1  # from the cache
    assert (tmp_path / "b" / "model.safetensors").read_bytes() == (ckpt / "model.safetensors").read_bytes()
    cached = next((tmp_path / "cache").glob(f"{default.SMALL_NAME}-*"))
    with open(cached / "checkpoint" / "model.safetensors", "ab") as fh:
        fh.write(b"\0")
    default.make_small(tmp_path / "c")
    assert len(trained) == 2  # altered: not trusted
    monkeypatch.setattr(default, "PIPELINE_RECIPE", dataclasses.replace(tiny, seed=1))
    default.make_small(tmp_path / "d")
    assert len(trained) == 3 and len(list((tmp_path / "cache").glob(f"{default.SMALL_NAME}-*"))) == 2


def test_rerun_in_a_real_process(ran):
    import subprocess
    import sys

    statuses("--out", ran, *FAST, *_source(ran))  # whatever earlier tests changed is made again
    proc = subprocess.run([sys.executable, "-m", "albert_edge", "pipeline", *_source(ran), "--out", str(ran), *FAST,
                           "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert {s["status"] for s in data["steps"]} <= {"given", "skipped (up to date)"}
    assert data["reports"] == {"ckpt": str(ran / "ckpt" / "report" / "report.html")}


def test_executorch_target_converts_with_its_int8_file(tmp_path, checkpoint):
    """--to executorch: the conversion makes model.pte and model.int8-dynamic.pte (it needs the
    PyTorch model), and the quantize step has nothing left to do for it."""
    pytest.importorskip("executorch.runtime")
    out = tmp_path / "out"
    # (ExecuTorch's import writes notes to stderr, which CliRunner mixes into the output: no --json here)
    code, output = pipeline(checkpoint, "--out", out, *FAST[:4], "--to", "executorch", "--scheme", "int8-dynamic",
                            "--only", "convert,quantize")
    assert code == 0, output
    state = json.loads((out / "pipeline.json").read_text())
    assert set(state["steps"]) == {"ckpt/convert", "ckpt/quantize"}
    manifest = json.loads(next(out.glob("*/files/manifest.json")).read_text())
    assert {f["name"]: f["precision"] for f in manifest["files"]} == {
        "model.pte": "fp32", "model.int8-dynamic.pte": "int8-dynamic"}


def _ran_target(checkpoint, out: Path, target: str) -> tuple[Path, dict[str, str], list[dict]]:
    """The pipeline run with ``--to target`` only: its files directory, each file's precision as
    the manifest says, and the profile records."""
    code, output = pipeline(checkpoint, "--out", out, *FAST[:10], "--to", target, "--json")
    assert code == 0, output
    files = next(out.glob("*/files"))
    manifest = json.loads((files / "manifest.json").read_text())
    records = json.loads(next(out.glob("*/profile.json")).read_text())
    records = records if isinstance(records, list) else records.get("records", [])
    return files, {f["name"]: f["precision"] for f in manifest["files"]}, records


def test_ort_target_converts_profiles_and_reports_with_its_int8_file(tmp_path, checkpoint):
    """--to ort: the conversion makes model.ort and model.int8-dynamic.ort with the operator
    configurations beside them; both are profiled and reported; the quantize step leaves them be."""
    out = tmp_path / "out"
    files, precisions, records = _ran_target(checkpoint, out, "ort")
    assert precisions == {"model.ort": "fp32", "model.int8-dynamic.ort": "int8-dynamic"}
    assert (files / "required_operators.config").is_file() and (files / "required_operators_and_types.config").is_file()
    assert {Path(r["file"]).name for r in records} == {"model.ort", "model.int8-dynamic.ort"}
    assert {r["format"] for r in records} == {"ort"}
    assert next(out.glob("*/report/report.html")).is_file()


def test_onnx_text_target_converts_profiles_and_reports_with_its_int8_file(tmp_path, spiece_model):
    """--to onnx-text: the conversion makes model.text.onnx and model.int8-dynamic.text.onnx; both are
    profiled as files that take the text (tokenizer and model timed) and reported with the
    framework that loads them; the quantize step leaves them be."""
    pytest.importorskip("onnxruntime_extensions")
    import torch

    from albert_edge import checkpoints
    from albert_edge.config import AlbertConfig
    from albert_edge.model import build_model

    torch.manual_seed(0)
    config = AlbertConfig.preset("tiny").replace(vocab_size=400)
    ckpt = checkpoints.save(build_model(config, "base"), tmp_path / "ckpt", spiece=spiece_model)
    out = tmp_path / "out"
    _, precisions, records = _ran_target(ckpt, out, "onnx-text")
    assert precisions == {"model.text.onnx": "fp32", "model.int8-dynamic.text.onnx": "int8-dynamic"}
    assert {(Path(r["file"]).name, r["seq_len"]) for r in records} == {
        (name, n) for name in ("model.text.onnx", "model.int8-dynamic.text.onnx") for n in (8, 16)}
    assert {r["input_kind"] for r in records} == {"text"}
    assert "onnxruntime-extensions" in next(out.glob("*/report/report.md")).read_text()
