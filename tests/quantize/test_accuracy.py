"""The accuracy figures: what is compared (real tokens only, [MASK] positions for MLM), how the
headline is chosen, and that a file measured against itself is perfect."""

from __future__ import annotations

import numpy as np
import pytest

from albert_edge.quantize.accuracy import (AccuracyReport, OutputAccuracy, _cosine, _Running, length_bucket, measure,
                                          output_kind)
from albert_edge.quantize.calibration import Batch, random_batches
from albert_edge.runtime import Session


def _batch(mask_rows: list[list[int]], masked: list[list[bool]] | None = None) -> Batch:
    mask = np.asarray(mask_rows, dtype=np.int64)
    feeds = {"input_ids": np.ones_like(mask), "attention_mask": mask, "token_type_ids": np.zeros_like(mask)}
    return Batch(feeds, None if masked is None else np.asarray(masked))


def test_output_kinds():
    assert output_kind("logits", "classification") == "label"
    assert output_kind("logits", "token-classification") == "token-label"
    assert output_kind("prediction_logits", "pretraining") == "mlm"
    assert output_kind("start_logits", "qa") == "span"
    assert output_kind("pooler_output", "base") == "examples"
    assert output_kind("last_hidden_state", "base") == "tokens"


def test_cosine_rows():
    a = np.array([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
    b = np.array([[2.0, 0.0], [0.0, 0.0], [-1.0, -1.0]])
    assert _cosine(a, b) == pytest.approx([1.0, 1.0, -1.0])


def test_padded_tokens_are_left_out():
    batch = _batch([[1, 1, 0]])
    ref = np.zeros((1, 3, 2))
    ref[0, :, 0] = 1.0
    got = ref.copy()
    got[0, 2] = [-50.0, 50.0]  # garbage at the padded position
    running = _Running("last_hidden_state", "tokens")
    running.add(ref, got, batch)
    result = running.result()
    assert result.rows == 2 and result.cosine_min == 1.0 and result.max_abs_diff == 0.0


@pytest.mark.parametrize("tokens, bucket", [(1, "<=8"), (8, "<=8"), (9, "9-32"), (32, "9-32"), (33, "33-128"),
                                           (128, "33-128"), (129, ">128")])
def test_length_buckets(tokens, bucket):
    assert length_bucket(tokens) == bucket


def test_figures_by_length_of_input():
    """A classifier right on long inputs and wrong on a short padded one: the whole agreement hides
    it, the <=8 bucket shows it."""
    batch = _batch([[1] * 4 + [0] * 36, [1] * 20 + [0] * 20, [1] * 40, [1] * 40])
    ref = np.array([[2.0, 0.0], [2.0, 0.0], [0.0, 2.0], [0.0, 2.0]])
    got = ref.copy()
    got[0] = [-2.0, 2.0]  # the 4-token input
    running = _Running("logits", "label")
    running.add(ref, got, batch)
    result = running.result()
    assert result.agreement == 0.75 and list(result.by_length) == ["<=8", "9-32", "33-128"]
    short, middle, long = result.by_length.values()
    assert (short["rows"], short["agreement"], short["max_abs_diff"]) == (1, 0.0, 4.0)
    assert (middle["agreement"], long["rows"], long["agreement"], long["max_abs_diff"]) == (1.0, 2, 1.0, 0.0)
    rows = AccuracyReport([result]).length_rows()
    assert rows[0] == ("logits", "<=8", 1, "-0.70711", "4", "0.00%", "label (1)")


def test_mlm_agreement_counts_masked_positions_only():
    batch = _batch([[1, 1, 1, 1]], masked=[[False, True, False, True]])
    ref = np.zeros((1, 4, 3))
    ref[0, :, 0] = 1.0
    got = ref.copy()
    got[0, 0] = [0.0, 2.0, 0.0]  # disagrees where nothing was masked: not counted
    got[0, 3] = [0.0, 0.0, 2.0]  # disagrees at a [MASK]
    running = _Running("prediction_logits", "mlm")
    running.add(ref, got, batch)
    result = running.result()
    assert (result.agreement, result.agreement_count, result.agreement_of) == (0.5, 2, "MLM top-1")


def test_span_argmax_ignores_padding():
    batch = _batch([[1, 1, 0], [1, 1, 1]])
    ref = np.array([[0.0, 1.0, 9.0], [3.0, 0.0, 0.0]])
    got = np.array([[0.0, 1.0, -9.0], [0.0, 0.0, 3.0]])
    running = _Running("start_logits", "span")
    running.add(ref, got, batch)
    assert running.result().agreement == 0.5


def test_headline_prefers_agreement_then_cosine():
    cos_only = AccuracyReport([OutputAccuracy("last_hidden_state", "tokens", 4, 0.97, 0.9, 0.1),
                               OutputAccuracy("pooler_output", "examples", 2, 0.99, 0.98, 0.1)])
    assert cos_only.headline == (0.97, "last_hidden_state mean cosine")
    assert cos_only.passes(0.03) and not cos_only.passes(0.02) and cos_only.passes(None)
    labelled = AccuracyReport([OutputAccuracy("logits", "label", 8, 0.99, 0.9, 0.1, 0.875, "label", 8)])
    assert labelled.headline == (0.875, "logits label agreement") and labelled.drop == pytest.approx(0.125)


def test_a_file_against_itself_is_perfect(converted):
    parent = Session(converted / "model.onnx")
    batches = random_batches(400, 16, count=4, batch_size=2, mask_id=4)
    report = measure(parent, parent, batches, head="mlm", text="random ids")
    [logits] = report.outputs
    assert logits.cosine_min == pytest.approx(1.0) and logits.max_abs_diff == 0.0 and logits.agreement == 1.0
    assert report.drop == 0.0 and report.to_dict()["headline_of"] == "prediction_logits MLM top-1 agreement"


def test_the_same_model_in_two_runtimes_agrees(converted):
    onnx_file, tflite_file = Session(converted / "model.onnx"), Session(converted / "model.tflite")
    batch = random_batches(400, 16, count=1, batch_size=1)[0]
    report = measure(onnx_file, tflite_file, [batch], head="mlm")  # same model, two runtimes
    assert report.outputs[0].cosine_min > 0.9999
