"""The ALBERT tokenizer's batches, pairs, truncation and decoding against transformers'
AlbertTokenizer on the same real spiece.model, training of spiece models, and the
`albert-edge tokenizer` commands. That ids equal the ones ALBERT was pretrained with, on a
vocabulary with ALBERT's user-defined pieces, is tested in test_tokenizer_exact.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
from click.testing import CliRunner

from albert_edge.cli import main
from albert_edge.errors import TokenizerError
from albert_edge.tokenizer import SPECIAL_TOKENS, AlbertTokenizer, normalize, train_spiece, truncate

CORPUS = Path(__file__).parent / "data" / "corpus.txt"
LONG = " ".join(CORPUS.read_text(encoding="utf-8").split()[:400])

# Hand-picked hard cases (accents, quotes, digits with commas, emoji, odd whitespace, special
# tokens written in the text), shared with test_tokenizer_exact.py.
SENTENCES = [*json.loads((CORPUS.parent / "sentences.json").read_text(encoding="utf-8")), LONG]
IDS = [f"s{i}" for i in range(len(SENTENCES))]


# -- oracles -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tok(spiece_model: Path) -> AlbertTokenizer:
    return AlbertTokenizer(spiece_model)


@pytest.fixture(scope="module")
def plain_spiece(tmp_path_factory) -> Path:
    """A vocabulary without user-defined pieces. transformers (>= 5) cuts text into words before
    sentencepiece sees it, which changes the pieces around user-defined ones; on this vocabulary
    both give ALBERT's ids on ordinary text, so batches and truncation can be compared."""
    return train_spiece([CORPUS], tmp_path_factory.mktemp("plain_spiece"), vocab_size=400,
                        user_defined_symbols=())


@pytest.fixture(scope="module")
def plain_tok(plain_spiece: Path) -> AlbertTokenizer:
    return AlbertTokenizer(plain_spiece)


@pytest.fixture(scope="module")
def hf_plain(plain_spiece: Path, tmp_path_factory):
    """transformers' AlbertTokenizer loading a directory with only spiece.model."""
    transformers = pytest.importorskip("transformers")
    ckpt = tmp_path_factory.mktemp("hf_plain")
    shutil.copy(plain_spiece, ckpt / "spiece.model")
    return _cached(transformers.AlbertTokenizer, ckpt)


@pytest.fixture(scope="module")
def hf_hub(plain_spiece: Path, tmp_path_factory):
    """transformers' AlbertTokenizer loading spiece.model + tokenizer.json, the layout of the
    published ALBERT checkpoints, whose tokenizer.json transformers' AlbertConverter made."""
    transformers = pytest.importorskip("transformers")
    from transformers.convert_slow_tokenizer import AlbertConverter

    ckpt = tmp_path_factory.mktemp("hf_hub")
    shutil.copy(plain_spiece, ckpt / "spiece.model")
    sp = spm.SentencePieceProcessor(model_file=str(plain_spiece))
    slow = types.SimpleNamespace(vocab_file=str(plain_spiece), keep_accents=False, do_lower_case=True,
                                 convert_tokens_to_ids=sp.piece_to_id)
    AlbertConverter(slow).converted().save(str(ckpt / "tokenizer.json"))
    return _cached(transformers.AlbertTokenizer, ckpt)


def _cached(cls, ckpt: Path):
    made: dict = {}

    def load(**kw):
        key = tuple(sorted(kw.items()))
        if key not in made:
            made[key] = cls.from_pretrained(ckpt, **kw)
        return made[key]
    return load


def hf_ids(hf, texts, pairs=None, **kw) -> dict[str, np.ndarray]:
    # Always a batch: transformers takes a lone empty second text as "no pair".
    out = hf(list(texts), None if pairs is None else list(pairs), return_tensors="np",
             return_token_type_ids=True, **kw)
    return {k: out[k] for k in ("input_ids", "attention_mask", "token_type_ids")}


# -- where transformers (>= 5) is not ALBERT -------------------------------------------------

def test_hangul_follows_sentencepiece(tmp_path):
    """With a vocabulary that knows Korean, we give sentencepiece's pieces (as ALBERT's own
    tokenizer does); transformers leaves NFKD's jamo apart and finds only <unk>."""
    text = tmp_path / "ko.txt"
    text.write_text("안녕하세요 감사합니다 안녕 감사 하세요\n" * 50 + CORPUS.read_text(encoding="utf-8"),
                    encoding="utf-8")
    model = train_spiece([text], tmp_path, vocab_size=300)
    sp = spm.SentencePieceProcessor(model_file=str(model))
    tok = AlbertTokenizer(model)
    assert tok.encode("안녕하세요")[1:-1] == sp.encode("안녕하세요") and tok.unk_id not in tok.encode("안녕하세요")
    hf = pytest.importorskip("transformers").AlbertTokenizer.from_pretrained(tmp_path)
    assert tok.unk_id in hf("안녕하세요")["input_ids"]


