"""The wheel ships every package and data file of the checkout, and says which version it is."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest

import albert_edge

ROOT = Path(__file__).parents[1]
# Folder in the checkout -> where the wheel installs it (setup.py's FOLDERS).
INSTALLED_AS = {"albert_edge": "albert_edge", "converters": "albert_edge/converters",
                "quantize": "albert_edge/quantize", "demo_app": "albert_edge/demo"}
DATA = ["albert_edge/py.typed", "albert_edge/demo/static/index.html", "albert_edge/demo/install.sh",
        "albert_edge/demo/emulate_pi.sh", "albert_edge/demo/albert-edge-demo.service", "albert_edge/demo/README.md"]


def _tracked() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the files the wheel must hold are those git tracks")
    return subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """A wheel built from the tracked files alone (a build/ folder left in the checkout cannot add to it)."""
    src = tmp_path_factory.mktemp("src")
    for name in _tracked():
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(src),
                    "-w", str(out)], check=True, capture_output=True)
    (built,) = out.glob("albert_edge-*.whl")
    return zipfile.ZipFile(built)


def test_the_wheel_holds_every_module_of_the_checkout(wheel):
    expected = {f"{INSTALLED_AS[name.split('/')[0]]}/{name.split('/', 1)[1]}"
                for name in _tracked() if name.endswith(".py") and name.split("/")[0] in INSTALLED_AS}
    shipped = {name for name in wheel.namelist() if name.endswith(".py")}
    assert expected - shipped == set(), "modules of the checkout missing from the wheel"
    assert shipped - expected == set(), "modules in the wheel that the checkout does not have"
    assert any(name.startswith("albert_edge/pipeline/") for name in shipped)


def test_the_wheel_holds_the_demo_files_and_type_marker(wheel):
    assert set(DATA) <= set(wheel.namelist())


def test_the_wheel_holds_the_reports_app_code_templates(wheel):
    """The report reads its Kotlin, Swift and JavaScript templates from files beside its modules."""
    templates = {name for name in _tracked() if name.startswith("albert_edge/report/templates/")}
    assert {name.rsplit(".", 1)[1] for name in templates} == {"kt", "swift", "js"}
    assert templates - set(wheel.namelist()) == set(), "templates of the checkout missing from the wheel"


def test_the_wheel_is_the_version_the_package_says(wheel):
    assert f"albert_edge-{albert_edge.__version__}.dist-info/METADATA" in wheel.namelist()
    metadata = wheel.read(f"albert_edge-{albert_edge.__version__}.dist-info/METADATA").decode()
    assert f"Version: {albert_edge.__version__}" in metadata.splitlines()


def test_version_option_prints_the_installed_version():
    result = subprocess.run([sys.executable, "-m", "albert_edge", "--version"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith(version("albert-edge")) and version("albert-edge") == albert_edge.__version__
