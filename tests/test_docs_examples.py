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
# README.md, docs/, and the READMEs the site shows as pages (tools/docs_hooks.py GENERATED)
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "demo_app" / "README.md",
         ROOT / "benchmarks" / "README.md"]

if not (ROOT / "docs").is_dir():
    pytest.skip("docs/ is in the repository, not in the installed package", allow_module_level=True)


SHELL = "bash|sh|shell|console|"  # an example with no language is a shell one


def _fences(text: str, languages: str) -> list[str]:
    """The code of each fenced example in ``languages`` (each fence read whole, whatever its language)."""
    return [code for language, code in re.findall(r"```([\w-]*)\n(.*?)```", text, re.S)
            if language in languages.split("|")]


def command_lines(text: str) -> list[str]:
    """Each `albert-edge ...` command in the shell examples of ``text``, comments and the commands
    chained around it (&&, |, ;, &) left out."""
    found = []
    for block in _fences(text, SHELL):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s\d?>&\d", "", line.split(" #", 1)[0])  # 2>&1 is no separator
            for part in re.split(r"&&|\|\||;|\||&", line):
                part = re.sub(r"^\S*/bin/(?=albert-edge )", "", part.strip().removeprefix("$ "))  # a venv's own
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


# -- each command parsed as the CLI parses it, and the files a block names ----------------------

def _words(line: str) -> list[str]:
    """The arguments of ``line``, its output redirection (`> new.json`) left out."""
    words = shlex.split(line)[1:]
    return words[:words.index(">")] if ">" in words else words


def refusal(line: str) -> str | None:
    """What the CLI's own parser refuses in ``line`` (an option, a value, an argument too many),
    or None. The command is resolved and its context made as when it runs, without running it."""
    words = _words(line)
    try:
        ctx = main.make_context("albert-edge", list(words))
        command: click.Command = main
        while isinstance(command, click.Group):
            name, command, rest = command.resolve_command(ctx, ctx._protected_args + ctx.args)
            ctx = command.make_context(name, rest, parent=ctx)
    except click.ClickException as exc:
        return exc.format_message()
    return None


def writes(line: str) -> tuple[set[str], set[str]]:
    """(folders, files) that ``line`` writes, as its options say: a `convert --out` folder holds
    each target's file, the manifest, the tokenizer and the labels; a `tokenizer train --out`
    folder its spiece.model; any other `--out` is a folder or the file named."""
    from albert_edge.converters.targets import target

    words = _words(line)
    options = dict(zip(words, words[1:]))
    out = options.get("--out", "").rstrip("/")
    if not out:
        return set(), set()
    if words[0] == "convert":
        names = [target(t).file_name for t, w in zip(words[1:], words) if w == "--to"]
        return {out}, {f"{out}/{n}" for n in (*names, "manifest.json", "spiece.model", "labels.json")}
    if words[:2] == ["tokenizer", "train"]:
        return {out}, {f"{out}/spiece.model"}
    return ({out}, set()) if "." not in Path(out).name else (set(), {out})


def _paths(text: str) -> list[str]:
    return re.findall(r"(?<![\w/.-])((?:[\w.-]+/)+[\w.-]+\.[a-z]+)\b", text)


def unmade(commands: list[str], prose: str = "") -> list[str]:
    """Files that ``commands`` (one example, in order) and the ``prose`` after it name in a
    folder an earlier command wrote, but that no command wrote there."""
    folders: set[str] = set()
    files: set[str] = set()
    missing = []
    for line in commands:
        made = writes(line)
        missing += [f"{line}: {p}" for p in _paths(line)
                    if str(Path(p).parent) in folders and p not in files | made[1]]
        folders |= made[0]
        files |= made[1]
    return missing + [f"the text after it: {p}" for p in _paths(prose)
                      if str(Path(p).parent) in folders and p not in files]


