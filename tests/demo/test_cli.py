"""`albert-edge demo` as a person uses it: CliRunner, one real subprocess, and the device-side
rule (the demo imports with torch and tensorflow blocked)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from albert_edge.cli import main

from .conftest import DISAGREEING, free_port


def run(*args: str, input: str | None = None):
    return CliRunner().invoke(main, list(args), input=input)


def test_every_option_has_help():
    group = main.commands["demo"]
    assert set(group.commands) == {"classify", "fill-mask", "serve", "bundle"}
    for command in group.commands.values():
        for param in command.params:
            if isinstance(param, __import__("click").Option):
                assert param.help, f"demo {command.name} {param.opts[0]} has no help"


def test_classify_table_and_json(tiny_bundle):
    result = run("demo", "classify", str(tiny_bundle), "Round the decimal number.", "--threads", "1")
    assert result.exit_code == 0, result.output
    labels = json.loads((tiny_bundle / "labels.json").read_text())
    # the adaptive file by default, saying its passes (tests/demo/test_adaptive.py checks the count)
    assert all(label in result.output for label in labels) and " of 2 passes, onnx-adaptive, " in result.output
    result = run("demo", "classify", str(tiny_bundle), "Round it.", "--json", "--model", "tflite-fp32")
    data = json.loads(result.stdout)
    assert data["model"] == "tflite-fp32" and data["label"] in labels


def test_fill_mask_json(tiny_bundle):
    result = run("demo", "fill-mask", str(tiny_bundle), "the ___ loop", "--top-k", "2", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert len(data["masks"]) == 1 and len(data["masks"][0]["predictions"]) == 2


def test_interactive_prompt_answers_each_line_and_reports_bad_ones(tiny_bundle):
    result = run("demo", "fill-mask", str(tiny_bundle), "--json", input="a [MASK] b\nno blank\nc ___\n\n")
    assert result.exit_code == 0, result.output
    answers = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    assert len(answers) == 2 and all(len(a["masks"]) == 1 for a in answers)
    assert "write [MASK] or ___" in result.output
    # Ctrl-D ends the prompt as well as an empty line does.
    result = run("demo", "classify", str(tiny_bundle), input="one sentence\n")
    assert result.exit_code == 0 and result.output.count(" ms, ") == 1


@pytest.mark.parametrize("args, message", [
    (["classify", "{missing}", "x"], "not a bundle directory"),
    (["classify", "{bundle}", "x", "--model", "onnx-int4"], "unknown model"),
    (["fill-mask", "{bundle}", "no blank"], "write [MASK]"),
    (["classify", "{bundle}", ""], "text is empty"),
    (["bundle", "--out", "{bundle}"], "already exists"),
    (["bundle", "--out", "{tmp}/new", "--preset", "huge"], "unknown bundle preset"),
])
def test_bad_input_is_one_line_and_exit_2(tiny_bundle, tmp_path, args, message):
    args = [a.format(bundle=tiny_bundle, missing=tmp_path / "nope", tmp=tmp_path) for a in args]
    result = run("demo", *args)
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "new").exists()


def test_real_subprocess(tiny_bundle):
    proc = subprocess.run([sys.executable, "-m", "albert_edge", "demo", "classify", str(tiny_bundle),
                           "Create an element tree.", "--json", "--threads", "1"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["label"] in json.loads((tiny_bundle / "labels.json").read_text())


@pytest.mark.parametrize("name", DISAGREEING)
@pytest.mark.parametrize("command", ["classify", "fill-mask"])
def test_a_bundle_whose_parts_disagree_is_one_line_and_exit_2(disagreeing, name, command):
    result = run("demo", command, str(disagreeing(name)), "the [MASK] loop", "--threads", "1")
    assert result.exit_code == 2, result.output
    assert DISAGREEING[name][1] in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("name", ["labels-short", "folders-swapped", "tokenizer-too-big", "seq-len-above-model"])
def test_serve_refuses_a_bundle_whose_parts_disagree_before_listening(disagreeing, name):
    """A real process: one line, exit 2, and no address announced."""
    proc = subprocess.run([sys.executable, "-m", "albert_edge", "demo", "serve", str(disagreeing(name)),
                           "--port", str(free_port()), "--threads", "1"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ")
    assert DISAGREEING[name][1] in proc.stderr and "http://" not in proc.stderr and not proc.stdout


@pytest.mark.parametrize("command, text", [("classify", "caf\udce9 au lait"), ("fill-mask", "caf\udce9 [MASK]")])
def test_text_that_is_not_utf8_is_refused_saying_where(tiny_bundle, command, text):
    """On Linux a command-line argument that is not UTF-8 reaches Python as lone surrogates
    (surrogateescape): refused as `tokenizer encode` refuses it, naming the byte and its offset."""
    result = run("demo", command, str(tiny_bundle), text)
    assert result.exit_code == 2, result.output
    assert result.output.strip() == "Error: TEXT is not UTF-8 text (byte 0xe9 at offset 3): give it in UTF-8"


def test_text_that_is_not_utf8_is_refused_in_a_real_process(tiny_bundle):
    """The raw bytes, as an argument and as lines on standard input."""
    cmd = [sys.executable, "-m", "albert_edge", "demo", "classify", str(tiny_bundle), "--threads", "1", "--json"]
    env = {**__import__("os").environ, "LC_ALL": "C.UTF-8"}
    proc = subprocess.run([*cmd, b"the caf\xe9 decimal"], capture_output=True, timeout=120, env=env)
    assert proc.returncode == 2 and not proc.stdout
    assert proc.stderr.decode().strip() == ("Error: TEXT is not UTF-8 text (byte 0xe9 at offset 7): "
                                            "give it in UTF-8")
    # At the prompt the bad line is refused and the next one is answered, as for any line it cannot answer.
    proc = subprocess.run(cmd, input=b"caf\xc3 x\nthe decimal module\n", capture_output=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "line 1 is not UTF-8 text (byte 0xc3 at offset 3): give it in UTF-8" in proc.stderr.decode()
    answers = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    assert len(answers) == 1 and answers[0]["tokens"] > 2


def test_device_side_runs_with_torch_and_tensorflow_blocked(run_blocked, tiny_bundle):
    proc = run_blocked(f"""
        import json
        from starlette.testclient import TestClient
        from albert_edge.demo import server, engine, loadtest
        from albert_edge.cli import main
        with TestClient(server.create_app({str(tiny_bundle)!r})) as c:
            for key in ("onnx-int8", "tflite-int8", "onnx-fp32", "tflite-fp32"):
                assert c.post("/api/model", json={{"model": key}}).status_code == 200
                assert c.post("/api/classify", json={{"text": "a sentence"}}).status_code == 200
                assert c.post("/api/fill-mask", json={{"text": "a [MASK]"}}).status_code == 200
            assert c.get("/api/status").status_code == 200
        print(json.dumps(attempts))
        print(sorted(m for m in __import__("sys").modules if m.split(".")[0] in ("torch", "tensorflow")))
    """)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[-1] == "[]"  # neither torch nor tensorflow is loaded
    assert json.loads(lines[-2]) == []  # nor was either even tried


def test_labels_and_text_in_brackets_are_printed_as_they_are(tiny_bundle, tmp_path):
    """Labels and the filled-in text are a user's words, not rich markup: "[tflite]" stays, and
    "[/x]" (a closing tag rich has no opening for) is no internal error."""
    import shutil

    bundle = tmp_path / "bundle"
    shutil.copytree(tiny_bundle, bundle)
    labels = ["[/x]", "[tflite]", "[bold]", "xml"]
    (bundle / "labels.json").write_text(json.dumps(labels))
    result = run("demo", "classify", str(bundle), "Create an element tree.", "--threads", "1")
    assert result.exit_code == 0, result.output
    assert all(label in result.output for label in labels)
    result = run("demo", "fill-mask", str(bundle), "a [MASK] loop", "--threads", "1")
    assert result.exit_code == 0 and "[MASK]" in result.output  # the table's column header
