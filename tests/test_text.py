"""Plain-text corpora and the builtin corpus."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from albert_edge.text import (
    BUILTIN,
    BuiltinDocument,
    DocPosition,
    builtin_corpus_path,
    builtin_stats,
    iter_documents,
    resolve_corpus,
    split_sentences,
)
from albert_edge.errors import DataError
from albert_edge.files import STAGING_MARK


@pytest.mark.parametrize("text, expected", [
    ("One. Two! Three? Four", ["One.", "Two!", "Three?", "Four"]),
    ("Use a list, e.g. A list of ints. Then stop.", ["Use a list, e.g. A list of ints.", "Then stop."]),
    ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
    ("Version 3.11 is out. 42 is the answer.", ["Version 3.11 is out.", "42 is the answer."]),
    ("no boundary here", ["no boundary here"]),
    ("lower. case does not split", ["lower. case does not split"]),
    ("  ", []),
])
def test_split_sentences(text, expected):
    assert split_sentences(text) == expected


def test_documents_are_blank_line_separated_and_resumable(tmp_path):
    a = tmp_path / "a.txt"
    a.write_text("First doc. Second sentence.\nSame doc.\n\n\nSecond doc. Yes.\n")
    b = tmp_path / "b.txt"
    b.write_text("Third doc without boundaries")  # no trailing newline: still a document
    docs = list(iter_documents([a, b]))
    assert [s for _, s in docs] == [
        ["First doc.", "Second sentence.", "Same doc."], ["Second doc.", "Yes."], ["Third doc without boundaries"],
    ]
    assert [p.index for p, _ in docs] == [1, 2, 3]
    # Restarting at any saved position gives exactly the rest of the stream.
    for k, (position, _) in enumerate(docs):
        assert list(iter_documents([a, b], position)) == docs[k + 1:]
    assert docs[-1][0] == DocPosition(2, 0, 3)


def test_resolve_corpus(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "b.txt").write_text("x")
    (tmp_path / "d" / "a.txt").write_text("y")
    (tmp_path / "d" / "skip.md").write_text("z")
    assert [p.name for p in resolve_corpus([tmp_path / "d"])] == ["a.txt", "b.txt"]
    with pytest.raises(DataError, match="does not exist"):
        resolve_corpus([tmp_path / "missing.txt"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no \\*.txt"):
        resolve_corpus([tmp_path / "empty"])
    with pytest.raises(DataError, match="no corpus"):
        resolve_corpus([])


def test_builtin_corpus_is_real_prose(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = resolve_corpus([BUILTIN])[0]  # built from scratch into an empty cache
    assert path == builtin_corpus_path() and path.parent == tmp_path / "albert-edge"
    assert not [p for p in path.parent.iterdir() if STAGING_MARK in p.name]
    docs = [sentences for _, sentences in iter_documents([path])]
    sentences = sum(len(d) for d in docs)
    megabytes = path.stat().st_size / 1e6
    assert len(docs) > 5000 and megabytes > 1.0 and sentences > 1.5 * len(docs), (len(docs), megabytes)
    text = path.read_text(encoding="utf-8")
    assert ">>>" not in text and "::=" not in text
    assert "event loop" in text and "decimal" in text  # docstrings of asyncio, _pydecimal
    assert sum(len(d) >= 2 for d in docs) > 3000  # documents that give sentence-order pairs


_BUILD = """
import hashlib, sys
from albert_edge import text as corpus
every = corpus._stdlib_sources()
corpus._stdlib_sources = lambda: every[::20]  # a sample of the sources keeps this quick
docs = corpus.builtin_documents()
print(len(docs), corpus.builtin_stats(docs)["sentences"], hashlib.sha256(repr(docs).encode()).hexdigest())
"""


def test_builtin_corpus_is_deterministic():
    # Two interpreters with different string hashing (set and dict orders) build the same corpus.
    outputs = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        proc = subprocess.run([sys.executable, "-c", _BUILD], capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr
        outputs.append(proc.stdout)
    assert outputs[0] == outputs[1]
    assert int(outputs[0].split()[0]) > 100


def test_builtin_documents_keep_their_module():
    doc = BuiltinDocument("asyncio", ("First paragraph here.", "Second one. Two sentences."))
    assert doc.text == "First paragraph here.\nSecond one. Two sentences."
    assert builtin_stats([doc]) == {"documents": 1, "paragraphs": 2, "sentences": 3, "megabytes": 0.0}


@pytest.mark.parametrize("data, problem", [
    ("plain ascii", None), ("émoji 🙂 ünïcödé", None), (b"caf\xc3\xa9", None),
    (b"caf\xe9 au lait", "byte 0xe9 at offset 3"), (b"\xff", "byte 0xff at offset 0"),
    (b"\xc3\xa9t\xc3", "byte 0xc3 at offset 3"),  # cut in the middle of a character
    # Text from argv or stdin that was not UTF-8 (Python's surrogateescape): the same bytes, the same offsets.
    (b"caf\xe9 au lait".decode("utf-8", "surrogateescape"), "byte 0xe9 at offset 3"),
    ("é\udcff".encode("utf-8", "surrogateescape").decode("utf-8", "surrogateescape"), "byte 0xff at offset 2"),
    ("a\ud800", "a lone surrogate U+D800 at offset 1"),
], ids=repr)
def test_utf8_problem_names_the_byte_and_its_offset(data, problem):
    from albert_edge.text import utf8_problem

    assert utf8_problem(data) == problem
