"""`albert-edge profile` of a file that takes the text (convert --to onnx-text): each call times
its tokenizer and the model, at a text the file itself tokenizes to the length asked for, or on
real sentences fed as they are (no --tokenizer needed); the records say so."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

pytest.importorskip("onnxruntime_extensions")

from albert_edge.cli import main  # noqa: E402

from .conftest import CONFIG, FAST  # noqa: E402
from ..converters.conftest import tiny_model  # noqa: E402


@pytest.fixture(scope="module")
def text_dir(tmp_path_factory, spiece_model):
    from albert_edge.converters.export import convert

    out = tmp_path_factory.mktemp("profile-text") / "out"
    convert(tiny_model(CONFIG, "classification"), out, targets=("onnx-text", "onnx"), seq_len=16,
            tokenizer=spiece_model)
    return out


def _profile(*args):
    return CliRunner().invoke(main, ["profile", *map(str, args), *FAST, "--json"])


# The length of the text the profiler fed, counted by the file's own tokenizer, in a child (the
# extensions' library and TensorFlow, which other tests load, crash one process).
_COUNT = """
import sys
from albert_edge.runtime import Session
from albert_edge.profile.inputs import ids_counter, text_of_length
session = Session(sys.argv[1])
feed, calls = text_of_length(ids_counter(session.run), int(sys.argv[2]))
print(session.run(feed)["token_ids"].shape[1], calls)
"""


def test_fixed_lengths_time_tokenizer_and_model(text_dir):
    result = _profile(text_dir / "model.text.onnx", "--seq-len", "8,40")
    assert result.exit_code == 0, result.output
    records = json.loads(result.stdout)
    assert [r["seq_len"] for r in records] == [8, 40]
    for r in records:
        assert r["input_kind"] == "text" and r["input_mode"] == "fixed" and r["format"] == "onnx"
        assert r["runtime"] == "onnxruntime" and r["latency"]["count"] >= 5 and r["first_call_ms"] > 0
        info = [w for w in r["warnings"] if w.startswith("info: the file takes the text")]
        assert len(info) == 1 and f"{r['seq_len']} tokens as its tokenizer counts them" in info[0], r["warnings"]
    for n in (8, 40, CONFIG.max_position_embeddings):
        done = subprocess.run([sys.executable, "-c", _COUNT, str(text_dir / "model.text.onnx"), str(n)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        fed, calls = map(int, done.stdout.split())
        assert fed == n and calls <= 16


def test_real_sentences_need_no_tokenizer(text_dir):
    result = _profile(text_dir / "model.text.onnx", "--text", "builtin", "--no-fixed", "--max-sentences", "20")
    assert result.exit_code == 0, result.output
    (record,) = json.loads(result.stdout)
    assert record["input_kind"] == "text" and record["input_mode"] == "real-text"
    text = record["text"]
    assert text["sentences"] == 20 and 2 < text["tokens"]["p50"] <= CONFIG.max_position_embeddings


def test_token_id_files_say_token_ids(text_dir):
    result = _profile(text_dir / "model.onnx", "--seq-len", "8")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)[0]["input_kind"] == "token ids"


@pytest.mark.parametrize("args, says", [
    (["model.text.onnx", "--batch", "2"], "takes one text per call"),
    (["model.onnx", "--text", "builtin"], "--text needs --tokenizer"),
])
def test_what_a_text_file_cannot_take_is_one_line(text_dir, args, says):
    result = _profile(text_dir / args[0], *args[1:])
    assert result.exit_code == 2 and says in result.stderr, result.output
    assert len(result.stderr.strip().splitlines()) == 1
