"""Fixtures for the quantization tests: a tiny ALBERT that has learned something (a few hundred
masked-LM steps on tests/data/corpus.txt), its checkpoint with its spiece.model, and its fp32
ONNX and TFLite files converted with their manifest.

The model is small but not the "tiny" preset: every weight has at least 1024 elements, so
TFLite's dynamic-range quantizer (which skips smaller weights) quantizes all of them, and
G=2 < L=4 exercises the sharing. Training makes the LayerNorm weights and biases non-trivial,
which random initialization (ones and zeros, folded away by the converters) would not.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from albert_edge.config import AlbertConfig  # noqa: E402

DATA = Path(__file__).parents[1] / "data"
CORPUS = DATA / "corpus.txt"
SEQ = 32
SMALL = dict(vocab_size=400, embedding_size=32, hidden_size=32, num_hidden_layers=4, num_hidden_groups=2,
             num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)


def small_config(**changes) -> AlbertConfig:
    return AlbertConfig(**{**SMALL, **changes})


def _sentences() -> list[str]:
    from albert_edge.text import split_sentences

    lines = CORPUS.read_text(encoding="utf-8").splitlines()
    return [s for line in lines if line.strip() for s in split_sentences(line)]


def train_tiny_mlm(spiece: Path, head: str = "mlm", steps: int = 300, seed: int = 0):
    """A few hundred masked-LM steps: enough for confident, non-degenerate predictions."""
    from albert_edge.model import build_model
    from albert_edge.tokenizer import AlbertTokenizer

    tok = AlbertTokenizer(spiece)
    batch = tok(_sentences(), max_length=SEQ, padding="max_length")
    ids = torch.from_numpy(batch["input_ids"])
    mask = torch.from_numpy(batch["attention_mask"])
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = build_model(small_config(), "mlm").train()
    lr = 1e-2
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    special = torch.tensor([tok.pad_id, tok.cls_id, tok.sep_id])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model on shared cores: one thread is several times faster
    try:
        for step in range(steps):
            rows = torch.randint(0, ids.shape[0], (32,), generator=gen)
            x, m = ids[rows].clone(), mask[rows]
            pick = (torch.rand(x.shape, generator=gen) < 0.15) & m.bool() & ~torch.isin(x, special)
            labels = torch.where(pick, x, torch.full_like(x, -100))
            x[pick] = tok.mask_id
            logits = model(x, m, torch.zeros_like(x))
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
            for group in optimizer.param_groups:  # warm up, then decay linearly
                group["lr"] = lr * min(1.0, (step + 1) / 50) * (1 - step / steps)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    finally:
        torch.set_num_threads(threads)
    model.eval()
    if head == "mlm":
        return model
    other = build_model(small_config(), head)
    other.load_state_dict(model.state_dict(), strict=False)  # the encoder learned; the head is new
    return other.eval()


@pytest.fixture(scope="session")
def trained_checkpoint(tmp_path_factory, spiece_model) -> Path:
    """A Hugging Face directory (config.json, model.safetensors, spiece.model) of the trained MLM."""
    from albert_edge import checkpoints

    out = tmp_path_factory.mktemp("trained-mlm")
    return checkpoints.save(train_tiny_mlm(spiece_model), out, spiece=spiece_model)


@pytest.fixture(scope="session")
def converted(tmp_path_factory, trained_checkpoint) -> Path:
    """The trained MLM as model.onnx and model.tflite with manifest.json (read-only for tests:
    quantize into a copy, see ``workdir``)."""
    from albert_edge.converters.export import convert

    out = tmp_path_factory.mktemp("converted") / "fp32"
    convert(trained_checkpoint, out, targets=("onnx", "tflite"), seq_len=SEQ)
    return out


@pytest.fixture
def workdir(tmp_path, converted) -> Path:
    """A private copy of the converted directory, so tests can write beside the files."""
    dst = tmp_path / "model"
    shutil.copytree(converted, dst)
    return dst


@pytest.fixture(scope="session")
def base_onnx(tmp_path_factory) -> Path:
    """A random tiny base-head model converted to ONNX: no labels, so the headline is a cosine."""
    from albert_edge import checkpoints
    from albert_edge.converters.export import convert
    from albert_edge.model import build_model

    torch.manual_seed(1)
    ckpt = tmp_path_factory.mktemp("base-ckpt")
    checkpoints.save(build_model(small_config(), "base"), ckpt)
    out = tmp_path_factory.mktemp("base") / "fp32"
    convert(ckpt, out, targets=("onnx",), seq_len=SEQ)
    return out


def copy_dir(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def feeds(batch: int = 2, seq: int = SEQ, vocab: int = 400, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, vocab, size=(batch, seq))
    mask = np.ones_like(ids)
    mask[-1, seq // 2:] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
