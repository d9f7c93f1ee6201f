"""The app code templates of the report's snippets, one file each in ``templates/<platform>/``:
each framework's code, named by its key (``litert.kt``, ``onnxruntime.swift``, ...), the token
arrays of a file of fixed or dynamic length (``tokens-fixed``, ``tokens-dynamic``) and the lines
for the files beside it (``load-tokenizer``, ``load-labels``, ``best-label``). They are Python
``str.format`` templates whose fields the snippets fill with a file's facts (``{file}``, ``{n}``,
``{first_output}``; a literal brace is doubled). Lines two frameworks share are one file, put into
each framework's template where it has the part's field (``{run}``: ONNX Runtime's session run,
the same with or without an execution provider). Read with importlib.resources, so they are found
in a wheel as in a checkout. Device side: standard library only."""

from __future__ import annotations

from functools import cache
from importlib import resources

__all__ = ["EXTENSIONS", "template", "templates"]

EXTENSIONS = {"kotlin": "kt", "swift": "swift", "js": "js"}  # a platform's templates end in its language's suffix


@cache
def template(platform: str, name: str, **parts: str) -> str:
    """The text of ``templates/<platform>/<name>.<suffix>``, without its final newline, each
    ``{part}`` field it has for a part named in ``parts`` replaced by the text of that template."""
    path = resources.files(__package__).joinpath(f"templates/{platform}/{name}.{EXTENSIONS[platform]}")
    text = path.read_text(encoding="utf-8").removesuffix("\n")
    for field, part in parts.items():
        if f"{{{field}}}" in text:
            text = text.replace(f"{{{field}}}", template(platform, part))
    return text


def templates(key: str, *platforms: str, **parts: str) -> dict[str, str | None]:
    """The templates of framework ``key`` on each platform, with ``parts`` (:func:`template`);
    None on the platforms not named (it has no runtime there)."""
    return {p: template(p, key, **parts) if p in platforms else None for p in EXTENSIONS}
