"""MediaPipe Tasks for Web (@mediapipe/tasks-text, web/package-lock.json) in headless Chromium on
`convert --to mediapipe` files: web/mediapipe.html, served from 127.0.0.1 with the package's own
WebAssembly (FilesetResolver.forTextTasks on the served wasm folder), runs TextClassifier and
TextEmbedder on raw held-out text as a web app does, driven by Selenium; its answers match
MediaPipe's Python task (the same C++, built natively) and PyTorch.

It lives with the MediaPipe tests because only their environment (.ci/mobile.sh) can build the
file; web/node_modules comes from `npm ci` in web/ (.ci/web.sh, the stage before). Elsewhere it
skips, saying which is missing."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from albert_edge import checkpoints
from albert_edge.converters.mediapipe_check import TASK_TEXTS, task_answers
from albert_edge.tokenizer import AlbertTokenizer

from ..web.runtimes import chromium, chromium_missing, cosines, decode, package_missing, run_page, serve

MISSING = chromium_missing() or package_missing("@mediapipe/tasks-text")
pytestmark = pytest.mark.skipif(bool(MISSING), reason=MISSING or "")

HELD_OUT = 200  # topic paragraphs the classifier was not fine-tuned on


def _held_out(classifier_checkpoint) -> list[str]:
    """TASK_TEXTS (the texts whose ids MediaPipe's tokenizer and albert-edge's give alike), then
    paragraphs of the evaluation part of the topic dataset the classifier was fine-tuned on."""
    rows = (classifier_checkpoint.parent / "topics" / "eval.jsonl").read_text(encoding="utf-8").splitlines()
    paragraphs = [json.loads(r)["text"] for r in rows if r.strip()][:HELD_OUT]
    assert len(paragraphs) == HELD_OUT
    return [*TASK_TEXTS, *paragraphs]


def _pytorch(checkpoint, texts, seq_len) -> np.ndarray:
    """What the file computes, in PyTorch, on albert-edge's ids padded to the file's length."""
    from albert_edge.converters.mediapipe import file_model

    model = file_model(checkpoints.load_model(checkpoint, None)[1].eval())
    tok = AlbertTokenizer.from_dir(checkpoint)
    feeds = tok(list(texts), max_length=seq_len, padding="max_length", truncation=True)
    with torch.no_grad():
        out = model(*(torch.from_numpy(np.asarray(feeds[n], dtype=np.int64))
                      for n in ("input_ids", "attention_mask", "token_type_ids")))
    return out.numpy().reshape(len(texts), -1)


def test_mediapipe_tasks_for_web_answer_as_mediapipe_and_pytorch(tmp_path, classifier_file, embedder_file,
                                                                 classifier_checkpoint, base_checkpoint, seq_len,
                                                                 record_property):
    texts = _held_out(classifier_checkpoint)
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"classifier": "/files/classifier.tflite", "embedder": "/files/embedder.tflite",
                                   "texts": texts}))
    served_files = {"classifier.tflite": classifier_file.path, "embedder.tflite": embedder_file.path,
                    "request.json": request}
    with serve(served_files) as (base, served), chromium(tmp_path / "profile") as driver:
        result = run_page(driver, f"{base}/mediapipe.html?request=/files/request.json")
        shot = tmp_path / "mediapipe.png"
        assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 5_000
    assert result["texts"] == len(texts)
    # The WebAssembly came from web/node_modules through this server, and it was the SIMD build.
    assert result["wasm"] and all(f"/node_modules/@mediapipe/tasks-text/wasm/{w}" in served for w in result["wasm"])
    assert result["simdSupported"] and result["simd"], result

    config = checkpoints.load_model(classifier_checkpoint, None)[0]
    assert result["classifier"]["labels"] == list(config.label_names)
    scores = decode(result["classifier"]["scores"]).astype(np.float64)
    vectors = decode(result["embedder"]["vectors"]).astype(np.float64)
    native = {"scores": task_answers(classifier_file.path, "TextClassifier", texts),
              "vectors": task_answers(embedder_file.path, "TextEmbedder", texts)}
    reference = {"scores": _pytorch(classifier_checkpoint, texts, seq_len),
                 "vectors": _pytorch(base_checkpoint, texts, seq_len)}
    np.testing.assert_allclose(scores.sum(1), 1.0, atol=1e-5)  # probabilities, as the Python task gives
    figures = {}
    for against, want in (("mediapipe python", native), ("pytorch", reference)):
        figures[against] = {
            "TextClassifier max_abs_diff": float(np.abs(scores - want["scores"]).max()),
            "TextClassifier top1 agreement": float((scores.argmax(1) == want["scores"].argmax(1)).mean()),
            "TextEmbedder max_abs_diff": float(np.abs(vectors - want["vectors"]).max()),
            "TextEmbedder min_cosine": float(cosines(vectors, want["vectors"]).min())}
    record = {"runtime": "@mediapipe/tasks-text", "wasm": result["wasm"], "simd": result["simd"],
              "texts": len(texts), "browser": result["userAgent"], "against": figures, "screenshot": str(shot)}
    record_property("figures", record)
    print(json.dumps(record, indent=1))
    for against, f in figures.items():
        assert f["TextClassifier max_abs_diff"] <= 1e-4, (against, f)
        assert f["TextClassifier top1 agreement"] >= 0.99, (against, f)
        assert f["TextEmbedder max_abs_diff"] <= 1e-4, (against, f)
        assert f["TextEmbedder min_cosine"] >= 0.9999, (against, f)



@pytest.mark.parametrize("gpu", ["webgpu", "webgl2"])
def test_the_gpu_delegate_falls_back_to_the_cpu(tmp_path, classifier_file, classifier_checkpoint, gpu):
    """`baseOptions: {delegate: "GPU"}` in Chromium that offers the page a GPU (WebGPU on lavapipe, or
    WebGL2 on SwiftShader, where there is no GPU): @mediapipe/tasks-text 1.0.1's WebAssembly registers
    only the CPU inference calculator, so MediaPipe falls back to XNNPACK on the CPU without a word to
    the page; the answers are the CPU delegate's, bit for bit. A release that runs text on the GPU
    fails this test."""
    texts = _held_out(classifier_checkpoint)[:40]
    answers, delegates = {}, {}
    for delegate in ("CPU", "GPU"):
        request = tmp_path / f"{delegate}.json"
        request.write_text(json.dumps({"classifier": "/files/classifier.tflite", "texts": texts, "delegate": delegate}))
        files = {"classifier.tflite": classifier_file.path, "request.json": request}
        with serve(files) as (base, _), chromium(tmp_path / f"profile-{delegate}", gpu=gpu) as driver:
            result = run_page(driver, f"{base}/mediapipe.html?request=/files/request.json")
            console = [e["message"] for e in driver.get_log("browser")]
        offered = {"webgpu": result["webgpuAdapter"], "webgl2": result["webgl2"]}
        assert result["delegate"] == delegate and offered[gpu], (gpu, offered)
        answers[delegate] = decode(result["classifier"]["scores"])
        delegates[delegate] = [m.split('"')[1] for m in console if "Created TensorFlow Lite" in m]
    cpu = ["INFO: Created TensorFlow Lite XNNPACK delegate for CPU."]
    assert delegates == {"CPU": cpu, "GPU": cpu}, delegates
    np.testing.assert_array_equal(answers["GPU"], answers["CPU"])
