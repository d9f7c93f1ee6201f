"""onnxruntime-node and onnxruntime-web (headless Chromium) on the `convert --to onnx` files of the
small ALBERT that transformers itself wrote (tests/web/checkpoints.py: AlbertModel,
AlbertForMaskedLM, AlbertForSequenceClassification, save_pretrained): every output on held-out
text as PyTorch computes it from that checkpoint, as for albert-edge's own files
(test_onnxruntime_node.py, test_onnxruntime_web.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from .checkpoints import (evaluation_texts, fitting, hf_checkpoints,  # noqa: F401  (fixtures)
                          hf_converted)
from .runtimes import (ATOL, COSINE, chromium, chromium_missing, cosines, decoded, feeds_json, node_missing,
                       package_missing, run_node, run_page, serve)

INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@pytest.fixture(scope="module")
def expected(hf_converted, evaluation_texts):
    """The held-out texts as albert-edge tokenizes them (one padded batch), and PyTorch's outputs
    of each head on them, by file name."""
    import torch

    from albert_edge.checkpoints import load_model
    from albert_edge.tokenizer import AlbertTokenizer

    any_model = hf_converted["text-classification"]
    texts = fitting(evaluation_texts, any_model.checkpoint, any_model.max_pieces)
    batch = AlbertTokenizer.from_dir(any_model.checkpoint)(texts, max_length=any_model.max_pieces,
                                                             padding="longest", truncation=True)
    feeds = {n: np.asarray(batch[n], dtype=np.int64) for n in INPUTS}
    names = {"base": ("last_hidden_state", "pooler_output"), "mlm": ("prediction_logits",),
             "classification": ("logits",)}
    want = {}
    for converted in hf_converted.values():
        with torch.no_grad():
            out = load_model(converted.checkpoint, converted.head)[1].eval()(*(torch.from_numpy(feeds[n])
                                                                               for n in INPUTS))
        out = out if isinstance(out, tuple) else (out,)
        want[f"{converted.head}.onnx"] = {n: o.numpy() for n, o in zip(names[converted.head], out, strict=True)}
    return feeds, want


def _check(got: dict[str, dict[str, np.ndarray]], want: dict[str, dict[str, np.ndarray]]) -> dict:
    figures = {}
    for name, outputs in want.items():
        assert set(got[name]) == set(outputs), (name, sorted(got[name]))
        f = figures[name] = {f"{o} max_abs_diff": float(np.abs(got[name][o] - w).max()) for o, w in outputs.items()}
        if "pooler_output" in outputs:
            f["pooler_output min_cosine"] = float(cosines(got[name]["pooler_output"], outputs["pooler_output"]).min())
            assert f["pooler_output min_cosine"] >= COSINE, (name, f)
        assert max(v for k, v in f.items() if k.endswith("max_abs_diff")) <= ATOL, (name, f)
    return figures


@pytest.mark.skipif(bool(node_missing() or package_missing("onnxruntime-node")),
                    reason=node_missing() or package_missing("onnxruntime-node") or "")
def test_onnxruntime_node_on_transformers_made_files(tmp_path, hf_converted, expected, record_property):
    feeds, want = expected
    paths = {f"{c.head}.onnx": c.onnx for c in hf_converted.values()}
    response = run_node("ort-node.mjs", {"models": [str(p) for p in paths.values()], "feeds": feeds_json(feeds),
                                         "threads": 1}, tmp_path)
    by_path = decoded(response["results"])
    figures = _check({name: by_path[str(p)] for name, p in paths.items()}, want)
    record = {"runtime": f"onnxruntime-node {response['version']}", "rows": len(feeds["input_ids"]),
              "files": figures}
    record_property("figures", record)
    print(json.dumps(record, indent=1))


@pytest.mark.skipif(bool(chromium_missing() or package_missing("onnxruntime-web")),
                    reason=chromium_missing() or package_missing("onnxruntime-web") or "")
def test_onnxruntime_web_on_transformers_made_files(tmp_path, hf_converted, expected, record_property):
    feeds, want = expected
    paths = {f"{c.head}.onnx": c.onnx for c in hf_converted.values()}
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"models": [f"/files/{name}" for name in paths], "feeds": feeds_json(feeds)}))
    with serve({**paths, "request.json": request}) as (base, _), chromium(tmp_path / "profile") as driver:
        result = run_page(driver, f"{base}/ort-web.html?request=/files/request.json")
    by_url = decoded(result["results"])
    figures = _check({name: by_url[f"/files/{name}"] for name in paths}, want)
    record = {"runtime": f"onnxruntime-web {result['version']}", "rows": len(feeds["input_ids"]), "files": figures}
    record_property("figures", record)
    print(json.dumps(record, indent=1))
