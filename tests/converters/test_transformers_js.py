"""``convert --to transformers-js`` (converters/transformers_js.py): the folder transformers.js loads,
read here as transformers.js reads it: config.json, tokenizer.json through Hugging Face's
``tokenizers``, onnx/model.onnx and onnx/model_quantized.onnx in onnxruntime fed int64 inputs by
name, against PyTorch; each shared weight stored once; bad input one line, nothing written."""

from __future__ import annotations

import json
import os
import shutil
import stat

import numpy as np
import onnx
import pytest
import torch
from click.testing import CliRunner

from albert_edge import checkpoints
from albert_edge.cli import main
from albert_edge.converters.export import convert
from albert_edge.converters.transformers_js import FOLDER, MODEL_FILES, verify_folder
from albert_edge.errors import ConversionError
from albert_edge.tokenizer import AlbertTokenizer

from .conftest import TINY, tiny_model

tokenizers = pytest.importorskip("tokenizers")
onnxruntime = pytest.importorskip("onnxruntime")

CONFIG = TINY.replace(vocab_size=400)  # the spiece_model fixture's 400 pieces
LABELLED = CONFIG.replace(num_labels=3, label_names=("negative", "neutral", "positive"))
SEQ_LEN = 32
TEXTS = ["The weather station on the hill reads its sensors once every minute.", "In 2020, the mast bent.",
         "Ça va? ``Yes'', said the ΟΔΟΣ sign.", "hello [MASK] world"]
# head -> (architecture, the outputs transformers.js reads)
HEADS = {"classification": ("AlbertForSequenceClassification", ["logits"]),
         "mlm": ("AlbertForMaskedLM", ["logits"]),
         "base": ("AlbertModel", ["last_hidden_state", "pooler_output"]),
         "qa": ("AlbertForQuestionAnswering", ["start_logits", "end_logits"])}


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def model_of(head: str):
    return tiny_model(LABELLED if head == "classification" else CONFIG, head)


@pytest.fixture(scope="module", params=list(HEADS))
def converted(request, spiece_model, tmp_path_factory):
    head = request.param
    model = model_of(head)
    out = tmp_path_factory.mktemp("tjs") / "out"
    result = convert(model, out, targets=["transformers-js"], tokenizer=spiece_model, seq_len=SEQ_LEN)
    return head, model, out, result


def test_the_folder_is_laid_out_as_optimum_exports_it(converted):
    head, model, out, result = converted
    folder = out / FOLDER
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) == [
        "config.json", "onnx/model.onnx", "onnx/model_fp16.onnx", "onnx/model_quantized.onnx",
        "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"]
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "albert" and config["architectures"] == [HEADS[head][0]]
    if head == "classification":
        assert config["id2label"] == {"0": "negative", "1": "neutral", "2": "positive"}
        assert config["label2id"] == {"negative": 0, "neutral": 1, "positive": 2}
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    assert tokenizer_config["tokenizer_class"] == "AlbertTokenizer"
    assert tokenizer_config["model_max_length"] == CONFIG.max_position_embeddings
    # the target's file is the folder's fp32 model, on disk once, and the manifest lists it
    (entry,) = json.loads((out / "manifest.json").read_text())["files"]
    assert entry["name"] == "model.transformers-js.onnx" and entry["format"] == "onnx"
    assert [o["name"] for o in entry["outputs"]] == HEADS[head][1]
    assert os.path.samefile(out / entry["name"], folder / MODEL_FILES["fp32"])
    assert [f.name for f in result.files] == ["model.transformers-js.onnx"]


