"""The app code templates of the report's snippets, one file each in ``templates/<platform>/``
(``litert.kt``, ``onnxruntime.swift``, ...): Python ``str.format`` templates whose fields the
snippets fill with a file's facts (``{file}``, ``{n}``, ``{first_output}``; a literal brace is
doubled). Read with importlib.resources, so they are found in a wheel as in a checkout. Device
side: standard library only."""

from __future__ import annotations

from functools import cache
from importlib import resources

__all__ = ["EXTENSIONS", "template", "templates"]

EXTENSIONS = {"kotlin": "kt", "swift": "swift", "js": "js"}  # a platform's templates end in its language's suffix


@cache
def template(platform: str, name: str) -> str:
    """The text of ``templates/<platform>/<name>.<suffix>``, without its final newline."""
    path = resources.files(__package__).joinpath(f"templates/{platform}/{name}.{EXTENSIONS[platform]}")
    return path.read_text(encoding="utf-8").removesuffix("\n")


def templates(key: str, *platforms: str) -> dict[str, str | None]:
    """The templates of framework ``key`` on each platform, None on those not named (it has no
    runtime there)."""
    return {p: template(p, key) if p in platforms else None for p in EXTENSIONS}
