"""Fixtures shared by the tests."""

from __future__ import annotations

import subprocess
import sys
import textwrap
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


# Run in a fresh interpreter where importing torch, tensorflow or transformers fails, as on a
# Raspberry Pi with only the device side installed. ``attempts`` lists what the code tried.
_BLOCKER = textwrap.dedent("""
    import importlib.abc, sys

    attempts = []

    class Blocked(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("torch", "tensorflow", "transformers", "tf_keras", "keras"):
                attempts.append(name)
                raise ImportError(f"{name} is not installed on this device")
            return None

    sys.meta_path.insert(0, Blocked())
""")


@pytest.fixture()
def run_blocked():
    def run(code: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", _BLOCKER + textwrap.dedent(code)],
                              capture_output=True, text=True, timeout=120)

    return run