@pytest.mark.parametrize("text, pieces", [
    ("1,000", ["▁1", ",", "0", "00"]),
    ("in 2019,", ["▁in", "▁20", "19", ","]),
    ("1,2,3", ["▁1", ",", "2", ",", "3"]),
])
def test_number_comma_split(plain_tok, plain_spiece, hf_hub, hf_plain, text, pieces):
    """ALBERT splits "▁1," into "▁1" ","; a bare spiece.model in transformers does not."""
    sp = spm.SentencePieceProcessor(model_file=str(plain_spiece))
    assert sp.piece_to_id("▁1,") != sp.unk_id()  # the vocabulary has such a piece: the case is real
    assert plain_tok.tokenize(text) == pieces == hf_hub().tokenize(text)
    if "1," in text:
        assert "▁1," in hf_plain().tokenize(text)


def test_special_ids(tok):
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)
    assert tok.id_to_piece(range(5)) == list(SPECIAL_TOKENS)
    assert tok.vocab_size == 400
    assert tok.encode("") == [2, 3] and tok.encode("", "") == [2, 3, 3]
    assert tok.tokenize("😀") == ["▁", "😀"]
    assert tok.id_to_piece(tok.encode("😀")) == ["[CLS]", "▁", "<unk>", "[SEP]"]


# -- pairs, truncation, batches ------------------------------------------------------------

PAIR_TEXTS = ["one two three four five six seven", "seven six five four three two one", "a",
              "the wind is from the west at 20 kilometres per hour", "", LONG[:300]]


@pytest.mark.parametrize("max_length", [3, 4, 5, 8, 9, 16, 64])
@pytest.mark.parametrize("b", PAIR_TEXTS, ids=lambda t: f"b{len(t)}")
@pytest.mark.parametrize("a", PAIR_TEXTS, ids=lambda t: f"a{len(t)}")
def test_pair_truncation_matches_transformers(plain_tok, hf_hub, a, b, max_length):
    ours = plain_tok([a], [b], max_length=max_length, padding=False)
    theirs = hf_ids(hf_hub(), [a], [b], max_length=max_length, truncation="longest_first")
    for key in ours:
        assert ours[key].tolist() == theirs[key].tolist(), key


@pytest.mark.parametrize("max_length", [2, 3, 16, 100])
def test_single_truncation(plain_tok, hf_hub, max_length):
    ids = plain_tok.encode(LONG, max_length=max_length)
    assert len(ids) == max_length and ids[0] == plain_tok.cls_id and ids[-1] == plain_tok.sep_id
    assert ids == hf_ids(hf_hub(), [LONG], max_length=max_length, truncation=True)["input_ids"][0].tolist()
    assert len(plain_tok.encode(LONG, max_length=max_length, truncation=False)) > 200


def test_truncate_longest_first_rules():
    a, b = list(range(10)), list(range(100, 103))
    assert truncate(a, b, 8) == (a[:5], b)          # only the longer is cut
    assert truncate(a, a, 7) == (a[:3], a[:4])      # a tie: the second keeps the extra id
    assert truncate(a, a[:9], 7) == (a[:4], a[:3])  # both cut: the longer keeps the extra id
    with pytest.raises(TokenizerError, match="max_length is too small"):
        truncate(a, b, -1)


@pytest.mark.parametrize("padding", ["max_length", "longest"])
def test_batch_padding_matches_transformers(plain_tok, hf_hub, padding):
    texts = SENTENCES[:6] + [LONG]
    pairs = list(reversed(texts))
    for b in (None, pairs):
        ours = plain_tok(texts, b, max_length=40, padding=padding)
        theirs = hf_ids(hf_hub(), texts, b, max_length=40, padding=padding, truncation=True)
        assert set(ours) == {"input_ids", "attention_mask", "token_type_ids"}
        for key, value in ours.items():
            assert value.dtype == np.int64 and value.shape[0] == len(texts)
            np.testing.assert_array_equal(value, theirs[key], err_msg=key)
    assert plain_tok(texts, max_length=40)["input_ids"].shape == (len(texts), 40)
    assert plain_tok(["a b", "a"], padding="longest")["attention_mask"].tolist() == [[1] * 5, [1] * 3 + [0] * 2]


