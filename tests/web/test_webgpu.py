"""WebGPU in headless Chromium (web/webgpu.html): the `convert --to transformers-js` folder of the
builtin classifier, each dtype a browser app asks for, through transformers.js' pipeline with
``device: "webgpu"`` on the held-out texts (one text per call, as an app calls it) and through
onnxruntime-web itself with ``executionProviders: ["webgpu"]`` on the first DIRECT of them in one
batch, whose verbose log says which nodes it placed on WebGPU and which on its CPU provider
(WebAssembly). fp32 answers as transformers' model of the checkpoint within ATOL; fp16 within
FP16_ATOL with its top-1 on every text where the adapter has ``shader-f16`` (where it has not,
both refuse it, and the test says so and skips); q8 as measured: the Session's label on the same file where it runs, the
refusal recorded where it does not. Skipped where Chromium or the packages are missing, or where
Chromium gives no WebGPU adapter. The figures go to ``record_property("figures")``, which
benchmarks/webgpu_parity.py writes to the result file docs/guides/web.md renders."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from .checkpoints import _convert, evaluation_texts, fitting  # noqa: F401  (a fixture)
from .conftest import SEQ
from .pipelines import _ours, _reduce, _session_int8
from .runtimes import AGREEMENT, ATOL, chromium, chromium_missing, decode, feeds_json, package_missing, run_page, serve

MISSING = chromium_missing() or package_missing("@huggingface/transformers", "onnxruntime-web")
pytestmark = pytest.mark.skipif(bool(MISSING), reason=MISSING or "")
TASK = "text-classification"
FP16_ATOL = 2e-2
# Held-out texts: enough that at least COMPARED get albert-edge's ids from transformers.js' tokenizer
# (it cuts a few digit-comma pieces otherwise: docs/guides/web.md).
TEXTS, COMPARED = 210, 200
# fp32 in the suite: a software adapter takes a second or more per text, so the suite runs the first
# FP32_TEXTS; benchmarks/webgpu_parity.py sets ALBERT_EDGE_WEBGPU_TEXTS to TEXTS for its result file.
FP32_TEXTS = int(os.environ.get("ALBERT_EDGE_WEBGPU_TEXTS", "40"))
DIRECT = 4  # texts onnxruntime-web runs in one batch (a software adapter takes seconds per text)
# The page's work for one dtype on a software adapter, on two shared cores.
PAGE_SECONDS = 900
# What each runtime says when the adapter has no shader-f16 (onnxruntime-web, transformers.js), and
# what onnxruntime-web says of the int8 file's attention with its padding mask on WebGPU.
NO_F16 = ("requires f16 but the device does not support it", "does not support fp16")
Q8_REFUSED = "not implemented for webgpu"
# What the fp32 and fp16 answers are held to (the result file names it).
REFERENCE = "transformers' AlbertForSequenceClassification"


@pytest.fixture(scope="module")
def classifier(tmp_path_factory, classifier_checkpoint):
    return _convert(classifier_checkpoint, tmp_path_factory.mktemp("webgpu") / "out", "classification", SEQ,
                    onnx=False)


@pytest.fixture(scope="module")
def texts(classifier, evaluation_texts) -> list[str]:
    return fitting(evaluation_texts, classifier.checkpoint, classifier.max_pieces, count=TEXTS)


@pytest.fixture(scope="module")
def reference(classifier, texts) -> dict[str, np.ndarray]:
    """transformers' AlbertForSequenceClassification (the checkpoint as transformers loads it): its
    probabilities on the texts and its logits on the first DIRECT (one padded batch)."""
    import torch
    from transformers import AlbertForSequenceClassification

    model = AlbertForSequenceClassification.from_pretrained(str(classifier.checkpoint)).eval()

    def logits(feeds: dict[str, np.ndarray]) -> np.ndarray:
        with torch.no_grad():
            return model(**{n: torch.from_numpy(feeds[n]) for n in ("input_ids", "attention_mask",
                                                                   "token_type_ids")}).logits.numpy()

    feeds = _ours(classifier, texts)
    return {"probabilities": _reduce("classification", logits(feeds), feeds),
            "logits": logits(_ours(classifier, texts[:DIRECT]))}


@pytest.fixture(scope="module")
def browser(tmp_path_factory, classifier, texts):
    """run(dtype) -> the page's result for that dtype: one server and one Chromium for the module,
    one page call per dtype that runs every text."""
    from albert_edge.converters.transformers_js import FOLDER, MODEL_FILES

    work = tmp_path_factory.mktemp("webgpu-page")
    served = {f"{FOLDER}/{p.relative_to(classifier.folder).as_posix()}": p
              for p in classifier.folder.rglob("*") if p.is_file()}
    feeds = feeds_json(_ours(classifier, texts[:DIRECT]))
    for dtype, name in MODEL_FILES.items():
        (work / f"{dtype}.json").write_text(json.dumps({
            "folder": f"/files/{FOLDER}/", "task": TASK, "dtype": dtype,
            "texts": texts[:FP32_TEXTS] if dtype == "fp32" else texts,
            "model": f"/files/{FOLDER}/{name}", "feeds": feeds}))
        served[f"{dtype}.json"] = work / f"{dtype}.json"
    with serve(served) as (base, _), chromium(work / "profile", gpu="webgpu") as driver:
        def run(dtype: str) -> dict:
            result = run_page(driver, f"{base}/webgpu.html?request=/files/{dtype}.json", PAGE_SECONDS)
            if result["adapter"] is None:
                pytest.skip("Chromium gives no WebGPU adapter here (navigator.gpu.requestAdapter() gave none)")
            return result

        yield run


def _placement(result: dict) -> dict[str, object]:
    """Where onnxruntime-web put the nodes: count and operator types per provider."""
    placed = result["ortWeb"].get("placement") or {}
    return {provider: {"nodes": len(ops), "ops": sorted(set(ops))} for provider, ops in placed.items()}


def _recorded(dtype: str, result: dict, figures: dict, record_property) -> dict:
    adapter = result["adapter"]
    record = {"dtype": dtype, "reference": REFERENCE if dtype != "q8" else "albert-edge's Session",
              "adapter": {k: adapter[k] for k in ("vendor", "architecture", "fallback")},
              "shader_f16": "shader-f16" in adapter["features"], "onnxruntime_web": result["ortWeb"].get("version"),
              "placement": _placement(result), "texts": figures.pop("texts", None),
              "errors": {k: v for k, v in (("onnxruntime-web", result["ortWeb"].get("error")),
                                            ("transformers.js", result["transformersJs"].get("error"))) if v},
              "figures": figures}
    record_property("figures", json.dumps(record))
    print(json.dumps(record, indent=1))
    return record


def _against(result: dict, classifier, texts, want: np.ndarray, logits: np.ndarray | None) -> dict:
    """transformers.js' probabilities (where its ids are ours) and onnxruntime-web's logits against
    ``want`` / ``logits``: the largest difference and the share of texts with the same top-1."""
    feeds = _ours(classifier, texts)
    ours = [row[m.astype(bool)].tolist() for row, m in zip(feeds["input_ids"], feeds["attention_mask"], strict=True)]
    pipe = result["transformersJs"]
    same = np.array([a == b for a, b in zip(pipe["ids"], ours, strict=True)])
    got = decode(pipe["scores"]).astype(np.float64)
    f = {"texts": len(texts), "ids differ": int((~same).sum()),
         "transformers.js probabilities max_abs_diff": float(np.abs(got - want)[same].max()),
         "transformers.js top1 agreement": float((got.argmax(1) == want.argmax(1))[same].mean())}
    if logits is not None and "outputs" in result["ortWeb"]:
        direct = decode(result["ortWeb"]["outputs"]["logits"]).astype(np.float64)
        f["onnxruntime-web logits max_abs_diff"] = float(np.abs(direct - logits).max())
        f["onnxruntime-web top1 agreement"] = float((direct.argmax(1) == logits.argmax(1)).mean())
    assert f["texts"] - f["ids differ"] >= 0.99 * f["texts"], f
    return f


def test_fp32_on_webgpu_answers_as_transformers(browser, classifier, texts, reference, record_property):
    result = browser("fp32")
    assert not result["ortWeb"].get("error") and not result["transformersJs"].get("error"), result
    shown = texts[:FP32_TEXTS]
    f = _against(result, classifier, shown, reference["probabilities"][:FP32_TEXTS], reference["logits"])
    record = _recorded("fp32", result, dict(f), record_property)
    assert "WebGpuExecutionProvider" in record["placement"], record["placement"]
    assert f["texts"] - f["ids differ"] >= min(COMPARED, int(0.95 * len(shown))), f
    assert f["transformers.js probabilities max_abs_diff"] <= ATOL and f["onnxruntime-web logits max_abs_diff"] <= ATOL
    assert f["transformers.js top1 agreement"] >= AGREEMENT and f["onnxruntime-web top1 agreement"] == 1.0


def test_fp16_on_webgpu_answers_as_transformers(browser, classifier, texts, reference, record_property):
    result = browser("fp16")
    if "shader-f16" not in result["adapter"]["features"]:
        record = _recorded("fp16", result, {}, record_property)
        assert NO_F16[0] in record["errors"]["onnxruntime-web"] and NO_F16[1] in record["errors"]["transformers.js"]
        pytest.skip(f"the WebGPU adapter ({result['adapter']['architecture'] or result['adapter']['vendor']}) has no "
                    "shader-f16: onnxruntime-web and transformers.js refuse float16 on it (recorded)")
    assert not result["ortWeb"].get("error") and not result["transformersJs"].get("error"), result
    f = _against(result, classifier, texts, reference["probabilities"], reference["logits"])
    _recorded("fp16", result, dict(f), record_property)
    assert f["texts"] - f["ids differ"] >= COMPARED, f
    assert f["transformers.js probabilities max_abs_diff"] <= FP16_ATOL, f
    assert f["transformers.js top1 agreement"] == 1.0 and f["onnxruntime-web top1 agreement"] == 1.0, f


def test_q8_on_webgpu_as_measured(browser, classifier, texts, record_property):
    """The int8 file on WebGPU: where it runs, albert-edge's Session's label on the same file (one
    text per call); where onnxruntime-web refuses it, the refusal and the placement are recorded."""
    result = browser("q8")
    errors = [e for e in (result["ortWeb"].get("error"), result["transformersJs"].get("error")) if e]
    if errors:
        record = _recorded("q8", result, {}, record_property)
        assert all(Q8_REFUSED in e for e in errors), errors
        assert record["placement"], "the session was made before the run was refused"
        return
    f = _against(result, classifier, texts, _session_int8(classifier, texts), None)
    _recorded("q8", result, dict(f), record_property)
    assert f["transformers.js top1 agreement"] >= AGREEMENT, f
