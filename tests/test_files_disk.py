"""A full disk and an interrupt, on real writers: what the one line says and what is left behind.

A small tmpfs stands for the full disk (mounting one needs root: elsewhere these tests are
skipped, saying so). A writer that is not Python (onnxruntime's .ort serializer) says only that it
failed to save the file it was given; the message must still say that the disk is full, name the
output (never a temporary name) and leave every output and the input as they were. An interrupt
that lands once the outputs are in place says that they are complete and names them."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from albert_edge import files
from albert_edge.errors import ConversionError, OutputError
from albert_edge.files import STAGING_MARK, interrupt_note, staged, staged_files

SCRIPT = Path(sys.executable).with_name("albert-edge")
QUANTIZE = ["--scheme", "int8-dynamic", "--samples", "8", "--eval-samples", "8", "--threads", "1"]
FULL = "the disk is full: free some space or write somewhere else"


@pytest.fixture()
def tmpfs(tmp_path):
    """mount(kib): a fresh tmpfs of that size under tmp_path, unmounted when the test ends."""
    mounted: list[Path] = []

    def mount(kib: int) -> Path:
        where = tmp_path / f"disk{len(mounted)}"
        where.mkdir()
        try:
            done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(where)],
                                  capture_output=True, text=True, timeout=30)
        except FileNotFoundError:
            pytest.skip("no mount command here: the full-disk tests mount a small tmpfs")
        if done.returncode != 0:
            pytest.skip(f"a tmpfs cannot be mounted here ({done.stderr.strip() or 'mount failed'}): the full-disk "
                        "tests need root")
        mounted.append(where)
        return where

    yield mount
    for where in reversed(mounted):
        subprocess.run(["umount", str(where)], capture_output=True, timeout=30)


def _listing(folder: Path) -> dict[str, str]:
    """Every name in ``folder`` (hidden ones too) with its sha256."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir" for p in folder.iterdir()}


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), stderr
    assert "Traceback" not in stderr and STAGING_MARK not in stderr, stderr
    return lines[0]


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.fixture(scope="module")
def fp32_onnx(tmp_path_factory, spiece_model) -> Path:
    """An fp32 .onnx albert-edge converted (H=64: int8 quantizes its matrices), its manifest
    beside it naming the checkpoint and its tokenizer."""
    import torch

    from albert_edge import checkpoints
    from albert_edge.config import AlbertConfig
    from albert_edge.converters.export import convert
    from albert_edge.model import build_model

    root = tmp_path_factory.mktemp("disk-source")
    config = AlbertConfig.preset("tiny").replace(vocab_size=400, embedding_size=32, hidden_size=64,
                                                 intermediate_size=128)
    torch.manual_seed(0)
    ckpt = checkpoints.save(build_model(config, "mlm"), root / "ckpt", spiece=spiece_model)
    result = convert(str(ckpt), root / "files", targets=("onnx",), seq_len=32)
    return result.files[0].path


@pytest.fixture(scope="module")
def sizes(tmp_path_factory, fp32_onnx) -> dict[str, int]:
    """What `quantize --ort` writes from ``fp32_onnx``, by name and size, where there is room."""
    folder = tmp_path_factory.mktemp("disk-room")
    shutil.copy2(fp32_onnx, folder)
    shutil.copy2(fp32_onnx.parent / "manifest.json", folder)
    done = _run("quantize", str(folder / fp32_onnx.name), *QUANTIZE, "--ort", "--out",
                str(folder / "model.int8-dynamic.onnx"))
    assert done.returncode == 0, done.stderr
    return {p.name: p.stat().st_size for p in folder.iterdir()}


