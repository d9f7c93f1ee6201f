"""albert_edge.formats.packed on the device side, where mediapipe is not installed: a MediaPipe
text-task file made here (the project's own .tflite of a tiny classifier, TFLite metadata written
with the flatbuffers builder in the layout of MediaPipe's metadata_schema.fbs, its spiece.model and
labels.txt packed as the zip archive MediaPipe's writer appends) and the same file with its packed
files rewritten. tests/mobile/test_mediapipe_packed.py runs the same checks on files MediaPipe
itself wrote."""

from __future__ import annotations

import io
import json
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from albert_edge.cli import main
from albert_edge.formats.packed import PackedFileError, check_packed, embedding_rows

LABELS = ["sports", "science", "arts"]
FAST = ["--threads", "1", "--runs", "3", "--min-seconds", "0", "--max-seconds", "0.5", "--warmup", "1"]
# metadata_schema.fbs: AssociatedFileType, ProcessUnitOptions
_TENSOR_AXIS_LABELS, _VOCABULARY, _SENTENCEPIECE = 2, 3, 5


def _metadata(inputs: list[str], output: str, labels_file: str | None) -> bytes:
    """A ModelMetadata flatbuffer (identifier M001) of a text task: its inputs by name, the
    SentencePieceTokenizer reading spiece.model, the output's labels file for a classifier."""
    import flatbuffers

    b = flatbuffers.Builder(1024)

    def table(fields: list[tuple[int, str, int]]) -> int:
        b.StartObject(8)
        for slot, kind, value in fields:
            {"offset": b.PrependUOffsetTRelativeSlot, "byte": b.PrependInt8Slot,
             "ubyte": b.PrependUint8Slot}[kind](slot, value, 0)
        return b.EndObject()

    def vector(offsets: list[int]) -> int:
        b.StartVector(4, len(offsets), 4)
        for offset in reversed(offsets):
            b.PrependUOffsetTRelative(offset)
        return b.EndVector()

    def associated(name: str, kind: int) -> int:
        text = b.CreateString(name)
        return table([(0, "offset", text), (2, "byte", kind)])

    def tensor(name: str, files: list[int]) -> int:
        text = b.CreateString(name)
        listed = vector(files) if files else None
        return table([(0, "offset", text)] + ([(6, "offset", listed)] if listed is not None else []))

    spiece = vector([associated("spiece.model", _VOCABULARY)])
    options = table([(0, "offset", spiece)])
    unit = table([(0, "ubyte", _SENTENCEPIECE), (1, "offset", options)])
    ins = vector([tensor(name, []) for name in inputs])
    outs = vector([tensor(output, [associated(labels_file, _TENSOR_AXIS_LABELS)] if labels_file else [])])
    units = vector([unit])
    sub = table([(2, "offset", ins), (3, "offset", outs), (5, "offset", units)])
    subs = vector([sub])
    name, about, parser = (b.CreateString(s) for s in ("TextClassifier", "ALBERT", "1.1.0"))
    b.Finish(table([(0, "offset", name), (1, "offset", about), (3, "offset", subs), (7, "offset", parser)]),
             file_identifier=b"M001")
    return bytes(b.Output())


def with_metadata(tflite: bytes, spiece: bytes, labels: list[str] | None) -> bytes:
    """``tflite`` as `convert --to mediapipe` lays it out: the metadata in a buffer its
    TFLITE_METADATA entry names, spiece.model (and labels.txt) zipped after the flatbuffer."""
    from albert_edge.formats.tflite_model import load, pack

    model = load(tflite)
    schema = model.schema
    names = {"input_ids": "ids", "attention_mask": "mask", "token_type_ids": "segment_ids"}
    graph = model.graph
    inputs = [next(v for k, v in names.items() if k in graph.tensors[i].name.decode()) for i in graph.inputs]
    buffer = schema.BufferT()
    buffer.data = np.frombuffer(_metadata(inputs, "probability", "labels.txt" if labels else None), dtype=np.uint8)
    model.obj.buffers.append(buffer)
    entry = schema.MetadataT()
    entry.name, entry.buffer = b"TFLITE_METADATA", len(model.obj.buffers) - 1
    model.obj.metadata = [*(model.obj.metadata or []), entry]
    out = io.BytesIO(pack(model))
    out.seek(0, io.SEEK_END)
    with zipfile.ZipFile(out, "a") as archive:
        archive.writestr("spiece.model", spiece)
        if labels:
            archive.writestr("labels.txt", "\n".join(labels) + "\n")
    return out.getvalue()


