"""Fixtures shared by the tests."""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def spiece_model(tmp_path_factory) -> Path:
    """A real ALBERT spiece.model (400 pieces, ids 0..4 = <pad> <unk> [CLS] [SEP] [MASK]),
    trained on tests/data/corpus.txt."""
    from albert_edge.tokenizer import train_spiece

    return train_spiece([DATA / "corpus.txt"], tmp_path_factory.mktemp("spiece"), vocab_size=400)


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Tiny models run fastest on one thread, and the machine is shared."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
