"""A MediaPipe file's packed tokenizer and labels, opened and checked against its model by every
reader (inspect, info, profile, report, the demo): a real file whose packed spiece.model or
labels.txt was rewritten is one ``Error: ...`` line and exit 2, before anything is described or
measured; the file as written passes."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from albert_edge.cli import main
from albert_edge.formats.packed import PackedFileError, check_packed

FAST = ["--threads", "1", "--runs", "3", "--min-seconds", "0", "--max-seconds", "0.5", "--warmup", "1"]
TEXT = "the match ended with a late goal"


def repack(source: Path, target: Path, changes: dict[str, bytes | None]) -> Path:
    """``source`` with its packed files (the zip archive after the flatbuffer) written again, each
    name in ``changes`` replaced by its bytes (None: left out). Written as MediaPipe's metadata
    writer writes it: the archive appended to the model, its offsets from the start of the file."""
    raw = source.read_bytes()
    with zipfile.ZipFile(io.BytesIO(raw)) as archive:
        start = min(info.header_offset for info in archive.infolist())
        files = {name: archive.read(name) for name in archive.namelist()}
    files.update(changes)
    out = io.BytesIO(raw[:start])
    out.seek(0, io.SEEK_END)
    with zipfile.ZipFile(out, "a") as archive:
        for name, data in files.items():
            if data is not None:
                archive.writestr(name, data)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(out.getvalue())
    return target


@pytest.fixture(scope="module")
def other_spiece(tmp_path_factory) -> bytes:
    """A real sentencepiece model of another vocabulary (300 pieces; the model embeds 400)."""
    from albert_edge.tokenizer import train_spiece

    data = Path(__file__).parents[1] / "data" / "corpus.txt"
    return train_spiece([data], tmp_path_factory.mktemp("spiece300"), vocab_size=300).read_bytes()


def _damages(other_spiece: bytes) -> dict[str, tuple[dict[str, bytes | None], str]]:
    return {
        "garbage tokenizer": ({"spiece.model": b"not a sentencepiece model\n" * 40},
                              "its packed spiece.model is not a sentencepiece model"),
        "empty tokenizer": ({"spiece.model": b""}, "its packed spiece.model is empty"),
        "tokenizer of another vocabulary": (
            {"spiece.model": other_spiece},
            "its packed spiece.model has 300 pieces but the model's token-embedding table has 400 rows"),
        "tokenizer left out": ({"spiece.model": None}, "names the tokenizer file spiece.model, which is not packed"),
        "labels one short": ({"labels.txt": b"first\nsecond\nthird\n"},
                             "its packed labels.txt names 3 labels but the classifier has 4 output classes"),
    }


DAMAGES = ["garbage tokenizer", "empty tokenizer", "tokenizer of another vocabulary", "tokenizer left out",
           "labels one short"]


def one_line(result, message: str) -> str:
    text = result.output + (result.stderr or "")
    assert "Traceback" not in text, text
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2, (result.exit_code, text)
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert message in lines[0], (message, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def damaged(classifier_file, other_spiece, tmp_path_factory):
    """Each damage applied to the classifier's file, in a folder of its own (no manifest beside it,
    so the packed files, not the manifest's hash, are what is caught)."""
    root = tmp_path_factory.mktemp("damaged")
    return {what: (repack(classifier_file.path, root / what.replace(" ", "-") / "model.mediapipe.tflite", changes),
                   message)
            for what, (changes, message) in _damages(other_spiece).items()}


def _bundle(classifier_file, classifier_checkpoint, spiece_model, seq_len, model: Path, root: Path) -> Path:
    """A demo bundle serving ``model`` as its MediaPipe classifier, its manifest entry made for
    those bytes (as a bundle made from such a file would be)."""
    out = root / "bundle"
    shutil.copytree(classifier_file.path.parent, out / "classifier")
    shutil.copyfile(model, out / "classifier" / "model.mediapipe.tflite")
    manifest = json.loads((out / "classifier" / "manifest.json").read_text())
    for entry in manifest["files"]:
        if entry["name"] == "model.mediapipe.tflite":
            raw = model.read_bytes()
            entry["size"], entry["sha256"] = len(raw), hashlib.sha256(raw).hexdigest()
    (out / "classifier" / "manifest.json").write_text(json.dumps(manifest))
    shutil.copyfile(spiece_model, out / "spiece.model")
    id2label = json.loads((classifier_checkpoint / "config.json").read_text())["id2label"]
    (out / "labels.json").write_text(json.dumps([id2label[str(i)] for i in range(len(id2label))]))
    (out / "bundle.json").write_text(json.dumps({"seq_len": seq_len}))
    return out


