"""MkDocs hooks (mkdocs.yml): what the site shows is made from the repository while it is built.

- ``index.md`` is README.md, its links made relative to docs/ (one text, two places to read it);
  the demo's and the benchmarks' READMEs are pages too (GENERATED), and a page's link to one of
  those READMEs (which works on GitHub) becomes a link to its page;
- each ``<!-- results:NAME -->`` block is rendered from benchmarks/results by
  benchmarks/render_results.py (no figure on a page is typed by hand);
- ``<!-- snippet:FRAMEWORK:PLATFORM -->`` becomes the app code ``albert-edge report`` prints for an
  example file of that framework (albert_edge.report.snippets), so a guide's snippet is the report's;
- ``<!-- api-reference -->`` becomes one mkdocstrings entry per name of ``albert_edge.api.__all__``,
  where that name is defined.

mkdocstrings reads the sources as installed: converters/, quantize/ and demo_app/ are installed
inside albert_edge (setup.py's FOLDERS), so the hook lays that package out in build/docs-package
(copies of their Python files: griffe follows links back to the folders) for it to read, the same
from a clone, an editable install or CI.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "build" / "docs-package"  # mkdocs.yml's mkdocstrings paths


def installed_layout() -> dict[str, str]:
    """setup.py's FOLDERS: installed package name -> folder in the repository."""
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["FOLDERS"]:
            return ast.literal_eval(node.value)
    raise RuntimeError("setup.py names no FOLDERS")


def lay_out_package(into: Path = PACKAGE) -> Path:
    """``into``/albert_edge as the wheel lays it out: the Python files of each folder of setup.py's
    FOLDERS, copied to where the wheel installs them."""
    shutil.rmtree(into, ignore_errors=True)
    for name, folder in installed_layout().items():
        target = into.joinpath(*name.split("."))
        for source in (ROOT / folder).rglob("*.py"):
            out = target / source.relative_to(ROOT / folder)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, out)
    return into


# Pages of the site that are READMEs kept beside their code: page -> file.
GENERATED = {"demo-app.md": "demo_app/README.md", "benchmarks/scripts.md": "benchmarks/README.md"}


def on_files(files, config, **_):
    from mkdocs.structure.files import File

    for page, source in GENERATED.items():
        files.append(File.generated(config, page, content=(ROOT / source).read_text(encoding="utf-8")))
    return files


_STARTED_IN: list[str] = []


def on_startup(**_) -> None:
    """The package copy exists before mkdocstrings reads its ``paths`` (its on_config comes
    before this hook's): from a fresh checkout, the first build would otherwise search a folder
    that is not there yet."""
    lay_out_package()


def on_config(config, **_):
    """Lay the package out, and build from inside that folder: griffe takes a module name that is
    also a folder of the working directory (the checkout's albert_edge/, which lacks converters/ and
    quantize/) for that folder, and Python imports from the working directory first."""
    lay_out_package()
    _STARTED_IN.append(os.getcwd())
    os.chdir(PACKAGE)
    return config


def _back(**_) -> None:
    if _STARTED_IN:
        os.chdir(_STARTED_IN.pop())


on_post_build = on_build_error = _back


def readme_links(markdown: str, page: str) -> str:
    """``markdown`` of docs/``page`` with each link to a README the site shows as a page of its own
    (GENERATED) made a link to that page: the Markdown links to the README beside its code, which
    is what GitHub shows, and the site to its page."""
    here = ROOT / "docs" / Path(page).parent
    pages = {(ROOT / source).resolve(): ROOT / "docs" / name for name, source in GENERATED.items()}

    def to_page(m: re.Match) -> str:
        target = pages.get((here / m.group(1)).resolve())
        return m.group(0) if target is None else f"]({Path(os.path.relpath(target, here)).as_posix()}{m.group(2) or ''})"

    return re.sub(r"\]\(([^)\s#:]+\.md)(#[^)\s]*)?\)", to_page, markdown)


def _renderer():
    spec = importlib.util.spec_from_file_location("render_results", ROOT / "benchmarks" / "render_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def readme_as_index() -> str:
    """README.md with its ``docs/`` links made relative to the docs folder."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.sub(r"\]\(docs/", "](", text)


def api_reference() -> str:
    """One ``::: dotted.path`` entry per public name, grouped by side, each where it is defined."""
    from albert_edge import api

    def where(name: str) -> str:
        obj = getattr(api, name)
        if hasattr(obj, "__qualname__") and hasattr(obj, "__module__"):
            return f"{obj.__module__}.{obj.__qualname__}"
        return f"albert_edge.config.{name}" if name == "PRESETS" else f"albert_edge.api.{name}"

    parts = []
    for title, names in (("The device side", api.DEVICE), ("The build side", api.BUILD)):
        parts.append(f"## {title}\n")
        for name in names:
            path = where(name)
            if path.rsplit(".", 1)[1] != name:  # a public name for an object named otherwise
                parts.append(f"`albert_edge.api.{name}` is `{path}`:\n")
            parts.append(f"::: {path}\n    options:\n      heading_level: 3\n")
    return "\n".join(parts)


def example_files():
    """The example file of each framework the guides show code for: a classifier of three topics,
    as convert writes it (int32 inputs in TFLite, int64 in ONNX; tokenizer and labels beside it)."""
    from albert_edge.report.snippets import AppFiles, FileFacts

    def inputs(dtype: str) -> tuple[tuple[str, str], ...]:
        return tuple((name, dtype) for name in ("input_ids", "attention_mask", "token_type_ids"))

    beside = AppFiles("spiece.model", "labels.json", 3)
    return {
        "litert": FileFacts("model.int8-dynamic.tflite", "tflite", inputs("int32"), (("logits", (1, 3)),), None,
                            None, None, loop=True, app=beside),
        "mediapipe": FileFacts("model.mediapipe.tflite", "tflite", inputs("int32"), (("probability", (1, 3)),), 64,
                               None, "TextClassifier", labels=("world", "sports", "science")),
        "onnxruntime": FileFacts("model.int8-dynamic.onnx", "onnx", inputs("int64"), (("logits", (1, 3)),), None,
                                 None, None, app=beside),
    }


def snippet(framework: str, platform: str) -> str:
    """The fenced code ``albert-edge report`` prints for ``framework``'s example file on ``platform``."""
    from albert_edge.report.snippets import FRAMEWORKS, LANGUAGES, file_snippet

    facts = example_files()[framework]
    code = file_snippet(FRAMEWORKS[framework], facts, facts.name)["code"][platform]
    if code is None:
        raise ValueError(f"albert-edge report prints no {platform} code for {framework}")
    return f"```{LANGUAGES[platform]}\n{code}\n```"


def on_page_markdown(markdown: str, page, **_) -> str:
    if page.file.src_uri == "index.md":
        markdown = readme_as_index()
    markdown = readme_links(markdown, page.file.src_uri)
    if "<!-- results:" in markdown:
        markdown = _renderer().render(markdown)
    markdown = re.sub(r"<!-- snippet:([\w-]+):(\w+) -->", lambda m: snippet(m.group(1), m.group(2)), markdown)
    if "<!-- api-reference -->" in markdown:
        markdown = markdown.replace("<!-- api-reference -->", api_reference())
    return markdown
