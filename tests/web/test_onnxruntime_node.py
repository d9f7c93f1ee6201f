"""onnxruntime-node, in Node as a server or Electron app runs it, on `convert --to onnx --to ort`'s
files and `quantize`'s int8 file: the ids of 256 held-out paragraphs from albert-edge's tokenizer go
in as JSON, web/ort-node.mjs writes the outputs back, and they match PyTorch (fp32) and albert-edge's
own Session (int8)."""

from __future__ import annotations

import json

import pytest

from .runtimes import check_answers, decoded, feeds_json, node_missing, package_missing, run_node

pytestmark = pytest.mark.skipif(bool(node_missing() or package_missing("onnxruntime-node")),
                                reason=node_missing() or package_missing("onnxruntime-node") or "")


def test_onnxruntime_node_answers_as_pytorch(tmp_path, files, feeds, pytorch, int8_session, record_property):
    request = {"models": [str(p) for p in files.values()], "feeds": feeds_json(feeds), "threads": 1}
    response = run_node("ort-node.mjs", request, tmp_path)
    assert response["runtime"] == "onnxruntime-node" and response["threads"] == 1
    by_path = decoded(response["results"])
    got = {name: by_path[str(path)] for name, path in files.items()}
    figures = check_answers(got, pytorch, int8_session)
    record = {"runtime": f"onnxruntime-node {response['version']}", "node": response["node"], "threads": 1,
              "files": figures}
    record_property("figures", record)
    print(json.dumps(record, indent=1))