@pytest.mark.parametrize("kwargs, message", [
    (dict(texts=["a", "a b c"], padding=False), "different lengths"),
    (dict(texts=["a"], padding="left"), "padding must be one of"),
    (dict(texts=["a"], max_length=None), "needs a max_length"),
    (dict(texts=["a", "b"], text_pairs=["c"]), "2 texts but 1 text pairs"),
    (dict(texts=["a"], text_pairs=["b"], max_length=2), "max_length is too small"),
])
def test_batch_errors(tok, kwargs, message):
    with pytest.raises(TokenizerError, match=message):
        tok(**kwargs)


# -- decode --------------------------------------------------------------------------------

@pytest.mark.parametrize("skip", [True, False])
@pytest.mark.parametrize("text", SENTENCES, ids=IDS)
def test_decode_matches_transformers(plain_tok, hf_hub, text, skip):
    ids = plain_tok.encode(text, "second part")
    assert plain_tok.decode(ids, skip_special_tokens=skip) == hf_hub().decode(ids, skip_special_tokens=skip)


@pytest.mark.parametrize("text", [SENTENCES[0], SENTENCES[2], LONG, "Café au lait, 1,000 times"])
def test_decode_round_trip(tok, text):
    assert tok.decode(tok.encode(text)) == normalize(text)
    assert tok.decode(np.array(tok.encode(text), dtype=np.int64)) == normalize(text)


# -- loading -------------------------------------------------------------------------------

def test_from_dir(spiece_model, tmp_path):
    assert AlbertTokenizer.from_dir(spiece_model.parent).path == spiece_model
    assert AlbertTokenizer.from_dir(spiece_model).path == spiece_model
    shutil.copy(spiece_model, tmp_path / "30k-clean.model")
    assert AlbertTokenizer.from_dir(tmp_path).vocab_size == 400
    shutil.copy(spiece_model, tmp_path / "other.model")
    with pytest.raises(TokenizerError, match=r"no spiece.model in .*30k-clean.model, other.model"):
        AlbertTokenizer.from_dir(tmp_path)


def test_bad_model_files(tmp_path):
    garbage = tmp_path / "spiece.model"
    garbage.write_bytes(b"\x00\x01 not a model")
    plain = tmp_path / "plain"
    spm.SentencePieceTrainer.train(input=str(CORPUS), model_prefix=str(plain), vocab_size=100,
                                   minloglevel=2)
    cases = [(tmp_path / "missing.model", "does not exist"), (garbage, "is not a sentencepiece model"),
             (Path(f"{plain}.model"), r"is not an ALBERT vocabulary: it has no <pad> piece"),
             (tmp_path / "nothing-here", "does not exist")]
    for path, message in cases:
        with pytest.raises(TokenizerError, match=message) as err:
            AlbertTokenizer.from_dir(path)
        assert "\n" not in str(err.value)


def test_check_vocab_size(tok):
    tok.check_vocab_size(400)
    with pytest.raises(TokenizerError, match="400 pieces but the model embeds only 99"):
        tok.check_vocab_size(99)


# -- training ------------------------------------------------------------------------------

def test_train_ids_and_atomic_write(spiece_model, tmp_path):
    sp = spm.SentencePieceProcessor(model_file=str(spiece_model))
    assert [sp.id_to_piece(i) for i in range(5)] == list(SPECIAL_TOKENS)
    assert sp.pad_id() == 0 and sp.unk_id() == 1 and sp.bos_id() == -1 and sp.eos_id() == -1
    assert all(sp.is_control(i) for i in (0, 2, 3, 4))
    # Trained on lower-cased text (the corpus has capitals).
    assert not any(p != p.lower() for p in (sp.id_to_piece(i) for i in range(5, sp.get_piece_size())))
    again = train_spiece([CORPUS], tmp_path, vocab_size=400)
    assert again.read_bytes() == spiece_model.read_bytes()  # seeded: the same model every time
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spiece.model"]


def test_train_streams_long_lines(tmp_path):
    one_line = tmp_path / "one-line.txt"
    one_line.write_text(" ".join(CORPUS.read_text(encoding="utf-8").split()), encoding="utf-8")
    assert len(one_line.read_bytes()) > 4192  # longer than sentencepiece takes in one sentence
    out = train_spiece([one_line, CORPUS], tmp_path / "out", vocab_size=300, input_sentence_size=200)
    assert AlbertTokenizer(out).vocab_size == 300


