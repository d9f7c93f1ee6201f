"""The layout keeps standing: the device side never reaches the build side, not even in an import
inside a function or through a module name in a string; no two modules import each other (directly
or around a longer circle), and no two packages do either (the build packages point one way:
converters may call quantize, quantize never imports converters).

Reads the installed package's source with ``ast`` (only packages are imported, to find their
folders), so it checks the wheel's modules when the suite runs against an installed wheel.
test_device_side.py checks the other half: the device side imports and runs with torch and
tensorflow blocked.
"""

from __future__ import annotations

import ast
import importlib.util
import pkgutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


# What a Raspberry Pi or a phone build runs: the modules and packages of the device side.
# The CLI and `info` (albert_edge.info) are fronts that span both sides: they import the build side
# only inside the commands that need it, and test_device_side.py runs them with torch blocked.
DEVICE = ("albert_edge.config", "albert_edge.params", "albert_edge.errors", "albert_edge.files",
          "albert_edge.tokenizer", "albert_edge.text", "albert_edge.hub", "albert_edge.device", "albert_edge.exits",
          "albert_edge.formats", "albert_edge.runtime", "albert_edge.profile", "albert_edge.report",
          "albert_edge.demo")
# The build side (and the libraries only it may use).
BUILD = ("albert_edge.converters", "albert_edge.quantize", "albert_edge.rewrite", "albert_edge.train",
         "albert_edge.model",
         "albert_edge.checkpoints", "albert_edge.pipeline", "torch", "tensorflow", "tf_keras", "transformers",
         "executorch", "safetensors")


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    line: int
    target: str  # the absolute name imported (a module, or the package a name comes from)


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


# Packages installed from folders of their own (setup.py): an editable install finds them apart.
INSTALLED_FROM_FOLDERS = ("albert_edge", "albert_edge.converters", "albert_edge.quantize", "albert_edge.demo")


def modules() -> dict[str, Path]:
    """Every module of the installed package, by name, with its source file."""
    found = {}
    for package in INSTALLED_FROM_FOLDERS:
        root = importlib.util.find_spec(package)
        found[package] = Path(root.origin)
        for info in pkgutil.walk_packages(root.submodule_search_locations, prefix=package + "."):
            spec = importlib.util.find_spec(info.name)
            if spec is not None and spec.origin and spec.origin.endswith(".py"):
                found[info.name] = Path(spec.origin)
    return found


