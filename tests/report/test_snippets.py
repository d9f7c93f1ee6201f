"""The report's app snippets: the framework of each file, and code whose names, dtypes and shapes
are the file's own (read back through the runtime that loads it here)."""

from __future__ import annotations

import html
import json
import re

import numpy as np
import pytest

from albert_edge.report import write_report
from albert_edge.report.snippets import PLATFORMS, blocks, facts_of, framework_of, snippets
from albert_edge.runtime import Session


def _row(name: str, fmt: str, inputs, outputs, task: str | None = None) -> dict:
    """A report file row with only what the snippets read."""
    metadata = {"task": {"task": task}} if task else {}
    return {"name": name, "format": fmt, "inspect": {
        "inputs": [{"name": n, "dtype": d, "shape": s} for n, d, s in inputs],
        "outputs": [{"name": n, "dtype": "float32", "shape": s} for n, s in outputs], "metadata": metadata}}


IDS = ("input_ids", "attention_mask", "token_type_ids")


@pytest.fixture(scope="module")
def report(tmp_path_factory, conversion):
    return write_report([conversion], tmp_path_factory.mktemp("snippets") / "report", charts=False)


def _fed_names(code: str, platform: str) -> set[str]:
    """The input names a snippet feeds, read out of its code."""
    pattern = {"kotlin": r'"(\w+)" to ', "swift": r'"(\w+)": ', "js": r"^\s+(\w+): "}[platform]
    return set(re.findall(pattern, code, re.M)) & {*IDS, "other"}


def test_every_file_gets_its_framework_and_code_for_three_platforms(report):
    groups = {g["key"]: g for g in report.data["snippets"]}
    assert set(groups) == {"onnxruntime", "litert"}
    assert {f["name"] for f in groups["onnxruntime"]["files"]} == {"model.onnx", "model.int8-dynamic.onnx"}
    assert [f["name"] for f in groups["litert"]["files"]] == ["model.tflite"]
    for group in groups.values():
        assert group["tokenize"] and "sentencepiece" in group["tokenize"]
        for f in group["files"]:
            # a .tflite has no JavaScript: no browser runtime the tests run takes it (the report says so)
            printed = [p for p in PLATFORMS if not (group["key"] == "litert" and p == "js")]
            assert all(f["code"][p] and f["name"] in f["code"][p].replace('"model", ofType: "', "model.")
                       for p in printed)
    assert groups["litert"]["files"][0]["code"]["js"] is None
    assert "onnxruntime-web" in groups["litert"]["missing"]["js"]


def test_snippets_feed_the_files_own_input_names_and_dtypes(report, conversion):
    """The names and dtypes in the code are those the runtime reports for the file: a snippet
    that fed int32 to an int64 file, or a name the file lacks, fails here."""
    for group in report.data["snippets"]:
        for f in group["files"]:
            session = Session(conversion / f["name"])
            assert [i["name"] for i in f["inputs"]] == session.input_names
            printed = [p for p in PLATFORMS if f["code"][p] is not None]
            for platform in printed:
                assert _fed_names(f["code"][platform], platform) == set(session.input_names), (f["name"], platform)
            dtypes = {np.dtype(s.dtype).name for s in session.inputs}
            assert dtypes == {i["dtype"] for i in f["inputs"]}
            (dtype,) = dtypes
            spelled = {"int64": ("LongArray", "[Int64]", "BigInt64Array"),
                       "int32": ("IntArray", "[Int32]", '"int32"')}[dtype]
            other = {"int64": ("IntArray", "[Int32]", '"int32"'),
                     "int32": ("LongArray", "[Int64]", "BigInt64Array")}[dtype]
            for platform, word, wrong in zip(PLATFORMS, spelled, other):
                if platform in printed:
                    assert word in f["code"][platform] and wrong not in f["code"][platform], (f["name"], platform)
            for name in session.output_names:
                assert all(name in f["code"][p] for p in printed)