def test_the_files_answer_like_pytorch_as_transformers_js_feeds_them(converted, spiece_model):
    """tokenizer.json's ids (as transformers.js's tokenizer makes them) are ours; both files take them
    as int64 input_ids, attention_mask and token_type_ids and give PyTorch's outputs under the names
    transformers.js reads: the fp32 file within 1e-4, the int8 one by cosine."""
    head, model, out, _ = converted
    folder = out / FOLDER
    engine = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    engine.enable_padding(pad_id=0, pad_token="<pad>")
    encodings = engine.encode_batch(TEXTS)
    feeds = {"input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
             "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
             "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64)}
    ours = AlbertTokenizer(spiece_model)(TEXTS, padding="longest", max_length=None)
    for name in feeds:
        np.testing.assert_array_equal(feeds[name], ours[name])
    with torch.no_grad():
        expected = model(*(torch.from_numpy(feeds[n]) for n in ("input_ids", "attention_mask", "token_type_ids")))
    expected = expected if isinstance(expected, tuple) else (expected,)
    for dtype, name in MODEL_FILES.items():
        session = onnxruntime.InferenceSession(str(folder / name), providers=["CPUExecutionProvider"])
        assert {i.name: i.type for i in session.get_inputs()} == dict.fromkeys(feeds, "tensor(int64)")
        outputs = [o.name for o in session.get_outputs()]
        assert outputs == HEADS[head][1]
        got = session.run(outputs, feeds)
        for want, have in zip(expected, got):
            want, have = want.numpy(), have
            if want.ndim == 3:  # real tokens only
                keep = feeds["attention_mask"].astype(bool)
                want, have = want[keep], have[keep]
            if dtype == "fp32":
                np.testing.assert_allclose(have, want, atol=1e-4, rtol=1e-4)
            else:
                a, b = have.reshape(len(have), -1), want.reshape(len(want), -1)
                cosine = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
                assert cosine.min() > 0.98, cosine


@pytest.mark.parametrize("name", list(MODEL_FILES.values()))
def test_inspect_shows_each_weight_once(converted, name):
    _, _, out, _ = converted
    result = run("inspect", str(out / FOLDER / name), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["duplicates"] == []
    assert data["stored_bytes"] <= 1.01 * data["unique_bytes"]


def test_the_quantized_file_is_int8(converted):
    _, _, out, _ = converted
    proto = onnx.load(str(out / FOLDER / MODEL_FILES["q8"]))
    int8 = sum(t.data_type == onnx.TensorProto.INT8 for t in proto.graph.initializer)
    assert int8 >= CONFIG.num_hidden_groups * 4  # Q, K, V, output, FFN of each shared group, at the least


def test_the_fp16_file_is_the_fp32_graph_in_float16(converted):
    """onnx/model_fp16.onnx (transformers.js' dtype "fp16"): every float weight float16, each of
    the fp32 file's weights there once, the same operators as the fp32 file's but for the casts
    that take the inputs in and the outputs out, and float32 outputs (what transformers.js reads)."""
    _, _, out, _ = converted
    fp32, fp16 = (onnx.load(str(out / FOLDER / MODEL_FILES[d])) for d in ("fp32", "fp16"))
    floats = [t for t in fp16.graph.initializer if t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)]
    assert floats and all(t.data_type == onnx.TensorProto.FLOAT16 for t in floats)
    big = sorted(tuple(t.dims) for t in fp32.graph.initializer if np.prod(t.dims) > 16)
    assert sorted(tuple(t.dims) for t in fp16.graph.initializer if np.prod(t.dims) > 16) == big

    def ops(proto):
        return sorted(n.op_type for n in proto.graph.node if n.op_type != "Cast")

    assert ops(fp16) == ops(fp32)
    outputs = fp16.graph.output
    assert [o.type.tensor_type.elem_type for o in outputs] == [onnx.TensorProto.FLOAT] * len(outputs)


def test_a_folder_that_differs_fails_its_check(converted, spiece_model, tmp_path):
    """verify_folder is the conversion's gate: a tokenizer.json that lower-cases no more, or a
    model file of another model, is refused."""
    head, model, out, _ = converted
    folder = tmp_path / FOLDER
    shutil.copytree(out / FOLDER, folder)
    assert verify_folder(model, folder, SEQ_LEN, spiece_model)["tokenizer"]["same"] >= 380
    data = json.loads((folder / "tokenizer.json").read_text())
    data["normalizer"]["normalizers"] = [n for n in data["normalizer"]["normalizers"] if n["type"] != "Lowercase"]
    (folder / "tokenizer.json").write_text(json.dumps(data))
    with pytest.raises(ConversionError, match="gives other ids than albert-edge's tokenizer"):
        verify_folder(model, folder, SEQ_LEN, spiece_model)
    shutil.copy(out / FOLDER / "tokenizer.json", folder / "tokenizer.json")
    os.unlink(folder / MODEL_FILES["q8"])
    shutil.copy(out / FOLDER / MODEL_FILES["fp32"], folder / MODEL_FILES["q8"])
    other = model_of(head).train(False)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.5)
    with pytest.raises(ConversionError, match="differs from PyTorch|cosine"):
        verify_folder(other, folder, SEQ_LEN, spiece_model)


