"""Pretraining examples: sentence-order pairs, n-gram masking, the resumable stream."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest

from albert_edge.train.data import MaskingOptions, examples_from_document, mask_tokens
from albert_edge.train.errors import DataError
from albert_edge.train.stream import ExampleStream, StreamState, collate, held_out_examples


def _words(vocab, tokens):
    """Whole words (runs of pieces after a ▁ piece) as lists of positions, as masking sees them."""
    words = []
    for i, t in enumerate(tokens):
        if t in (vocab.cls_id, vocab.sep_id):
            continue
        if words and not vocab.word_start[t] and words[-1][-1] == i - 1:
            words[-1].append(i)
        else:
            words.append([i])
    return words


def test_masking_follows_albert(vocab, corpus_file):
    text = corpus_file.read_text().split()
    opts = MaskingOptions(max_seq_length=128, max_predictions=20)
    rng = random.Random(0)
    kinds, span_words, masked_share = Counter(), Counter(), []
    for k in range(300):
        start = rng.randrange(len(text) - 60)
        tokens = [vocab.cls_id, *vocab.ids(" ".join(text[start:start + 40])), vocab.sep_id]
        out, positions, labels = mask_tokens(tokens, vocab, opts, rng)
        budget = min(20, max(1, round(len(tokens) * 0.15)))
        assert 0 < len(positions) <= budget and positions == sorted(set(positions))
        assert labels == [tokens[i] for i in positions]
        assert all(tokens[i] not in (vocab.cls_id, vocab.sep_id) for i in positions)
        assert all(out[i] == tokens[i] for i in range(len(tokens)) if i not in positions)
        masked_share.append(len(positions) / len(tokens))
        for i in positions:
            kinds["mask" if out[i] == vocab.mask_id else "same" if out[i] == tokens[i] else "random"] += 1
        # Masking takes whole words: every word is masked entirely or not at all.
        chosen = set(positions)
        words = _words(vocab, tokens)
        assert all(chosen.issuperset(w) or not chosen.intersection(w) for w in words)
        # Runs of consecutive masked words are the n-grams (adjacent spans can merge).
        flags = [bool(chosen.intersection(w)) for w in words]
        for is_masked, run in itertools.groupby(flags):
            if is_masked:
                span_words[min(len(list(run)), 4)] += 1
    total = sum(kinds.values())
    assert abs(kinds["mask"] / total - 0.8) < 0.04
    assert abs(kinds["same"] / total - 0.1) < 0.03 and abs(kinds["random"] / total - 0.1) < 0.03
    assert abs(sum(masked_share) / len(masked_share) - 0.15) < 0.02
    # 1-grams are the most frequent, then 2- and 3-grams (p = 6/11, 3/11, 2/11).
    assert span_words[1] > span_words[2] > 0 and span_words[3] > 0


def test_sentence_order_pairs(vocab):
    # Sentences of distinct ids, so A and B can be traced back to the document.
    sentences = [[10 + 3 * k, 11 + 3 * k, 12 + 3 * k] for k in range(8)]
    opts = MaskingOptions(max_seq_length=16, masked_lm_prob=0.01, max_predictions=1, short_seq_prob=0.0)
    labels = Counter()
    for seed in range(40):
        for ex in examples_from_document(sentences, vocab, opts, random.Random(seed)):
            ids = list(ex.input_ids)
            for p, label in zip(ex.positions, ex.labels):
                ids[p] = label  # undo the masking
            assert len(ids) <= 16 and ids[0] == vocab.cls_id and ids[-1] == vocab.sep_id
            a, b = ids[1:1 + ex.len_a], ids[2 + ex.len_a:-1]
            assert ids[1 + ex.len_a] == vocab.sep_id and a and b
            # Order kept (label 0): A's ids come before B's in the document; swapped: after.
            assert (max(a) < min(b)) == (ex.sop_label == 0)
            labels[ex.sop_label] += 1
    assert labels[0] > 25 and labels[1] > 25  # about half of 80 each


def test_one_sentence_gives_no_pair(vocab):
    opts = MaskingOptions(max_seq_length=32)
    assert examples_from_document([[10, 11, 12, 13]], vocab, opts, random.Random(0)) == []


def test_collate(vocab, corpus_file):
    opts = MaskingOptions(max_seq_length=64)
    examples = held_out_examples([corpus_file], vocab, opts, seed=0, holdout_every=1, limit=5)
    batch = collate(examples, vocab.pad_id)
    B, T = batch["input_ids"].shape
    assert B == 5 and T == max(len(e.input_ids) for e in examples)
    for row, e in enumerate(examples):
        n = len(e.input_ids)
        assert batch["attention_mask"][row].sum() == n
        assert batch["token_type_ids"][row, :e.len_a + 2].sum() == 0
        assert batch["token_type_ids"][row, e.len_a + 2:n].sum() == n - e.len_a - 2
        assert (batch["mlm_labels"][row] != -100).sum() == len(e.positions)
        assert batch["sop_labels"][row] == e.sop_label


def test_stream_resumes_exactly(vocab, corpus_file, tmp_path):
    second = tmp_path / "more.txt"
    second.write_text(corpus_file.read_text())
    opts = MaskingOptions(max_seq_length=48)

    def stream():
        return ExampleStream([corpus_file, second], vocab, opts, seed=3, chunk_documents=4, holdout_every=5)

    full = stream()
    it = iter(full)
    reference, states = [], []
    for _ in range(120):  # more than one epoch, over several chunks
        reference.append(next(it))
        states.append(full.state())
    assert states[-1].epoch >= 1, "the test must cross an epoch boundary"
    for k in (0, 7, 31, 77):
        resumed = stream()
        resumed.load_state(StreamState.from_dict(states[k].to_dict()))
        assert list(itertools.islice(iter(resumed), 120 - k - 1)) == reference[k + 1:]
    # A new epoch draws new masks: the first examples of epoch 1 differ from epoch 0's.
    first_of_epoch = [i for i, s in enumerate(states) if s.epoch == 1][0]
    assert reference[first_of_epoch:first_of_epoch + 5] != reference[:5]


def test_held_out_documents_are_not_trained_on(vocab, tmp_path):
    docs = [f"Document {k} starts here. It has word{k} inside. It ends now." for k in range(10)]
    path = tmp_path / "c.txt"
    path.write_text("\n\n".join(docs))
    opts = MaskingOptions(max_seq_length=64, masked_lm_prob=0.01)
    stream = ExampleStream([path], vocab, opts, chunk_documents=3, holdout_every=5)
    train = list(itertools.islice(iter(stream), 30))
    held = held_out_examples([path], vocab, opts, seed=0, holdout_every=5, limit=100)
    for k in (4, 9):  # documents 5 and 10 (1-based) are held out
        marker = vocab.ids(f"word{k}")
        assert any(_contains(e, marker) for e in held)
        assert not any(_contains(e, marker) for e in train)


def _contains(example, ids):
    seq = list(example.input_ids)
    for p, label in zip(example.positions, example.labels):
        seq[p] = label
    return any(seq[i:i + len(ids)] == ids for i in range(len(seq)))


@pytest.mark.parametrize("text, match", [
    ("", "is empty"),
    ("\n\n  \n", "is empty"),
    ("one long line without any sentence boundary\n\nand another one", "no sentence-order pairs"),
])
def test_stream_refuses_corpora_without_pairs(vocab, tmp_path, text, match):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    stream = ExampleStream([path], vocab, MaskingOptions(max_seq_length=32))
    with pytest.raises(DataError, match=match):
        next(iter(stream))
