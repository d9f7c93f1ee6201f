"""transformers.js (@huggingface/transformers) in headless Chromium, as a web app runs it:
web/transformers-web.html served from 127.0.0.1 with transformers.js' browser build and the
onnxruntime-web WebAssembly it bundles from web/node_modules, `env.allowRemoteModels = false`, the
`convert --to transformers-js` folders served beside them. Its text-classification,
feature-extraction and fill-mask pipelines, fp32 and q8, on two kinds of checkpoint: albert-edge's
builtin small ALBERT (and its classifier) and a small ALBERT that transformers itself wrote
(tests/web/checkpoints.py). fp32 answers as PyTorch, q8 as albert-edge's Session on the same
int8 file (tests/web/pipelines.py); nothing is fetched from anywhere but the test's server."""

from __future__ import annotations

import json

import pytest

from albert_edge.converters.targets import TARGETS

from .checkpoints import (TASK_HEADS, builtin_converted, evaluation_texts, hf_checkpoints,  # noqa: F401  (fixtures)
                          hf_converted, task_texts)
from .pipelines import figures
from .runtimes import chromium, chromium_missing, package_missing, run_page, serve

MISSING = (("convert has no transformers-js target (converters/targets.py)" if "transformers-js" not in TARGETS
            else None) or chromium_missing() or package_missing("@huggingface/transformers"))
pytestmark = pytest.mark.skipif(bool(MISSING), reason=MISSING or "")
DTYPES = ("fp32", "q8")


def test_transformers_js_pipelines_in_chromium(tmp_path, builtin_converted, hf_converted, evaluation_texts,
                                               record_property):
    models = {"builtin": builtin_converted, "transformers": hf_converted}
    served_files = {}
    jobs = []
    texts = {}
    for kind, converted in models.items():
        for task in TASK_HEADS:
            c = converted[task]
            root = f"{kind}-{TASK_HEADS[task]}/{c.folder.name}"
            served_files.update({f"{root}/{p.relative_to(c.folder).as_posix()}": p
                                 for p in c.folder.rglob("*") if p.is_file()})
            texts[kind, task] = task_texts(task, c, evaluation_texts)
            jobs += [{"name": f"{kind} {task} {dtype}", "folder": f"/files/{root}/", "task": task, "dtype": dtype,
                      "texts": texts[kind, task]} for dtype in DTYPES]
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"jobs": jobs}))
    with serve({**served_files, "request.json": request}) as (base, served), chromium(tmp_path / "profile") as driver:
        result = run_page(driver, f"{base}/transformers-web.html?request=/files/request.json")
        assert driver.find_element("id", "status").text == f"done: {len(jobs)} pipelines ran"
        shot = tmp_path / "transformers-web.png"
        assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 5_000
    # Nothing but this server: every address the page fetched, and the WebAssembly of the
    # onnxruntime-web that transformers.js bundles, from web/node_modules (not its CDN default).
    assert result["origins"] == [base], result["origins"]
    wasm_dir = "/node_modules/@huggingface/transformers/node_modules/onnxruntime-web/dist/"
    assert result["wasm"] and all(f"{wasm_dir}{w}" in served for w in result["wasm"]), (result["wasm"], served)
    # Each folder's files were read from the server: both model files, the tokenizer, the config.
    for kind in models:
        for head in TASK_HEADS.values():
            for name in ("config.json", "tokenizer.json", "onnx/model.onnx", "onnx/model_quantized.onnx"):
                assert f"/files/{kind}-{head}/transformers-js/{name}" in served, (kind, head, name)
    answers = result["jobs"]
    measured = {"runtime": f"transformers.js {result['version']} (onnxruntime-web {result['ortWeb']}, "
                           f"{', '.join(result['wasm'])}) in Chromium", "screenshot": str(shot)}
    for kind, converted in models.items():
        for task in TASK_HEADS:
            measured[f"{kind} {task}"] = figures(task, converted[task], texts[kind, task],
                                                 answers[f"{kind} {task} fp32"], answers[f"{kind} {task} q8"])
    record_property("figures", measured)
    print(json.dumps(measured, indent=1))
