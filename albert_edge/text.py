"""Plain-text corpora as a stream of documents, and the builtin corpus.

**File format.** UTF-8 text. Documents are separated by blank lines (a file with no blank line is
one document). Inside a document, lines are joined and split into sentences at ``. ! ?`` followed
by a space and a capital letter, digit, quote or bracket. Files are read line by line from a byte
offset, so a corpus of any size streams without being loaded whole, and a position in it is two
integers that a checkpoint can save.

**The builtin corpus** (``--corpus builtin``) is English prose that every Python installation
carries: the docstrings of the standard library's modules, classes and functions, read from the
library's source files with ``ast`` (no Python module is imported, so none runs any code); the
docstrings of its compiled modules (builtins, math, itertools, ...: importing those runs no
Python code); and the Python Language Reference topics shipped in ``pydoc_data.topics``. Test
packages, GUI packages (idlelib, tkinter, turtledemo), codec boilerplate (encodings) and joke
modules (this, antigravity) are left out. Paragraphs that are code (doctests, indented code,
grammar rules, tables) are dropped, reStructuredText markup is stripped, repeated paragraphs are
kept once, and the documents are shuffled with a fixed seed. It is deterministic for a given
Python version; on CPython 3.11 it is 1.6 MB of text in about 7,450 documents (19,000
sentences; ``builtin_stats()`` measures it), enough for an 8000-piece vocabulary. It is built
once (a few seconds) and cached as a text file in ``$XDG_CACHE_HOME/albert-edge`` (default
``~/.cache/albert-edge``).
"""

from __future__ import annotations

import ast
import hashlib
import logging
import os
import random
import re
import sys
import sysconfig
import textwrap
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from .errors import DataError
from .files import atomic_write, cache_root

__all__ = [
    "BUILTIN",
    "BuiltinDocument",
    "DocPosition",
    "builtin_documents",
    "builtin_corpus_path",
    "builtin_stats",
    "iter_documents",
    "read_sentences",
    "resolve_corpus",
    "split_sentences",
    "utf8_problem",
]

log = logging.getLogger(__name__)

BUILTIN = "builtin"
_MIN_WORDS = 3  # shorter lines (headings, list bullets) say little about activation ranges
_MAX_SENTENCES = 20_000  # read no more than this: calibration needs dozens, not millions
# Bumped whenever the builtin corpus's recipe changes, so stale caches are not reused.
_BUILTIN_VERSION = 1
_SKIP_TOP = {"idlelib", "tkinter", "turtledemo", "turtle", "test", "lib2to3", "ensurepip",
             "encodings", "this", "antigravity", "pydoc_data", "__phello__"}
_SKIP_EXTENSIONS = ("_test", "_xx", "xx", "_ctypes_test", "_tkinter", "readline", "_curses")
_SKIP_DIRS = {"test", "tests", "__pycache__", "site-packages", "idle_test"}


# -- sentences ---------------------------------------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")
_ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "cf.", "Mr.", "Mrs.", "Dr.", "St.", "No.", "approx.")


def split_sentences(text: str) -> list[str]:
    """Split a paragraph into sentences at ``. ! ?`` + space + capital/digit/quote/bracket,
    not after common abbreviations ("e.g.", "etc.")."""
    text = " ".join(text.split())
    sentences: list[str] = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        head = text[start:match.start()]
        if head.endswith(_ABBREVIATIONS):
            continue
        sentences.append(text[start:match.end()].strip())
        start = match.end()
    tail = text[start:].strip()
    if tail:
        sentences.append(tail)
    return [s for s in sentences if s]


# -- reading files -----------------------------------------------------------------------------

@dataclass(frozen=True)
class DocPosition:
    """Where the next document starts: file number, byte offset in it, and global document index."""

    file: int = 0
    offset: int = 0
    index: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"file": self.file, "offset": self.offset, "index": self.index}

    @classmethod
    def from_dict(cls, data: dict) -> DocPosition:
        return cls(int(data["file"]), int(data["offset"]), int(data["index"]))


def resolve_corpus(specs: Sequence[str | os.PathLike]) -> list[Path]:
    """Corpus arguments -> text files: ``builtin``, a file, or a directory (its ``*.txt``, sorted)."""
    files: list[Path] = []
    for spec in specs:
        if str(spec) == BUILTIN:
            files.append(builtin_corpus_path())
            continue
        path = Path(spec)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*.txt") if p.is_file())
            if not found:
                raise DataError(f"corpus directory {path} holds no *.txt file")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise DataError(f"corpus {spec} does not exist (give text files, directories, or 'builtin')")
    if not files:
        raise DataError("no corpus given: pass text files, directories, or 'builtin'")
    return files


