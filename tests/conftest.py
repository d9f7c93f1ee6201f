"""Fixtures shared by the tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"

# The Python processes the tests start import albert_edge as it is installed (a wheel in CI), never
# the source folder of the checkout they run in: `python -c` and `python -m` would put it first.
os.environ["PYTHONSAFEPATH"] = "1"

# A run started in the background of a non-interactive shell inherits SIGINT ignored, and so would
# every child; the tests that press Ctrl-C on a command need it delivered. A handler (not an
# ignored signal) is reset to the default in each child, where Python turns it into an interrupt.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


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


# ``albert-edge ARGS`` in a fresh interpreter where importing one package fails as Python fails
# for a package that is not installed (ModuleNotFoundError naming it), whether it is installed or not.
_WITHOUT = textwrap.dedent("""
    import importlib.abc, sys

    class Missing(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in sys.argv[1].split(","):  # several: "onnx,onnxruntime"
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Missing())
    from albert_edge.cli import main
    main(sys.argv[2:])
""")


@pytest.fixture()
def cli_without():
    def run(package: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", _WITHOUT, package, *map(str, args)], capture_output=True,
                              text=True, timeout=timeout)

    return run


@pytest.fixture()
def interrupt_install(monkeypatch):
    """``interrupt_install(out, exchange, after)``: the next time albert_edge.files (install, staged, staged_files) puts
    something at ``out``, Ctrl-C arrives just before (or just after) that rename or swap, once;
    ``exchange=False`` makes it use two renames, as where the system cannot swap. Returns the list
    that records whether it fired."""
    from albert_edge import files

    real_rename, real_exchange = os.rename, files._exchange
    fired: list[Path] = []

    def arm(out: Path, exchange: bool = True, after: bool = False) -> list[Path]:
        def interrupted(real):
            def step(src, dst):
                if Path(dst) == out and not after and not fired:
                    fired.append(Path(dst))
                    raise KeyboardInterrupt
                result = real(src, dst)
                if Path(dst) == out and result is not False and not fired:
                    fired.append(Path(dst))
                    raise KeyboardInterrupt
                return result
            return step

        monkeypatch.setattr(files.os, "rename", interrupted(real_rename))
        monkeypatch.setattr(files, "_exchange", interrupted(real_exchange) if exchange else (lambda a, b: False))
        return fired

    return arm