def repack(source: Path, target: Path, changes: dict[str, bytes | None]) -> Path:
    """``source`` with its packed files written again, each name in ``changes`` replaced by its
    bytes (None: left out), appended to the flatbuffer as MediaPipe's writer appends them."""
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
def conversion(tmp_path_factory, spiece_model) -> Path:
    """A tiny classifier (3 named labels) converted to .tflite: its folder, manifest included."""
    pytest.importorskip("tensorflow")
    import torch

    from albert_edge import checkpoints
    from albert_edge.config import AlbertConfig
    from albert_edge.converters.export import convert
    from albert_edge.model import build_model

    root = tmp_path_factory.mktemp("packed")
    config = AlbertConfig.preset("tiny").replace(vocab_size=400, num_labels=3, label_names=tuple(LABELS))
    torch.manual_seed(0)
    ckpt = checkpoints.save(build_model(config, "classification"), root / "ckpt", spiece=spiece_model)
    convert(str(ckpt), root / "files", targets=("tflite",), seq_len=16)
    return root / "files"


@pytest.fixture(scope="module")
def task_file(conversion, spiece_model, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("task") / "model.mediapipe.tflite"
    path.write_bytes(with_metadata((conversion / "model.tflite").read_bytes(), spiece_model.read_bytes(), LABELS))
    return path


@pytest.fixture(scope="module")
def other_spiece(tmp_path_factory) -> bytes:
    from albert_edge.tokenizer import train_spiece

    data = Path(__file__).parent / "data" / "corpus.txt"
    return train_spiece([data], tmp_path_factory.mktemp("spiece300"), vocab_size=300).read_bytes()


DAMAGES = {
    "garbage tokenizer": (lambda other: {"spiece.model": b"not a sentencepiece model\n" * 40},
                          "its packed spiece.model is not a sentencepiece model"),
    "empty tokenizer": (lambda other: {"spiece.model": b""}, "its packed spiece.model is empty"),
    "tokenizer of another vocabulary": (
        lambda other: {"spiece.model": other},
        "its packed spiece.model has 300 pieces but the model's token-embedding table has 400 rows"),
    "tokenizer left out": (lambda other: {"spiece.model": None},
                           "names the tokenizer file spiece.model, which is not packed"),
    "labels one short": (lambda other: {"labels.txt": b"sports\nscience\n"},
                         "its packed labels.txt names 2 labels but the classifier has 3 output classes"),
}


@pytest.fixture(scope="module")
def damaged(task_file, other_spiece, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("damaged")
    return {what: repack(task_file, root / what.replace(" ", "-") / task_file.name, changes(other_spiece))
            for what, (changes, _) in DAMAGES.items()}


def test_the_file_as_made_passes(task_file, tmp_path):
    found = check_packed(task_file)
    assert (found.task, found.tokenizer_file, found.tokenizer_pieces, found.embedding_rows, found.labels) == \
        ("TextClassifier", "spiece.model", 400, 400, 3)
    assert found.not_checked == []
    # written again unchanged by the tests' repacking: still whole
    assert check_packed(repack(task_file, tmp_path / "same.tflite", {})) == found
    result = CliRunner().invoke(main, ["info", str(task_file)], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "spiece.model loads, 400 pieces = 400 embedding rows; 3 labels = 3 outputs" in result.output
    assert CliRunner().invoke(main, ["inspect", str(task_file)]).exit_code == 0


def test_files_without_a_text_task_are_not_checked(conversion):
    assert check_packed(conversion / "model.tflite") is None  # no metadata
    assert check_packed(conversion / "manifest.json") is None  # not a .tflite


def test_the_embedding_rows_are_read_from_the_lookup_of_the_ids(task_file, conversion):
    raw = task_file.read_bytes()
    assert embedding_rows(raw, ["mask", "ids", "segment_ids"]) == 400
    assert embedding_rows(raw, ["mask", "input", "segment_ids"]) is None  # no input named ids


@pytest.mark.parametrize("what", DAMAGES)
def test_the_check_refuses_each_damage(damaged, what):
    with pytest.raises(PackedFileError, match=DAMAGES[what][1]) as caught:
        check_packed(damaged[what])
    assert str(damaged[what]) in str(caught.value) and "\n" not in str(caught.value)


def _bundle(conversion: Path, spiece_model: Path, model: Path, root: Path) -> Path:
    """A demo bundle whose classifier folder serves ``model`` as its MediaPipe file."""
    out = root / "bundle"
    shutil.copytree(conversion, out / "classifier")
    shutil.copyfile(model, out / "classifier" / "model.mediapipe.tflite")
    shutil.copyfile(spiece_model, out / "spiece.model")
    (out / "labels.json").write_text(json.dumps(LABELS))
    (out / "bundle.json").write_text(json.dumps({"seq_len": 16}))
    return out


@pytest.mark.parametrize("reader", ["inspect", "info", "profile", "report", "demo"])
@pytest.mark.parametrize("what", DAMAGES)
def test_every_reader_refuses_a_file_that_cannot_work(reader, what, damaged, conversion, spiece_model, tmp_path):
    path = damaged[what]
    before = path.read_bytes()
    args = {"inspect": ["inspect", str(path)], "info": ["info", str(path)],
            "profile": ["profile", str(path), "--seq-len", "8", *FAST],
            "report": ["report", str(path), "--out", str(tmp_path / "report")],
            "demo": ["demo", "classify", str(_bundle(conversion, spiece_model, path, tmp_path)), "a late goal",
                     "--model", "mediapipe-fp32"]}[reader]
    result = CliRunner().invoke(main, args, terminal_width=200)
    text = result.output + (result.stderr or "")
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and "Traceback" not in text, text
    assert len(lines) == 1 and lines[0].startswith("Error: ") and DAMAGES[what][1] in lines[0], result.stderr
    assert path.read_bytes() == before and not (tmp_path / "report").exists()


def test_the_demo_serves_the_whole_file(task_file, conversion, spiece_model, tmp_path):
    """The check does not stand in the way of a file that works: the demo answers with it."""
    bundle = _bundle(conversion, spiece_model, task_file, tmp_path)
    result = CliRunner().invoke(main, ["demo", "classify", str(bundle), "a late goal", "--model", "mediapipe-fp32",
                                       "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["label"] in LABELS


def test_info_of_a_conversion_folder_checks_its_mediapipe_file(damaged, conversion, tmp_path):
    """`info FOLDER` checks each file its manifest lists: a MediaPipe file whose packed tokenizer
    is garbage is refused even where the manifest records those very bytes."""
    import hashlib

    folder = tmp_path / "files"
    shutil.copytree(conversion, folder)
    bad = damaged["garbage tokenizer"].read_bytes()
    (folder / "model.mediapipe.tflite").write_bytes(bad)
    manifest = json.loads((folder / "manifest.json").read_text())
    entry = dict(next(f for f in manifest["files"] if f["name"] == "model.tflite"))
    entry.update(name="model.mediapipe.tflite", size=len(bad), sha256=hashlib.sha256(bad).hexdigest())
    manifest["files"].append(entry)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    result = CliRunner().invoke(main, ["info", str(folder)])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output + result.stderr
    assert f"{folder / 'model.mediapipe.tflite'}: its packed spiece.model is not a sentencepiece model" in lines[0]


def test_without_sentencepiece_the_tokenizer_is_said_not_checked(task_file):
    """Where sentencepiece cannot be imported the tokenizer is reported as not checked, never as
    passed; the labels are still checked."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(f"""
        import importlib.abc, sys

        class Missing(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "sentencepiece":
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
                return None

        sys.meta_path.insert(0, Missing())
        from albert_edge.formats.packed import check_packed
        found = check_packed({str(task_file)!r})
        print(found.tokenizer_pieces, found.labels, "|", found.summary())
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("None 3 | 3 labels = 3 outputs; not checked: spiece.model (sentencepiece is not "
                                   "installed: pip install sentencepiece)")
