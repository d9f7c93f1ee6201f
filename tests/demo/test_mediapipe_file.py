"""A bundle whose classifier folder also holds model.mediapipe.tflite: the demo serves it through
albert-edge's Session (LiteRT) and says so in every answer and on the page.

A real .mediapipe.tflite needs mediapipe to be written (convert --to mediapipe), which this
environment does not have: the file here is the bundle's own fp32 classifier .tflite under the
MediaPipe file's name, so what is tested is the Session route, the padding to a fixed length and
the engine label. MediaPipe's own route, on a real file, is tested in tests/mobile/."""

from __future__ import annotations

import json
import shutil
import urllib.request

import numpy as np
import pytest

from albert_edge.demo.engine import MEDIAPIPE, Bundle, DemoInputError, Engine, Variant
from albert_edge.demo.tasks import mediapipe_installed
from albert_edge.runtime import Session

from .conftest import Server

TEXT = "Return the quotient of two decimal numbers."


@pytest.fixture(scope="module")
def mediapipe_bundle(tiny_bundle, tmp_path_factory):
    copy = tmp_path_factory.mktemp("mediapipe") / "bundle"
    shutil.copytree(tiny_bundle, copy)
    shutil.copyfile(copy / "classifier" / "model.tflite", copy / "classifier" / MEDIAPIPE.file_name)
    return copy


def test_the_mediapipe_file_is_a_variant_of_the_classifier_only(mediapipe_bundle):
    bundle = Bundle(mediapipe_bundle)
    assert MEDIAPIPE in bundle.variants("classifier") and MEDIAPIPE not in bundle.variants("mlm")
    assert Variant.parse("mediapipe-fp32") == MEDIAPIPE and MEDIAPIPE.file_name == "model.mediapipe.tflite"
    assert bundle.default_variant() != MEDIAPIPE  # the default stays the bundle's int8 file
    with pytest.raises(DemoInputError, match="unknown model"):
        Variant.parse("mediapipe-int8")


@pytest.mark.skipif(mediapipe_installed(), reason="with mediapipe installed, --mediapipe answers through it")
@pytest.mark.parametrize("use_mediapipe", [False, True])
def test_session_answers_and_says_so(mediapipe_bundle, use_mediapipe):
    engine = Engine(Bundle(mediapipe_bundle), "mediapipe-fp32", num_threads=1, mediapipe=use_mediapipe)
    result = engine.classify(TEXT)
    assert result["model"] == "mediapipe-fp32"
    assert result["engine"] == "LiteRT via albert-edge Session"  # mediapipe missing: LiteRT either way
    status = engine.status()["models"]["classifier"]
    assert status["engine"] == result["engine"] and status["file"] == "classifier/model.mediapipe.tflite"
    # The same label as the file run by hand through the runtime.
    session = Session(mediapipe_bundle / "classifier" / MEDIAPIPE.file_name)
    feeds = engine.bundle.tokenizer(TEXT, max_length=None, padding="longest")
    logits = session.run({k: v for k, v in feeds.items() if k in session.input_names})
    assert engine.bundle.labels[int(np.argmax(next(iter(logits.values()))[0]))] == result["label"]
    # mlm has no MediaPipe file: filling in a blank says so
    with pytest.raises(DemoInputError, match="no mlm model"):
        engine.fill_mask("The [MASK] loop.")


def test_other_files_name_their_runtime(tiny_bundle):
    engine = Engine(Bundle(tiny_bundle), "onnx-int8", num_threads=1)
    assert engine.classify(TEXT)["engine"] == "ONNX Runtime via albert-edge Session"
    assert engine.fill_mask("The event ___ runs tasks.")["engine"] == "ONNX Runtime via albert-edge Session"


def test_a_fixed_length_file_is_fed_padded(tiny_bundle, tmp_path):
    """A .mediapipe.tflite is fixed at its conversion's length: short text is padded with mask 0,
    and the answer is the one the unpadded ids give."""
    from albert_edge.demo.engine import _feeds

    class Fixed:
        inputs = Session(tiny_bundle / "classifier" / "model.tflite").inputs
        input_names = [s.name for s in inputs]

    Fixed.inputs = [type(s)(s.name, s.dtype, (1, 32)) for s in Fixed.inputs]
    feeds = _feeds([2, 7, 9, 3], Fixed)
    assert feeds["input_ids"].shape == (1, 32) and feeds["input_ids"][0, :4].tolist() == [2, 7, 9, 3]
    assert feeds["attention_mask"][0].tolist() == [1] * 4 + [0] * 28 and not feeds["token_type_ids"].any()


def test_the_page_shows_the_engine(mediapipe_bundle):
    srv = Server(mediapipe_bundle, "--model", "mediapipe-fp32", "--threads", "1")
    try:
        assert srv.status["models"]["classifier"]["engine"] == "LiteRT via albert-edge Session"
        assert "mediapipe-fp32" in srv.status["available"]
        request = urllib.request.Request(srv.url + "/api/classify", data=json.dumps({"text": TEXT}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as r:
            answer = json.loads(r.read())
        assert answer["engine"] == "LiteRT via albert-edge Session" and answer["model"] == "mediapipe-fp32"
        with urllib.request.urlopen(srv.url + "/", timeout=30) as r:
            page = r.read().decode()
        assert "engine: " in page and '"mediapipe-fp32"' in page and "m.engine" in page
    finally:
        srv.stop()
