"""The examples in README.md and docs/ stay true to the code: every `albert-edge` command line in a
shell example names a command and options the CLI has, and every Python example compiles. (Each Python example also runs: the API tour's in
test_docs_api_example.py, the others in test_docs_examples_run.py.)"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from albert_edge.cli import main

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

if not (ROOT / "docs").is_dir():
    pytest.skip("docs/ is in the repository, not in the installed package", allow_module_level=True)


def _fences(text: str, languages: str) -> list[str]:
    return re.findall(rf"```(?:{languages})\n(.*?)```", text, re.S)


def command_lines(text: str) -> list[str]:
    """Each `albert-edge ...` command in the shell examples of ``text``, comments and the commands
    chained around it (&&, |, ;) left out."""
    found = []
    for block in _fences(text, "bash|sh|shell|console"):
        for line in block.replace("\\\n", " ").splitlines():
            for part in re.split(r"&&|\|\||;|\|", line.split(" #", 1)[0]):
                part = part.strip().removeprefix("$ ")
                if part.startswith("albert-edge "):
                    found.append(part)
    return found


def problem(line: str) -> str | None:
    """What in ``line`` the CLI does not have, or None."""
    words = shlex.split(line)[1:]
    command: click.Command = main
    while isinstance(command, click.Group) and words and not words[0].startswith("-"):
        if words[0] not in command.commands:
            return f"no command {words[0]!r}"
        command, words = command.commands[words[0]], words[1:]
    options = {"--help", "-h"} | {opt for param in command.params
                                  for opt in (*getattr(param, "opts", ()), *getattr(param, "secondary_opts", ()))}
    for word in words:
        if word.startswith("-") and not re.fullmatch(r"-\d.*", word) and word.split("=", 1)[0] not in options:
            return f"no option {word}"
    return None


def test_every_command_in_the_docs_is_one_the_cli_has():
    lines = [(page.relative_to(ROOT), line) for page in PAGES
             for line in command_lines(page.read_text(encoding="utf-8"))]
    assert len(lines) >= 30, "the shell examples were not found: is the fence reader broken?"
    stale = [f"{page}: {line}: {problem(line)}" for page, line in lines if problem(line)]
    assert not stale, "\n".join(stale)


@pytest.mark.parametrize("line, words", [
    ("albert-edge convert run --to tflite --no-such-option 3", "no option --no-such-option"),
    ("albert-edge convrt run --to tflite", "no command 'convrt'"),
    ("albert-edge demo classifyy 'text'", "no command 'classifyy'"),
])
def test_a_stale_command_is_found(line, words):
    assert problem(line) == words


def test_commands_chained_and_commented_are_read_apart():
    text = "```bash\nalbert-edge info run && albert-edge inspect m.onnx --json  # read --nothing\n```\n"
    assert command_lines(text) == ["albert-edge info run", "albert-edge inspect m.onnx --json"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_python_example_compiles(page):
    for n, block in enumerate(_fences(page.read_text(encoding="utf-8"), "python|py")):
        compile(block, f"{page.name}, Python example {n + 1}", "exec")
