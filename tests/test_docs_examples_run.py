"""Every Python example in docs/ runs as written, against a small model made for it (the API tour's
own test is test_docs_api_example.py). Each example gets what its page says it starts from (a
checkpoint at the path it names, a file it opens, the names the text before it defines) and runs
in a fresh interpreter in a folder of its own; a new example on a page fails here until it is
given its start."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("tensorflow")

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

if not DOCS.is_dir():
    pytest.skip("docs/ is in the repository, not in the installed package", allow_module_level=True)

# The API tour (python-api.md's first example) runs in test_docs_api_example.py.
TOUR = ("python-api.md", 1)


def examples() -> list[tuple[str, int, str]]:
    """(page, number from 1, code) of every Python example in docs/."""
    found = []
    for page in sorted(DOCS.rglob("*.md")):
        for n, code in enumerate(re.findall(r"```(?:python|py)\n(.*?)```", page.read_text(encoding="utf-8"), re.S), 1):
            found.append((page.relative_to(DOCS).as_posix(), n, code))
    return found


def _checkpoint(path: Path, spiece: Path, head: str = "mlm") -> None:
    from albert_edge import checkpoints
    from albert_edge.config import AlbertConfig
    from albert_edge.model import build_model

    config = AlbertConfig(vocab_size=400, embedding_size=16, hidden_size=32, num_hidden_layers=4, num_hidden_groups=2,
                          num_attention_heads=4, intermediate_size=64, max_position_embeddings=128)
    checkpoints.save(build_model(config, head), path, spiece=spiece)


def _start_checkpoints(work: Path, spiece: Path) -> str:
    _checkpoint(work / "path" / "to" / "checkpoint", spiece)
    return ""


def _start_compiled_model(work: Path, spiece: Path) -> str:
    """weights-once.md: a .tflite of the base head; T, H and the feeds as the text before it says."""
    from albert_edge.converters.export import convert

    _checkpoint(work / "ckpt", spiece, head="base")
    convert(work / "ckpt", work / "files", targets=("tflite",), head="base", seq_len=32)
    (work / "model.tflite").hardlink_to(work / "files" / "model.tflite")  # where the example opens it
    return textwrap.dedent("""\
        import numpy as np
        T, H = 12, 32
        ids = np.arange(5, 5 + T, dtype=np.int32)[None]
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        """)


def _start_gpu(work: Path, spiece: Path) -> str:
    """python-api.md's GPU example: a static file in gpu/ and the tour's tokenizer."""
    from albert_edge.converters.export import convert
    from albert_edge.runtime.accelerator import NO_VULKAN_FIX, vulkan_available

    reason = vulkan_available()
    if reason is not None:
        pytest.skip(f"no Vulkan device for LiteRT's GPU accelerator: {reason} ({NO_VULKAN_FIX})")
    _checkpoint(work / "ckpt", spiece, head="base")
    convert(work / "ckpt", work / "gpu", targets=("tflite",), head="base", seq_len=128, static=True)
    return f"from albert_edge.api import AlbertTokenizer, Session\ntokenizer = AlbertTokenizer({str(spiece)!r})\n"


def _start_adaptive(work: Path, spiece: Path) -> str:
    """guides/adaptive.md: an adaptive .tflite in edge-adaptive/ (a classifier with exits, confidence 0.6)."""
    import json

    from albert_edge import checkpoints
    from albert_edge.config import AlbertConfig
    from albert_edge.converters.export import convert
    from albert_edge.model import build_model

    config = AlbertConfig(vocab_size=400, embedding_size=16, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
                          intermediate_size=64, max_position_embeddings=128, num_labels=2,
                          exits=json.dumps({"training": "frozen", "rule": {"kind": "confidence", "setting": 0.6}}))
    checkpoints.save(build_model(config, "classification"), work / "ckpt", spiece=spiece)
    convert(work / "ckpt", work / "edge-adaptive", targets=("tflite",), seq_len=32, adaptive=True)
    return ""


STARTS = {("checkpoints.md", 1): _start_checkpoints, ("concepts/weights-once.md", 1): _start_compiled_model,
          ("python-api.md", 2): _start_gpu, ("guides/adaptive.md", 1): _start_adaptive}


def test_every_example_has_a_start():
    """A Python example added to a page is run here, or this fails until it is."""
    assert {(page, n) for page, n, _ in examples()} == {*STARTS, TOUR}


@pytest.mark.parametrize("key", sorted(STARTS), ids=lambda key: f"{key[0]}#{key[1]}")
def test_the_example_runs(key, tmp_path, spiece_model):
    code = next(code for page, n, code in examples() if (page, n) == key)
    prelude = STARTS[key](tmp_path, Path(spiece_model))
    done = subprocess.run([sys.executable, "-c", prelude + code], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"{key[0]}, Python example {key[1]}:\n{done.stderr[-3000:]}"


def test_the_recipe_s_tokenizer_step_runs_as_written(tmp_path):
    """commands.md's recipe from text to a phone starts by training a tokenizer on the builtin
    corpus; a size the corpus cannot yield (8,000) is refused only when it runs, so it runs here,
    as written, with the installed command."""
    import shlex

    line = re.search(r"^albert-edge tokenizer train [^#\n]*", (DOCS / "commands.md").read_text(encoding="utf-8"),
                     re.M).group(0).strip()
    command = Path(sys.executable).with_name("albert-edge")
    done = subprocess.run([str(command), *shlex.split(line)[1:]], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"commands.md: {line}\n{done.stderr[-2000:]}"
    out = shlex.split(line)[shlex.split(line).index("--out") + 1]
    assert (tmp_path / out / "spiece.model").is_file()
