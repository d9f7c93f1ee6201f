"""The web app's JSON API through Starlette's TestClient, on the tiny bundle's real files."""

from __future__ import annotations

import re
import threading
import time

import pytest
from starlette.testclient import TestClient

from albert_edge.demo.server import ServerOptions, create_app


@pytest.fixture(scope="module")
def client(tiny_bundle):
    with TestClient(create_app(tiny_bundle, ServerOptions(threads=1))) as c:
        yield c


def test_page_is_one_file_with_no_external_assets(client):
    r = client.get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    page = r.text
    assert "<style>" in page and "<script>" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert not re.search(r"<link|@import|url\(", page)
    for element in ('id="text"', 'id="classify"', 'id="fill"', 'name="format"', 'name="scheme"', 'id="running"'):
        assert element in page


def test_classify_and_fill_mask(client):
    r = client.post("/api/classify", json={"text": "Parse the message headers."})
    assert r.status_code == 200
    data = r.json()
    assert data["label"] in [s["label"] for s in data["scores"]] and data["latency_ms"] > 0
    r = client.post("/api/fill-mask", json={"text": "the event ___ runs", "top_k": 2})
    assert r.status_code == 200
    assert len(r.json()["masks"]) == 1 and len(r.json()["masks"][0]["predictions"]) == 2


def test_status_shows_files_latency_memory_device(client):
    client.post("/api/classify", json={"text": "warm"})
    s = client.get("/api/status").json()
    assert s["model"] in s["available"] and sorted(s["available"]) == sorted(
        f"{fmt}-{form}" for fmt in ("onnx", "tflite") for form in ("adaptive", "int8", "fp32"))
    m = s["models"]["classifier"]
    assert m["file"].startswith("classifier") and m["size_bytes"] > 0 and m["runtime_version"]
    assert m["latency"]["count"] >= 1 and m["latency"]["p50_ms"] <= m["latency"]["p90_ms"]
    assert s["memory"]["rss"] > 10_000_000 and s["memory"]["peak_rss"] >= s["memory"]["rss"]
    for key in ("cpu_model", "cpu_cores", "ram_bytes", "os", "python", "board", "throttled", "governor", "temperatures"):
        assert key in s["device"]
    assert s["limits"]["max_tokens"] == 32 and s["bundle"]["held_out_accuracy"]["examples"] > 0


@pytest.mark.parametrize("key", ["tflite-fp32", "onnx-fp32", "tflite-int8", "onnx-int8"])
def test_switch_model_live(client, key):
    r = client.post("/api/model", json={"model": key})
    assert r.status_code == 200 and r.json()["model"] == key
    assert client.post("/api/classify", json={"text": "xml element tree"}).json()["model"] == key
    fmt = key.split("-")[0]
    assert client.get("/api/status").json()["models"]["mlm"]["format"] == fmt