def imports(name: str, source: str, is_package: bool, known: set[str]) -> Iterator[Import]:
    """Every import statement of a module, at any depth, resolved to absolute names."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(name, node.lineno, alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = name.split(".") if is_package else name.split(".")[:-1]
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield Import(name, node.lineno, sub if sub in known else base)


def build_side_reached(found: dict[str, Path]) -> list[str]:
    """Each import by a device-side module of something on the build side, as 'module:line -> target'."""
    known = set(found)
    bad = []
    for name, path in sorted(found.items()):
        if not _within(name, DEVICE):
            continue
        for imp in imports(name, path.read_text(encoding="utf-8"), path.name == "__init__.py", known):
            if _within(imp.target, BUILD):
                bad.append(f"{name}:{imp.line} -> {imp.target}")
    return bad


def circles(found: dict[str, Path]) -> list[list[str]]:
    """Groups of modules that import one another (strongly connected components of two or more)."""
    known = set(found)
    graph = {name: sorted({i.target for i in imports(name, path.read_text(encoding="utf-8"),
                                                      path.name == "__init__.py", known)
                           if i.target in known and i.target != name})
             for name, path in found.items()}
    return strongly_connected(graph)


def strongly_connected(graph: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components of two or more nodes of ``graph`` (node -> the nodes it points to)."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


# Calls that import the module their first argument names, and the engines table's entries (the
# module an engine is imported from): a string there is an import the walk above cannot see.
_IMPORTING_CALLS = ("import_module", "optional_import", "__import__", "find_spec", "Engine")
# The documented fallbacks that name a build-side library on the device side, each with its reason.
# Anything else found by string_imports() fails the test.
FALLBACKS = {
    ("albert_edge.formats.kinds", "tensorflow.lite"):
        "the workstation fallback interpreter for .tflite files, after ai-edge-litert and tflite-runtime",
    ("albert_edge.formats.kinds", "executorch.extension.pybindings._C"):
        "executorch's own bindings, the only .pte runtime before CPython 3.12; they take torch tensors",
    ("albert_edge.runtime.pte_engine", "torch"):
        "the same executorch bindings: their inputs are torch tensors, imported only when those bindings run",
    ("albert_edge.runtime.pte_engine", "executorch"):
        "the same executorch bindings: where their native library lies (found, not imported)",
}


def string_imports(found: dict[str, Path]) -> list[str]:
    """Each module name on the build side that a device-side module imports through a string
    (importlib, find_spec, optional_import, an engine's module), as 'module:line -> name', less the
    documented FALLBACKS."""
    bad = []
    for name, path in sorted(found.items()):
        if not _within(name, DEVICE):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)):
                continue
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            target = node.args[0].value
            if called in _IMPORTING_CALLS and _within(target, BUILD) and (name, target) not in FALLBACKS:
                bad.append(f"{name}:{node.lineno} -> {target}")
    return bad


def _package_of(module: str, found: dict[str, Path]) -> str:
    """The package a module belongs to: albert_edge.converters for albert_edge.converters.onnx; a
    module directly under albert_edge (albert_edge.model) stands for itself."""
    parts = module.split(".")
    if len(parts) > 2 and found.get(".".join(parts[:2]), Path()).name == "__init__.py":
        return ".".join(parts[:2])
    if len(parts) == 2 and found[module].name == "__init__.py":
        return module
    return module


def package_circles(found: dict[str, Path]) -> list[list[str]]:
    """Groups of packages that import one another, at any depth of any module: converters importing
    quantize while quantize imports converters is one, whichever modules the imports are in."""
    known = set(found)
    edges: dict[str, set[str]] = {}
    for name, path in found.items():
        mine = _package_of(name, found)
        for imp in imports(name, path.read_text(encoding="utf-8"), path.name == "__init__.py", known):
            if imp.target in known and _package_of(imp.target, found) != mine:
                edges.setdefault(mine, set()).add(_package_of(imp.target, found))
    return strongly_connected({p: sorted(edges.get(p, ())) for p in {_package_of(n, found) for n in found}})


def test_the_device_side_never_reaches_the_build_side():
    assert build_side_reached(modules()) == []


def test_no_module_imports_one_that_imports_it_back():
    # A package may import its own modules (re-exports) and they may read its constants, but the
    # circle closes only when the package imports the module at its top: listed as a circle too.
    assert circles(modules()) == []


def test_no_device_module_imports_the_build_side_by_name():
    assert string_imports(modules()) == []


def test_no_package_imports_one_that_imports_it_back():
    assert package_circles(modules()) == []


def test_the_walk_sees_the_whole_package():
    found = modules()
    for name in ("albert_edge.formats.weights", "albert_edge.runtime.compiled", "albert_edge.demo.server",
                 "albert_edge.converters.export", "albert_edge.quantize.tflite", "albert_edge.pipeline.bundle"):
        assert name in found
    assert all(path.is_file() for path in found.values())


@pytest.mark.parametrize("statement, where", [
    ("from albert_edge.converters.export import convert", "top"),
    ("from ..converters import export", "function"),
    ("import torch", "function"),
    ("from ..quantize.calibration import read_sentences", "function"),
])
def test_a_device_module_that_reaches_the_build_side_is_found(tmp_path, statement, where):
    """The check fails on the import a refactoring could slip in: at the top or inside a function."""
    found = modules()
    bad = tmp_path / "bad.py"
    body = statement if where == "top" else f"def later():\n    {statement}\n"
    bad.write_text(found["albert_edge.formats.graph"].read_text(encoding="utf-8") + "\n" + body + "\n")
    found["albert_edge.formats.graph"] = bad
    reached = build_side_reached(found)
    assert len(reached) == 1 and reached[0].startswith("albert_edge.formats.graph:")


def test_a_circle_is_found(tmp_path):
    found = modules()
    bad = tmp_path / "bad.py"
    bad.write_text(found["albert_edge.formats.graph"].read_text(encoding="utf-8")
                   + "\ndef later():\n    from .weights import read_file\n")
    found["albert_edge.formats.graph"] = bad
    assert ["albert_edge.formats.graph", "albert_edge.formats.weights"] in [
        [m for m in group if m in ("albert_edge.formats.graph", "albert_edge.formats.weights")]
        for group in circles(found)]


@pytest.mark.parametrize("statement", [
    'importlib.import_module("albert_edge.converters.onnx")',
    'optional_import("torch")',
    'importlib.util.find_spec("tensorflow")',
])
def test_a_string_import_of_the_build_side_is_found(tmp_path, statement):
    found = modules()
    bad = tmp_path / "bad.py"
    bad.write_text(found["albert_edge.formats.graph"].read_text(encoding="utf-8")
                   + f"\ndef later():\n    return {statement}\n")
    found["albert_edge.formats.graph"] = bad
    reached = string_imports(found)
    assert len(reached) == 1 and reached[0].startswith("albert_edge.formats.graph:")


def test_a_package_circle_is_found(tmp_path):
    """quantize importing converters inside a function, with converters importing quantize: the
    circle the build side had (quantize.onnx read converters.onnx_fuse) is found again."""
    found = modules()
    bad = tmp_path / "bad.py"
    bad.write_text(found["albert_edge.quantize.result"].read_text(encoding="utf-8")
                   + "\ndef later():\n    from albert_edge.converters.export import convert\n")
    found["albert_edge.quantize.result"] = bad
    assert ["albert_edge.converters", "albert_edge.quantize"] in [
        [p for p in group if p in ("albert_edge.converters", "albert_edge.quantize")]
        for group in package_circles(found)]


# ------------------------------------------------------------------ one way to write an output
# Writing an output under a temporary name and renaming it into place is albert_edge.files.staged's
# job (with atomic_write and staged_dir on top of it): these calls anywhere else hand-roll it.
# tempfile.TemporaryDirectory / NamedTemporaryFile in a `with` are scratch space, not outputs.
HAND_ROLLED_CALLS = ("tempfile.mkdtemp", "tempfile.mkstemp", "os.replace", "os.rename", "shutil.move",
                     "albert_edge.files.install")
# A method renaming a path: Path.rename(target) and Path.replace(target) take one argument (str and
# bytes .replace take two or more).
HAND_ROLLED_METHODS = ("rename", "replace")
# The modules that still put an output in place themselves, each with why.
HAND_ROLLED_ALLOWED = {
    "albert_edge.files": "the one staged writer",
}


def _imported_names(name: str, tree: ast.AST, is_package: bool) -> dict[str, str]:
    """Each name the module's imports bind (at any depth), with the absolute name it stands for."""
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]  # import os.path binds os
                bound[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".") if is_package else name.split(".")[:-1]
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{base}.{alias.name}"
    return bound


