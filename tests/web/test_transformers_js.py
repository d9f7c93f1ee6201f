"""transformers.js (@huggingface/transformers) in Node on a `convert --to transformers-js` folder, as
a JavaScript app loads it (local files only): its own tokenizer gives albert-edge's ids for the
held-out paragraphs, and its text-classification pipeline the classifier's probabilities, as PyTorch
computes them; its feature-extraction and fill-mask pipelines too, and all three on a checkpoint
transformers itself wrote (tests/web/checkpoints.py). Skipped until converters/targets.py has the
transformers-js target."""

from __future__ import annotations

import json

import numpy as np
import pytest

from albert_edge.converters.targets import TARGETS

from .checkpoints import (builtin_converted, evaluation_texts, hf_checkpoints, hf_converted,  # noqa: F401  (fixtures)
                          task_texts)
from .conftest import HELD_OUT, INPUTS, SEQ
from .pipelines import figures as pipeline_figures
from .runtimes import AGREEMENT, ATOL, decode, node_missing, package_missing, run_node

TARGET = "transformers-js"
FP16_ATOL = 2e-2  # float16 weights and arithmetic against PyTorch's float32 (the WebGPU test's bound)
MISSING = ((f"convert has no {TARGET} target yet (converters/targets.py)" if TARGET not in TARGETS else None)
           or node_missing() or package_missing("@huggingface/transformers"))
pytestmark = pytest.mark.skipif(bool(MISSING), reason=MISSING or "")

@pytest.fixture(scope="module")
def short_held_out(topics, classifier_checkpoint) -> list[str]:
    """Held-out paragraphs that fit in SEQ pieces untruncated (about nine in ten do), so neither
    tokenizer's truncation rule decides the ids."""
    from albert_edge.tokenizer import AlbertTokenizer

    tok = AlbertTokenizer.from_dir(classifier_checkpoint)
    rows = [json.loads(line)["text"] for line in topics[1].read_text(encoding="utf-8").splitlines() if line.strip()]
    lengths = tok(rows, max_length=4 * SEQ, padding="longest", truncation=True)["attention_mask"].sum(1)
    texts = [t for t, n in zip(rows, lengths, strict=True) if n <= SEQ][:HELD_OUT]
    assert len(texts) >= 200
    return texts


