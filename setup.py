"""Package discovery. Three top-level folders are installed under albert_edge; every package
below each folder is found here, so a new one is shipped without being listed. Everything else
about the build is in pyproject.toml."""

from pathlib import Path

from setuptools import find_namespace_packages, setup

ROOT = Path(__file__).parent
# Installed name -> folder in this repository.
FOLDERS = {
    "albert_edge": "albert_edge",
    "albert_edge.converters": "converters",
    "albert_edge.quantize": "quantize",
    "albert_edge.demo": "demo_app",
}


def packages(name: str, folder: str) -> list[str]:
    """``name`` and every folder below ``folder`` that holds Python files or package data (a
    namespace package, such as the demo's static/), named under ``name``."""
    found = find_namespace_packages(str(ROOT / folder), exclude=["*__pycache__*", "*.egg-info"])
    return [name, *(f"{name}.{sub}" for sub in found if f"{name}.{sub}" not in FOLDERS)]


setup(package_dir=FOLDERS, packages=sorted({p for name, folder in FOLDERS.items() for p in packages(name, folder)}))