def test_files_with_the_same_facts_share_one_block(report):
    onnx = next(g for g in report.data["snippets"] if g["key"] == "onnxruntime")
    for platform in ("kotlin", "swift"):
        (only,) = blocks(onnx, platform)  # fp32 and int8 .onnx: the same lines but the name
        assert sorted(only[1]) == ["model.int8-dynamic.onnx", "model.onnx"]


def test_the_javascript_names_the_device_each_onnx_file_runs_on(report):
    """onnxruntime-web: the fp32 .onnx on WebGPU first (WebAssembly where the browser has none), the
    int8 one on WebAssembly only, as its MultiHeadAttention fails on onnxruntime-web's WebGPU
    provider (tests/web/test_webgpu.py)."""
    onnx = next(g for g in report.data["snippets"] if g["key"] == "onnxruntime")
    code = {f["name"]: f["code"]["js"] for f in onnx["files"]}
    assert 'executionProviders: ["webgpu", "wasm"]' in code["model.onnx"]
    assert 'executionProviders: ["wasm"]' in code["model.int8-dynamic.onnx"]
    assert "MultiHeadAttention" in code["model.int8-dynamic.onnx"]


def test_onnx_blocks_set_the_memory_option_albert_edge_sets_where_the_api_has_it(report):
    """Session opens .onnx files with the memory pattern off; an app gets the same where its API
    exposes the switch (Java/Kotlin, JS) and is told where it does not (onnxruntime-objc)."""
    onnx = next(g for g in report.data["snippets"] if g["key"] == "onnxruntime")
    code = onnx["files"][0]["code"]
    assert "options.setMemoryPatternOptimization(false)" in code["kotlin"]
    assert "env.createSession(modelBytes, options)" in code["kotlin"]
    assert "enableMemPattern: false," in code["js"] and "no switch for the memory pattern" in code["swift"]


def test_markdown_html_and_json_carry_the_section(report):
    md = (report.out_dir / "report.md").read_text()
    page = (report.out_dir / "report.html").read_text()
    saved = json.loads((report.out_dir / "report.json").read_text())
    assert saved["snippets"] == report.data["snippets"]
    assert "## Running the files in an app" in md and "```kotlin" in md and "```swift" in md and "```javascript" in md
    assert 'id="snippets"' in page and "<details>" in page and "<pre><code" in page
    kotlin = next(f["code"]["kotlin"] for g in report.data["snippets"] for f in g["files"] if g["key"] == "litert")
    assert "mapOf<String, Any>" in kotlin
    assert html.escape(kotlin) in page and "mapOf<String, Any>" not in page  # escaped, whole


def test_a_fixed_length_int32_tflite_file():
    row = _row("model.tflite", "tflite", [(n, "int32", (1, 32)) for n in IDS], [("logits", (1, 4))])
    (group,) = snippets([row])
    code = group["files"][0]["code"]
    assert "val n = 32" in code["kotlin"] and "let n = 32" in code["swift"] and code["js"] is None
    # padded to the fixed length, the mask 0 on the padding
    assert "val ids = tokens.copyOf(n)" in code["kotlin"] and "if (it < tokens.size) 1 else 0" in code["kotlin"]
    assert "count: n - tokens.count" in code["swift"]
    # the same file as .onnx: its JavaScript pads too
    onnx = _row("model.onnx", "onnx", [(n, "int64", (1, 32)) for n in IDS], [("logits", (1, 4))])
    js = snippets([onnx])[0]["files"][0]["code"]["js"]
    assert "const n = 32" in js and "tokens[i] ?? 0" in js and "i < tokens.length ? 1 : 0" in js
    assert '"logits" to Array(1) { FloatArray(4) }' in code["kotlin"]
    assert group["files"][0]["seq_len"] == 32 and "1 x 32" in group["files"][0]["note"]


def test_a_tflite_note_says_what_the_interpreter_packs():
    """An app's Interpreter (default options) packs the shared layer per application from an unrolled
    file, once from a loop file (`inspect` lists its WHILE); the note says which, and how to get once."""
    rows = []
    for name, ops in (("model.tflite", {"FULLY_CONNECTED": 74}), ("loop.tflite", {"FULLY_CONNECTED": 8, "WHILE": 1})):
        row = _row(name, "tflite", [(n, "int32", (1, 32)) for n in IDS], [("logits", (1, 4))])
        row["inspect"]["ops"] = ops
        rows.append(row)
    unrolled, loop = snippets(rows)[0]["files"]
    assert "once per layer application" in unrolled["note"] and "convert --layers loop" in unrolled["note"]
    assert "packs each shared weight once" in loop["note"] and "per layer" not in loop["note"]