def test_transformers_js_classifies_as_pytorch(tmp_path, classifier_checkpoint, short_held_out, record_property):
    """fp32 (onnx/model.onnx): probabilities within ATOL of PyTorch where the ids are albert-edge's;
    q8 (onnx/model_quantized.onnx, transformers.js's default on WebAssembly): the label albert-edge's
    own Session gives on that same file, for at least AGREEMENT of the texts; fp16
    (onnx/model_fp16.onnx, transformers.js' dtype for WebGPU, here on the CPU): within FP16_ATOL of
    PyTorch with its top-1 where the ids are albert-edge's."""
    import torch

    from albert_edge.checkpoints import load_model
    from albert_edge.converters.export import convert
    from albert_edge.converters.transformers_js import MODEL_FILES, folder_of
    from albert_edge.runtime import Session
    from albert_edge.tokenizer import AlbertTokenizer

    result = convert(str(classifier_checkpoint), tmp_path / "out", targets=(TARGET,), seq_len=SEQ)
    folder = folder_of(result.files[0].path)
    answers = {dtype: run_node("transformers-node.mjs", {"folder": str(folder), "task": "text-classification",
                                                         "texts": short_held_out, "dtype": dtype}, tmp_path / dtype)
               for dtype in ("fp32", "q8", "fp16")}
    config, model = load_model(classifier_checkpoint)
    assert answers["fp32"]["labels"] == answers["q8"]["labels"] == list(config.label_names)
    assert answers["fp32"]["ids"] == answers["q8"]["ids"]
    scores = {dtype: decode(a["scores"]).astype(np.float64) for dtype, a in answers.items()}

    tok = AlbertTokenizer.from_dir(classifier_checkpoint)
    feeds = tok(short_held_out, max_length=SEQ, padding="max_length", truncation=True)
    ours = [row[mask.astype(bool)].tolist() for row, mask in zip(feeds["input_ids"], feeds["attention_mask"],
                                                                     strict=True)]
    same_ids = np.array([a == b for a, b in zip(answers["fp32"]["ids"], ours, strict=True)])
    with torch.no_grad():
        logits = model.eval()(*(torch.from_numpy(np.asarray(feeds[n], dtype=np.int64)) for n in INPUTS))
    reference = torch.softmax(logits.double(), -1).numpy()
    # The q8 file in albert-edge's Session, one text per call as the pipeline runs it (no padding:
    # dynamic quantization's ranges would see the padded positions).
    session = Session(folder / MODEL_FILES["q8"], num_threads=1)
    q8_session = np.concatenate([session.run(tok([t], max_length=SEQ, truncation=True))["logits"]
                                 for t in short_held_out])
    figures = {"runtime": f"transformers.js {answers['fp32']['version']}", "texts": len(short_held_out),
               "ids agreement": float(same_ids.mean()),
               "fp32 probabilities max_abs_diff (same ids)": float(np.abs(scores["fp32"] - reference)[same_ids].max()),
               "fp32 top1 agreement with pytorch": float((scores["fp32"].argmax(1) == reference.argmax(1)).mean()),
               "q8 top1 agreement with albert-edge Session": float(
                   (scores["q8"].argmax(1) == q8_session.argmax(1)).mean()),
               "fp16 probabilities max_abs_diff (same ids)": float(np.abs(scores["fp16"] - reference)[same_ids].max()),
               "fp16 top1 agreement with pytorch (same ids)": float(
                   (scores["fp16"].argmax(1) == reference.argmax(1))[same_ids].mean())}
    record_property("figures", figures)
    print(json.dumps(figures, indent=1))
    assert figures["ids agreement"] >= AGREEMENT, figures
    assert figures["fp32 probabilities max_abs_diff (same ids)"] <= ATOL, figures
    assert figures["fp32 top1 agreement with pytorch"] >= AGREEMENT, figures
    assert figures["q8 top1 agreement with albert-edge Session"] >= AGREEMENT, figures
    assert answers["fp16"]["ids"] == answers["fp32"]["ids"]
    assert figures["fp16 probabilities max_abs_diff (same ids)"] <= FP16_ATOL, figures
    assert figures["fp16 top1 agreement with pytorch (same ids)"] == 1.0, figures


# The other pipelines, and all three on the model transformers itself wrote (tests/web/checkpoints.py):
# fp32 as PyTorch, q8 as albert-edge's Session on the same int8 file (tests/web/pipelines.py). Node's
# feature-extraction runs the texts as one padded batch (web/transformers-node.mjs), as an app
# embedding a list does.
@pytest.mark.parametrize(("kind", "task"), [("builtin", "feature-extraction"), ("builtin", "fill-mask"),
                                            ("transformers", "text-classification"),
                                            ("transformers", "feature-extraction"), ("transformers", "fill-mask")])
def test_transformers_js_pipelines_in_node(kind, task, request, tmp_path, evaluation_texts, record_property):
    converted = request.getfixturevalue("builtin_converted" if kind == "builtin" else "hf_converted")[task]
    texts = task_texts(task, converted, evaluation_texts)
    answers = {dtype: run_node("transformers-node.mjs", {"folder": str(converted.folder), "task": task, "texts": texts,
                                                         "dtype": dtype}, tmp_path / dtype)
               for dtype in ("fp32", "q8")}
    measured = {"runtime": f"transformers.js {answers['fp32']['version']} in Node", "model": kind, "task": task,
                **pipeline_figures(task, converted, texts, answers["fp32"], answers["q8"])}
    record_property("figures", measured)
    print(json.dumps(measured, indent=1))
