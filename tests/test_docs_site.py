"""The documentation site (mkdocs.yml, docs/) builds with warnings as errors, its references are
complete, and a broken link or reference target fails the build. README.md stays short."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest

ROOT = Path(__file__).resolve().parents[1]

pytest.importorskip("mkdocs", reason="the documentation tools are the [docs] extra: pip install '.[docs]'")
pytest.importorskip("mkdocstrings")
pytest.importorskip("mkdocs_click")
yaml = pytest.importorskip("yaml")

if not (ROOT / "mkdocs.yml").is_file():
    pytest.skip("mkdocs.yml and docs/ are in the repository, not in the installed package", allow_module_level=True)


def _build(config: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          capture_output=True, text=True, timeout=600, env=env, cwd=config.parent)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    # from a checkout as it is cloned: the hook's package copy is not there before the first build
    shutil.rmtree(ROOT / "build" / "docs-package", ignore_errors=True)
    result = _build(ROOT / "mkdocs.yml", out)
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def _text(html: Path) -> str:
    return re.sub(r"<[^>]+>", " ", html.read_text(encoding="utf-8"))


def _commands(group: click.Group, path: str = "albert-edge"):
    for name, command in sorted(group.commands.items()):
        yield f"{path} {name}", command
        if isinstance(command, click.Group):
            yield from _commands(command, f"{path} {name}")


def test_the_cli_reference_lists_every_command_and_option(site):
    from albert_edge.cli import main

    page = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    missing = []
    for path, command in _commands(main):
        if path not in page:
            missing.append(path)
        for param in command.params:
            for opt in getattr(param, "opts", ()):
                if opt.startswith("-") and opt not in page:
                    missing.append(f"{path} {opt}")
    assert not missing, f"the CLI reference lacks: {missing}"


def test_the_api_reference_documents_every_public_name(site):
    from albert_edge import api

    page = _text(site / "reference" / "api" / "index.html")
    missing = [name for name in api.__all__ if not re.search(rf"\b{re.escape(name)}\b", page)]
    assert not missing


def test_the_landing_page_is_the_readme(site):
    page = _text(site / "index.html")
    assert "Quickstart: from a checkpoint to a phone file" in page
    links = re.findall(r'(?:href|src)="([^"]+)"', (site / "index.html").read_text(encoding="utf-8"))
    assert "guides/tflite/" in links and "report-overview.png" in links
    assert not [link for link in links if link.startswith("docs/")]


def test_a_link_to_a_readme_shown_as_a_page_leads_to_that_page(site):
    """docs/ links to demo_app/README.md, which GitHub shows; on the site it is the demo app's page."""
    for page in ("demo", "commands"):
        links = re.findall(r'href="([^"]+)"', (site / page / "index.html").read_text(encoding="utf-8"))
        assert "../demo-app/" in links and not [link for link in links if "demo_app/README" in link], page


def test_the_result_tables_are_rendered_while_building(site):
    page = (site / "guides" / "accelerators" / "index.html").read_text(encoding="utf-8")
    assert "benchmarks/results/gpu_static-albert-base.json" in page


def _copy_of_the_docs(tmp_path: Path) -> Path:
    """mkdocs.yml and docs/ in ``tmp_path``, with the hooks and the package copy where they were."""
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    config["hooks"] = [str(ROOT / h) for h in config["hooks"]]
    handler = config["plugins"][1]["mkdocstrings"]["handlers"]["python"]
    handler["paths"] = [str(ROOT / p) for p in handler["paths"]]
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return tmp_path / "mkdocs.yml"


@pytest.mark.parametrize("damage, words", [
    ("[a page that is not there](nowhere.md)", "nowhere.md"),
    ("[an anchor that is not there](#no-such-heading)", "no-such-heading"),
    ("::: albert_edge.api.NoSuchName", "NoSuchName"),
])
def test_a_broken_link_or_reference_fails_the_build(tmp_path, damage, words):
    config = _copy_of_the_docs(tmp_path)
    page = tmp_path / "docs" / "errors.md"
    page.write_text(page.read_text(encoding="utf-8") + f"\n{damage}\n", encoding="utf-8")
    result = _build(config, tmp_path / "site")
    assert result.returncode != 0
    assert words in result.stderr


def test_the_copy_builds_undamaged(tmp_path):
    """The damaged builds above fail for their damage alone. (Never build with -q: it hides the
    warnings --strict counts, and a broken link passes.)"""
    result = _build(_copy_of_the_docs(tmp_path), tmp_path / "site")
    assert result.returncode == 0, result.stderr[-3000:]


def test_the_readme_is_short_and_keeps_its_two_set_up_commands():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200
    commands = [lines[i + 1] for i, line in enumerate(lines) if re.match(r"# [12]\. install and run", line)]
    install = "python3 -m venv .venv && . .venv/bin/activate && pip install '.[dev]' -c constraints.txt"
    assert commands == [f"{install} && albert-edge pipeline", f"{install} && pytest -q"]


def test_the_guides_app_code_is_the_reports(site):
    """A guide's Android snippet is rendered from albert_edge.report.snippets while the site is
    built, so it cannot drift from what `albert-edge report` prints."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import docs_hooks
    finally:
        sys.path.remove(str(ROOT / "tools"))
    import html

    for page, framework in (("mediapipe", "mediapipe"), ("tflite", "litert")):
        # the highlighter wraps each token in a span: drop the tags without adding spaces
        built = (site / "guides" / page / "index.html").read_text(encoding="utf-8")
        shown = html.unescape(re.sub(r"<[^>]+>", "", built))
        code = docs_hooks.snippet(framework, "kotlin").split("\n", 1)[1].rsplit("\n", 1)[0]
        for line in code.splitlines():
            assert " ".join(line.split()) in " ".join(shown.split()), line
