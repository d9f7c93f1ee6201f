"""The JavaScript that `albert-edge report` prints runs as printed: each block of report.json's
snippets for a real conversion folder (a classifier's .onnx, .ort, int8 .onnx and .tflite, with its
spiece.model and labels.json beside them) runs unchanged in a page in headless Chromium served from
127.0.0.1, beside the files it names, with its package resolved by the import map its own comment
gives. The one part an app writes itself, the token ids, is the snippet's placeholder comment; only
that is replaced, by albert-edge's ids of a real sentence. Its scores and label match albert-edge's
own Session on the same file.

The onnxruntime-web snippets fetch their files by URLs relative to the page (fetch("spiece.model")),
which Node's fetch refuses: they are browser code, so none runs in Node. The transformers.js block of
a `convert --to transformers-js` folder does: it names its device as one marked choice ("webgpu",
with the dtype WebGPU runs, tests/web/test_webgpu.py), which the test sets to Node's "cpu", and
runs in Node from the conversion folder unchanged but for that and the text; its label and score
match albert-edge's Session on the folder's fp32 file. The report prints no JavaScript for
a .tflite (no browser runtime run here takes it as printed code would: TF.js's TFLite alpha and
LiteRT.js were tried) and says why where the block would be. Kotlin and Swift cannot run here
either; every block names the versions it was written against."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from albert_edge.report.render import SNIPPETS_INTRO
from albert_edge.report.snippets import PLATFORMS

from .runtimes import WEB, chromium, chromium_missing, node_missing, package_missing, run_page, serve
from .snippet_page import import_map, module, page

MISSING = chromium_missing() or package_missing("onnxruntime-web")
SEQ = 16
TEXT = "The quick brown fox jumps over the lazy dog, and the report's lines classify it."
# The app's own part of a snippet that takes token ids: one comment, where the ids go.
TOKENS = re.compile(r"/\*[^*]*token ids[^*]*\*/")
FP32 = 1e-4
ONNX_FILES = ("model.onnx", "model.ort", "model.int8-dynamic.onnx")
STATIC = "static/model.onnx"
SHORT = "A short one."  # fewer tokens than the fixed length: the static file's snippet pads it
NODE_MISSING = node_missing() or package_missing("@huggingface/transformers")
# The transformers.js block's one marked choice of device, and its dtype.
DEVICE = re.compile(r'^const device = "([a-z]+)";', re.M)
DTYPE = re.compile(r'^const dtype = "([a-z0-9]+)";', re.M)


@pytest.fixture(scope="module")
def folder(tmp_path_factory, spiece_model):
    """A tiny classifier (3 labels, its own spiece.model) converted to .onnx, .ort and .tflite,
    and its .onnx quantized to int8, in one folder with its manifest, tokenizer and labels; and
    beside it, in static/, its fixed-length .onnx (convert --static: every input [1, 16])."""
    import torch

    from albert_edge import checkpoints
    from albert_edge.config import AlbertConfig
    from albert_edge.converters.export import convert
    from albert_edge.model import build_model
    from albert_edge.quantize import QuantizeConfig, quantize

    torch.manual_seed(0)
    config = AlbertConfig.preset("tiny").replace(vocab_size=400, num_labels=3, label_names=("neg", "neutral", "pos"))
    root = tmp_path_factory.mktemp("snippets")
    model = build_model(config, "classification")
    with torch.no_grad():  # weights away from their init, so the logits are not all near 0
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    checkpoint = checkpoints.save(model, root / "ckpt", spiece=spiece_model)
    out = root / "edge"
    convert(checkpoint, out, targets=("onnx", "ort", "tflite"), seq_len=SEQ)
    quantize(out / "model.onnx", QuantizeConfig("int8-dynamic", eval_samples=8, num_threads=1))
    convert(checkpoint, out / "static", targets=("onnx",), seq_len=SEQ, static=True)
    return out


@pytest.fixture(scope="module")
def report(tmp_path_factory, folder) -> dict:
    """`albert-edge report` of the folder and static/: report.json, and report.md's text under "md"."""
    from albert_edge.report import write_report

    out = tmp_path_factory.mktemp("report") / "report"
    write_report([folder, folder / "static"], out, charts=False)
    data = json.loads((out / "report.json").read_text(encoding="utf-8"))
    data["md"] = (out / "report.md").read_text(encoding="utf-8")
    return data


def _js(report: dict) -> dict[str, tuple[str, str]]:
    """Each file's JavaScript block, with its framework's key, by its path under the folder."""
    return {_path(f["label"]): (g["key"], f["code"]["js"]) for g in report["snippets"] for f in g["files"]
            if f["code"]["js"] is not None}


def _path(label: str) -> str:
    """A file's path under the folder from its report label ("static/model.onnx" or "edge/model.onnx",
    where two folders hold a file of that name; the name alone where one does)."""
    return label if label.startswith("static/") else label.rsplit("/", 1)[-1]


