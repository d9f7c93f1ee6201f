"""A page that runs a JavaScript block of the report as an app's module: it maps the block's
package as the block's own comment says (its import map) and imports the block, unchanged but for
the app's own part the test fills in, with one export line after it. Its outcome goes to
window.albertEdge, which :func:`.runtimes.run_page` reads."""

from __future__ import annotations

import json
import re

IMPORT_MAP = re.compile(r'<script type="importmap">(.*?)</script>', re.S)


def import_map(code: str) -> dict:
    """The import map the block's comment gives (its comment lines joined)."""
    comments = " ".join(line.strip()[2:].strip() for line in code.splitlines() if line.strip().startswith("//"))
    found = IMPORT_MAP.search(comments)
    assert found, f"the snippet names no import map for its package:\n{code}"
    return json.loads(found.group(1))


def module(code: str, names: tuple[str, ...]) -> str:
    """The block as the app's module, exporting ``names`` (constants it declares) to the page."""
    return f"{code}\nexport {{ {', '.join(names)} }};\n"


def page(imports: dict, read: str) -> str:
    """The page: ``imports`` as its import map, then ./snippet.mjs imported; ``read`` is a JavaScript
    expression of the module ``m`` that gives the result the test reads."""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>report snippet</title>
<script type="importmap">{json.dumps(imports)}</script></head>
<body><script type="module">
import("./snippet.mjs").then(
  (m) => {{ window.albertEdge = {{ done: true, error: null, result: {read} }}; }},
  (e) => {{ window.albertEdge = {{ done: true, error: String((e && e.stack) || e), result: null }}; }});
</script></body></html>
"""
