"""`--force` replaces a command's own earlier output, never what it reads: an --out that is, holds
or lies inside an input is refused with or without --force, and every input byte stays as it was."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from albert_edge.cli import main

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from ..converters.conftest import tiny_model  # noqa: E402


def _hashes(*roots: Path) -> dict[str, str]:
    """sha256 of every file under ``roots`` (or of the file itself)."""
    found = {}
    for root in roots:
        for path in [root] if root.is_file() else sorted(root.rglob("*")):
            if path.is_file():
                found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, spiece_model) -> dict[str, Path]:
    """A checkpoint (with its spiece.model), its conversion, and a text corpus, each in its own folder."""
    from albert_edge import checkpoints
    from albert_edge.converters.export import convert

    root = tmp_path_factory.mktemp("inputs")
    model = tiny_model()
    checkpoints.save(model, root / "work" / "ckpt", spiece=spiece_model)
    convert(model, root / "work" / "conv", targets=("onnx",), seq_len=16)
    corpus = root / "work" / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("The loop runs the task until it is done.\n\nA queue holds the items in order.\n" * 20)
    return {"ckpt": root / "work" / "ckpt", "conv": root / "work" / "conv", "corpus": corpus}


# command (with {input} for the path read), the input it reads
COMMANDS = {
    "report": (("report", "{conv}", "--no-charts"), "conv"),
    "convert": (("convert", "{ckpt}", "--seq-len", "16"), "ckpt"),
    "pipeline": (("pipeline", "{ckpt}", "--only", "convert"), "ckpt"),
    "tokenizer-train": (("tokenizer", "train", "{corpus}", "--vocab-size", "100"), "corpus"),
}
WHERE = {"is": lambda p: p, "holds": lambda p: p.parent, "lies-inside": lambda p: p / "out"}


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("command", COMMANDS)
def test_an_out_that_is_holds_or_lies_inside_an_input_is_refused_even_with_force(inputs, command, where):
    args, read = COMMANDS[command]
    out = WHERE[where](inputs[read])
    before = _hashes(*inputs.values())
    result = CliRunner().invoke(main, [a.format(**inputs) for a in args] + ["--out", str(out), "--force"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(lines) == 1 and f"the input {inputs[read]}" in lines[0], result.output
    assert _hashes(*inputs.values()) == before
    assert not (inputs[read] / "out").exists()


def test_quantize_onto_its_parent_or_its_tokenizer_changes_nothing(inputs):
    parent = inputs["conv"] / "model.onnx"
    before = _hashes(*inputs.values())
    for out, why in ((parent, "is the fp32 file itself"), (inputs["ckpt"] / "spiece.model", "must end in .onnx")):
        result = CliRunner().invoke(main, ["quantize", str(parent), "--scheme", "int8-dynamic", "--tokenizer",
                                           str(inputs["ckpt"] / "spiece.model"), "--out", str(out), "--force"])
        assert result.exit_code == 2 and why in result.output, result.output
    assert _hashes(*inputs.values()) == before


def test_an_input_through_a_symlink_or_dot_dot_is_the_input(inputs, tmp_path):
    link = tmp_path / "link"
    link.symlink_to(inputs["conv"], target_is_directory=True)
    before = _hashes(*inputs.values())
    out = inputs["ckpt"] / ".." / inputs["conv"].name  # the input itself, spelled another way
    result = CliRunner().invoke(main, ["report", str(link), "--out", str(out), "--force"])
    assert result.exit_code == 2 and "is the input" in result.output, result.output
    assert _hashes(*inputs.values()) == before