def _disk_with(tmpfs, fp32_onnx: Path, free: int) -> Path:
    """A tmpfs holding a copy of the fp32 file and its manifest, with about ``free`` bytes left."""
    used = sum(-(-p.stat().st_size // 4096) * 4096 for p in (fp32_onnx, fp32_onnx.parent / "manifest.json"))
    disk = tmpfs(-(-(used + free) // 4096) * 4)
    shutil.copy2(fp32_onnx, disk)
    shutil.copy2(fp32_onnx.parent / "manifest.json", disk)
    return disk


@pytest.mark.parametrize("writer", ["onnx", "ort"])
def test_quantize_on_a_full_disk_says_the_disk_is_full(tmpfs, fp32_onnx, sizes, writer):
    """The int8 .onnx (written by Python) or its .ort twin (by onnxruntime, whose own error says
    only "Failed to save ORT format model") does not fit: one line saying the disk is full, naming
    the file that did not fit; the folder and the input as they were."""
    int8, ort = sizes["model.int8-dynamic.onnx"], sizes["model.int8-dynamic.ort"]
    # The .ort step needs the int8 .onnx, a rewritten copy of it (onnxruntime's source) and the .ort.
    free = int8 // 2 if writer == "onnx" else 2 * int8 + ort // 2
    disk = _disk_with(tmpfs, fp32_onnx, free)
    before = _listing(disk)
    done = _run("quantize", str(disk / fp32_onnx.name), *QUANTIZE, "--ort", "--out",
                str(disk / "model.int8-dynamic.onnx"))
    line = _one_line(done.stderr)
    assert done.returncode == 2, done.stderr
    assert line.startswith(f"Error: cannot write {disk}/model.int8-dynamic.{writer}: {FULL}"), line
    assert line.endswith(f"({disk}/model.int8-dynamic.onnx, {disk}/manifest.json and {disk}/model.int8-dynamic.ort "
                         "were left as they were)"), line
    assert _listing(disk) == before


def test_convert_on_a_full_disk_says_the_disk_is_full(tmpfs, fp32_onnx):
    """torch's exporter writes the .onnx: the same line, and no output folder."""
    ckpt = Path(json.loads((fp32_onnx.parent / "manifest.json").read_text())["source"]["checkpoint"])
    disk = tmpfs(128)
    done = _run("convert", str(ckpt), "--to", "onnx", "--seq-len", "32", "--out", str(disk / "out"))
    assert done.returncode == 2, done.stderr
    assert _one_line(done.stderr) == f"Error: cannot write {disk}/out: {FULL} ({disk}/out was left as it was)"
    assert list(disk.iterdir()) == []


def test_an_interrupt_just_after_install_names_the_complete_files(tmp_path, fp32_onnx):
    """SIGINT as soon as the .ort is in place (the last of the three files installed together):
    the line says that the int8 .onnx, the manifest and the .ort are complete, and they are."""
    import onnxruntime as ort

    folder = tmp_path / "files"
    folder.mkdir()
    shutil.copy2(fp32_onnx, folder)
    shutil.copy2(fp32_onnx.parent / "manifest.json", folder)
    source = _listing(folder)[fp32_onnx.name]
    outs = [folder / "model.int8-dynamic.onnx", folder / "manifest.json", folder / "model.int8-dynamic.ort"]
    for attempt in range(3):  # the command may end before the signal lands: then again
        for p in folder.iterdir():
            if p.name not in (fp32_onnx.name, "manifest.json"):
                p.unlink()
        proc = subprocess.Popen([str(SCRIPT), "quantize", str(folder / fp32_onnx.name), *QUANTIZE, "--ort",
                                 "--force", "--out", str(outs[0])], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        deadline = time.monotonic() + 300
        while not outs[2].exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.001)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
        if proc.returncode != 0:
            break
    assert proc.returncode == 130, stderr
    assert _one_line(stderr) == (f"Error: interrupted; {outs[0]}, {outs[1]}, {outs[2]} are complete (written before "
                                 "the interrupt); nothing half-written was left behind")
    left = _listing(folder)
    assert left[fp32_onnx.name] == source
    assert {p.name for p in outs} <= set(left) and not [n for n in left if STAGING_MARK in n]
    manifest = {f["name"]: f for f in json.loads(outs[1].read_text())["files"]}
    for out in (outs[0], outs[2]):
        assert manifest[out.name]["sha256"] == left[out.name]  # the file the manifest lists, whole
        ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])


def test_an_interrupt_while_writing_leaves_the_folder_as_it_was(tmp_path, fp32_onnx):
    """SIGINT once the int8 .onnx is written under its temporary name (being checked): the line says
    nothing half-written was left, and nothing was."""
    folder = tmp_path / "files"
    folder.mkdir()
    shutil.copy2(fp32_onnx, folder)
    shutil.copy2(fp32_onnx.parent / "manifest.json", folder)
    before = _listing(folder)
    proc = subprocess.Popen([str(SCRIPT), "quantize", str(folder / fp32_onnx.name), *QUANTIZE, "--ort", "--out",
                             str(folder / "model.int8-dynamic.onnx")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + 300
    while not list(folder.glob(f".model.int8-dynamic.onnx.*{STAGING_MARK}*")) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.001)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert _one_line(stderr) == "Error: interrupted; nothing half-written was left behind"
    assert _listing(folder) == before


# -- the staged writer itself, with a writer that behaves as onnxruntime's serializer does --------

def _engine_save(path: Path, scratch: Path, size: int) -> None:
    """Write ``size`` bytes to ``path`` as a C++ engine does: a scratch copy of its source first,
    then the file until the disk is full, the scratch removed as the error unwinds, and an error
    that says only that saving failed."""
    scratch.write_bytes(b"\0" * (size // 2))
    try:
        with open(path, "wb") as f:
            for _ in range(size // 4096 + 1):
                f.write(b"\1" * 4096)
                f.flush()
    except OSError:
        scratch.unlink()
        raise ConversionError(f"onnxruntime could not convert model.onnx to .ort: [ONNXRuntimeError] : 1 : FAIL : "
                              f"SaveToOrtFormat Failed to save ORT format model to file: {path}") from None
    scratch.unlink()


def test_an_engine_that_only_says_it_failed_to_save_wrote_on_a_full_disk(tmpfs):
    disk = tmpfs(256)
    outs = [disk / "model.int8-dynamic.onnx", disk / "manifest.json", disk / "model.int8-dynamic.ort"]
    with pytest.raises(OutputError) as raised:
        with staged_files(outs) as (onnx_tmp, manifest_tmp, ort_tmp):
            onnx_tmp.write_bytes(b"\2" * 100_000)
            _engine_save(ort_tmp, disk / ".ort-source", 200_000)
    message = str(raised.value)
    assert message.startswith(f"cannot write {outs[2]}: {FULL} ("), message
    assert STAGING_MARK not in message and list(disk.iterdir()) == []


def test_an_engine_error_with_room_left_is_its_own_naming_the_output(tmp_path):
    """The same words where the disk has room: not a full disk; the engine's error, naming the
    output rather than its temporary name."""
    out = tmp_path / "model.ort"
    with pytest.raises(ConversionError) as raised, staged(out) as tmp:
        tmp.write_bytes(b"partial")
        raise ConversionError(f"onnxruntime could not convert model.onnx to .ort: Failed to save ORT format model "
                              f"to file: {tmp}")
    assert str(raised.value).endswith(f"to file: {out}") and STAGING_MARK not in str(raised.value)
    assert list(tmp_path.iterdir()) == []


def test_an_interrupt_after_install_finds_the_output_complete(tmp_path):
    out = tmp_path / "model.onnx"
    with staged(out) as tmp:
        tmp.write_text("new")
    assert str(out) in interrupt_note() and interrupt_note().endswith("nothing half-written was left behind")


def test_an_interrupt_while_the_old_version_is_removed(tmp_path, monkeypatch):
    """Ctrl-C lands while the old output is being removed: the new one is in place and said to be
    complete, and no old one is left beside it."""
    out = tmp_path / "report"
    with staged(out, directory=True) as tmp:
        (tmp / "report.md").write_text("old")
    real, calls = files._remove, []

    def interrupted(path):
        calls.append(path)
        if len(calls) == 1:
            raise KeyboardInterrupt
        real(path)

    with pytest.raises(KeyboardInterrupt):
        with staged(out, directory=True, keep=False) as tmp:
            (tmp / "report.md").write_text("new")
            monkeypatch.setattr(files, "_remove", interrupted)
    monkeypatch.setattr(files, "_remove", real)
    assert calls and (out / "report.md").read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["report"]
    assert f"{out} is complete" in interrupt_note() or f"{out}," in interrupt_note() or f", {out}" in interrupt_note()
