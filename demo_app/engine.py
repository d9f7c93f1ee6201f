"""The demo's model side: a bundle directory, the files in it, and an engine that classifies text
and fills in [MASK]s with one chosen file per task, timing every answer. Device side only (the
runtime, the tokenizer, the device description): no torch, no tensorflow.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from albert_edge.errors import AlbertEdgeError
from albert_edge.formats.graph import TensorSpec
from albert_edge.formats.kinds import Format, by_name, file_suffix
from albert_edge.formats.manifest import MANIFEST_NAME, FileChanged, check_used
from albert_edge.formats.tflite_reader import read as read_tflite
from albert_edge.runtime import Session
from albert_edge.runtime.engines import available, version_of
from albert_edge.tokenizer import SPIECE_NAME, AlbertTokenizer

from .checks import BundleError, check_labels, check_outputs, check_packed_files, check_seq_len, read_manifest
from .tasks import MediaPipeClassifier, mediapipe_installed, session_label

__all__ = ["BUNDLE_FILE", "LABELS_FILE", "TASK_DIRS", "ADAPTIVE_DIR", "VARIANTS", "ADAPTIVE", "MEDIAPIPE",
           "ALL_VARIANTS", "Variant", "Bundle", "Engine", "BundleError", "DemoInputError", "LatencyWindow"]

log = logging.getLogger(__name__)

BUNDLE_FILE = "bundle.json"
LABELS_FILE = "labels.json"
TASK_DIRS = {"mlm": "mlm", "classifier": "classifier"}
# The classifier written with its early exits (convert --adaptive): model.onnx, model.tflite and their manifest.
ADAPTIVE_DIR = "classifier-adaptive"
BLANK = "___"  # typed for a [MASK] by people who do not want to type [MASK]
MAX_CHARS = 2000  # characters of text looked at; the model sees far fewer tokens anyway
MAX_TOP_K = 20


class DemoInputError(AlbertEdgeError):
    """Text the demo cannot answer (no [MASK] to fill, a bad top_k, an unknown model)."""


@dataclass(frozen=True)
class Variant:
    """One model file per task: its format and precision."""

    format: str  # "onnx" | "tflite" | "mediapipe" (a .tflite with TFLite metadata, tokenizer inside)
    scheme: str  # "fp32" | "int8" | "adaptive" (the fp32 classifier that stops early; the MLM at full depth)

    @property
    def key(self) -> str:
        return f"{self.format}-{self.scheme}"

    @property
    def kind(self) -> Format:
        """The format its file is read and run as (a MediaPipe file is a .tflite)."""
        return by_name(self.format)

    @property
    def adaptive(self) -> bool:
        return self.scheme == "adaptive"

    @property
    def file_name(self) -> str:
        """model.onnx, model.int8-dynamic.tflite, model.mediapipe.tflite: the name convert and quantize give it."""
        return "model" + (".int8-dynamic" if self.scheme == "int8" else "") + file_suffix(self.format)

    def scheme_of(self, task: str) -> str:
        """The scheme of the file that answers ``task`` (an adaptive variant's MLM is fp32)."""
        return "fp32" if self.adaptive and task != "classifier" else self.scheme

    def folder(self, task: str) -> str:
        """The bundle folder of this variant's ``task`` file: an adaptive classifier's own folder,
        else the task's (an adaptive variant's MLM is the fp32 one: it has no exits)."""
        return ADAPTIVE_DIR if self.adaptive and task == "classifier" else TASK_DIRS[task]

    @classmethod
    def parse(cls, key: str) -> Variant:
        fmt, _, scheme = str(key).partition("-")
        variant = cls(fmt, scheme)
        if variant not in ALL_VARIANTS:
            raise DemoInputError(f"unknown model {key!r}; choose one of {', '.join(v.key for v in ALL_VARIANTS)}")
        return variant

    def runtime_installed(self) -> bool:
        return available(self.kind)


# In order of preference for the default: the classifier that stops early (where the bundle has one),
# then int8 (smaller, faster on a Pi), then fp32.
ADAPTIVE = (Variant("onnx", "adaptive"), Variant("tflite", "adaptive"))
VARIANTS = ADAPTIVE + (Variant("onnx", "int8"), Variant("tflite", "int8"), Variant("onnx", "fp32"),
                       Variant("tflite", "fp32"))
# convert --to mediapipe's file (a classifier's), put into a bundle's classifier folder: served when there.
MEDIAPIPE = Variant("mediapipe", "fp32")
ALL_VARIANTS = VARIANTS + (MEDIAPIPE,)


class Bundle:
    """A bundle directory (see ``albert_edge.pipeline.bundle``): bundle.json, spiece.model,
    labels.json and a directory of model files per task. ``info`` stands in for bundle.json
    while the bundle is still being made."""

    def __init__(self, path: str | os.PathLike, info: dict[str, Any] | None = None):
        self.path = Path(path)
        if not self.path.is_dir():
            raise BundleError(f"{self.path} is not a bundle directory (make one with `albert-edge demo bundle`)")
        if info is None:
            info = _read_json(self.path / BUNDLE_FILE)
        if not isinstance(info, dict):
            raise BundleError(f"{self.path / BUNDLE_FILE} is not a JSON object: not a demo bundle "
                              "(make one with `albert-edge demo bundle`)")
        self.info = info
        self.labels = check_labels(_read_json(self.path / LABELS_FILE), self.path / LABELS_FILE)
        self.tokenizer = AlbertTokenizer(self.path / SPIECE_NAME)
        if not self.variants("classifier") and not self.variants("mlm"):
            raise BundleError(f"{self.path} holds no model file this machine can run "
                              "(install onnxruntime, or ai-edge-litert / tflite-runtime)")
        # The parts must agree before anything runs: each folder's task, the tokenizer against the
        # embedding tables, seq_len against the position table, the labels against the classifier.
        self.manifests = {folder: read_manifest(self.path / folder, task) for task, folder in _FOLDERS
                          if any(self.file(task, v).is_file() and v.folder(task) == folder for v in ALL_VARIANTS)}
        for manifest in self.manifests.values():
            self.tokenizer.check_vocab_size(manifest["config"]["vocab_size"])
        max_positions = min((m["config"]["max_position_embeddings"] for m in self.manifests.values()), default=None)
        self.seq_len = check_seq_len(info.get("seq_len"), self.path / BUNDLE_FILE, max_positions)
        for task, variant in ((t, v) for t in TASK_DIRS for v in ALL_VARIANTS if self.file(t, v).is_file()):
            outputs = self._declared_outputs(variant.folder(task), variant.file_name)
            if outputs is not None:
                self.check_file(task, self.file(task, variant), outputs)

    def file(self, task: str, variant: Variant) -> Path:
        return self.path / variant.folder(task) / variant.file_name

    def variants(self, task: str) -> list[Variant]:
        """The variants whose file exists and whose runtime is installed; an adaptive variant only
        where the bundle has its adaptive classifier (bundles made before it have none)."""
        return [v for v in ALL_VARIANTS if self.file(task, v).is_file() and v.runtime_installed()
                and (not v.adaptive or self.file("classifier", v).is_file())]

    def max_passes(self, task: str, variant: Variant) -> int | None:
        """The passes of the shared layer a file runs at most (its manifest's num_hidden_layers)."""
        manifest = self.manifests.get(variant.folder(task))
        value = manifest["config"].get("num_hidden_layers") if manifest else None
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def check_file(self, task: str, path: Path, outputs: list[TensorSpec]) -> None:
        """Raise BundleError when ``outputs`` (of the file at ``path``) do not fit ``task``, the
        labels or the tokenizer."""
        check_outputs(task, str(path), outputs, self.labels, self.path / LABELS_FILE, self.tokenizer.vocab_size)

    def check_against_manifest(self, task: str, variant: Variant) -> None:
        """The file of ``task`` and ``variant`` against its entry in the task folder's manifest.json,
        and the app files it lists (size, then sha256, once per process:
        :func:`albert_edge.formats.manifest.check_used`);
        BundleError when it differs. A file the manifest does not list is not checked."""
        path, folder = self.file(task, variant), variant.folder(task)
        files = self.manifests[folder].get("files") if folder in self.manifests else None
        entry = next((e for e in files if isinstance(e, dict) and e.get("name") == path.name), None) \
            if isinstance(files, list) else None
        if entry is None:
            return
        app_files = self.manifests[task].get("app_files")  # the folder's spiece.model and labels.json
        try:
            check_used(path, entry, app_files if isinstance(app_files, list) else [], path.parent / MANIFEST_NAME,
                       "make the bundle again with `albert-edge demo bundle`")
        except FileChanged as exc:
            raise BundleError(str(exc)) from None

    def _declared_outputs(self, folder: str, name: str) -> list[TensorSpec] | None:
        """The outputs manifest.json declares for a file (None when it does not list the file)."""
        files = self.manifests[folder].get("files")
        for entry in files if isinstance(files, list) else []:
            if isinstance(entry, dict) and entry.get("name") == name and isinstance(entry.get("outputs"), list):
                try:
                    return [TensorSpec(str(o["name"]), str(o["dtype"]), tuple(o["shape"])) for o in entry["outputs"]]
                except (KeyError, TypeError):
                    raise BundleError(f"{self.path / folder / 'manifest.json'}: the outputs of {name} "
                                      "cannot be read") from None
        return None

    def default_variant(self) -> Variant:
        both = [v for v in self.variants("classifier") if v in self.variants("mlm")]
        return (both or self.variants("classifier") or self.variants("mlm"))[0]


# Each folder of model files and the task it holds.
_FOLDERS = (*((task, folder) for task, folder in TASK_DIRS.items()), ("classifier", ADAPTIVE_DIR))


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BundleError(f"{path} is missing: not a demo bundle (make one with `albert-edge demo bundle`)") from None
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nested deeper than json can read
        raise BundleError(f"{path} cannot be read: {exc}") from None


@dataclass(frozen=True)
class _Answer:
    logits: np.ndarray
    passes: int | None  # the passes an adaptive file ran; None for a file that runs them all


class LatencyWindow:
    """The last ``size`` latencies of one task and file: running p50/p90."""

    def __init__(self, size: int = 500):
        self._values: deque[float] = deque(maxlen=size)
        self.count = 0

    def add(self, ms: float) -> None:
        self._values.append(ms)
        self.count += 1

    def summary(self) -> dict[str, Any]:
        if not self._values:
            return {"count": 0, "p50_ms": None, "p90_ms": None, "last_ms": None}
        values = np.asarray(self._values)
        return {"count": self.count, "window": len(values), "p50_ms": round(float(np.percentile(values, 50)), 3),
                "p90_ms": round(float(np.percentile(values, 90)), 3), "last_ms": round(float(values[-1]), 3)}


class Engine:
    """Runs the bundle's files: one loaded file per task (the selected variant), so the process
    holds one model per task. Model calls and switches are serialised: the runtimes are not asked
    to run two requests at once, and a switch never happens during an answer. ``status`` never
    waits for a model call.

    A .mediapipe.tflite file runs through Session (LiteRT) fed albert-edge's ids; with
    ``mediapipe=True`` and mediapipe installed, its classifier answers through MediaPipe Tasks'
    TextClassifier instead (a string in). Every answer names the engine that gave it."""

    def __init__(self, bundle: Bundle, variant: Variant | str | None = None, num_threads: int | None = None,
                 mediapipe: bool = False):
        self.bundle = bundle
        self.num_threads = num_threads
        self.mediapipe = mediapipe
        self._run_lock = threading.Lock()  # one model call or switch at a time
        self._state_lock = threading.Lock()  # held only briefly: what is loaded, the latencies
        self._sessions: dict[str, Session | MediaPipeClassifier] = {}
        self._load_seconds: dict[str, float] = {}
        self._latency: dict[tuple[str, str], LatencyWindow] = {}
        self.variant: Variant | None = None
        self._special = sorted(_special_ids(bundle.tokenizer))
        self._inside_word = _inside_word_ids(bundle.tokenizer)
        self.select(variant or bundle.default_variant())

    # -- choosing the file ---------------------------------------------------------------------

    def select(self, variant: Variant | str) -> Variant:
        """Load ``variant``'s file for each task that has one, dropping the previous ones."""
        variant = Variant.parse(variant) if isinstance(variant, str) else variant
        tasks = [t for t in TASK_DIRS if variant in self.bundle.variants(t)]
        if not tasks:
            raise DemoInputError(f"the bundle has no runnable {variant.key} files "
                                 f"(available: {', '.join(self.available()) or 'none'})")
        with self._run_lock:
            if variant == self.variant:
                return variant
            previous = self.variant
            with self._state_lock:
                self._sessions, self.variant = {}, None  # drop the old files before loading the new ones
            try:
                self._load(variant, tasks)
            except Exception:
                if previous is not None:  # keep serving what worked
                    self._load(previous, [t for t in TASK_DIRS if previous in self.bundle.variants(t)])
                raise
        log.info("loaded %s (%s)", variant.key, ", ".join(tasks))
        return variant

    def _load(self, variant: Variant, tasks: list[str]) -> None:
        sessions, load_seconds = {}, {}
        for task in tasks:
            # A MediaPipe file's packed tokenizer and labels must work with its model before it loads.
            check_packed_files(self.bundle.file(task, variant))
            start = time.perf_counter()
            if variant == MEDIAPIPE and task == "classifier" and self.mediapipe and mediapipe_installed():
                sessions[task] = MediaPipeClassifier(self.bundle.file(task, variant), self.bundle.labels)
                load_seconds[task] = time.perf_counter() - start
                self.bundle.check_file(task, sessions[task].path, read_tflite(sessions[task].path).outputs)
                self.bundle.check_against_manifest(task, variant)
                continue
            # The runtime picks the TFLite route this CPU runs (weights packed once where it can).
            sessions[task] = Session(self.bundle.file(task, variant), num_threads=self.num_threads)
            load_seconds[task] = time.perf_counter() - start
            # The file's own outputs, not what its manifest says: a file copied over another is caught here.
            self.bundle.check_file(task, sessions[task].path, sessions[task].outputs)
            # A file that loads but is not the one the manifest lists (bytes changed) never answers.
            self.bundle.check_against_manifest(task, variant)
        with self._state_lock:
            self._sessions, self._load_seconds, self.variant = sessions, load_seconds, variant

    def available(self) -> list[str]:
        keys = {v.key for t in TASK_DIRS for v in self.bundle.variants(t)}
        return [v.key for v in ALL_VARIANTS if v.key in keys]

    # -- answers -------------------------------------------------------------------------------

    def classify(self, text: str) -> dict[str, Any]:
        """The predicted label and the score of every label, with the latency of the model call."""
        text, cut_chars = _bounded(text)
        ids, truncated = self._encode(text)
        out, ms, variant, engine = self._run("classifier", ids, text)
        scores = _softmax(out.logits.reshape(-1)[: len(self.bundle.labels)])
        order = np.argsort(-scores)
        return {
            "label": self.bundle.labels[int(order[0])],
            "scores": [{"label": self.bundle.labels[int(i)], "score": round(float(scores[i]), 4)} for i in order],
            **self._about("classifier", variant, ms, len(ids), truncated, cut_chars), "engine": engine,
            **self._passes(variant, out.passes),
        }

    def _passes(self, variant: Variant, passes: int | None) -> dict[str, Any]:
        """``passes`` (how many passes of the shared layer an adaptive file ran) and ``max_passes``
        (its depth); nothing for a file that always runs them all."""
        if passes is None:
            return {}
        return {"passes": passes, "max_passes": self.bundle.max_passes("classifier", variant)}

    def fill_mask(self, text: str, top_k: int = 5) -> dict[str, Any]:
        """The ``top_k`` pieces for every [MASK] (or ``___``) in ``text``, and the text filled in
        with the best of each."""
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
            raise DemoInputError(f"top_k must be a whole number from 1 to {MAX_TOP_K}")
        text, cut_chars = _bounded(text)
        text = text.replace(BLANK, " [MASK] ")
        tok = self.bundle.tokenizer
        ids, truncated = self._encode(text)
        positions = [i for i, t in enumerate(ids) if t == tok.mask_id]
        if not positions:
            where = " in the part the model sees" if truncated else ""
            raise DemoInputError(f"write [MASK] or {BLANK} where a word is missing{where}")
        out, ms, variant, engine = self._run("mlm", ids, text)
        logits = out.logits.reshape(len(ids), -1).astype(np.float64)
        logits[:, self._special] = -np.inf  # never suggest <pad>, [CLS], [MASK], ...
        logits[:, tok.vocab_size:] = -np.inf  # rows of a padded embedding table have no piece
        filled = list(ids)
        masks = []
        for pos, own_word in zip(positions, _masks_as_words(text)):
            if own_word:  # a blank between spaces takes a word: a piece that goes on a word would glue to the last
                logits[pos, self._inside_word] = -np.inf
            probs = _softmax(logits[pos])
            best = np.argsort(-probs)[:top_k]
            filled[pos] = int(best[0])
            masks.append({"position": pos, "predictions": [
                {"token": _piece_text(tok, int(i)), "id": int(i), "score": round(float(probs[i]), 4)} for i in best]})
        return {"masks": masks, "filled": tok.decode(filled),
                **self._about("mlm", variant, ms, len(ids), truncated, cut_chars), "engine": engine}

    def _encode(self, text: str) -> tuple[list[int], bool]:
        """[CLS] text [SEP], cut to the bundle's sequence length."""
        tok = self.bundle.tokenizer
        ids = tok.encode(text, truncation=False)
        if len(ids) <= self.bundle.seq_len:
            return ids, False
        return [*ids[: self.bundle.seq_len - 1], tok.sep_id], True

    def _run(self, task: str, ids: list[int], text: str) -> tuple[_Answer, float, Variant, str]:
        """The logits of ``task`` (the ids through a Session, or the text through MediaPipe) with the
        passes an adaptive file ran, the milliseconds the model call took, the variant and the
        engine that answered."""
        with self._run_lock:
            with self._state_lock:
                session, variant = self._sessions.get(task), self.variant
            if session is None:
                raise DemoInputError(f"the {variant.key} files of this bundle have no {task} model")
            passes = None
            if isinstance(session, MediaPipeClassifier):
                start = time.perf_counter()
                logits = session.log_scores(text)
                ms = (time.perf_counter() - start) * 1000
            else:
                feeds = _feeds(ids, session)
                start = time.perf_counter()
                out = session.run(feeds)
                ms = (time.perf_counter() - start) * 1000
                logits = _main_output(out, session)
                logits = logits[:, : len(ids)] if task == "mlm" else logits  # the padding of a fixed-length file
                passes = int(out["passes"].reshape(-1)[0]) if "passes" in out else None  # an adaptive file's
            with self._state_lock:
                self._latency.setdefault((task, variant.key), LatencyWindow()).add(ms)
        return _Answer(logits, passes), ms, variant, _engine_label(session)

    def _about(self, task: str, variant: Variant, ms: float, tokens: int, truncated: bool,
               cut_chars: bool) -> dict[str, Any]:
        note = None
        if truncated or cut_chars:
            note = (f"the text was cut to the model's limit of {self.bundle.seq_len} tokens"
                    if truncated else f"the text was cut to its first {MAX_CHARS} characters")
        return {"latency_ms": round(ms, 3), "model": variant.key, "tokens": tokens,
                "truncated": truncated or cut_chars, "note": note}

    # -- what the page shows -------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """What is loaded and how fast it answers; never waits for a model call."""
        with self._state_lock:
            variant = self.variant
            models = {}
            for task, session in self._sessions.items():
                models[task] = {
                    "file": str(session.path.relative_to(self.bundle.path)), "size_bytes": session.path.stat().st_size,
                    "format": variant.format, "scheme": variant.scheme_of(task), "runtime": session.backend_name,
                    "engine": _engine_label(session),
                    "runtime_version": session.version() if isinstance(session, MediaPipeClassifier)
                    else version_of(session.backend_name),
                    "weights_once": session.weights_once, "accelerator": session.accelerator,
                    "load_seconds": round(self._load_seconds.get(task, 0.0), 3),
                    "latency": self._latency.get((task, variant.key), LatencyWindow()).summary(),
                }
        return {"model": variant.key if variant else None, "available": self.available(), "models": models,
                "threads": self.num_threads, "seq_len": self.bundle.seq_len, "labels": self.bundle.labels}


def _bounded(text: Any) -> tuple[str, bool]:
    if not isinstance(text, str):
        raise DemoInputError("text must be a string")
    if not text.strip():
        raise DemoInputError("text is empty")
    # Lone surrogates (from JSON "\ud800") cannot be encoded; replace them like any bad byte.
    text = text.encode("utf-8", "replace").decode("utf-8")
    return (text[:MAX_CHARS], True) if len(text) > MAX_CHARS else (text, False)


def _engine_label(session: Session | MediaPipeClassifier) -> str:
    return session.label if isinstance(session, MediaPipeClassifier) else session_label(session.backend_name)


def _feeds(ids: list[int], session: Session) -> dict[str, np.ndarray]:
    """[CLS] text [SEP] as the file's inputs, batch 1; padded (mask 0) to a fixed-length file's
    length (a .mediapipe.tflite is fixed at its conversion's sequence length)."""
    n = len(ids)
    shape = session.inputs[0].shape if session.inputs else ()
    fixed = shape[1] if len(shape) > 1 else None
    length = fixed if isinstance(fixed, int) and fixed >= n else n
    feeds = {name: np.zeros((1, length), dtype=np.int64) for name in ("input_ids", "attention_mask", "token_type_ids")}
    feeds["input_ids"][0, :n] = ids
    feeds["attention_mask"][0, :n] = 1
    return {k: v for k, v in feeds.items() if k in session.input_names}


def _main_output(out: dict[str, np.ndarray], session: Session) -> np.ndarray:
    """The logits: the output named so, else the log of a MediaPipe classifier's probabilities
    (a softmax of them gives the probabilities back), else the first output."""
    if "logits" not in out and "probabilities" in out:
        with np.errstate(divide="ignore"):
            return np.log(np.clip(out["probabilities"].astype(np.float64), 0.0, None))
    return out.get("logits", out[session.output_names[0]])


def _softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - np.max(x))
    return e / e.sum()


_SPECIAL = re.compile(r"^(<.*>|\[.*\])$")


def _special_ids(tok: AlbertTokenizer) -> set[int]:
    ids = {tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id}
    return ids | {i for i in range(tok.vocab_size) if _SPECIAL.match(tok.id_to_piece([i])[0])}


def _inside_word_ids(tok: AlbertTokenizer) -> list[int]:
    """The pieces that continue a word (no leading "▁"): "line" of "▁the" "line" = "theline"."""
    return [i for i in range(tok.vocab_size) if not tok.id_to_piece([i])[0].startswith("\u2581")]


def _masks_as_words(text: str) -> list[bool]:
    """For each [MASK] in ``text``, in order: whether it stands as a word of its own (whitespace or
    the start of the text before it, whitespace, punctuation or the end after it)."""
    return [(m.start() == 0 or text[m.start() - 1].isspace())
            and (m.end() == len(text) or not text[m.end()].isalnum())
            for m in re.finditer(re.escape("[MASK]"), text)]


def _piece_text(tok: AlbertTokenizer, i: int) -> str:
    return tok.id_to_piece([i])[0].replace("\u2581", "")
