"""A MediaPipe text task file checked through MediaPipe itself (the C++ an app runs): its
``TextClassifier`` or ``TextEmbedder`` answers real texts from the raw text, tokenizing with the
spiece.model inside the file, and must agree with albert_edge.runtime's Session on the same file
fed albert-edge's tokenizer ids: probabilities within :data:`ATOL`, embeddings with a cosine of
at least :data:`MIN_COSINE`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from albert_edge.errors import ConversionError, install_line, optional_import

from .native_logs import quiet_native, quiet_tensorflow_env
from .verify import TOLERANCES, OutputMatchError, ShapeError

__all__ = ["check_task", "task_answers", "engine_reason", "session_answers", "agreement", "TASK_TEXTS",
           "ATOL", "MIN_COSINE", "MOBILE_EXTRA"]

log = logging.getLogger(__name__)

MOBILE_EXTRA = install_line("mobile")
ATOL = TOLERANCES["mediapipe"].atol
MIN_COSINE = TOLERANCES["mediapipe"].min_cosine

# Texts whose ids MediaPipe's tokenizer and albert-edge's give alike (case, accents, quotes,
# punctuation, Unicode spaces, a text longer than any file's length): what may differ is measured
# by the tests on the tokenizer's own strings.
TASK_TEXTS = (
    "The weather station on the hill reads its sensors once every minute.",
    "Does ALBERT share its layers? Yes: twelve layers, one set of weights.",
    "Crème brûlée at the Café Münster\u00a0— naïve, but ``quoted'' well.",
    "A short one.",
    "\u3000Tabs\tand   spaces\nmix here.",
    " ".join(["Phones, Raspberry Pis and Jetsons run the same small file."] * 12),
)


def _tasks():
    quiet_tensorflow_env()  # MediaPipe's Python package may load TensorFlow; a level the user set is kept
    with quiet_native(tensorflow=True):  # (dropped with our error too)
        try:
            text = optional_import("mediapipe.tasks.python.text")
            core = optional_import("mediapipe.tasks.python.core.base_options")
        except ImportError as exc:
            raise ConversionError(f"checking a MediaPipe file needs mediapipe ({exc.name or exc} did not import): "
                                  f"{MOBILE_EXTRA}") from None
    return text, core


def task_answers(path: str | Path, task: str, texts: Sequence[str]) -> np.ndarray:
    """(len(texts), n) float64: the classifier's score per class index (of each head in turn: an
    adaptive file's second head is its passes), or the embedding, as MediaPipe's ``task``
    ("TextClassifier" / "TextEmbedder") gives them for each raw text."""
    text, core = _tasks()
    base = core.BaseOptions(model_asset_path=str(path))
    rows = []
    with quiet_native():  # MediaPipe's own log lines as its graph starts (an error of ours drops them)
        try:
            if task == "TextClassifier":
                options = text.TextClassifierOptions(base_options=base, max_results=-1)
                with text.TextClassifier.create_from_options(options) as classifier:
                    heads = [classifier.classify(t).classifications for t in texts]
                    rows = [np.concatenate([_scores(head.categories) for head in each]) for each in heads]
            else:
                with text.TextEmbedder.create_from_options(text.TextEmbedderOptions(base_options=base)) as embedder:
                    rows = [np.asarray(embedder.embed(t).embeddings[0].embedding, dtype=np.float64) for t in texts]
        except (RuntimeError, ValueError) as exc:
            raise ConversionError(f"MediaPipe's {task} refused {path}: {engine_reason(exc)}") from None
    return np.stack(rows)


def _scores(categories) -> np.ndarray:
    """One head's scores by category index."""
    row = np.zeros(len(categories))
    for c in categories:
        row[c.index] = c.score
    return row


def engine_reason(exc: BaseException, limit: int = 300) -> str:
    """MediaPipe's message as one line: from its failed check on (the graph and node names
    before it say nothing a user can act on), cut to ``limit`` characters."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    at = text.find("RET_CHECK failure")
    text = text[at:] if at >= 0 else text
    return text if len(text) <= limit else text[:limit - 3].rstrip() + "..."


def session_answers(path: str | Path, tokenizer, texts: Sequence[str], seq_len: int,
                    outputs: Sequence[str] | None = None) -> np.ndarray:
    """The same through albert_edge.runtime.Session, fed albert-edge's ids padded to ``seq_len``:
    the ``outputs`` named, one after the other (None: the first)."""
    from albert_edge.runtime import Session
    from albert_edge.tokenizer import AlbertTokenizer

    tok = tokenizer if callable(tokenizer) else AlbertTokenizer.from_dir(tokenizer)
    session = Session(path)
    names = list(outputs or session.output_names[:1])
    rows = []
    for t in texts:
        feeds = tok([t], max_length=seq_len, padding="max_length", truncation=True)
        out = session.run({k: np.asarray(v, dtype=np.int32) for k, v in feeds.items()})
        rows.append(np.concatenate([np.asarray(out[n], dtype=np.float64).reshape(-1) for n in names]))
    return np.stack(rows)


def agreement(task: str, engine: np.ndarray, session: np.ndarray) -> dict[str, float]:
    """How close two sets of answers are: max |difference|, and for embeddings the least cosine."""
    figures = {"max_abs_diff": float(np.abs(engine - session).max())}
    if task == "TextEmbedder":
        cos = (engine * session).sum(1) / (np.linalg.norm(engine, axis=1) * np.linalg.norm(session, axis=1))
        figures["min_cosine"] = float(cos.min())
    return figures


def check_task(path: str | Path, task, tokenizer, seq_len: int, texts: Sequence[str] = TASK_TEXTS) -> dict[str, float]:
    """Raise a VerificationError (a ConversionError) unless MediaPipe's task and the Session agree on ``texts``."""
    engine = task_answers(path, task.task, texts)
    session = session_answers(path, tokenizer, texts, seq_len, task.outputs)
    if engine.shape != session.shape:
        raise ShapeError(f"MediaPipe's {task.task} gives {engine.shape[1]} values per text, the file's output "
                         f"has {session.shape[1]}", shape=list(engine.shape), expected=list(session.shape))
    figures = agreement(task.task, engine, session)
    log.info("MediaPipe %s against the Session: %s", task.task, figures)
    if "min_cosine" in figures and figures["min_cosine"] < MIN_COSINE:
        raise OutputMatchError(f"MediaPipe's {task.task} and albert-edge's Session disagree on {Path(path).name}: "
                               f"cosine {figures['min_cosine']:.6f} (at least {MIN_COSINE})")
    if "min_cosine" not in figures and figures["max_abs_diff"] > ATOL:
        raise OutputMatchError(f"MediaPipe's {task.task} and albert-edge's Session disagree on {Path(path).name}: "
                               f"max |difference| {figures['max_abs_diff']:.3g} (atol {ATOL:g})",
                               max_abs_diff=figures["max_abs_diff"], atol=ATOL)
    return figures
