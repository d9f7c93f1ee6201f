"""Fixtures of the transformers.js pipeline tests: model folders from `convert --to
transformers-js` of two kinds of checkpoint, and the held-out texts they run on.

- albert-edge's own: the builtin small ALBERT (tests/web/conftest.py) as an encoder
  (feature-extraction) and with its masked-LM head (fill-mask), and the classifier fine-tuned from
  it (text-classification). Trained, so their int8 files make real decisions to agree on.
- transformers' own: a small ALBERT that transformers builds and writes (``AlbertConfig`` and
  ``AlbertModel`` / ``AlbertForMaskedLM`` / ``AlbertForSequenceClassification``,
  ``save_pretrained``) with the spiece.model of tests/conftest.py and named labels, so the files
  albert-edge converts from a checkpoint it did not write are held to the same figures. Its
  weights are random (seeded): enough for fp32 parity, where every computation is compared."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import HELD_OUT, SEQ

# Our name of each pipeline's head (convert --head) and transformers' class for it.
TASK_HEADS = {"text-classification": "classification", "feature-extraction": "base", "fill-mask": "mlm"}
HF_CLASSES = {"classification": "AlbertForSequenceClassification", "base": "AlbertModel",
              "mlm": "AlbertForMaskedLM"}
HF_LABELS = ("sport", "science", "politics")
# transformers' model has the 400-piece spiece.model, so a paragraph takes about twice the pieces.
HF_MAX_PIECES = 2 * SEQ
# Texts each pipeline runs on (held-out paragraphs that fit untruncated).
TEXTS = 200


@dataclass(frozen=True)
class Converted:
    """One head of one checkpoint: the checkpoint, its transformers.js folder, the pieces its texts
    fit in, and (transformers-made only) the `--to onnx` file of the same checkpoint."""

    checkpoint: Path
    head: str
    folder: Path
    max_pieces: int
    onnx: Path | None = None


def _convert(checkpoint: Path, out: Path, head: str, max_pieces: int, onnx: bool) -> Converted:
    from albert_edge.converters.export import convert
    from albert_edge.converters.transformers_js import folder_of

    targets = ("transformers-js", "onnx") if onnx else ("transformers-js",)
    result = convert(str(checkpoint), out, targets=targets, head=head, seq_len=SEQ)
    paths = [f.path for f in result.files]
    tjs = next(p for p in paths if str(p).endswith(".transformers-js.onnx"))
    plain = next((p for p in paths if not str(p).endswith(".transformers-js.onnx")), None) if onnx else None
    return Converted(Path(checkpoint), head, folder_of(tjs), max_pieces, Path(plain) if plain else None)


@pytest.fixture(scope="session")
def hf_checkpoints(tmp_path_factory, spiece_model) -> dict[str, Path]:
    """transformers' own small ALBERT, one checkpoint per head (by our head name), each written by
    ``save_pretrained`` beside the tests' spiece.model."""
    import torch
    import transformers

    root = tmp_path_factory.mktemp("transformers-made")
    config = transformers.AlbertConfig(
        vocab_size=400, embedding_size=16, hidden_size=32, num_hidden_layers=3, num_hidden_groups=1,
        num_attention_heads=4, intermediate_size=64, max_position_embeddings=4 * SEQ,
        # Wider than the default 0.02, so the random model's outputs are not all near zero.
        initializer_range=0.2, id2label=dict(enumerate(HF_LABELS)),
        label2id={name: i for i, name in enumerate(HF_LABELS)})
    out = {}
    for head, cls in HF_CLASSES.items():
        torch.manual_seed(0)
        model = getattr(transformers, cls)(config).eval()
        out[head] = root / head
        model.save_pretrained(out[head])
        shutil.copy(spiece_model, out[head] / "spiece.model")
    return out


@pytest.fixture(scope="session")
def builtin_converted(tmp_path_factory, small_checkpoint, classifier_checkpoint) -> dict[str, Converted]:
    """`convert --to transformers-js` of the builtin small ALBERT (base, mlm) and its classifier,
    by pipeline task."""
    root = tmp_path_factory.mktemp("tjs-builtin")
    checkpoints = {"text-classification": classifier_checkpoint, "feature-extraction": small_checkpoint,
                   "fill-mask": small_checkpoint}
    return {task: _convert(ckpt, root / TASK_HEADS[task], TASK_HEADS[task], SEQ, onnx=False)
            for task, ckpt in checkpoints.items()}


@pytest.fixture(scope="session")
def hf_converted(tmp_path_factory, hf_checkpoints) -> dict[str, Converted]:
    """`convert --to transformers-js --to onnx` of each transformers-made checkpoint, by task."""
    root = tmp_path_factory.mktemp("tjs-transformers")
    return {task: _convert(hf_checkpoints[head], root / head, head, HF_MAX_PIECES, onnx=True)
            for task, head in TASK_HEADS.items()}


def fitting(texts: list[str], checkpoint: Path, max_pieces: int, count: int = TEXTS) -> list[str]:
    """The first ``count`` of ``texts`` that albert-edge's tokenizer of ``checkpoint`` fits in
    ``max_pieces`` untruncated, so neither tokenizer's truncation rule decides the ids."""
    from albert_edge.tokenizer import AlbertTokenizer

    tok = AlbertTokenizer.from_dir(checkpoint)
    lengths = tok(texts, max_length=4 * max_pieces, padding="longest", truncation=True)["attention_mask"].sum(1)
    out = [t for t, n in zip(texts, lengths, strict=True) if n <= max_pieces][:count]
    assert len(out) == count, f"only {len(out)} held-out texts fit in {max_pieces} pieces"
    return out


def with_mask(text: str) -> str:
    """``text`` with its middle word replaced by [MASK], for fill-mask."""
    words = text.split()
    words[len(words) // 2] = "[MASK]"
    return " ".join(words)


@pytest.fixture(scope="session")
def evaluation_texts(topics) -> list[str]:
    """Every paragraph of the topic dataset's evaluation part (never trained on), in order."""
    rows = [json.loads(line)["text"] for line in topics[1].read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(rows) >= HELD_OUT
    return rows


def task_texts(task: str, converted: Converted, evaluation: list[str]) -> list[str]:
    """The texts ``task`` runs on for this model: fitting held-out paragraphs (one word masked for
    fill-mask)."""
    texts = fitting(evaluation, converted.checkpoint, converted.max_pieces - (2 if task == "fill-mask" else 0))
    return [with_mask(t) for t in texts] if task == "fill-mask" else texts
