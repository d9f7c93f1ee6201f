"""convert --to onnx-text: an ONNX file whose input is the text, ALBERT's tokenizer inside as
onnxruntime-extensions' SentencepieceTokenizer node. Run through onnxruntime with the extensions'
library registered, as an app runs it: its ids are albert_edge.tokenizer's (or differ in a named
class) on the tokenizer test strings, and its outputs are the token-id file's for those ids."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime_extensions")

from click.testing import CliRunner  # noqa: E402

from albert_edge import checkpoints  # noqa: E402
from albert_edge.cli import main  # noqa: E402
from albert_edge.converters.onnx_text import IDS_OUTPUT, TEXT_INPUT, run_texts  # noqa: E402
from albert_edge.errors import install_line  # noqa: E402
from albert_edge.converters.tokenizer_parity import _Reference, count_classes, hard_strings  # noqa: E402
from albert_edge.formats.weights import read_file  # noqa: E402
from albert_edge.model import build_model  # noqa: E402
from albert_edge.runtime import Session  # noqa: E402
from albert_edge.tokenizer import AlbertTokenizer  # noqa: E402

from .conftest import TINY, tiny_model  # noqa: E402

CONFIG = TINY.replace(vocab_size=400, num_labels=3)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, spiece_model):
    model = tiny_model(CONFIG, "classification")
    return checkpoints.save(model, tmp_path_factory.mktemp("text-ckpt"), spiece=spiece_model)


@pytest.fixture(scope="module")
def converted(checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("text") / "out"
    result = CliRunner().invoke(main, ["convert", str(checkpoint), "--to", "onnx", "--to", "onnx-text",
                                       "--scheme", "int8-dynamic", "--out", str(out), "--seq-len", "16", "--json"])
    assert result.exit_code == 0, result.output
    return out, json.loads(result.stdout)


def test_a_string_in_gives_the_token_id_files_outputs(converted, spiece_model):
    out, result = converted
    entry = {f["name"]: f for f in result["files"]}["model.text.onnx"]
    assert entry["weights"]["duplicates"] == [] and entry["weights"]["within_bound"]
    graph = onnx.load(str(out / "model.text.onnx"), load_external_data=False).graph
    assert [i.name for i in graph.input] == [TEXT_INPUT]
    assert [o.name for o in graph.output] == ["logits", IDS_OUTPUT]  # the model's first, as in model.onnx
    plain = Session(out / "model.onnx")
    tok = AlbertTokenizer(spiece_model)
    texts = ("The wind is from the west.", "Does ALBERT share its layers? Yes: all of them.", "Café au lait")
    for text, got in zip(texts, run_texts(out / "model.text.onnx", list(texts))):
        want_ids = tok([text], max_length=CONFIG.max_position_embeddings, padding="longest", truncation=True)["input_ids"]
        np.testing.assert_array_equal(got[IDS_OUTPUT], want_ids)
        expected = plain.run({"input_ids": want_ids, "attention_mask": np.ones_like(want_ids),
                              "token_type_ids": np.zeros_like(want_ids)})
        np.testing.assert_allclose(got["logits"], expected["logits"], atol=1e-5, rtol=0)


def test_the_int8_text_file_is_the_int8_onnx_behind_the_tokenizer(converted, checkpoint, tmp_path):
    """convert --scheme int8-dynamic: model.int8-dynamic.text.onnx computes the fp32 text file's ids
    and gives, for them, what albert-edge quantize's int8 .onnx gives in onnxruntime (defaults on
    both sides, as an app opens them); its weights are int8 and stored once."""
    import onnxruntime as ort

    from albert_edge.formats import manifest as manifest_io
    from albert_edge.quantize import QuantizeConfig, quantize

    out, result = converted
    entry = {f["name"]: f for f in result["files"]}["model.int8-dynamic.text.onnx"]
    assert entry["weights"]["duplicates"] == [] and entry["weights"]["within_bound"]
    recorded = manifest_io.read(out).file("model.int8-dynamic.text.onnx")
    assert recorded.precision == "int8-dynamic" and recorded.parity["parent"] == "model.text.onnx"
    assert recorded.parity["twin_max_abs_diff"]["logits"] == 0.0  # measured against the int8 .onnx, as below
    assert min(recorded.parity["agreement"].values()) >= 0.9  # against the fp32 file on held-out text
    assert "int8" in {w.data.dtype.name for w in read_file(out / "model.int8-dynamic.text.onnx").weights}
    int8 = quantize(out / "model.onnx", QuantizeConfig("int8-dynamic", tokenizer=checkpoint),
                    tmp_path / "model.int8-dynamic.onnx").out_path
    plain = ort.InferenceSession(str(int8), providers=["CPUExecutionProvider"])
    names = [o.name for o in plain.get_outputs()]
    texts = ["The wind is from the west.", "Crème brûlée at the Café Münster", "A short one."]
    fp32 = run_texts(out / "model.text.onnx", texts)
    for got, whole in zip(run_texts(out / "model.int8-dynamic.text.onnx", texts), fp32):
        ids = got[IDS_OUTPUT]
        np.testing.assert_array_equal(ids, whole[IDS_OUTPUT])
        want = plain.run(names, {"input_ids": ids, "attention_mask": np.ones_like(ids),
                                 "token_type_ids": np.zeros_like(ids)})
        np.testing.assert_array_equal(got["logits"], want[0])


def test_quantize_of_a_text_file_says_where_its_twin_is_made(converted, tmp_path):
    out, _ = converted
    result = CliRunner().invoke(main, ["quantize", str(out / "model.text.onnx"), "--scheme", "int8-dynamic",
                                       "--out", str(tmp_path / "q.onnx")])
    assert result.exit_code == 2 and "--to onnx-text --scheme int8-dynamic" in result.stderr, result.output
    assert not (tmp_path / "q.onnx").exists()


def test_over_long_text_is_cut_to_the_model_length(converted, spiece_model):
    out, _ = converted
    text = " ".join(["Phones run the same small file."] * 40)
    (got,) = run_texts(out / "model.text.onnx", [text])
    want = AlbertTokenizer(spiece_model)([text], max_length=CONFIG.max_position_embeddings, padding="longest",
                                         truncation=True)
    np.testing.assert_array_equal(got[IDS_OUTPUT], want["input_ids"])
    assert got[IDS_OUTPUT].shape == (1, CONFIG.max_position_embeddings)


def test_the_tokenizer_test_strings_are_sentencepieces_own_ids(converted, spiece_model):
    """2,400 strings of every kind (case, accents, Unicode spaces, quotes, digits, CJK, emoji,
    controls, special tokens, over-long): the graph's ids are exactly what sentencepiece computes
    with the embedded model (ALBERT's normalizer inside), between [CLS] and [SEP] and cut to the
    model's length (or a cut of the same score), save that onnxruntime-extensions reads a text up
    to its first NUL; against
    albert_edge.tokenizer they are mostly the same, the rest in the classes tokenizer_parity names."""
    import sentencepiece as spm

    from albert_edge.converters.spiece_rules import with_albert_normalizer

    out, _ = converted
    embedded = spm.SentencePieceProcessor(model_proto=with_albert_normalizer(spiece_model))
    tok = AlbertTokenizer(spiece_model)
    texts = [text for _, text in hard_strings(2400)]
    engine = [got[IDS_OUTPUT][0].tolist() for got in run_texts(out / "model.text.onnx", texts)]
    keep = CONFIG.max_position_embeddings - 2
    reference = _Reference(spiece_model, CONFIG.max_position_embeddings)
    whole = 0
    for text, ids in zip(texts, engine):
        pieces = embedded.encode(text.split("\x00", 1)[0])
        if len(pieces) >= keep:  # cut to the model's length (a tie broken otherwise moves the cut)
            assert len(ids) == keep + 2 and ids[0] == tok.cls_id and ids[-1] == tok.sep_id, text
            continue
        whole += 1
        want = [tok.cls_id, *pieces, tok.sep_id]
        # the extensions' own sentencepiece build may break a tie between two equally scored cuts otherwise
        assert ids == want or reference.same_scores(ids, want), text
    assert whole >= 1600  # 1,705 of the 2,400 fit in 62 pieces of this 400-piece vocabulary
    counts, _ = count_classes(spiece_model, texts, engine, CONFIG.max_position_embeddings)
    print(counts)
    assert counts["same"] >= 2000 and counts["nul-ends-text"] > 0


def test_one_text_per_call(converted):
    out, _ = converted
    # In a child of its own, as run_texts runs the file (the extensions' library and TensorFlow
    # in one process crash it).
    code = textwrap.dedent("""
        import sys, numpy as np
        from albert_edge.converters.onnx_text import TEXT_INPUT, text_session
        try:
            text_session(sys.argv[1]).run(None, {TEXT_INPUT: np.array(["one", "two"], dtype=object)})
        except Exception as exc:
            sys.exit(str(exc))
    """)
    done = subprocess.run([sys.executable, "-c", code, str(out / "model.text.onnx")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode != 0 and "text" in done.stderr, done.stderr


_SESSION = """
import json, sys, numpy as np
if sys.argv[2] == "with-tensorflow":
    import tensorflow
from albert_edge.errors import RuntimeUnavailable
from albert_edge.runtime import Session
try:
    session = Session(sys.argv[1])
except RuntimeUnavailable as exc:
    sys.exit(str(exc))
got = session.run({"text": np.array([sys.argv[3]])})
print(json.dumps({"takes_text": session.takes_text, "inputs": [[s.name, s.dtype] for s in session.inputs],
                  **{name: value.tolist() for name, value in got.items()}}))
"""


def _session_child(path, *args: str) -> subprocess.CompletedProcess:
    # A child of its own: the extensions' library and TensorFlow in one process crash it.
    return subprocess.run([sys.executable, "-c", _SESSION, str(path), *args], capture_output=True, text=True,
                          timeout=300)


def test_session_runs_a_text_file_as_the_app_does(converted):
    out, _ = converted
    text = "Does ALBERT share its layers? Yes."
    done = _session_child(out / "model.text.onnx", "plain", text)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["takes_text"] and got["inputs"] == [[TEXT_INPUT, "object"]]
    (want,) = run_texts(out / "model.text.onnx", [text])
    np.testing.assert_array_equal(got[IDS_OUTPUT], want[IDS_OUTPUT])
    np.testing.assert_allclose(got["logits"], want["logits"], atol=1e-6, rtol=0)
    assert not Session(out / "model.onnx").takes_text


def test_session_refuses_a_text_file_where_tensorflow_is_loaded(converted):
    out, _ = converted
    done = _session_child(out / "model.text.onnx", "with-tensorflow", "one")
    assert done.returncode == 1 and "TensorFlow loaded" in done.stderr.strip().splitlines()[-1], done.stderr[-2000:]


def test_without_onnxruntime_extensions_one_line_and_nothing_written(checkpoint, tmp_path, cli_without):
    out = tmp_path / "out"
    done = cli_without("onnxruntime_extensions", "convert", checkpoint, "--to", "onnx-text", "--out", out,
                       "--seq-len", "16")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "onnxruntime-extensions" in lines[0] and install_line("onnx-text") in lines[0], lines
    assert not out.exists()


def test_a_checkpoint_without_spiece_is_one_line(tmp_path):
    ckpt = checkpoints.save(build_model(CONFIG, "base"), tmp_path / "bare")
    result = CliRunner().invoke(main, ["convert", str(ckpt), "--to", "onnx-text", "--out", str(tmp_path / "out"),
                                       "--seq-len", "16"])
    assert result.exit_code == 2 and "needs its spiece.model" in result.stderr, result.output
    assert not (tmp_path / "out").exists()