def test_the_report_prints_one_javascript_block_per_file_it_runs_and_says_what_is_not_run(report):
    blocks = _js(report)
    assert set(blocks) == {*ONNX_FILES, STATIC}
    md_blocks = re.findall(r"```javascript\n(.*?)\n```", report["md"], re.S)
    assert md_blocks and all(b in [code for _, code in blocks.values()] for b in md_blocks)
    # what the tests cannot run, the report says so where the snippets are shown
    assert "cannot be run by albert-edge's tests" in SNIPPETS_INTRO and SNIPPETS_INTRO in report["md"]
    # no JavaScript for the .tflite: no browser runtime the tests run takes it, and the report says why
    (litert,) = [g for g in report["snippets"] if g["key"] == "litert"]
    assert [f["code"]["js"] for f in litert["files"]] == [None] and "onnxruntime-web" in litert["missing"]["js"]
    assert f"Web (JavaScript): none. {litert['missing']['js']}" in report["md"]
    for code in (c for _, c in blocks.values()):
        assert "cdn." not in code and "https://" not in code, code


@pytest.mark.skipif(bool(MISSING), reason=MISSING or "")
def test_the_onnxruntime_web_snippets_run_as_printed_and_answer_as_the_session(report, folder, tmp_path,
                                                                               record_property):
    from albert_edge.runtime import Session
    from albert_edge.tokenizer import AlbertTokenizer

    tokenizer = AlbertTokenizer.from_dir(folder)
    labels = json.loads((folder / "labels.json").read_text(encoding="utf-8"))
    blocks = _js(report)
    figures = {}
    with chromium(tmp_path / "profile") as driver:
        for name in (*ONNX_FILES, STATIC):
            # a real sentence, whole, of its own length (the dynamic files take any); a short one padded
            tokens = tokenizer.encode(TEXT if name != STATIC else SHORT)
            n = len(tokens) if name != STATIC else SEQ
            assert (8 < len(tokens) <= 64) if name != STATIC else (len(tokens) < SEQ), tokens
            key, code = blocks[name]
            assert key == "onnxruntime" and len(TOKENS.findall(code)) == 1, code
            app = TOKENS.sub(json.dumps(tokens), code)  # the app's own part, and only it
            assert app.replace(json.dumps(tokens), "") == TOKENS.sub("", code)
            work = tmp_path / name.replace("/", "-")
            work.mkdir()
            (work / "snippet.mjs").write_text(module(app, ("scores", "label")), encoding="utf-8")
            (work / "page.html").write_text(page(import_map(code), "{ scores: m.scores, label: m.label }"),
                                            encoding="utf-8")
            served_files = {"page.html": work / "page.html", "snippet.mjs": work / "snippet.mjs",
                            "model.onnx" if name == STATIC else name: folder / name,
                            "spiece.model": folder / "spiece.model", "labels.json": folder / "labels.json"}
            with serve(served_files) as (base, served):
                result = run_page(driver, f"{base}/files/page.html")
            # the page fetched the files the snippet names, beside it, and the package's own wasm
            assert {f"/files/{name.split('/')[-1]}", "/files/spiece.model", "/files/labels.json"} <= set(served)
            assert any(p.startswith("/node_modules/onnxruntime-web/dist/") and p.endswith(".wasm") for p in served)
            # the Session is fed what the snippet makes of the tokens: [1, n], padded with 0, mask 0 there
            ids = np.zeros((1, n), np.int64)
            ids[0, :len(tokens)] = tokens
            feeds = {"input_ids": ids, "attention_mask": (np.arange(n) < len(tokens)).astype(np.int64)[None],
                     "token_type_ids": np.zeros((1, n), np.int64)}
            want = Session(folder / name, num_threads=1).run(feeds)["logits"][0].astype(np.float64)
            got = np.asarray(result["scores"], dtype=np.float64)
            assert got.shape == want.shape, (name, got.shape, want.shape)
            figures[name] = {"tokens": len(tokens), "n": n, "Session logits max_abs": float(np.abs(want).max()),
                             "logits max_abs_diff vs Session": float(np.abs(got - want).max()),
                             "label": result["label"], "Session label": labels[int(want.argmax())]}
    record_property("figures", figures)
    print(json.dumps(figures, indent=1))
    for name, f in figures.items():
        assert f["label"] == f["Session label"], (name, f)
        assert f["logits max_abs_diff vs Session"] <= FP32, (name, f)
        # and small beside the logits themselves, which are small in a tiny model
        assert f["logits max_abs_diff vs Session"] <= 1e-3 * f["Session logits max_abs"], (name, f)


