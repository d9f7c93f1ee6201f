"""`albert-edge quantize`: a table or JSON on success; bad input is one line, exit 2 and nothing
written; a failed --max-drop is exit 1 and no file. Once through a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

import onnx
import pytest
from click.testing import CliRunner

from albert_edge.cli import main
from albert_edge.formats import manifest as manifest_io

from .conftest import CORPUS, copy_dir


def _run(*args: str):
    return CliRunner().invoke(main, ["quantize", *map(str, args)])


def _listing(directory):
    return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in directory.rglob("*"))


def test_quantize_prints_a_table(workdir):
    result = _run(workdir / "model.onnx", "--scheme", "int8-dynamic", "--calibration", CORPUS,
                  "--eval-samples", "16", "--out", workdir / "q.onnx")
    assert result.exit_code == 0, result.output
    for text in ("prediction_logits", "MLM top-1", "cosine mean", "every matrix-product weight is stored quantized",
                 "stored exactly once", "wrote", "by input length", "<=8", "9-32"):
        assert text in result.output
    assert all(len(line) <= 100 for line in result.output.splitlines() if "prediction_logits" in line)  # tables
    assert manifest_io.read(workdir).file("q.onnx").precision == "int8-dynamic"


def test_quantize_json(workdir):
    result = _run(workdir / "model.onnx", "--scheme", "int8-static", "--calibration", CORPUS, "--method",
                  "percentile", "--samples", "16", "--eval-samples", "16", "--out", workdir / "q.onnx", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["kept"] and data["scheme"] == "int8-static" and data["calibration"]["method"] == "percentile"
    assert data["check"]["problems"] == [] and data["check"]["copies"] == {} and data["float_weights"] == []
    assert data["accuracy"]["outputs"][0]["name"] == "prediction_logits" and data["size_ratio"] > 0
    by_length = data["accuracy"]["outputs"][0]["by_length"]  # the held-out text has short texts too
    assert "<=8" in by_length and sum(b["rows"] for b in by_length.values()) == data["accuracy"]["outputs"][0]["rows"]
    parity = manifest_io.read(workdir).file("q.onnx").parity
    assert parity["accuracy"]["outputs"][0]["by_length"] == by_length  # and the record keeps them


@pytest.mark.parametrize("model", ["model.onnx", "model.tflite"])
def test_inspect_shows_precision_and_float_weights(workdir, model):
    """`albert-edge inspect` of a quantized file: bytes per precision, no unexpected float
    weight, every parent weight found once by value; with --no-embeddings the table it kept in
    float is listed with the reason."""
    src = workdir / model
    full, kept = src.with_suffix(".q" + src.suffix), src.with_suffix(".float-table" + src.suffix)
    # The TFLite converter always quantizes the table: --no-embeddings is ONNX only.
    made = ((full, []), (kept, ["--no-embeddings"])) if model.endswith(".onnx") else ((full, []),)
    for out, extra in made:
        result = _run(src, "--scheme", "int8-dynamic", "--calibration", CORPUS, "--eval-samples", "8",
                      "--out", out, *extra)
        assert result.exit_code == 0, result.output
    shown = CliRunner().invoke(main, ["inspect", str(full)])
    assert shown.exit_code == 0, shown.output
    assert "every matrix-product weight is stored quantized" in shown.output
    assert f"fp32 parent {model} looked for by value" in shown.output and "stored more than once: 0" in shown.output
    data = json.loads(CliRunner().invoke(main, ["inspect", str(full), "--json"]).stdout)["precision"]
    assert data["unexpected_float_weights"] == 0 and data["stored_more_than_once"] == {}
    assert data["weight_bytes_by_dtype"]["int8"] > 0.5 * sum(data["weight_bytes_by_dtype"].values())
    assert data["parent"] == model and data["weights_checked"] >= 8
    fp32 = CliRunner().invoke(main, ["inspect", str(src)])
    assert "fp32 file, nothing in it is quantized" in fp32.output
    if not kept.exists():
        return

    data = json.loads(CliRunner().invoke(main, ["inspect", str(kept), "--json"]).stdout)["precision"]
    assert data["unexpected_float_weights"] == 0
    assert [w["reason"] for w in data["float_weights"]] and all(
        "word-embedding table" in w["reason"] for w in data["float_weights"])
    shown = CliRunner().invoke(main, ["inspect", str(kept)])
    assert "Matrix products reading a float weight" in shown.output and "unexpected float weights: 0" in shown.output


def _rename_input(path):
    model = onnx.load(str(path))
    model.graph.input[0].name = "ids"
    for node in model.graph.node:
        node.input[:] = ["ids" if name == "input_ids" else name for name in node.input]
    onnx.save(model, str(path))
    data = json.loads((path.parent / "manifest.json").read_text())
    for entry in data["files"]:
        if entry["name"] == path.name:
            entry["sha256"], entry["size"] = manifest_io.sha256_of(path), path.stat().st_size
    (path.parent / "manifest.json").write_text(json.dumps(data))


def _bad_cases(workdir, tmp_path, big_spiece):
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    (lonely / "model.onnx").write_bytes((workdir / "model.onnx").read_bytes())
    empty, latin = tmp_path / "empty.txt", tmp_path / "latin.txt"
    empty.write_text("")
    latin.write_bytes("D\u00e9j\u00e0 vu, \u00e7a arrive tr\u00e8s souvent \u00e0 la f\u00eate.".encode("latin-1"))
    renamed = copy_dir(workdir, tmp_path / "renamed")
    _rename_input(renamed / "model.onnx")
    changed = copy_dir(workdir, tmp_path / "changed")
    with open(changed / "model.onnx", "ab") as fh:
        fh.write(b"\0")
    model = workdir / "model.onnx"
    return {
        "no manifest": ([lonely / "model.onnx", "--scheme", "int8-dynamic"], "no manifest.json", lonely),
        "unknown inputs": ([renamed / "model.onnx", "--scheme", "int8-dynamic"], "has inputs", renamed),
        "changed file": ([changed / "model.onnx", "--scheme", "int8-dynamic"], "has changed", changed),
        "empty text": ([model, "--scheme", "int8-static", "--calibration", empty], "is empty", workdir),
        "latin-1 text": ([model, "--scheme", "int8-dynamic", "--calibration", latin], "not UTF-8", workdir),
        "tokenizer vocab": ([model, "--scheme", "int8-dynamic", "--tokenizer", big_spiece],
                            "430 pieces but the model's vocab_size is 400", workdir),
        "onnx int8-full": ([model, "--scheme", "int8-full"], "does not exist for onnx", workdir),
        "tflite int8-static": ([workdir / "model.tflite", "--scheme", "int8-static"], "does not exist for tflite",
                               workdir),
        "unknown scheme": ([model, "--scheme", "int4"], "unknown scheme", workdir),
        "tflite entropy": ([workdir / "model.tflite", "--scheme", "int8-full", "--method", "entropy"],
                           "not available", workdir),
        "static without text": ([model, "--scheme", "int8-static", "--tokenizer", ""], "needs real text", workdir),
        "missing model": ([workdir / "nope.onnx", "--scheme", "fp16"], "no such file", workdir),
    }


@pytest.fixture(scope="module")
def big_spiece(tmp_path_factory):
    from albert_edge.tokenizer import train_spiece

    # More pieces than the model's 400 ids: fewer would be fine (every id it gives is in range).
    return train_spiece([CORPUS], tmp_path_factory.mktemp("spiece430"), vocab_size=430)


CASE_NAMES = ["no manifest", "unknown inputs", "changed file", "empty text", "latin-1 text", "tokenizer vocab",
              "onnx int8-full", "tflite int8-static", "unknown scheme", "tflite entropy", "static without text",
              "missing model"]


@pytest.mark.parametrize("case", CASE_NAMES)
def test_bad_input_is_one_line_exit_2_and_nothing_written(workdir, tmp_path, big_spiece, case):
    args, message, directory = _bad_cases(workdir, tmp_path, big_spiece)[case]
    if args[-1] == "":  # no tokenizer at all: the checkpoint's spiece.model is hidden
        args = args[:-2]
        (workdir / "manifest.json").write_text((workdir / "manifest.json").read_text().replace(
            '"checkpoint": "', '"checkpoint": "/nonexistent'))
    before = _listing(directory)
    suffix = args[0].suffix
    result = _run(*args, "--out", directory / f"out{suffix}")
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0], result.output
    assert _listing(directory) == before


def test_out_must_keep_the_format(workdir):
    result = _run(workdir / "model.onnx", "--scheme", "fp16", "--out", workdir / "model.tflite")
    assert result.exit_code == 2 and "must end in .onnx" in result.output


def test_a_quantized_file_is_not_quantized_again(workdir):
    assert _run(workdir / "model.onnx", "--scheme", "fp16", "--calibration", CORPUS, "--eval-samples", "8",
                "--out", workdir / "half.onnx").exit_code == 0
    result = _run(workdir / "half.onnx", "--scheme", "int8-dynamic", "--out", workdir / "q.onnx")
    assert result.exit_code == 2 and "already quantized (fp16)" in result.output


def test_max_drop_failing_is_exit_1_and_no_file(base_onnx, tmp_path):
    directory = copy_dir(base_onnx, tmp_path / "base")
    before = _listing(directory)
    result = _run(directory / "model.onnx", "--scheme", "int8-dynamic", "--max-drop", "0", "--eval-samples", "8",
                  "--out", directory / "q.onnx")
    assert result.exit_code == 1, result.output
    assert "mean cosine" in result.output and "not kept" in result.output
    assert "random ids" in result.output  # no tokenizer known: measured on random ids, and it says so
    assert _listing(directory) == before
    ok = _run(directory / "model.onnx", "--scheme", "int8-dynamic", "--max-drop", "0.05", "--eval-samples", "8",
              "--out", directory / "q.onnx")
    assert ok.exit_code == 0 and (directory / "q.onnx").is_file()


def test_a_real_subprocess(workdir):
    out = workdir / "sub.onnx"
    proc = subprocess.run(
        [sys.executable, "-m", "albert_edge", "quantize", str(workdir / "model.onnx"), "--scheme", "int8-dynamic",
         "--calibration", str(CORPUS), "--eval-samples", "8", "--out", str(out), "--json"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["kept"] and out.is_file()
    bad = subprocess.run(
        [sys.executable, "-m", "albert_edge", "quantize", str(workdir / "model.onnx"), "--scheme", "int16x8",
         "--out", str(workdir / "bad.onnx")], capture_output=True, text=True, timeout=300,
    )
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "does not exist for onnx" in bad.stderr
    assert not (workdir / "bad.onnx").exists()