def _examples(page: Path) -> list[tuple[list[str], str]]:
    """Each shell example of ``page`` with the text up to the next example."""
    parts = re.split(r"```([\w-]*)\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)
    return [(command_lines(f"```bash\n{block}```"), after) for language, block, after
            in zip(parts[1::3], parts[2::3], parts[3::3]) if language in SHELL.split("|")]


def test_every_command_in_the_docs_is_one_the_cli_parses():
    """Each command as the CLI's own parser reads it: a refused value, a placeholder such as
    `[--json]` or an argument too many fails here, not in a reader's terminal."""
    refused = [f"{page.relative_to(ROOT)}: {line}: {refusal(line)}" for page in PAGES
               for line in command_lines(page.read_text(encoding="utf-8")) if refusal(line)]
    assert not refused, "\n".join(refused)


def test_every_file_a_command_names_is_one_an_earlier_command_wrote():
    """`inspect edge/model.int8.tflite` after a `quantize ... --out edge/model.int8-dynamic.tflite`
    names a file that is not there."""
    missing = [f"{page.relative_to(ROOT)}: {m}" for page in PAGES for commands, prose in _examples(page)
               for m in unmade(commands, prose)]
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize("line, words", [
    ("albert-edge profile m.onnx --accelerator tpu", "'tpu'"),
    ("albert-edge inspect m.tflite --accelerator gpu [--json]", "[--json]"),
    ("albert-edge tokenizer train builtin --out tok --vocab-size many", "many"),
])
def test_a_refused_value_is_found(line, words):
    assert words in (refusal(line) or "")


def test_a_file_no_earlier_command_wrote_is_found():
    commands = ["albert-edge convert ckpt --to tflite --out edge",
                "albert-edge quantize edge/model.tflite --scheme int8-dynamic --out edge/model.int8-dynamic.tflite",
                "albert-edge inspect edge/model.int8.tflite", "albert-edge inspect edge/model.int8-dynamic.tflite"]
    assert unmade(commands, "then `edge/model.onnx` and `other/x.onnx`") == [
        "albert-edge inspect edge/model.int8.tflite: edge/model.int8.tflite", "the text after it: edge/model.onnx"]


# -- install lines ----------------------------------------------------------------------------------

CPU_TORCH = "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"


def install_lines(text: str) -> list[str]:
    """Each `pip install ...` in ``text``, in shell examples and in the prose's code, in order."""
    code = re.sub(r"```\w*\n(.*?)```", lambda m: m.group(1).replace("\\\n", " "), text, flags=re.S)
    code = "\n".join(re.findall(r"```\w*\n.*?```|`[^`\n]+`|^.*$", code, re.M))
    return [m.strip(" `") for m in re.findall(r"pip install [^`\n#&;|]*", code)]


def _extras(line: str) -> set[str]:
    return {e for group in re.findall(r"\[([\w,-]+)\]", line) for e in group.split(",")}


def _brings_torch(extras: set[str]) -> bool:
    import tomllib

    table = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    return any(req.startswith("torch") or _brings_torch(_extras(req))
               for extra in extras for req in table.get(extra, ()))


def install_problem(line: str, cpu_torch_before: bool) -> str | None:
    """What is wrong with one `pip install` line: albert-edge from the package index (it is not
    published), an extra that does not exist, or torch brought in without the constraints and the
    CPU build installed first."""
    import tomllib

    extras = _extras(line)
    known = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    if re.search(r"install (?:-\S+ )*'?albert-edge\b", line):
        return "albert-edge is not on the package index: install '.[extras]' from a clone, or the wheel"
    if extras - set(known) and ("'." in line or ".whl" in line):
        return f"no extra {sorted(extras - set(known))}"
    if _brings_torch(extras) and "-c constraints" not in line:
        return "torch without -c constraints.txt"
    if _brings_torch(extras) and not cpu_torch_before:
        return f"torch without the CPU build installed first ({CPU_TORCH})"
    return None


def test_every_install_line_installs_what_exists_keeping_the_cpu_torch():
    bad = []
    for page in PAGES:
        lines = install_lines(page.read_text(encoding="utf-8"))
        for n, line in enumerate(lines):
            cpu = any(CPU_TORCH in earlier for earlier in lines[:n + 1])
            if install_problem(line, cpu):
                bad.append(f"{page.relative_to(ROOT)}: {line}: {install_problem(line, cpu)}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("line, cpu, words", [
    ("pip install 'albert-edge[convert]'", True, "not on the package index"),
    ("pip install albert-edge tflite-runtime==2.14.0", True, "not on the package index"),
    ("pip install '.[convert]'", True, "constraints"),
    ("pip install '.[mobile,train,tflite]' -c constraints.txt", False, "CPU build"),
    ("pip install '.[tflit]' -c constraints.txt", True, "no extra"),
])
def test_a_wrong_install_line_is_found(line, cpu, words):
    assert words in (install_problem(line, cpu) or "")


def test_install_lines_are_read_from_examples_and_prose():
    text = "```bash\npip install '.[dev]' -c constraints.txt && pytest\n```\nOn a Pi, `pip install '.[tflite]'` runs it."
    assert install_lines(text) == ["pip install '.[dev]' -c constraints.txt", "pip install '.[tflite]'"]


# -- links ----------------------------------------------------------------------------------------

def broken_links(text: str, folder: Path) -> list[str]:
    """The relative links of Markdown ``text`` (kept in ``folder``) that name no file: code is
    left out, and so are web addresses and anchors of the page itself."""
    prose = re.sub(r"```.*?```|`[^`\n]+`", "", text, flags=re.S)
    targets = re.findall(r"\]\(([^)\s]+)\)", prose)
    return [t for t in targets if not re.match(r"[a-z]+:|#", t) and not (folder / t.split("#")[0]).exists()]


def test_every_relative_link_names_a_file():
    """Each link works in the Markdown as GitHub shows it; the site's build turns links to the
    READMEs it shows as pages into links to those pages (tools/docs_hooks.py)."""
    broken = [f"{page.relative_to(ROOT)}: {t}" for page in PAGES
              for t in broken_links(page.read_text(encoding="utf-8"), page.parent)]
    assert not broken, "\n".join(broken)


def test_a_link_to_no_file_is_found(tmp_path):
    (tmp_path / "here.md").write_text("")
    text = "[a](here.md#top) [b](gone.md) ![c](gone.png) [d](https://x.org) [e](#top) `[f](gone2.md)`"
    assert broken_links(text, tmp_path) == ["gone.md", "gone.png"]