def iter_documents(files: Sequence[Path],
                   start: DocPosition = DocPosition()) -> Iterator[tuple[DocPosition, list[str]]]:
    """Yield (position after the document, its sentences) from ``start`` to the end of the corpus.

    Documents are blank-line separated; empty documents are skipped but still counted in
    ``index``, so document numbers do not depend on where reading started.
    """
    index = start.index
    for file_no in range(start.file, len(files)):
        offset = start.offset if file_no == start.file else 0
        with open(files[file_no], "rb") as fh:
            fh.seek(offset)
            lines: list[str] = []
            while True:
                raw = fh.readline()
                offset += len(raw)
                line = raw.decode("utf-8", errors="replace").strip()
                if line:
                    lines.append(line)
                    continue
                if lines:
                    index += 1
                    position = DocPosition(file_no, offset, index) if raw else DocPosition(file_no + 1, 0, index)
                    yield position, split_sentences(" ".join(lines))
                    lines = []
                if not raw:
                    break


# -- the builtin corpus ------------------------------------------------------------------------

@dataclass(frozen=True)
class BuiltinDocument:
    """One document of the builtin corpus: where it comes from and its paragraphs."""

    module: str  # top-level standard-library module ("asyncio", "email", ...) or "reference"
    paragraphs: tuple[str, ...]

    @property
    def text(self) -> str:
        return "\n".join(self.paragraphs)


_ROLE = re.compile(r":[a-zA-Z:]+:`~?([^`]*)`")
_LITERAL = re.compile(r"``([^`]*)``|`([^`]*)`")
_EMPHASIS = re.compile(r"\*{1,2}([^*\s][^*]*?)\*{1,2}")
_RULE = re.compile(r"^[\s=\-~*^#+|]{3,}$")
_LABEL = re.compile(r"^[A-Z][\w ]{0,30}:$")  # "Args:", "Returns:", "Exported exceptions:"
_BULLET = re.compile(r"^(?:[-*+]|\d{1,2}[.)]|\(\w\))\s+")
_CODE_START = (">>>", "...", ".. ", "$ ", "%", "(Pdb)", "-> ", "def ", "class ", "import ", "from ", "@", "#")
_CODE_CHARS = set("()[]{}=<>_|\\/;")


def _clean_paragraph(lines: list[str]) -> str | None:
    """A paragraph as one line of prose, or None when it is code, a table or a heading."""
    lines = textwrap.dedent("\n".join(lines)).splitlines()
    while lines and _LABEL.match(lines[0].strip()):
        lines = textwrap.dedent("\n".join(lines[1:])).splitlines()
    if not lines or any(_RULE.match(line) for line in lines):  # headings underlined, tables
        return None
    if any(line.lstrip().startswith(_CODE_START) for line in lines):
        return None
    text = " ".join(_BULLET.sub("", line.strip()) for line in lines)
    text = _ROLE.sub(r"\1", text)
    text = _LITERAL.sub(lambda m: m.group(1) if m.group(1) is not None else m.group(2), text)
    text = _EMPHASIS.sub(r"\1", text)
    text = " ".join(text.replace("::", ":").split())
    letters = sum(c.isalpha() or c == " " for c in text)
    code = sum(c in _CODE_CHARS for c in text)
    if len(text.split()) < 3 or letters < 0.8 * len(text) or code > 0.08 * len(text):
        return None
    return text


def _paragraphs(text: str) -> list[str]:
    out: list[str] = []
    block: list[str] = []
    for line in text.expandtabs().splitlines() + [""]:
        if line.strip():
            block.append(line.rstrip())
        elif block:
            cleaned = _clean_paragraph(block)
            if cleaned:
                out.append(cleaned)
            block = []
    return out


def _stdlib_sources() -> list[tuple[str, Path]]:
    root = Path(sysconfig.get_paths()["stdlib"])
    names = set(getattr(sys, "stdlib_module_names", ()))
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if _SKIP_DIRS & set(rel.parts[:-1]):
            continue
        top = rel.parts[0].removesuffix(".py")
        if top in _SKIP_TOP or (names and top not in names):
            continue
        found.append((top, path))
    return found


def _docstrings(path: Path) -> Iterator[str]:
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, OSError):  # a few stdlib files are templates or py2 examples
        return
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                yield doc


def _extension_docstrings() -> list[tuple[str, str]]:
    """Docstrings of the compiled modules (builtins, math, itertools, ...) and of their public
    functions, classes and methods. Importing a compiled module runs no Python code; the
    interpreter's test and GUI extensions are skipped."""
    import importlib
    import inspect

    dynload = Path(sysconfig.get_paths()["stdlib"]) / "lib-dynload"
    names = set(sys.builtin_module_names) | {p.name.split(".")[0] for p in dynload.glob("*.so")}
    out: list[tuple[str, str]] = []
    for name in sorted(names):
        if name.startswith(_SKIP_EXTENSIONS):
            continue
        try:
            module = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - an extension this build cannot load is simply skipped
            continue
        objects = [module]
        for key, value in sorted(vars(module).items()):
            if key.startswith("_"):
                continue
            objects.append(value)
            if inspect.isclass(value):
                objects.extend(v for k, v in sorted(vars(value).items()) if not k.startswith("_"))
        for obj in objects:
            doc = getattr(obj, "__doc__", None) if inspect.ismodule(obj) or callable(obj) else None
            if isinstance(doc, str):
                out.append((name.lstrip("_"), inspect.cleandoc(doc)))
    return out


