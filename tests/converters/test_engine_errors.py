"""Bad input that an engine would only meet after an export is refused first, in our one line; and
what the engines write themselves (TensorFlow's start-up lines, torchao's warnings, ExecuTorch's
cpuinfo lines) stays off stderr unless -v. Real processes: descriptor 2 is what a user sees."""

from __future__ import annotations

import re
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from albert_edge import checkpoints
from albert_edge.config import AlbertConfig
from albert_edge.errors import ConversionError
from albert_edge.model import build_model

DATA = Path(__file__).parents[1] / "data"
SCRIPT = Path(sys.executable).with_name("albert-edge")
TINY = AlbertConfig.preset("tiny").replace(vocab_size=400)  # the size of the shared spiece_model


def _env(**extra: str) -> dict[str, str]:
    """This environment without a TensorFlow log level (the user set none), ``extra`` on top."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    return {**env, "OMP_NUM_THREADS": "1", **extra}


def _cli(*args, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=_env())


def one_line(done: subprocess.CompletedProcess, *parts: str) -> str:
    """Exit 2, nothing on stdout, exactly one line on stderr (no library line before it), holding
    each of ``parts`` and no temporary name."""
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stdout == "", done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
    for part in parts:
        assert part in lines[0], (part, lines[0])
    assert ".albert-edge-tmp" not in lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory, spiece_model) -> Path:
    torch.manual_seed(0)
    return checkpoints.save(build_model(TINY, "base"), tmp_path_factory.mktemp("ckpt"), spiece=spiece_model)


@pytest.fixture(scope="module")
def larger_vocabulary(tmp_path_factory, ckpt) -> Path:
    """The checkpoint with a 430-piece spiece.model beside its 400 embedding rows."""
    from albert_edge.tokenizer import train_spiece

    root = tmp_path_factory.mktemp("larger")
    bigger = train_spiece([DATA / "corpus.txt"], root / "spiece", vocab_size=430)
    shutil.copytree(ckpt, root / "ckpt")
    shutil.copy(bigger, root / "ckpt" / "spiece.model")
    return root / "ckpt"


@pytest.fixture(scope="module")
def unreadable_spiece(tmp_path_factory, ckpt) -> Path:
    """The checkpoint with a spiece.model sentencepiece cannot parse."""
    root = tmp_path_factory.mktemp("unreadable") / "ckpt"
    shutil.copytree(ckpt, root)
    (root / "spiece.model").write_bytes(b"\x0a\xff" * 500)
    return root


# -- ExecuTorch ---------------------------------------------------------------------------------

def test_max_seq_len_below_seq_len_is_refused_before_any_export(ckpt, tmp_path):
    pytest.importorskip("executorch")
    out = tmp_path / "out"
    for targets in (("executorch",), ("onnx", "executorch")):  # before the onnx file, too
        to = [a for t in targets for a in ("--to", t)]
        line = one_line(_cli("convert", ckpt, *to, "--seq-len", "16", "--max-seq-len", "8", "--out", out),
                        "--max-seq-len (8)", "--seq-len (16)")
        assert "the input" not in line
        assert not out.exists()
    from albert_edge.converters.export import convert

    # From Python the same line, before any export too (the onnx file first would take seconds)
    for targets in (("executorch",), ("onnx", "executorch")):
        start = time.perf_counter()
        with pytest.raises(ConversionError, match=r"--max-seq-len \(8\) is below --seq-len \(16\)"):
            convert(ckpt, out, targets=targets, seq_len=16, max_seq_len=8)
        assert time.perf_counter() - start < 5, "refused only after an export"
        assert not out.exists()
    with pytest.raises(ConversionError, match="--seq-len 2 is too short for the mediapipe target"):
        convert(ckpt, out, targets=("onnx", "mediapipe"), seq_len=2)
    assert not out.exists()


def test_an_executorch_conversion_writes_nothing_on_stderr(ckpt, tmp_path):
    """torchao's warnings and ExecuTorch's cpuinfo lines (sent to Python's sys.stderr from C++)
    were 9 lines before a good result, and before every error after the export."""
    pytest.importorskip("executorch")
    done = _cli("convert", ckpt, "--to", "executorch", "--seq-len", "8", "--max-seq-len", "16", "--out",
                tmp_path / "out", "--json")
    assert done.returncode == 0, done.stderr
    ours = re.compile(r"^\[convert( \d+/\d+ .+| done)\] \d+:\d\d (elapsed|in all)$")  # progress lines, past 20 s
    assert [line for line in done.stderr.splitlines() if not ours.match(line)] == [], done.stderr
    assert (tmp_path / "out" / "model.pte").is_file()


# -- the checkpoint's spiece.model, before an export that packs it -------------------------------

@pytest.mark.parametrize("which, parts", [
    ("larger_vocabulary", ("spiece.model has 430 pieces", "word embeddings have 400 rows")),
    ("unreadable_spiece", ("spiece.model is not a sentencepiece model",)),
])
def test_onnx_text_refuses_a_spiece_model_that_does_not_fit(which, parts, request, tmp_path):
    pytest.importorskip("onnxruntime_extensions")
    checkpoint = request.getfixturevalue(which)
    before = sorted((p.name, p.stat().st_size) for p in checkpoint.iterdir())
    line = one_line(_cli("convert", checkpoint, "--to", "onnx-text", "--seq-len", "16", "--out", tmp_path / "out"),
                    *parts)
    assert "Gather" not in line and "onnxruntime" not in line
    assert not (tmp_path / "out").exists()
    assert sorted((p.name, p.stat().st_size) for p in checkpoint.iterdir()) == before


def test_the_spiece_check_is_before_the_export(larger_vocabulary, unreadable_spiece, tmp_path):
    """onnx_text.export refuses before the inner .onnx is written: nothing in its directory."""
    from albert_edge.converters import onnx_text
    from albert_edge.errors import TokenizerError

    model = checkpoints.model_from_checkpoint(checkpoints.load(larger_vocabulary), None)
    for checkpoint, message in ((larger_vocabulary, "430 pieces"), (unreadable_spiece, "not a sentencepiece")):
        with pytest.raises(TokenizerError, match=message):
            onnx_text.export(model, tmp_path / "model.text.onnx", seq_len=16, tokenizer=checkpoint / "spiece.model")
        assert list(tmp_path.iterdir()) == []


# -- TensorFlow from Python ---------------------------------------------------------------------

_CONVERT_TFLITE = textwrap.dedent("""
    import sys
    from albert_edge.converters.export import convert
    convert(sys.argv[1], sys.argv[2], targets=("tflite",), seq_len=8)
""")


def test_the_python_api_keeps_tensorflow_quiet_unless_the_user_set_a_level(ckpt, tmp_path):
    """No absl start-up lines and no 'failed call to cuInit' from the library call; a
    TF_CPP_MIN_LOG_LEVEL the user set is theirs: TensorFlow speaks at it."""
    pytest.importorskip("tensorflow")
    quiet = subprocess.run([sys.executable, "-c", _CONVERT_TFLITE, str(ckpt), str(tmp_path / "quiet")],
                           capture_output=True, text=True, timeout=600, env=_env())
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == "", quiet.stderr
    loud = subprocess.run([sys.executable, "-c", _CONVERT_TFLITE, str(ckpt), str(tmp_path / "loud")],
                          capture_output=True, text=True, timeout=600, env=_env(TF_CPP_MIN_LOG_LEVEL="0"))
    assert loud.returncode == 0, loud.stderr
    assert "InitializeLog" in loud.stderr or "tensorflow" in loud.stderr.lower(), loud.stderr


# -- the helper ---------------------------------------------------------------------------------

_QUIET = textwrap.dedent("""
    import logging, os, sys
    from albert_edge.converters.native_logs import quiet_native
    from albert_edge.errors import ConversionError

    if sys.argv[1] == "verbose":
        logging.basicConfig(level=logging.INFO)

    def noisy():
        os.write(2, b"native line\\n")  # C code writing to descriptor 2
        print("python line", file=sys.stderr)  # pybind11's redirect writes to sys.stderr
        logging.getLogger("torchao").warning("library warning")

    with quiet_native():
        noisy()
    print("after", file=sys.stderr)
    try:
        with quiet_native():
            noisy()
            raise ConversionError("ours")
    except ConversionError:
        pass
    with quiet_native():
        noisy()
        raise RuntimeError("a bug")
""")


def test_quiet_native_holds_back_library_output_and_gives_it_to_a_bug():
    def run(mode: str) -> str:
        done = subprocess.run([sys.executable, "-c", _QUIET, mode], capture_output=True, text=True, timeout=120)
        assert done.returncode == 1 and "RuntimeError: a bug" in done.stderr
        return done.stderr[:done.stderr.index("Traceback")]

    quiet = run("quiet")
    assert quiet == "after\nnative line\npython line\n", quiet  # only the bug's block is written out
    verbose = run("verbose")
    assert verbose.count("native line") == 3 and verbose.count("library warning") == 3, verbose


def test_a_text_file_whose_tokenizer_outruns_the_embeddings_is_named_so(larger_vocabulary, tmp_path):
    """A text file made elsewhere (the exporter refuses the pair now) with a tokenizer larger than
    the model: its verification says so, not onnxruntime's Gather error."""
    pytest.importorskip("onnxruntime_extensions")
    from albert_edge.converters import onnx as onnx_export
    from albert_edge.converters import onnx_text

    model = checkpoints.model_from_checkpoint(checkpoints.load(larger_vocabulary), None)
    inner = onnx_export.export(model, tmp_path / "model.onnx", seq_len=16)
    onnx_text._with_tokenizer(inner, larger_vocabulary / "spiece.model", model, tmp_path / "model.text.onnx")
    # ids of the larger vocabulary's own pieces, past row 400 (the rare ones: the last trained)
    texts = ["the weather station reads its sensors", *onnx_text._texts()]
    with pytest.raises(ConversionError, match=r"its tokenizer gave id 4\d\d but the model's word embeddings have "
                                              r"400 rows: the spiece.model and the model do not match") as refused:
        onnx_text.run_texts(tmp_path / "model.text.onnx", texts)
    assert "Gather" not in str(refused.value)