def _command(reader: str, path: Path, tmp_path: Path, bundle) -> list[str]:
    return {"inspect": ["inspect", str(path)],
            "info": ["info", str(path)],
            "profile": ["profile", str(path), "--seq-len", "8", *FAST],
            "profile --mediapipe": ["profile", str(path), "--mediapipe", "--seq-len", "8", *FAST],
            "report": ["report", str(path), "--out", str(tmp_path / "report")],
            "demo": ["demo", "classify", str(bundle), TEXT, "--model", "mediapipe-fp32"]}[reader]


READERS = ["inspect", "info", "profile", "profile --mediapipe", "report", "demo"]


def test_the_file_as_written_passes_and_says_what_was_checked(classifier_file, embedder_file, tmp_path):
    found = check_packed(classifier_file.path)
    assert (found.task, found.tokenizer_pieces, found.embedding_rows, found.labels) == ("TextClassifier", 400, 400, 4)
    assert found.not_checked == []
    found = check_packed(embedder_file.path)
    assert (found.task, found.tokenizer_pieces, found.embedding_rows, found.labels) == ("TextEmbedder", 400, 400, 0)
    # Written again unchanged by the test's own repacking: still whole, for MediaPipe and for the check.
    same = repack(classifier_file.path, tmp_path / "same" / "model.mediapipe.tflite", {})
    assert check_packed(same) == check_packed(classifier_file.path)
    from mediapipe.tasks.python.text import TextClassifier

    with TextClassifier.create_from_model_path(str(same)) as task:
        assert len(task.classify(TEXT).classifications[0].categories) == 4
    result = CliRunner().invoke(main, ["info", str(same)], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "spiece.model loads, 400 pieces = 400 embedding rows; 4 labels = 4 outputs" in result.output


def test_mediapipe_itself_cannot_run_the_garbage_tokenizer(damaged, tmp_path):
    """What the check stands for: MediaPipe fails on the file only when the app creates its task
    (here it aborts the process), so it is run in a process of its own."""
    code = ("import sys\nfrom mediapipe.tasks.python.text import TextClassifier\n"
            "TextClassifier.create_from_model_path(sys.argv[1])\nprint('created')\n")
    done = subprocess.run([sys.executable, "-c", code, str(damaged["garbage tokenizer"][0])], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode != 0 and "created" not in done.stdout, (done.returncode, done.stderr[-2000:])


@pytest.mark.parametrize("what", DAMAGES)
def test_the_check_refuses_each_damage(damaged, what):
    path, message = damaged[what]
    with pytest.raises(PackedFileError, match=message) as caught:
        check_packed(path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("what", DAMAGES)
def test_every_reader_refuses_a_file_that_cannot_work(reader, what, damaged, classifier_file, classifier_checkpoint,
                                                      spiece_model, seq_len, tmp_path):
    path, message = damaged[what]
    bundle = _bundle(classifier_file, classifier_checkpoint, spiece_model, seq_len, path, tmp_path) \
        if reader == "demo" else None
    before = path.read_bytes()
    result = CliRunner().invoke(main, _command(reader, path, tmp_path, bundle), terminal_width=200)
    one_line(result, message)
    assert path.read_bytes() == before
    assert not (tmp_path / "report").exists()


def test_inspect_in_a_process_of_its_own(damaged):
    path, message = damaged["garbage tokenizer"]
    done = subprocess.run([sys.executable, "-m", "albert_edge", "inspect", str(path)], capture_output=True, text=True,
                          timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1 and message in lines[0], done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
