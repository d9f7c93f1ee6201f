"""transformers.js (@huggingface/transformers) in Node on an adaptive folder (`convert --to
transformers-js --adaptive`): its text-classification pipeline runs the ONNX file's Loop, so the
probabilities it gives are those of the pass PyTorch's adaptive forward stopped at; q8 gives the
labels albert-edge's Session gives on the same int8 file."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from albert_edge.exits import decide, softmax

from .conftest import SEQ
from .runtimes import ATOL, decode, node_missing, package_missing, run_node

MISSING = node_missing() or package_missing("@huggingface/transformers")
pytestmark = pytest.mark.skipif(bool(MISSING), reason=MISSING or "")

@pytest.fixture(scope="module")
def adaptive_folder(tmp_path_factory, classifier_checkpoint, held_out):
    """The web tests' topic classifier given exits that read each pass with its own final classifier
    (ALBERT's passes share one layer and one pooler), converted adaptive under a confidence rule at
    the median of the first pass's top probability on the texts, so that they stop at different
    passes. Returns (model, rule, folder, texts)."""
    from albert_edge.converters.export import convert
    from albert_edge.tokenizer import AlbertTokenizer
    from albert_edge.train.state import export_model

    from ..exit_fixtures import classifier_with_exits, median_confidence_rule

    model = classifier_with_exits(classifier_checkpoint)
    tok = AlbertTokenizer.from_dir(classifier_checkpoint)
    texts = [t for t in held_out if len(tok.encode(t)) <= SEQ - 2][:40]
    rule = median_confidence_rule(model, tok, texts)
    work = tmp_path_factory.mktemp("adaptive-js")
    path = export_model(model, work / "ckpt", classifier_checkpoint / "spiece.model")
    convert(str(path), work / "out", targets=("transformers-js",), seq_len=SEQ, adaptive=rule)
    return model, rule, work / "out" / "transformers-js", texts


def test_transformers_js_stops_where_pytorch_does(tmp_path, adaptive_folder):
    from albert_edge.runtime import Session

    model, rule, folder, texts = adaptive_folder
    answers = {dtype: run_node("transformers-node.mjs", {"folder": str(folder), "task": "text-classification",
                                                         "texts": texts, "dtype": dtype}, tmp_path / dtype)
               for dtype in ("fp32", "q8")}
    seen, q8_labels = set(), []
    int8 = Session(folder / "onnx" / "model_quantized.onnx")
    for row, ids in enumerate(answers["fp32"]["ids"]):
        ids = np.array([ids])
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        with torch.no_grad():
            every = model.pass_logits(*(torch.from_numpy(a) for a in feeds.values())).numpy()
        logits, passes = decide(every, rule)
        seen |= set(passes.tolist())
        np.testing.assert_allclose(decode(answers["fp32"]["scores"])[row], softmax(logits)[0], atol=ATOL)
        q8_labels.append(int(int8.run(feeds)["logits"].argmax(-1)[0]))
    assert len(seen) >= 2, f"every text ran {seen} passes: the test shows nothing"
    np.testing.assert_array_equal(decode(answers["q8"]["scores"]).argmax(-1), q8_labels)
