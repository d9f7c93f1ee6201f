"""tokenizer.json from a spiece.model (converters/tokenizer_json.py), loaded by Hugging Face's
``tokenizers`` as transformers.js's own tokenizer reads it, against albert_edge.tokenizer: the same
ids on the hard strings of converters/tokenizer_parity.py, each remaining difference in a named class."""

from __future__ import annotations

import json

import pytest

from albert_edge.converters.tokenizer_json import (CLASSES, check_spiece, count_differences, special_tokens_map,
                                                   tokenizer_config, tokenizer_json, write_tokenizer_files)
from albert_edge.converters.tokenizer_parity import CLASSES as ENGINE_CLASSES
from albert_edge.converters.tokenizer_parity import hard_strings
from albert_edge.errors import ConversionError
from albert_edge.tokenizer import AlbertTokenizer

tokenizers = pytest.importorskip("tokenizers")

SEQ_LEN = 512  # most of the hard strings whole; the long ones cut


def engine_of(tok: AlbertTokenizer, tmp_path, seq_len: int | None = SEQ_LEN):
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(tokenizer_json(tok), ensure_ascii=False), encoding="utf-8")
    engine = tokenizers.Tokenizer.from_file(str(path))
    if seq_len:
        engine.enable_truncation(seq_len)
    return engine


@pytest.fixture(scope="module")
def tok(spiece_model):
    return AlbertTokenizer(spiece_model)


def test_the_ids_are_ours_on_the_hard_strings(tok, tmp_path):
    """2,400 strings of every kind the tokenizer tests have: at least 2,000 give our ids exactly;
    every other one differs in a class that is named and explained."""
    texts = [text for _, text in hard_strings(2400)]
    counts, examples = count_differences(tok, engine_of(tok, tmp_path), texts, SEQ_LEN)
    print(counts)
    assert sum(counts.values()) == 2400
    assert counts["same"] >= 2300, counts  # 2,371 with this 400-piece vocabulary
    named = {"same", *CLASSES, *ENGINE_CLASSES}
    assert all(set(kind.split("+")) <= named for kind in counts), (counts, examples)


@pytest.mark.parametrize("text", [
    "``Quoted'' text",  # ALBERT's quote pairs
    "Ça  va\u3000très   bien\t!",  # accents, Unicode and repeated whitespace
    "  leading and trailing \n",
    "ΟΔΟΣ and ΣΑΣ. and Σίσυφος",  # a final sigma, lower-cased as str.lower does
    "a\x1cb\x1dc",  # separators str.split splits at (not Unicode White_Space)
    "e\u0301 o\u0308 n\u0303",  # combining marks after letters
    "hello [MASK] world[SEP]x <unk>",  # special pieces written in the text stay whole
    "(a) \"b\" c-d e.f",  # ALBERT's user-defined pieces inside words
    "ＦＵＬＬ width ½ ﬁne",  # sentencepiece's own nmt_nfkc map
    "",
])
@pytest.mark.parametrize("settings", [{}, {"keep_accents": True}, {"do_lower_case": False}])
def test_each_step_of_albert_normalization(spiece_model, tmp_path, text, settings):
    tok = AlbertTokenizer(spiece_model, **settings)
    got = engine_of(tok, tmp_path).encode(text).ids
    assert got == tok.encode(text), (tok.id_to_piece(got), tok.id_to_piece(tok.encode(text)))


def test_pairs_have_token_types(tok, tmp_path):
    engine = engine_of(tok, tmp_path)
    a, b = "Does ALBERT share its layers?", "Yes: twelve layers, one set of weights."
    got = engine.encode(a, b)
    want = tok(a, b, max_length=None, padding=False)
    assert got.ids == want["input_ids"][0].tolist()
    assert got.type_ids == want["token_type_ids"][0].tolist() and set(got.type_ids) == {0, 1}
    assert got.tokens[0] == "[CLS]" and got.tokens.count("[SEP]") == 2


def test_transformers_loads_the_files(tok, tmp_path):
    """The three files as transformers writes them: AutoTokenizer takes the folder and gives our ids,
    with [MASK] and the other special tokens where transformers.js looks for them."""
    transformers = pytest.importorskip("transformers")

    write_tokenizer_files(tok, tmp_path, 64)
    loaded = transformers.AutoTokenizer.from_pretrained(str(tmp_path), local_files_only=True)
    text = "The wind, in 2019, was [MASK] at 1,000 metres."
    assert loaded(text)["input_ids"] == tok.encode(text)
    assert loaded.mask_token == "[MASK]" and loaded.cls_token == "[CLS]" and loaded.model_max_length == 64
    config = tokenizer_config(tok, 64)
    assert config["tokenizer_class"] == "AlbertTokenizer" and config["do_lower_case"] is True
    assert special_tokens_map(tok)["mask_token"]["lstrip"] is True


def test_a_bpe_model_is_refused(tmp_path):
    import sentencepiece as spm

    from albert_edge.tokenizer import SPECIAL_TOKENS
    from tests.conftest import DATA

    spm.SentencePieceTrainer.train(input=str(DATA / "corpus.txt"), model_prefix=str(tmp_path / "bpe"), model_type="bpe",
                                   vocab_size=300, pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
                                   control_symbols=list(SPECIAL_TOKENS[2:]), minloglevel=2)
    tok = AlbertTokenizer(tmp_path / "bpe.model")
    with pytest.raises(ConversionError, match="is a sentencepiece bpe model; the transformers-js target writes "
                                              "ALBERT's Unigram tokenizer only"):
        check_spiece(tok)


def as_transformers_js_reads_it(data: dict) -> dict:
    """tokenizer.json with its Precompiled step as transformers.js runs one (@huggingface/tokenizers'
    Precompiled.ts reads no map: it deletes and spaces a fixed list of characters, then runs NFKC)."""
    deleted = "[\u0001-\u0008\u000b\u000e-\u001f\u007f\u008f\u009f]"
    js = [{"type": "Replace", "pattern": {"Regex": deleted}, "content": ""},
          {"type": "Replace", "pattern": {"Regex": "[\t\n\u000c\r\u00a0\u1680\u2000-\u200f\u2028\u2029\u202f\u205f"
                                                   "\u2581\u3000\ufeff\ufffd]"}, "content": " "},
          {"type": "NFKC"}]
    steps = data["normalizer"]["normalizers"]
    at = next(i for i, step in enumerate(steps) if step["type"] == "Precompiled")
    data["normalizer"]["normalizers"] = [*steps[:at], *js, *steps[at + 1:]]
    return data


def test_the_ids_hold_without_the_precompiled_map(tok, tmp_path):
    """transformers.js runs no precompiled map: what sentencepiece's map deletes or spaces is spelled
    out before it, and the joiner inside emoji (which transformers.js would make a space) crosses it
    as a stand-in, so its ids are ours too (the rest: NFKC where nmt_nfkc differs)."""
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(as_transformers_js_reads_it(tokenizer_json(tok)), ensure_ascii=False), encoding="utf-8")
    engine = tokenizers.Tokenizer.from_file(str(path))
    engine.enable_truncation(SEQ_LEN)
    for text in ("a family 👨\u200d👩\u200d👧 here", "x\u061cy", "bell\u0007 and\u2028line", "z\u200bw\u00a0v"):
        assert engine.encode(text).ids == tok.encode(text), text
    texts = [text for _, text in hard_strings(2400)]
    counts, _ = count_differences(tok, engine, texts, SEQ_LEN)
    print(counts)
    assert counts["same"] >= 2300, counts