@pytest.mark.parametrize("path, body, status, message", [
    ("/api/classify", b"not json", 400, "not JSON"),
    ("/api/classify", b"\xff\xfe\x00bad", 400, "not UTF-8"),
    ("/api/classify", b"", 400, "not JSON"),
    ("/api/classify", b"[1, 2]", 400, "JSON object"),
    ("/api/classify", b'"text"', 400, "JSON object"),
    ("/api/classify", b'{"text": 5}', 400, "string"),
    ("/api/classify", b'{"text": ["a"]}', 400, "string"),
    ("/api/classify", b'{"text": ""}', 400, "empty"),
    ("/api/classify", b'{}', 400, "string"),
    ("/api/classify", b'{"text": "\\ud800"}', 200, None),
    ("/api/fill-mask", b'{"text": "no blank"}', 400, "MASK"),
    ("/api/fill-mask", b'{"text": "a [MASK]", "top_k": "x"}', 400, "top_k"),
    ("/api/fill-mask", b'{"text": "a [MASK]", "top_k": 1e9}', 400, "top_k"),
    ("/api/model", b'{"model": "onnx-int4"}', 400, "unknown model"),
    ("/api/model", b'{"model": null}', 400, "onnx-int8"),
    ("/api/classify", b'{"text": "' + b"a" * 20_000 + b'"}', 413, "larger than"),
    ("/api/classify", b'{"text": "caf\xe9"}', 400, "not UTF-8 (byte 0xe9 at offset 13)"),
    # Nested deep enough to exhaust json's recursion, yet under the size limit: 400, not a 500.
    ("/api/classify", b"[" * 8000 + b"]" * 8000, 400, "more than 16 deep"),
    ("/api/classify", b'{"text": "x", "a": ' + b"{" * 5000 + b"}" * 5000 + b"}", 400, "more than 16 deep"),
    ("/api/fill-mask", b'{"text": "a [MASK]", "top_k": ' + b"[" * 17 + b"]" * 17 + b"}", 400, "more than 16 deep"),
    ("/api/classify", b'{"text": "[[[[[[[[[[[[[[[[[[[[ brackets in text are text"}', 200, None),
])
def test_no_input_crashes_it(client, path, body, status, message):
    r = client.post(path, content=body, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    if message:
        assert message in r.json()["error"] and "\n" not in r.json()["error"]
    assert client.get("/api/status").status_code == 200  # still up


def test_body_size_is_checked_while_reading_too(client):
    def chunks():
        for _ in range(40):
            yield b"x" * 1024

    r = client.post("/api/classify", content=chunks())  # no content-length: streamed
    assert r.status_code == 413


def test_long_text_is_truncated_and_says_so(client):
    r = client.post("/api/classify", json={"text": "the decimal module " * 300})
    assert r.status_code == 200 and r.json()["truncated"] and "32 tokens" in r.json()["note"]


def test_get_on_post_routes_and_unknown_paths(client):
    assert client.get("/api/classify").status_code == 405
    assert client.get("/nothing").status_code == 404


def test_busy_gives_503_and_timeouts_never_pile_up(tiny_bundle):
    """Queue of 1 and a 0.5 s limit. While the model is held (the engine's run lock, as during a
    long answer), a request times out (504) but keeps its slot until the work ends, so the next
    one is turned away at once with 503 + Retry-After; when the model is free, all is well."""
    app = create_app(tiny_bundle, ServerOptions(queue=1, timeout_s=0.5, retry_after_s=2, threads=1))
    engine = app.state.engine
    with TestClient(app) as c:
        engine._run_lock.acquire()
        try:
            first = {}
            t = threading.Thread(target=lambda: first.update(r=c.post("/api/classify", json={"text": "a"})))
            t.start()
            time.sleep(0.2)
            start = time.monotonic()
            busy = c.post("/api/classify", json={"text": "b"})
            assert busy.status_code == 503 and busy.headers["retry-after"] == "2"
            assert time.monotonic() - start < 0.4  # turned away at once, not queued
            t.join()
            assert first["r"].status_code == 504
            assert c.post("/api/classify", json={"text": "c"}).status_code == 503  # slot still held
            assert c.get("/api/status").json()["queue"]["rejected"] == 2
        finally:
            engine._run_lock.release()
        deadline = time.monotonic() + 5
        while c.get("/api/status").json()["queue"]["inside"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert c.post("/api/classify", json={"text": "d"}).status_code == 200


def test_a_bundle_whose_parts_disagree_is_refused(disagreeing, tiny_bundle, tmp_path):
    """Refused when the app is made (before it serves), and a switch to a file that does not fit
    its task is a 400 that leaves the loaded files serving."""
    import shutil

    from albert_edge.errors import AlbertEdgeError

    with pytest.raises(AlbertEdgeError, match="lists 3 labels but"):
        create_app(disagreeing("labels-short"))
    copy = tmp_path / "bundle"
    shutil.copytree(tiny_bundle, copy)
    shutil.copyfile(copy / "mlm" / "model.onnx", copy / "classifier" / "model.onnx")
    with TestClient(create_app(copy, ServerOptions(threads=1, model="onnx-int8"))) as c:
        r = c.post("/api/model", json={"model": "onnx-fp32"})
        assert r.status_code == 400 and "classifier/model.onnx is a fill-mask (MLM) model" in r.json()["error"]
        assert c.get("/api/status").json()["model"] == "onnx-int8"
        assert c.post("/api/classify", json={"text": "still here"}).status_code == 200
