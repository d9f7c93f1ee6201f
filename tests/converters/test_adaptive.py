"""Adaptive files: a classifier with early exits written so that the engine itself stops when the
exit rule says the answer is settled. The TFLite Interpreter and onnxruntime give PyTorch's
adaptive answers and pass counts, input by input, with one weight group (one loop) and two (a loop
per run of a group), and each weight is stored once."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from albert_edge.config import AlbertConfig
from albert_edge.errors import ConfigError, ConversionError
from albert_edge.exits import ExitRule, decide, softmax
from albert_edge.formats.weights import analyze, read_file
from albert_edge.model import build_model

from albert_edge.converters.task_heads import AdaptiveClassifier

def _rules(model) -> list[ExitRule]:
    """A rule of each kind, the confidence and entropy settings at the median of what the test
    inputs reach at the first pass the rule may stop at, so that some stop there and some do not."""
    probs = np.concatenate([softmax(_every(model, *feeds)) for feeds in _inputs(40, 3)])  # (N, L, C)
    entropy = -(probs[:, 1] * np.log(probs[:, 1])).sum(-1)
    return [ExitRule("patience", 1), ExitRule("confidence", float(np.median(probs[:, 0].max(-1)))),
            ExitRule("entropy", float(np.median(entropy)), min_passes=2)]


def _every(model, ids, mask, types) -> np.ndarray:
    with torch.no_grad():
        return model.pass_logits(*(torch.from_numpy(a.astype(np.int64)) for a in (ids, mask, types))).numpy()


def _classifier(groups: int):
    config = AlbertConfig.preset("tiny").replace(vocab_size=99, num_labels=3, num_hidden_groups=groups,
                                                 classifier_dropout_prob=0.0, exits=json.dumps({"training": "joint"}))
    torch.manual_seed(groups)
    model = build_model(config, "classification")
    with torch.no_grad():  # sharper classifiers, so that the rules stop inputs at different passes;
        model.classifier.weight.mul_(20)
        for head in model.exit_classifiers:  # near the last classifier: answers that can repeat, or not
            head.weight.copy_(model.classifier.weight + 10 * torch.randn_like(head.weight))
    return model


def _inputs(n: int, batch: int = 1, seed: int = 0):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        length = int(rng.integers(3, 17))
        ids = rng.integers(5, 99, (batch, length))
        mask = np.ones_like(ids)
        if batch > 1:
            mask[0, length // 2:] = 0  # a padded row beside full ones
        yield ids, mask, np.zeros_like(ids)


def _reference(adaptive, ids, mask, types):
    with torch.no_grad():
        logits, passes = adaptive(*(torch.from_numpy(a.astype(np.int64)) for a in (ids, mask, types)))
    return logits.numpy(), passes.numpy()


def _check_engine(adaptive, run, batch: int = 1) -> np.ndarray:
    """Run 40 inputs through ``run`` and the reference; returns the pass counts seen."""
    seen = []
    for ids, mask, types in _inputs(40, batch):
        logits, passes = run(ids, mask, types)
        ref_logits, ref_passes = _reference(adaptive, ids, mask, types)
        np.testing.assert_array_equal(passes, ref_passes)
        np.testing.assert_allclose(logits, ref_logits, atol=1e-4, rtol=1e-4)
        seen += list(passes)
    return np.array(seen)


@pytest.mark.parametrize("groups", [1, 2])
def test_onnx_loops_stop_where_pytorch_does(tmp_path, groups):
    import onnx
    import onnxruntime as ort

    from albert_edge.converters.onnx import _linears_as_matmul
    from albert_edge.converters.onnx_adaptive import adaptive_proto

    model = _classifier(groups)
    for rule in _rules(model):
        adaptive = AdaptiveClassifier(model, rule)
        proto = adaptive_proto(adaptive, 20, _linears_as_matmul)
        onnx.checker.check_model(proto)
        assert [n.op_type for n in proto.graph.node].count("Loop") == groups
        path = tmp_path / f"{rule.kind}.onnx"
        onnx.save(proto, str(path))
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])

        def run(ids, mask, types, session=session):
            return session.run(None, {"input_ids": ids.astype(np.int64), "attention_mask": mask.astype(np.int64),
                                      "token_type_ids": types.astype(np.int64)})

        seen = _check_engine(adaptive, run, batch=3)
        assert len(set(seen)) >= 2, f"{rule}: every input ran {set(seen)} passes; the test shows nothing"
        report = analyze(read_file(path), adaptive)
        assert report.ok, report.problems()


def test_onnx_setting_is_an_optional_input(tmp_path):
    import onnx
    import onnxruntime as ort

    from albert_edge.converters.onnx import _linears_as_matmul
    from albert_edge.converters.onnx_adaptive import SETTING, adaptive_proto

    model = _classifier(1)
    adaptive = AdaptiveClassifier(model, ExitRule("patience", 1))
    onnx.save(adaptive_proto(adaptive, 20, _linears_as_matmul), str(tmp_path / "m.onnx"))
    session = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    for ids, mask, types in _inputs(20, batch=2, seed=1):
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        every = _every(model, ids, mask, types)
        for setting in (1, 2, 3):
            _, passes = session.run(None, {**feeds, SETTING: np.array(setting, np.float32)})
            np.testing.assert_array_equal(passes, decide(every, ExitRule("patience", setting))[1])
        _, default = session.run(None, feeds)
        np.testing.assert_array_equal(default, decide(every, ExitRule("patience", 1))[1])


@pytest.mark.parametrize("groups", [1, 2])
def test_tflite_while_stops_where_pytorch_does(tmp_path, groups):
    pytest.importorskip("tensorflow")
    from ai_edge_litert.interpreter import Interpreter

    from albert_edge.converters import tflite

    model = _classifier(groups)
    for rule in _rules(model)[:2]:
        adaptive = AdaptiveClassifier(model, rule)
        path = tmp_path / f"{rule.kind}.tflite"
        path.write_bytes(tflite.convert(adaptive, seq_len=16, layers="loop"))
        runner = Interpreter(model_path=str(path)).get_signature_runner("serving_default")

        def run(ids, mask, types, runner=runner):
            out = runner(input_ids=ids.astype(np.int32), attention_mask=mask.astype(np.int32),
                         token_type_ids=types.astype(np.int32))
            return out["logits"], out["passes"]

        seen = _check_engine(adaptive, run)
        assert len(set(seen)) >= 2, f"{rule}: every input ran {set(seen)} passes; the test shows nothing"
        report = analyze(read_file(path), adaptive)
        assert report.ok, report.problems()


def test_a_classifier_without_exits_is_refused_in_one_line():
    plain = build_model(AlbertConfig.preset("tiny").replace(vocab_size=99, num_labels=3), "classification")
    with pytest.raises(ConversionError, match="trained without early exits.*--exits frozen"):
        AdaptiveClassifier(plain, ExitRule("patience", 1))


def test_a_rule_outside_the_model_is_refused():
    with pytest.raises(ConfigError, match=re.escape("patience (4) must be a whole number from 1 to 3")):
        AdaptiveClassifier(_classifier(1), ExitRule("patience", 4))
