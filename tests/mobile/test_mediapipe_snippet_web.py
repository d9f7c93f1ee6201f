"""The MediaPipe Tasks for Web block that `albert-edge report` prints runs as printed: for the
`convert --to mediapipe` folders of a classifier and an encoder, each block of report.json's
snippets runs unchanged in a page in headless Chromium served from 127.0.0.1, beside the file it
names and the WebAssembly folder it loads ("wasm", a copy of the npm package's wasm/), with
@mediapipe/tasks-text resolved by the import map its own comment gives. The app's own part, the
text, is the block's placeholder; only that is replaced. Its answer matches albert-edge's own
MediaPipe task (MediaPipe's Python API, the same C++) on the same file.

It lives with the MediaPipe tests because only their environment (.ci/mobile.sh) can build the
files; web/node_modules comes from `npm ci` in web/ (.ci/web.sh). Elsewhere it skips, saying
which is missing."""

from __future__ import annotations

import json

import numpy as np
import pytest

from albert_edge.report import write_report
from albert_edge.report.snippets import JS_TEXT
from albert_edge.runtime.mediapipe_tasks import MediaPipeTask

from ..web.runtimes import NODE_MODULES, chromium, chromium_missing, package_missing, run_page, serve
from ..web.snippet_page import import_map, module, page

MISSING = chromium_missing() or package_missing("@mediapipe/tasks-text")
pytestmark = pytest.mark.skipif(bool(MISSING), reason=MISSING or "")

TEXT = "The match ended in a draw after the home side scored twice in the last ten minutes."
WASM = NODE_MODULES / "@mediapipe" / "tasks-text" / "wasm"
# What each task's block declares that the page reads, and how the page reads it.
READS = {"TextClassifier": (("result", "best"), "{ categories: m.result.classifications[0].categories.map("
                            "(c) => ({ index: c.index, name: c.categoryName, score: c.score })), "
                            "best: m.best.categoryName }"),
         "TextEmbedder": (("embedding",), "{ embedding: Array.from(m.embedding) }")}


def test_the_mediapipe_snippets_run_as_printed_and_answer_as_the_mediapipe_task(tmp_path, classifier_file,
                                                                                embedder_file, record_property):
    figures = {}
    with chromium(tmp_path / "profile") as driver:
        for made in (classifier_file, embedder_file):
            folder = made.path.parent
            report = tmp_path / f"report-{folder.name}"
            write_report([folder], report, charts=False)
            groups = json.loads((report / "report.json").read_text(encoding="utf-8"))["snippets"]
            # (the fixture's folder may hold other files that earlier tests made beside it)
            (f,) = [f for g in groups if g["key"] == "mediapipe" for f in g["files"] if f["name"] == made.path.name]
            code, task = f["code"]["js"], f["task"]
            assert f["name"] == made.path.name and code.count(JS_TEXT) == 1, code
            assert "https://" not in code and 'forTextTasks("wasm")' in code, code
            app = code.replace(JS_TEXT, json.dumps(TEXT))  # the app's own part, and only it
            names, read = READS[task]
            work = tmp_path / task
            work.mkdir()
            (work / "snippet.mjs").write_text(module(app, names), encoding="utf-8")
            (work / "page.html").write_text(page(import_map(code), read), encoding="utf-8")
            # the app's folder: the page, its module, the file, and the wasm folder copied from the package
            served_files = {"page.html": work / "page.html", "snippet.mjs": work / "snippet.mjs",
                            made.path.name: made.path, **{f"wasm/{w.name}": w for w in WASM.iterdir()}}
            with serve(served_files) as (base, served):
                result = run_page(driver, f"{base}/files/page.html")
            assert f"/files/{made.path.name}" in served
            assert any(p.startswith("/files/wasm/") and p.endswith(".wasm") for p in served), served
            want = MediaPipeTask(made.path, task).answer(TEXT).astype(np.float64)
            if task == "TextClassifier":
                got = np.zeros(len(result["categories"]))
                for c in result["categories"]:
                    got[c["index"]] = c["score"]
                by_index = {c["index"]: c["name"] for c in result["categories"]}
                assert result["best"] == by_index[int(want.argmax())], (result, want)
            else:
                got = np.asarray(result["embedding"], dtype=np.float64)
            assert got.shape == want.shape, (task, got.shape, want.shape)
            figures[task] = {"file": made.path.name, "values": int(got.size),
                             "max_abs_diff vs MediaPipe python": float(np.abs(got - want).max())}
    record_property("figures", figures)
    print(json.dumps(figures, indent=1))
    for task, fig in figures.items():
        assert fig["max_abs_diff vs MediaPipe python"] <= 1e-4, (task, fig)
