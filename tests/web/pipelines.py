"""transformers.js pipelines' answers held to PyTorch (fp32) and to albert-edge's own Session on
the same int8 file (q8), the same way for Node and the browser. An answer is what
web/transformers-node.mjs and web/transformers-page.mjs give for a task: ``ids`` per text, and
``labels`` + ``scores`` (text-classification), ``vectors`` (feature-extraction: mean pooled) or
``tokens`` + ``scores`` (fill-mask: the top tokens for the [MASK] and their probabilities)."""

from __future__ import annotations

import numpy as np

from .checkpoints import Converted
from .runtimes import AGREEMENT, ATOL, COSINE, cosines, decode

MASK_ID = 4  # [MASK] in every ALBERT spiece.model (albert_edge.tokenizer.SPECIAL_TOKENS)
# q8 embeddings against the Session's on the same int8 file: the same int8 weights, but not always
# the same activations' ranges (Node embeds its texts as one padded batch) nor the same kernels
# (onnxruntime-web's WebAssembly); measured at least 0.99983.
Q8_COSINE = 0.999


def _ours(converted: Converted, texts: list[str]) -> dict[str, np.ndarray]:
    from albert_edge.tokenizer import AlbertTokenizer

    tok = AlbertTokenizer.from_dir(converted.checkpoint)
    batch = tok(texts, max_length=converted.max_pieces, padding="longest", truncation=True)
    return {n: np.asarray(batch[n], dtype=np.int64) for n in ("input_ids", "attention_mask", "token_type_ids")}


def _pytorch(converted: Converted, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """The head's output on the padded batch: probabilities (classification), mean-pooled vectors
    (base), or the [MASK] position's probabilities over the vocabulary (mlm); float64."""
    import torch

    from albert_edge.checkpoints import load_model

    model = load_model(converted.checkpoint, converted.head)[1].eval()
    x = [torch.from_numpy(feeds[n]) for n in ("input_ids", "attention_mask", "token_type_ids")]
    with torch.no_grad():
        out = model(*x)
    return _reduce(converted.head, out[0] if isinstance(out, tuple) else out, feeds)


def _reduce(head: str, out, feeds: dict[str, np.ndarray]) -> np.ndarray:
    out = np.asarray(out, dtype=np.float64)
    if head == "classification":
        return _softmax(out)
    mask = feeds["attention_mask"][..., None].astype(np.float64)
    if head == "base":
        return (out * mask).sum(1) / mask.sum(1)
    rows, positions = np.nonzero(feeds["input_ids"] == MASK_ID)
    assert list(rows) == list(range(len(feeds["input_ids"]))), "one [MASK] per text"
    return _softmax(out[rows, positions])


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _session_int8(converted: Converted, texts: list[str]) -> np.ndarray:
    """albert-edge's Session on the folder's q8 file, one text per call as the pipeline runs it
    (dynamic quantization's ranges would see a batch's padding)."""
    from albert_edge.converters.transformers_js import MODEL_FILES
    from albert_edge.runtime import Session

    session = Session(converted.folder / MODEL_FILES["q8"], num_threads=1)
    rows = []
    for text in texts:
        feeds = _ours(converted, [text])
        out = session.run(feeds)
        rows.append(_reduce(converted.head, out["last_hidden_state" if converted.head == "base" else "logits"],
                            feeds)[0])
    return np.stack(rows)


def figures(task: str, converted: Converted, texts: list[str], fp32: dict, q8: dict) -> dict[str, float]:
    """The figures of one pipeline on one model (fp32 against PyTorch on the texts whose ids are
    albert-edge's, q8 against albert-edge's Session on the same int8 file), asserted against the
    thresholds of runtimes.py. ``fp32`` / ``q8``: the runtime's answers."""
    feeds = _ours(converted, texts)
    ours = [row[m.astype(bool)].tolist() for row, m in zip(feeds["input_ids"], feeds["attention_mask"], strict=True)]
    assert fp32["ids"] == q8["ids"]
    same = np.array([a == b for a, b in zip(fp32["ids"], ours, strict=True)])
    reference = _pytorch(converted, feeds)
    session = _session_int8(converted, texts)
    f: dict[str, float] = {"texts": len(texts), "ids differ": int((~same).sum())}
    if task == "feature-extraction":
        got = {d: decode(a["vectors"]).astype(np.float64) for d, a in (("fp32", fp32), ("q8", q8))}
        f["fp32 vectors max_abs_diff"] = float(np.abs(got["fp32"] - reference)[same].max())
        f["fp32 min_cosine"] = float(cosines(got["fp32"], reference)[same].min())
        f["q8 min_cosine vs Session"] = float(cosines(got["q8"], session).min())
    else:
        scores = {d: decode(a["scores"]).astype(np.float64) for d, a in (("fp32", fp32), ("q8", q8))}
        if task == "text-classification":
            tokens = {d: np.tile(np.arange(reference.shape[1]), (len(texts), 1)) for d in scores}
        else:
            tokens = {d: np.asarray(a["tokens"]) for d, a in (("fp32", fp32), ("q8", q8))}
        picked = np.take_along_axis(reference, tokens["fp32"], 1)
        f["fp32 probabilities max_abs_diff"] = float(np.abs(scores["fp32"] - picked)[same].max())
        top = {d: tokens[d][np.arange(len(texts)), scores[d].argmax(1)] for d in scores}
        f["fp32 top1 agreement with pytorch"] = float((top["fp32"] == reference.argmax(1))[same].mean())
        f["q8 top1 agreement with Session"] = float((top["q8"] == session.argmax(1)).mean())
        f["q8 probabilities max_abs_diff vs Session"] = float(
            np.abs(scores["q8"] - np.take_along_axis(session, tokens["q8"], 1)).max())
    assert f["texts"] - f["ids differ"] >= 0.99 * f["texts"], f
    for key, value in f.items():
        if key.startswith("fp32") and key.endswith("max_abs_diff"):
            assert value <= ATOL, (task, key, f)
        elif key.startswith("fp32") and key.endswith("cosine"):
            assert value >= COSINE, (task, key, f)
        elif "agreement" in key:
            assert value >= AGREEMENT, (task, key, f)
        elif key.startswith("q8") and key.endswith("cosine"):
            assert value >= Q8_COSINE, (task, key, f)
    return f
