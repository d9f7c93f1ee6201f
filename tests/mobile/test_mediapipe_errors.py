"""Bad input MediaPipe would only refuse once the file is made (its RET_CHECK failures, naming our
temporary file) is refused before any export in one line, through the real command; what MediaPipe
still refuses names the user's output file; and nothing else reaches stderr."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from albert_edge import checkpoints
from albert_edge.errors import ConversionError

DATA = Path(__file__).parents[1] / "data"
SCRIPT = Path(sys.executable).with_name("albert-edge")


def _files(root: Path) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(root)), p.stat().st_size) for p in root.rglob("*"))


def one_line(done: subprocess.CompletedProcess, *parts: str) -> str:
    """Exit 2, nothing on stdout, exactly one line on stderr, with ``parts`` and no temporary name."""
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
    for part in parts:
        assert part in lines[0], (part, lines[0])
    assert ".albert-edge-tmp" not in lines[0] and "Traceback" not in done.stderr
    return lines[0]


@pytest.fixture(scope="module")
def larger_vocabulary(tmp_path_factory, base_checkpoint) -> Path:
    """The base checkpoint with a 430-piece spiece.model beside its 400 embedding rows."""
    from albert_edge.tokenizer import train_spiece

    root = tmp_path_factory.mktemp("larger")
    bigger = train_spiece([DATA / "corpus.txt"], root / "spiece", vocab_size=430)
    shutil.copytree(base_checkpoint, root / "ckpt")
    shutil.copy(bigger, root / "ckpt" / "spiece.model")
    return root / "ckpt"


@pytest.fixture(scope="module")
def unreadable_spiece(tmp_path_factory, base_checkpoint) -> Path:
    root = tmp_path_factory.mktemp("unreadable") / "ckpt"
    shutil.copytree(base_checkpoint, root)
    (root / "spiece.model").write_bytes(b"\x0a\xff" * 500)
    return root


@pytest.mark.parametrize("which, seq_len, parts", [
    ("unreadable_spiece", 16, ("spiece.model is not a sentencepiece model",)),  # was sentencepiece's RuntimeError
    ("larger_vocabulary", 16, ("spiece.model has 430 pieces", "word embeddings have 400 rows")),  # MediaPipe's Gather
    ("base_checkpoint", 1, ("--seq-len 1 is too short", "--seq-len 3 or more")),  # MediaPipe's RET_CHECK
    ("base_checkpoint", 2, ("--seq-len 2 is too short",)),  # no room for text: our verification's error, late
])
def test_refused_before_any_export(which, seq_len, parts, request, tmp_path):
    checkpoint = request.getfixturevalue(which)
    before = _files(checkpoint)
    done = subprocess.run([str(SCRIPT), "convert", str(checkpoint), "--to", "mediapipe", "--seq-len", str(seq_len),
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    one_line(done, *parts)
    assert not (tmp_path / "out").exists() and _files(checkpoint) == before


def test_what_mediapipe_still_refuses_names_the_output(base_checkpoint, tmp_path, monkeypatch, capfd, caplog):
    """A file MediaPipe refuses once made (here: our length check lowered to let MediaPipe's own
    RET_CHECK speak): the line names the output asked for, never the temporary file, and nothing
    else reaches descriptor 2."""
    import logging

    from albert_edge.converters import mediapipe

    # not verbose, whatever an earlier test in this process left (an `albert-edge -v` run sets the
    # root logger to INFO, and verbose lets the libraries speak); through setLevel, which also
    # empties the logger's cache of isEnabledFor answers (a bare `level` assignment would not)
    caplog.set_level(logging.WARNING, logger="albert_edge")
    # and as for a user who set no TF_CPP_MIN_LOG_LEVEL (.ci/mobile.sh runs these tests with 2, and a
    # level the user gave below fatal-only lets TensorFlow's converter speak, by design)
    from albert_edge.converters import native_logs

    monkeypatch.setattr(native_logs, "_GIVEN_TF_LEVEL", None)
    monkeypatch.setattr(mediapipe, "MIN_SEQ_LEN", 1, raising=False)
    model = checkpoints.model_from_checkpoint(checkpoints.load(base_checkpoint), None)
    out = tmp_path / "files" / "model.mediapipe.tflite"
    out.parent.mkdir()
    capfd.readouterr()
    with pytest.raises(ConversionError) as refused:
        mediapipe.export(model, out, seq_len=1, tokenizer=base_checkpoint / "spiece.model")
    message = str(refused.value)
    assert f"refused {out}:" in message and "bert_max_seq_len must be at least 2" in message, message
    assert ".albert-edge-tmp" not in message and "\n" not in message
    assert list(out.parent.iterdir()) == []
    assert capfd.readouterr().err == ""