def test_the_folder_can_be_entered_by_everyone(converted):
    _, _, out, _ = converted
    for item in [out / FOLDER, *(out / FOLDER).rglob("*")]:
        mode = stat.S_IMODE(item.stat().st_mode)
        assert mode & 0o444 == 0o444, item  # everyone reads every file
        if item.is_dir():
            assert mode & 0o111 == 0o111, item  # and enters every folder


# -- the command line --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ckpt(tmp_path_factory, spiece_model):
    """A pretraining checkpoint with its spiece.model (base, mlm and pretraining heads)."""
    torch.manual_seed(0)
    path = checkpoints.save(tiny_model(CONFIG, "pretraining"), tmp_path_factory.mktemp("cli") / "ckpt")
    shutil.copy(spiece_model, path / "spiece.model")
    return path


def test_convert_from_the_command_line(ckpt, tmp_path):
    out = tmp_path / "out"
    result = run("convert", str(ckpt), "--to", "transformers-js", "--head", "mlm", "--out", str(out),
                 "--seq-len", "16")
    assert result.exit_code == 0, result.output
    assert "model.transformers-js.onnx" in result.stdout
    assert json.loads((out / FOLDER / "config.json").read_text())["architectures"] == ["AlbertForMaskedLM"]


def one_line_error(result, text: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and text in lines[0], result.stderr


def test_a_head_transformers_js_has_no_class_for(ckpt, tmp_path):
    out = tmp_path / "out"
    one_line_error(run("convert", str(ckpt), "--to", "transformers-js", "--out", str(out), "--seq-len", "16"),
                   "transformers.js has no ALBERT model class for the 'pretraining' head")
    assert not out.exists()


def test_no_spiece_model(ckpt, tmp_path):
    bare = tmp_path / "bare"
    shutil.copytree(ckpt, bare)
    (bare / "spiece.model").unlink()
    out = tmp_path / "out"
    one_line_error(run("convert", str(bare), "--to", "transformers-js", "--head", "mlm", "--out", str(out),
                       "--seq-len", "16"), "found no spiece.model beside the checkpoint")
    assert not out.exists()


def test_a_bpe_spiece_model(ckpt, tmp_path):
    import sentencepiece as spm

    from albert_edge.tokenizer import SPECIAL_TOKENS
    from tests.conftest import DATA

    bpe = tmp_path / "bpe"
    shutil.copytree(ckpt, bpe)
    spm.SentencePieceTrainer.train(input=str(DATA / "corpus.txt"), model_prefix=str(tmp_path / "sp"), model_type="bpe",
                                   vocab_size=CONFIG.vocab_size, pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
                                   control_symbols=list(SPECIAL_TOKENS[2:]), minloglevel=2)
    shutil.copy(tmp_path / "sp.model", bpe / "spiece.model")
    out = tmp_path / "out"
    one_line_error(run("convert", str(bpe), "--to", "transformers-js", "--head", "base", "--out", str(out),
                       "--seq-len", "16"), "is a sentencepiece bpe model")
    assert not out.exists()