@pytest.mark.parametrize("task, call, kotlin", [("TextClassifier", "classify", "textclassifier"),
                                                 ("TextEmbedder", "embed", "textembedder")])
def test_a_mediapipe_file_runs_its_task_on_a_string(task, call, kotlin):
    row = _row("model.mediapipe.tflite", "tflite", [(n, "int32", (1, 32)) for n in IDS], [("logits", (1, 4))], task)
    f = facts_of(row)
    assert framework_of(f).key == "mediapipe"
    (group,) = snippets([row])
    assert group["framework"] == f"MediaPipe Tasks ({task})" and group["tokenize"] is None
    code = group["files"][0]["code"]
    assert f"com.google.mediapipe.tasks.text.{kotlin}.{task}" in code["kotlin"]
    assert f'{task}.createFromFile(context, "model.mediapipe.tflite")' in code["kotlin"]
    assert "import MediaPipeTasksText" in code["swift"] and f"try task.{call}(text: text)" in code["swift"]
    assert "FilesetResolver.forTextTasks" in code["js"] and f"{task}.createFromOptions" in code["js"]
    assert all("input_ids" not in code[p] for p in PLATFORMS)  # a string in: no token ids
    # the text each platform passes is declared, the app's own part marked as such
    assert "val text: String = /* the text, a string */" in code["kotlin"]
    assert "let text: String = /* the text, a string */" in code["swift"]
    assert "const text = /* the text, a string */" in code["js"]
    assert "cut or padded to 32 tokens" in group["files"][0]["note"]


def test_an_onnx_file_that_takes_text_registers_the_extensions():
    row = _row("model.text.onnx", "onnx", [("text", "object", (1,))], [("logits", (1, 3)), ("token_ids", (1, "n"))])
    assert facts_of(row).takes_text
    (group,) = snippets([row])
    assert group["framework"] == "ONNX Runtime + onnxruntime-extensions" and group["tokenize"] is None
    code = group["files"][0]["code"]
    assert "registerCustomOpLibrary(OrtxPackage.getLibraryPath())" in code["kotlin"]
    assert "OnnxTensor.createTensor(env, arrayOf(text), longArrayOf(1))" in code["kotlin"]
    assert "OrtExt.getRegisterCustomOpsFunctionPointer()" in code["swift"] and "tensorStringData: [text]" in code["swift"]
    assert all("input_ids" not in code[p] for p in ("kotlin", "swift")) and '"logits"' in code["kotlin"]
    assert code["js"] is None and "token ids" in group["missing"]["js"]


def test_a_pte_file_has_no_web_runtime():
    row = _row("model.pte", "executorch", [(n, "int64", (1, 64)) for n in IDS], [("last_hidden_state", (1, 64, 16))])
    row["inspect"]["metadata"]["input_dynamism"] = ["dynamic bound"] * 3  # as the .pte reader says it
    (group,) = snippets([row])
    code = group["files"][0]["code"]
    # a bounded dynamic axis: n tokens, up to the bound, no padding
    assert group["files"][0]["seq_len"] is None and "at most 64" in group["files"][0]["note"]
    assert "val n = ids.size" in code["kotlin"] and "copyOf" not in code["kotlin"]
    assert group["key"] == "executorch" and code["js"] is None and "no web runtime" in group["missing"]["js"]
    assert "Module.load(" in code["kotlin"] and "Tensor.fromBlob(ids, longArrayOf(1, n.toLong()))" in code["kotlin"]
    assert "Tensor<Int64>(ids, shape: [1, n])" in code["swift"]
    # by position, in the file's order
    assert code["kotlin"].index("fromBlob(ids") < code["kotlin"].index("fromBlob(mask") < code["kotlin"].index(
        "fromBlob(types")