def _reference_topics() -> list[str]:
    """The Language Reference topics of ``pydoc_data.topics`` (a data-only module), read with ast."""
    try:
        import pydoc_data

        path = Path(pydoc_data.__file__).parent / "topics.py"
        tree = ast.parse(path.read_bytes())
    except (ImportError, OSError, SyntaxError, TypeError):
        return []
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
            topics = ast.literal_eval(node.value)
            return [topics[k] for k in sorted(topics)]
    return []


def builtin_documents() -> list[BuiltinDocument]:
    """The builtin corpus as documents, in its fixed shuffled order (see the module docstring)."""
    sources: list[tuple[str, str]] = [("reference", t) for t in _reference_topics()]
    for module, path in _stdlib_sources():
        sources.extend((module, doc) for doc in _docstrings(path))
    sources.extend(_extension_docstrings())
    seen: set[str] = set()
    docs: list[BuiltinDocument] = []
    for module, text in sources:
        kept = []
        for paragraph in _paragraphs(text):
            key = hashlib.sha1(paragraph.encode()).hexdigest()
            if key not in seen:
                seen.add(key)
                kept.append(paragraph)
        if kept:
            docs.append(BuiltinDocument(module, tuple(kept)))
    random.Random(0).shuffle(docs)
    return docs


def builtin_corpus_path(cache_dir: str | os.PathLike | None = None) -> Path:
    """The builtin corpus as a text file (one paragraph per line, blank line between documents),
    built on first use and cached. Safe to call from several processes at once."""
    directory = Path(cache_dir) if cache_dir is not None else cache_root()
    tag = f"py{sys.version_info[0]}{sys.version_info[1]}{sys.version_info[2]}-v{_BUILTIN_VERSION}"
    path = directory / f"builtin-corpus-{tag}.txt"
    if path.is_file():
        return path
    directory.mkdir(parents=True, exist_ok=True)
    docs = builtin_documents()
    if not docs:
        raise DataError("the builtin corpus is empty: this Python installation ships no standard-library sources")
    atomic_write(path, "\n\n".join(doc.text for doc in docs) + "\n")
    log.info("built the builtin corpus: %d documents, %s", len(docs), path)
    return path


def builtin_stats(docs: Iterable[BuiltinDocument] | None = None) -> dict[str, float]:
    """Size of the builtin corpus: documents, paragraphs, sentences, megabytes of UTF-8 text."""
    docs = list(builtin_documents() if docs is None else docs)
    text_bytes = sum(len(d.text.encode()) for d in docs)
    sentences = sum(len(split_sentences(p)) for d in docs for p in d.paragraphs)
    return {"documents": len(docs), "paragraphs": sum(len(d.paragraphs) for d in docs),
            "sentences": sentences, "megabytes": round(text_bytes / 1e6, 2)}


def read_sentences(paths: Sequence[str | os.PathLike]) -> tuple[list[str], list[str]]:
    """Sentences of the given UTF-8 text files (or ``builtin``), in order, and the sources read."""
    files = resolve_corpus([str(p) for p in paths])
    sentences: list[str] = []
    for path in files:
        text = _read_text(Path(path))
        found = [s for line in text.splitlines() if line.strip() for s in split_sentences(line)]
        found = [s for s in found if len(s.split()) >= _MIN_WORDS] or found
        if not found:
            raise DataError(f"calibration text {path} holds no sentence")
        sentences.extend(found)
        if len(sentences) >= _MAX_SENTENCES:
            break
    return sentences[:_MAX_SENTENCES], [str(f) for f in files]


def utf8_problem(data: str | bytes) -> str | None:
    """Where ``data`` stops being UTF-8, as "byte 0xff at offset 4" (the offset counts bytes),
    or None when it is UTF-8. Command-line arguments and standard input that were not UTF-8
    reach Python as lone surrogates (Python decodes them with surrogateescape: U+DC80..U+DCFF
    stand for the bytes 0x80..0xFF), so ``str`` is checked for those; bytes are decoded."""
    if isinstance(data, bytes):
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            return f"byte 0x{data[exc.start]:02x} at offset {exc.start}"
        return None
    try:
        data.encode("utf-8")
    except UnicodeEncodeError as exc:
        offset = len(data[:exc.start].encode("utf-8"))  # what comes before the first bad one is UTF-8
        code = ord(data[exc.start])
        if 0xDC80 <= code <= 0xDCFF:
            return f"byte 0x{code - 0xDC00:02x} at offset {offset}"
        return f"a lone surrogate U+{code:04X} at offset {offset}"
    return None


def _read_text(path: Path) -> str:
    if not path.is_file():
        raise DataError(f"calibration text {path} does not exist")
    data = path.read_bytes()
    if not data.strip():
        raise DataError(f"calibration text {path} is empty")
    problem = utf8_problem(data)
    if problem:
        raise DataError(f"calibration text {path} is not UTF-8 ({problem}); convert it to UTF-8")
    text = data.decode("utf-8")
    if "\x00" in text:
        raise DataError(f"calibration text {path} holds NUL bytes: it is not a text file")
    if not text.strip():
        raise DataError(f"calibration text {path} is empty")
    return text
