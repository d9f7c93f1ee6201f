"""The CLI as a person uses it: help, params, info, and one clear line + exit 2 on bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner

from albert_edge.cli import main
from albert_edge.config import AlbertConfig
from albert_edge.model import build_model, num_params
from albert_edge import checkpoints
from albert_edge.errors import install_line

TINY = AlbertConfig.preset("tiny")


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_help_lists_commands_with_one_line_each():
    result = run("--help")
    assert result.exit_code == 0
    commands = ("params", "info", "convert", "inspect", "quantize", "tokenizer", "pretrain", "finetune")
    assert set(commands) <= set(main.commands)
    for command in main.commands:
        line = next(l for l in result.output.splitlines() if l.startswith(f"  {command} "))
        assert len(line.split(None, 1)[1]) > 10  # a one-line help beside each


def test_params_json_albert_base():
    result = run("params", "albert-base-v2", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    with torch.device("meta"):
        unique = num_params(build_model(AlbertConfig.preset("albert-base-v2")))
    assert abs(data["total"] - unique) < 200_000
    assert data["bert_total"] > 9 * data["total"]
    assert data["paper"]["figure_m"] == 12 and data["bert_paper"]["model"] == "bert-base"


def test_params_table_names_the_parts():
    result = run("params", "albert-base-v2")
    assert result.exit_code == 0
    for text in ("token embeddings", "E -> H projection", "group 0", "pooler", "saved by cross-layer sharing",
                 "11,683,584", "bert-base"):
        assert text in result.output


@pytest.fixture()
def hf_dir(tmp_path):
    torch.manual_seed(0)
    checkpoints.save(build_model(TINY, "pretraining"), tmp_path / "ckpt")
    return tmp_path / "ckpt"


def test_info_on_checkpoint(hf_dir):
    result = run("info", str(hf_dir), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["heads"] == ["base", "mlm", "pretraining"]
    assert data["parameters"] == num_params(build_model(TINY, "pretraining"))
    assert data["file_bytes"] == (hf_dir / "model.safetensors").stat().st_size
    assert "pretraining" in run("info", str(hf_dir)).output


def _bad_inputs(tmp_path, hf_dir):
    empty = tmp_path / "empty"
    empty.mkdir()
    bad_heads = tmp_path / "bad_heads"
    bad_heads.mkdir()
    (bad_heads / "config.json").write_text(json.dumps(dict(TINY.to_hf_dict(), hidden_size=18)))
    truncated = tmp_path / "truncated"
    truncated.mkdir()
    (truncated / "config.json").write_text((hf_dir / "config.json").read_text())
    (truncated / "model.safetensors").write_bytes((hf_dir / "model.safetensors").read_bytes()[:300])
    mismatch = tmp_path / "mismatch"
    mismatch.mkdir()
    (mismatch / "config.json").write_text(json.dumps(dict(TINY.to_hf_dict(), intermediate_size=48)))
    (mismatch / "model.safetensors").write_bytes((hf_dir / "model.safetensors").read_bytes())
    return {
        "no config.json": (empty, "no config.json"),
        "heads": (bad_heads, "hidden_size (18) is not a multiple of num_attention_heads (4)"),
        "truncated": (truncated, "truncated or corrupt"),
        "mismatch": (mismatch, "has shape [32, 16], but the config needs [48, 16]"),
    }


def test_bad_input_is_one_line_and_exit_2(tmp_path, hf_dir):
    for name, (path, message) in _bad_inputs(tmp_path, hf_dir).items():
        result = run("info", str(path))
        assert result.exit_code == 2, (name, result.output)
        assert message in result.output, (name, result.output)
        assert "Traceback" not in result.output
    assert run("params", "hidden_size=7").exit_code == 2


def test_subprocess_entry_point(tmp_path, hf_dir):
    ok = subprocess.run([sys.executable, "-m", "albert_edge", "params", "tiny", "--json"],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["total"] == num_params(build_model(TINY))
    path, message = _bad_inputs(tmp_path, hf_dir)["truncated"]
    bad = subprocess.run([sys.executable, "-m", "albert_edge", "info", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    lines = [line for line in bad.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], bad.stderr


def test_text_in_brackets_is_printed_as_it_is(tmp_path):
    """The CLI prints text, not rich markup: `inspect` where only tflite-runtime is installed (as on
    a Pi) names the extra to install, "pip install '.[tflite]' ...", which rich used to take
    for a style and drop. A real process with ai_edge_litert made unimportable."""
    pytest.importorskip("tensorflow")
    from albert_edge.converters import tflite

    torch.manual_seed(0)
    path = tflite.export(build_model(TINY, "base"), tmp_path / "model.tflite", seq_len=16)
    blocker = ("import importlib.abc, sys\n"
               "class Blocked(importlib.abc.MetaPathFinder):\n"
               "    def find_spec(self, name, path=None, target=None):\n"
               "        if name.split('.')[0] == 'ai_edge_litert':\n"
               "            raise ImportError(name + ' is not installed on this device')\n"
               "sys.meta_path.insert(0, Blocked())\n"
               "from albert_edge.cli import main\n"
               f"main(['inspect', {str(path)!r}])\n")
    proc = subprocess.run([sys.executable, "-c", blocker], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    # the note may wrap at the console's width: the words are what is checked
    assert f"reading .tflite files needs ai-edge-litert ({install_line('tflite')})" in " ".join(proc.stdout.split())