@pytest.mark.parametrize("setup, kwargs, message", [
    ("empty", {}, "no text to train the tokenizer on in empty.txt"),
    ("blank", {}, "no text to train the tokenizer on in blank.txt"),
    ("corpus", dict(vocab_size=5000), r"vocab_size 5000 is too large .* at most \d+ pieces"),
    ("missing", {}, "does not exist"),
    ("corpus", dict(vocab_size=13), "must be larger than the 5 special tokens and 8 user-defined"),
    ("corpus", dict(input_sentence_size=50), "must be 0 .* or more than 100"),
])
def test_train_errors(tmp_path, setup, kwargs, message):
    files = {"empty": "", "blank": "\n  \n\t\n"}
    path = CORPUS if setup == "corpus" else tmp_path / f"{setup}.txt"
    if setup in files:
        path.write_text(files[setup], encoding="utf-8")
    with pytest.raises(TokenizerError, match=message) as err:
        train_spiece([path], tmp_path / "out", **{"vocab_size": 300, **kwargs})
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()


# -- command line --------------------------------------------------------------------------

def run(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_cli_train(tmp_path):
    result = run("tokenizer", "train", CORPUS, "--out", tmp_path / "tok", "--vocab-size", 300, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["vocab_size"] == 300
    assert data["special_ids"] == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    assert Path(data["path"]) == tmp_path / "tok" / "spiece.model" and data["bytes"] > 0
    table = run("tokenizer", "train", CORPUS, "--out", tmp_path / "tok2", "--vocab-size", 300)
    assert table.exit_code == 0 and "pad=0, unk=1, cls=2, sep=3, mask=4" in table.stdout


def test_cli_encode(tok, spiece_model):
    result = run("tokenizer", "encode", spiece_model.parent, "In 2019, [MASK] café", "b text", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    batch = tok("In 2019, [MASK] café", "b text", padding=False, max_length=None)
    assert data["input_ids"] == batch["input_ids"][0].tolist()
    assert data["token_type_ids"] == batch["token_type_ids"][0].tolist()
    assert data["pieces"] == tok.id_to_piece(data["input_ids"])
    table = run("tokenizer", "encode", spiece_model, "In 2019, [MASK] café", "--max-length", 5)
    assert table.exit_code == 0 and "5 ids" in table.stdout
    for text in ("[CLS]", "▁in", "▁20", "[SEP]"):
        assert text in table.stdout


@pytest.mark.parametrize("args, message", [
    (["train", "{missing}", "--out", "{out}"], "does not exist"),
    (["train", "{empty}", "--out", "{out}"], "no text to train the tokenizer on in empty.txt"),
    (["train", str(CORPUS), "--out", "{out}", "--vocab-size", "9999"], "is too large"),
    (["encode", "{missing}", "text"], "does not exist"),
    (["encode", "{empty}", "text"], "is not a sentencepiece model"),
])
def test_cli_bad_input_is_one_line_exit_2(tmp_path, args, message):
    (tmp_path / "empty.txt").write_text("")
    names = {"missing": tmp_path / "missing.txt", "empty": tmp_path / "empty.txt", "out": tmp_path / "out"}
    result = run("tokenizer", *(a.format(**names) for a in args))
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], result.output
    assert not (tmp_path / "out").exists()


def test_cli_subprocess(spiece_model, tmp_path):
    ok = subprocess.run([sys.executable, "-m", "albert_edge", "tokenizer", "encode", str(spiece_model),
                         "Hello, world", "--json"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["input_ids"] == AlbertTokenizer(spiece_model).encode("Hello, world")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    bad = subprocess.run([sys.executable, "-m", "albert_edge", "tokenizer", "train", str(empty),
                          "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    lines = [line for line in bad.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "no text to train the tokenizer on" in lines[0], bad.stderr
    assert not (tmp_path / "out").exists()


def test_works_without_build_side_libraries(spiece_model, tmp_path):
    """Encoding and training need only numpy and sentencepiece, as on a Raspberry Pi."""
    code = f"""
import importlib.abc, sys
class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "tensorflow", "transformers", "tokenizers", "google"):
            raise ImportError(name + " is not installed on this device")
sys.meta_path.insert(0, Blocked())
from albert_edge.tokenizer import AlbertTokenizer, train_spiece
tok = AlbertTokenizer(train_spiece([{str(CORPUS)!r}], {str(tmp_path)!r}, vocab_size=300))
print(tok("In 2019, [MASK] café", max_length=8)["input_ids"].tolist())
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    expected = AlbertTokenizer(tmp_path / "spiece.model")("In 2019, [MASK] café", max_length=8)
    assert json.loads(result.stdout) == expected["input_ids"].tolist()


def test_train_on_the_builtin_corpus(tmp_path):
    from click.testing import CliRunner

    from albert_edge.cli import main

    result = CliRunner().invoke(main, ["tokenizer", "train", "builtin", "--out", str(tmp_path),
                                       "--vocab-size", "1000", "--json"])
    assert result.exit_code == 0, result.output
    tok = AlbertTokenizer(tmp_path / "spiece.model")
    assert tok.vocab_size == 1000 and tok.tokenize("[MASK]") == ["[MASK]"]
