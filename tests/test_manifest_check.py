"""Every reader of a conversion folder checks each file it uses against its manifest entry
(albert_edge.formats.manifest.check_file): `info` of the folder or of a file in it, `inspect`
and `profile` of a file with a manifest beside it. A cut file is caught by its size, a file with
flipped bytes by its sha256, and each file is hashed once per process."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from albert_edge import checkpoints
from albert_edge.cli import main
from albert_edge.config import AlbertConfig
from albert_edge.formats import manifest as manifest_io
from albert_edge.model import build_model

pytestmark = pytest.mark.filterwarnings("ignore")

TINY = AlbertConfig.preset("tiny").replace(vocab_size=400)  # the size of the shared spiece_model
SCRIPT = Path(sys.executable).with_name("albert-edge")


@pytest.fixture(scope="module")
def conversion(tmp_path_factory, spiece_model) -> Path:
    from albert_edge.converters.export import convert

    root = tmp_path_factory.mktemp("conv")
    torch.manual_seed(0)
    ckpt = checkpoints.save(build_model(TINY, "base"), root / "ckpt", spiece=spiece_model)
    convert(ckpt, root / "out", targets=("onnx", "ort"), seq_len=16)
    return root / "out"


def _copy(conversion: Path, tmp_path: Path, name: str, how: str) -> Path:
    """A copy of the conversion folder whose ``name`` is cut to 3 KB or has bytes flipped in the
    middle of its weights (same size, the file still reads)."""
    copy = tmp_path / f"{how}-{name}"
    shutil.copytree(conversion, copy)
    path = copy / name
    data = bytearray(path.read_bytes())
    if how == "cut":
        data = data[:3072]
    else:
        start = _largest_weight(path, bytes(data)) if path.suffix == ".onnx" else len(data) // 2
        data[start:start + 8] = bytes(b ^ 0x55 for b in data[start:start + 8])
    path.write_bytes(bytes(data))
    return copy


def _largest_weight(path: Path, data: bytes) -> int:
    """Where the bytes of the file's largest initializer start: flipping them leaves a file
    every reader and runtime still loads."""
    import onnx

    largest = max(onnx.load(str(path)).graph.initializer, key=lambda t: len(t.raw_data))
    return data.index(largest.raw_data) + len(largest.raw_data) // 2


def one_line(result, *words: str) -> str:
    text = result.output + (result.stderr or "")
    assert "Traceback" not in text, text
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2, (result.exit_code, text)
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert result.stdout == ""
    return lines[0]


def test_info_of_a_good_folder_and_file(conversion):
    for path in (conversion, conversion / "model.ort"):
        result = CliRunner().invoke(main, ["info", str(path)])
        assert result.exit_code == 0, result.output


@pytest.mark.parametrize("how, words", [("cut", ("has changed since", "it is 3,072 bytes, the manifest says")),
                                        ("flip", ("has changed since", "same size, sha256 differs"))])
@pytest.mark.parametrize("target", ["folder", "file"])
def test_info_refuses_a_file_that_changed(conversion, tmp_path, how, words, target):
    copy = _copy(conversion, tmp_path, "model.ort", how)
    line = one_line(CliRunner().invoke(main, ["info", str(copy if target == "folder" else copy / "model.ort")]),
                    *words)
    assert "model.ort" in line and "manifest.json" in line and "convert again" in line


def test_info_refuses_a_missing_file(conversion, tmp_path):
    copy = tmp_path / "missing"
    shutil.copytree(conversion, copy)
    (copy / "model.ort").unlink()
    one_line(CliRunner().invoke(main, ["info", str(copy)]), "lists model.ort, which is missing")


def test_info_refuses_a_cut_file_in_a_real_process(conversion, tmp_path):
    copy = _copy(conversion, tmp_path, "model.ort", "cut")
    done = subprocess.run([str(SCRIPT), "info", str(copy)], capture_output=True, text=True, timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and "has changed since" in lines[0] and "3,072 bytes" in lines[0], done.stderr
    assert done.stdout == ""


def test_inspect_refuses_a_file_that_differs_from_the_manifest_beside_it(conversion, tmp_path):
    copy = _copy(conversion, tmp_path, "model.onnx", "flip")
    loose = tmp_path / "loose"
    loose.mkdir()
    shutil.copyfile(copy / "model.onnx", loose / "model.onnx")
    # the same bytes with no manifest beside them read back: what refuses is the check
    assert CliRunner().invoke(main, ["inspect", str(loose / "model.onnx"), "--json"]).exit_code == 0
    one_line(CliRunner().invoke(main, ["inspect", str(copy / "model.onnx")]), "model.onnx has changed since",
             "sha256 differs")
    assert CliRunner().invoke(main, ["inspect", str(conversion / "model.onnx"), "--json"]).exit_code == 0


def test_inspect_refuses_in_a_real_process(conversion, tmp_path):
    copy = _copy(conversion, tmp_path, "model.onnx", "flip")
    done = subprocess.run([str(SCRIPT), "inspect", str(copy / "model.onnx")], capture_output=True, text=True,
                          timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1 and "sha256 differs" in lines[0], done.stderr


def test_profile_refuses_a_file_that_differs_from_the_manifest_beside_it(conversion, tmp_path):
    copy = _copy(conversion, tmp_path, "model.onnx", "flip")
    one_line(CliRunner().invoke(main, ["profile", str(copy / "model.onnx"), "--seq-len", "16", "--threads", "1",
                                       "--runs", "2", "--min-seconds", "0", "--warmup", "0"]),
             "model.onnx has changed since", "sha256 differs")


def test_each_file_is_hashed_once_per_process(conversion, tmp_path, monkeypatch):
    copy = tmp_path / "hashed"
    shutil.copytree(conversion, copy)
    reads = []
    real = manifest_io.sha256_of
    monkeypatch.setattr(manifest_io, "sha256_of", lambda path: reads.append(Path(path).name) or real(path))
    manifest = manifest_io.check_listed(copy)
    manifest_io.check_listed(copy)
    # every file it lists, the app files (spiece.model) too, once: the second check read nothing
    assert sorted(reads) == sorted(e.name for e in [*manifest.files, *manifest.app_files])
    path = copy / "model.onnx"
    path.write_bytes(path.read_bytes()[:-1] + bytes([path.read_bytes()[-1] ^ 1]))
    with pytest.raises(manifest_io.FileChanged, match="sha256 differs"):  # a rewrite is read again
        manifest_io.check_beside(path)
    assert reads.count("model.onnx") == 2


# -- the app files and the transformers-js/ folder: what a reader uses with a file ----------------

LABELS = ("negative", "neutral", "positive")


@pytest.fixture(scope="module")
def web_conversion(tmp_path_factory, spiece_model) -> Path:
    """A classifier converted to onnx and transformers-js: spiece.model and labels.json beside the
    files, the transformers-js/ folder beside model.transformers-js.onnx."""
    from albert_edge.converters.export import convert

    torch.manual_seed(0)
    model = build_model(TINY.replace(num_labels=3, label_names=LABELS), "classification").eval()
    out = tmp_path_factory.mktemp("web") / "out"
    convert(model, out, targets=("onnx", "transformers-js"), tokenizer=spiece_model, seq_len=16)
    return out


def _reorder(path: Path) -> None:
    from albert_edge.labels import labels_json

    before = path.stat().st_size
    path.write_text(labels_json(reversed(json.loads(path.read_text()))), encoding="utf-8")
    assert path.stat().st_size == before  # same size: only the sha256 tells


def _flip_middle(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x55
    path.write_bytes(bytes(data))


def _other_config(path: Path) -> None:
    config = json.loads(path.read_text())
    config.update(num_hidden_layers=config["num_hidden_layers"] + 1, id2label={"0": "a", "1": "b"})
    path.write_text(json.dumps(config, indent=2))


def _cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


# name -> (file, damage): what a hidden corpus of malformed folders found passing `info` and `report`
DAMAGE = {
    "labels-reordered": ("labels.json", _reorder),
    "labels-missing": ("labels.json", Path.unlink),
    "spiece-flipped": ("spiece.model", _flip_middle),
    "spiece-missing": ("spiece.model", Path.unlink),
    "tokenizer-invalid": ("transformers-js/tokenizer.json", lambda p: p.write_text("{not json")),
    "tokenizer-missing": ("transformers-js/tokenizer.json", Path.unlink),
    "config-of-another-model": ("transformers-js/config.json", _other_config),
    "int8-cut": ("transformers-js/onnx/model_quantized.onnx", _cut),
    "int8-missing": ("transformers-js/onnx/model_quantized.onnx", Path.unlink),
}


def _damaged(web_conversion: Path, tmp_path: Path, name: str) -> tuple[Path, str]:
    copy = tmp_path / name
    shutil.copytree(web_conversion, copy)
    file, damage = DAMAGE[name]
    damage(copy / file)
    return copy, file


def test_the_manifest_lists_every_file_of_the_transformers_js_folder(web_conversion):
    manifest = manifest_io.read(web_conversion)
    entry = manifest.file("model.transformers-js.onnx")
    folder = web_conversion / "transformers-js"
    on_disk = sorted(p.relative_to(web_conversion).as_posix() for p in folder.rglob("*") if p.is_file())
    assert [f["name"] for f in entry.folder_files] == on_disk
    assert "transformers-js/onnx/model_quantized.onnx" in on_disk and "transformers-js/tokenizer.json" in on_disk
    for f in entry.folder_files:
        assert f["size"] == (web_conversion / f["name"]).stat().st_size
        assert f["sha256"] == manifest_io.sha256_of(web_conversion / f["name"])
    assert {a.name for a in manifest.app_files} == {"spiece.model", "labels.json"}
    assert manifest.file("model.onnx").folder_files == []  # a file with no folder lists none


@pytest.mark.parametrize("name", list(DAMAGE))
def test_info_and_report_refuse_a_damaged_app_file_or_folder(web_conversion, tmp_path, name):
    copy, file = _damaged(web_conversion, tmp_path, name)
    used = "model.transformers-js.onnx" if file.startswith("transformers-js/") else "model.onnx"
    for args in (["info", str(copy)], ["info", str(copy / used)],
                 ["report", str(copy), "--out", str(tmp_path / "report"), "--no-charts", "--json"]):
        line = one_line(CliRunner().invoke(main, args), Path(file).name, "convert again")
        assert ("missing" in line) == name.endswith("-missing"), line
    assert not (tmp_path / "report").exists()


@pytest.mark.parametrize("name", ["tokenizer-invalid", "int8-cut"])
def test_inspect_and_profile_refuse_a_damaged_folder(web_conversion, tmp_path, name):
    copy, file = _damaged(web_conversion, tmp_path, name)
    path = str(copy / "model.transformers-js.onnx")
    one_line(CliRunner().invoke(main, ["inspect", path]), Path(file).name, "has changed since", "convert again")
    one_line(CliRunner().invoke(main, ["profile", path, "--seq-len", "16", "--threads", "1", "--runs", "2",
                                       "--min-seconds", "0", "--warmup", "0"]), Path(file).name, "has changed since")


def test_a_damaged_folder_is_refused_in_a_real_process(web_conversion, tmp_path):
    copy, _ = _damaged(web_conversion, tmp_path, "tokenizer-invalid")
    done = subprocess.run([str(SCRIPT), "info", str(copy)], capture_output=True, text=True, timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert len(lines) == 1 and "transformers-js/tokenizer.json has changed since" in lines[0], done.stderr


def test_a_manifest_written_before_the_folder_was_listed_still_reads(web_conversion, tmp_path):
    copy = tmp_path / "old"
    shutil.copytree(web_conversion, copy)
    data = json.loads((copy / "manifest.json").read_text())
    data["schema_version"] = 2
    for entry in data["files"]:
        del entry["folder_files"]
    (copy / "manifest.json").write_text(json.dumps(data))
    _cut(copy / "transformers-js/onnx/model_quantized.onnx")  # unlisted there: not checked
    for path in (copy, copy / "model.transformers-js.onnx"):
        result = CliRunner().invoke(main, ["info", str(path)])
        assert result.exit_code == 0, result.output
    _reorder(copy / "labels.json")  # the app files it lists still are
    one_line(CliRunner().invoke(main, ["info", str(copy)]), "labels.json has changed since")


@pytest.mark.parametrize("name", ["../model.onnx", "/etc/passwd", "transformers-js/../../x"])
def test_a_folder_file_outside_the_folder_is_refused(web_conversion, tmp_path, name):
    copy = tmp_path / "outside"
    shutil.copytree(web_conversion, copy)
    data = json.loads((copy / "manifest.json").read_text())
    entry = next(e for e in data["files"] if e["folder_files"])
    entry["folder_files"][0]["name"] = name
    (copy / "manifest.json").write_text(json.dumps(data))
    one_line(CliRunner().invoke(main, ["info", str(copy)]), "which is not a file of its folder")