def test_every_kotlin_and_swift_snippet_names_the_versions_it_was_written_against():
    from albert_edge.report.accelerator_snippets import ACCELERATED
    from albert_edge.report.snippets import FRAMEWORKS

    version = re.compile(r"\d+\.\d+(\.\d+)?")
    for framework in (*FRAMEWORKS.values(), *ACCELERATED.values()):
        for platform in PLATFORMS[:2]:  # kotlin, swift
            if framework.code.get(platform) is None:
                continue
            packages = framework.packages[platform].replace("{litert}", "2.3.0")
            assert version.search(packages), (framework.key, platform, packages)


@pytest.fixture(scope="module")
def transformers_js(tmp_path_factory, folder) -> tuple:
    """The folder's checkpoint converted to transformers-js, and report.json of that conversion
    (report.md's text under "md")."""
    from albert_edge.converters.export import convert
    from albert_edge.report import write_report

    root = tmp_path_factory.mktemp("tjs-report")
    convert(folder.parent / "ckpt", root / "edge", targets=("transformers-js",), seq_len=SEQ)
    write_report([root / "edge"], root / "report", charts=False)
    data = json.loads((root / "report" / "report.json").read_text(encoding="utf-8"))
    data["md"] = (root / "report" / "report.md").read_text(encoding="utf-8")
    return root / "edge", data


def test_the_transformers_js_folder_gets_its_own_block_naming_webgpu_and_its_dtype(transformers_js):
    _, report = transformers_js
    groups = {g["key"]: g for g in report["snippets"]}
    # the file itself in onnxruntime-web, the folder in transformers.js
    assert [f["label"] for f in groups["onnxruntime"]["files"]] == ["model.transformers-js.onnx"]
    (folder,) = groups["transformers-js"]["files"]
    code = folder["code"]["js"]
    assert folder["label"] == "transformers-js/" and f"```javascript\n{code}\n```" in report["md"]
    assert DEVICE.findall(code) == ["webgpu"] and DTYPE.findall(code) == ["fp32"], code
    assert 'pipeline("text-classification", "transformers-js", { device, dtype })' in code
    # what else the folder holds, and where it runs: fp16 with shader-f16, the int8 file on WebAssembly
    assert '"fp16" (onnx/model_fp16.onnx) needs an adapter with shader-f16' in code
    assert '"q8" (onnx/model_quantized.onnx, the int8 file) runs on WebAssembly only: device "wasm", dtype "q8"' in code
    # the folder holds the tokenizer and labels: no load of spiece.model or labels.json
    assert "spiece.model" not in code and "labels.json" not in code
    assert folder["code"]["kotlin"] is None and "ONNX Runtime" in groups["transformers-js"]["missing"]["kotlin"]


@pytest.mark.skipif(bool(NODE_MISSING), reason=NODE_MISSING or "")
def test_the_transformers_js_snippet_runs_in_node_as_printed_and_answers_as_the_session(transformers_js, tmp_path):
    import subprocess

    from albert_edge.runtime import Session
    from albert_edge.tokenizer import AlbertTokenizer

    out, report = transformers_js
    (code,) = [f["code"]["js"] for g in report["snippets"] if g["key"] == "transformers-js" for f in g["files"]]
    # the app's choices: Node's device, and the text; nothing else changes
    app = DEVICE.sub('const device = "cpu";', code).replace("/* the text, a string */", json.dumps(TEXT))
    changed = [a for a, b in zip(app.splitlines(), code.splitlines(), strict=True) if a != b]
    assert len(changed) == 2 and changed[0].startswith('const device = "cpu";') and json.dumps(TEXT) in changed[1]
    (tmp_path / "node_modules").symlink_to(WEB / "node_modules")
    (tmp_path / "snippet.mjs").write_text(
        app + "\nconst ids = Array.from(classify.tokenizer(" + json.dumps(TEXT) + ").input_ids.data, Number);"
        "\nprocess.stdout.write(JSON.stringify({ best, ids }));\n", encoding="utf-8")
    done = subprocess.run(["node", str(tmp_path / "snippet.mjs")], cwd=out, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-4000:]
    got = json.loads(done.stdout)
    tokens = AlbertTokenizer.from_dir(out).encode(TEXT)
    assert got["ids"] == tokens  # transformers.js' tokenizer of the folder gives albert-edge's ids
    feeds = {"input_ids": np.array([tokens], np.int64), "attention_mask": np.ones((1, len(tokens)), np.int64),
             "token_type_ids": np.zeros((1, len(tokens)), np.int64)}
    logits = Session(out / "transformers-js" / "onnx" / "model.onnx", num_threads=1).run(feeds)["logits"][0]
    probabilities = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    labels = json.loads((out / "labels.json").read_text(encoding="utf-8"))
    assert got["best"]["label"] == labels[int(probabilities.argmax())], (got, probabilities)
    assert abs(got["best"]["score"] - float(probabilities.max())) <= FP32, (got, probabilities)