def _dotted(node: ast.AST, bound: dict[str, str]) -> str | None:
    """``os.replace`` for ``os.replace`` or ``_os.replace`` (import os as _os) or ``replace`` (from
    os import replace); None when the call is not on an imported name."""
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, bound)
        return f"{base}.{node.attr}" if base else None
    return None


def hand_rolled_writers(found: dict[str, Path]) -> list[str]:
    """Each call, outside the allowed modules, that puts a file in place by hand: 'module:line call'."""
    bad = []
    for name, path in sorted(found.items()):
        if name in HAND_ROLLED_ALLOWED:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        bound = _imported_names(name, tree, path.name == "__init__.py")
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            called = _dotted(node.func, bound)
            if called in HAND_ROLLED_CALLS:
                bad.append(f"{name}:{node.lineno} {called}")
            elif (called is None and isinstance(node.func, ast.Attribute) and node.func.attr in HAND_ROLLED_METHODS
                  and len(node.args) == 1 and not node.keywords):
                bad.append(f"{name}:{node.lineno} .{node.func.attr}()")
    return bad


def test_no_hand_rolled_output_writer():
    """Every output goes through albert_edge.files.staged (or atomic_write / staged_dir on it): a
    temporary name renamed into place by hand is how half-written files and leftovers come back."""
    found = modules()
    assert hand_rolled_writers(found) == []
    assert set(HAND_ROLLED_ALLOWED) <= set(found), "an allowed module that no longer exists: remove it from the list"


@pytest.mark.parametrize("statement, call", [
    ("import os\ndef later(tmp, out):\n    os.replace(tmp, out)\n", "os.replace"),
    ("def later(tmp, out):\n    import shutil as sh\n    sh.move(tmp, out)\n", "shutil.move"),
    ("from tempfile import mkdtemp\ndef later(out):\n    return mkdtemp(dir=out)\n", "tempfile.mkdtemp"),
    ("from ..files import install\ndef later(tmp, out):\n    install([(tmp, out)])\n", "albert_edge.files.install"),
    ("def later(tmp, out):\n    tmp.rename(out)\n", ".rename()"),
    ("from pathlib import Path\ndef later(tmp, out):\n    Path(tmp).replace(out)\n", ".replace()"),
])
def test_a_hand_rolled_writer_is_found(tmp_path, statement, call):
    """The check fails on a writer a refactoring could slip back in; str.replace is no such writer."""
    found = modules()
    bad = tmp_path / "bad.py"
    source = found["albert_edge.report.render"].read_text(encoding="utf-8")
    bad.write_text(source + "\n" + statement + "\ndef text(s):\n    return s.replace('a', 'b')\n")
    found["albert_edge.report.render"] = bad
    reached = hand_rolled_writers(found)
    assert len(reached) == 1 and reached[0].startswith("albert_edge.report.render:") and reached[0].endswith(f" {call}")


# -- functions a reader takes in at once -------------------------------------------------------------

LONG_FUNCTION = 60  # lines, signature to last line
MAX_LONG_FUNCTIONS = 3  # there were 7 before the format table, the staged writer and the templates


def long_functions(found: dict[str, Path]) -> list[str]:
    """Each function or method of more than LONG_FUNCTION lines, as 'module:line name (lines)'."""
    out = []
    for name, path in sorted(found.items()):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > LONG_FUNCTION:
                    out.append(f"{name}:{node.lineno} {node.name} ({lines})")
    return out


def test_few_functions_run_past_one_screen():
    assert len(long_functions(modules())) <= MAX_LONG_FUNCTIONS, long_functions(modules())


def test_a_long_function_is_found(tmp_path):
    found = modules()
    bad = tmp_path / "bad.py"
    bad.write_text("def long():\n" + "    x = 1\n" * LONG_FUNCTION + "    return x\n")
    assert long_functions({"albert_edge.bad": bad}) == [f"albert_edge.bad:1 long ({LONG_FUNCTION + 2})"]
    assert found  # the walk found the package
