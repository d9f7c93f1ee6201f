"""The demo server against slow and hostile clients: a real uvicorn (in this process, on a free
loopback port) with the demo's guarded protocol, and the app through Starlette's TestClient.
Every server listens on 127.0.0.1 only; every loop is bounded in count and time."""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import shutil
import socket
import threading
import time

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from albert_edge.cli import main
from albert_edge.demo import server as server_module
from albert_edge.demo.guard import Access, host_allow_list, is_loopback, url_of
from albert_edge.demo.server import ServerOptions, create_app, exposure, uvicorn_config

from .conftest import free_port

NESTING_BODY = b'"' + b'\\"' * 8191  # 16 KB that cost the old nesting check 0.64 s


class LiveServer:
    """uvicorn serving ``app`` on 127.0.0.1 in a thread of this process, as `demo serve` runs it."""

    def __init__(self, app, options: ServerOptions):
        import uvicorn

        self.port = free_port()
        self.server = uvicorn.Server(uvicorn_config(app, "127.0.0.1", self.port, options))
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve()), daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "server did not start"
            time.sleep(0.05)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(15)

    def connect(self, timeout: float = 10) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=timeout)

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
                timeout: float = 10) -> tuple[int, dict, bytes, float]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        start = time.monotonic()
        try:
            conn.request(method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read(), time.monotonic() - start
        finally:
            conn.close()


@pytest.fixture(scope="module")
def live(tiny_bundle):
    """Short time limits (1 s for headers, 1 s for a body), 8 connections in all and 6 per client."""
    options = ServerOptions(threads=1, model="onnx-int8", header_timeout_s=1, body_timeout_s=1,
                            max_connections=8, max_connections_per_client=6)
    srv = LiveServer(create_app(tiny_bundle, options, Access(host_allow_list("127.0.0.1"))), options)
    yield srv
    srv.stop()


def _closed_within(sock: socket.socket, seconds: float) -> bytes | None:
    """What the server sent before closing ``sock`` (None: still open after ``seconds``)."""
    sock.settimeout(0.2)
    got, deadline = b"", time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(4096)
        except socket.timeout:
            continue
        except ConnectionResetError:
            return got
        if not chunk:
            return got
        got += chunk
    return None


HEAD = b"POST /api/classify HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"


@pytest.mark.parametrize("sent", [
    b"",  # connects and sends nothing
    b"POST /api/classify HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le",  # half a header
    HEAD + b"Content-Length: 100\r\n\r\n" + b'{"text": "',  # headers and half the body
], ids=["nothing", "half-a-header", "half-a-body"])
def test_a_slow_client_is_dropped_within_seconds(live, sent):
    with live.connect() as sock:
        sock.sendall(sent)
        start = time.monotonic()
        assert _closed_within(sock, 5) is not None, "the connection was still open after 5 s"
        assert time.monotonic() - start < 3
    status, *_ = live.request("GET", "/api/status")
    assert status == 200


def test_content_length_with_transfer_encoding_is_400_and_closed(live):
    with live.connect() as sock:
        sock.sendall(HEAD + b"Content-Length: 16\r\nTransfer-Encoding: chunked\r\n\r\n" + b'{"text": "abc"}\n')
        start = time.monotonic()
        answer = _closed_within(sock, 5)
        assert answer is not None and time.monotonic() - start < 0.9  # answered, not timed out
        assert answer.startswith(b"HTTP/1.1 400 ") and b"Content-Length and Transfer-Encoding" in answer


def test_connections_past_the_limits_get_503_with_retry_after(live):
    held = [live.connect() for _ in range(6)]  # the per-client limit, all from 127.0.0.1
    try:
        time.sleep(0.2)
        status, headers, body, _ = live.request("GET", "/api/status")
        assert status == 503 and headers["retry-after"] == "1" and b"too many connections" in body
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + 5
    while live.request("GET", "/api/status")[0] != 200:
        assert time.monotonic() < deadline, "the freed connections were never counted out"
        time.sleep(0.1)


def test_no_server_banner_and_security_headers_on_the_wire(live):
    status, headers, _, _ = live.request("GET", "/")
    assert status == 200 and "server" not in headers
    assert headers["x-content-type-options"] == "nosniff"
    assert "frame-ancestors 'none'" in headers["content-security-policy"]


@pytest.mark.parametrize("size", [8 * 1024, 16 * 1024, 32 * 1024])
def test_the_nesting_check_is_linear(size):
    data = b'"' + b'\\"' * (size // 2 - 1)
    start = time.perf_counter()
    assert server_module._nesting(data) == 0
    assert time.perf_counter() - start < 0.05  # the old check took 0.13 s, 0.64 s and 2.3 s


@pytest.mark.parametrize("data, depth", [
    (b'{"a": [1, {"b": 2}]}', 3),
    (b'{"text": "[[[[{{{{"}', 1),
    (b'{"text": "\\"[[[\\\\", "b": [[]]}', 3),
    (b'{"text": "unterminated [[[[', 1),
    (b'[' * 20 + b']' * 20, 20),
    (b'"\\', 0),
])
def test_the_nesting_check_skips_strings(data, depth):
    assert server_module._nesting(data) == depth


def test_held_connections_and_nesting_bodies_never_stop_a_good_client(tiny_bundle):
    """64 held connections (nothing, half a header, half a body) and 4 clients sending the 16 KB
    nesting body as fast as they can: a good client's requests all answer 200 within 0.5 s.
    (The old server: 48 connections filled uvicorn's limit and every other request got 503.)"""
    options = ServerOptions(threads=1, model="onnx-int8", queue=8, header_timeout_s=20, body_timeout_s=20)
    srv = LiveServer(create_app(tiny_bundle, options, Access(host_allow_list("127.0.0.1"))), options)
    held, stop = [], threading.Event()
    slow_kinds = [b"", b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nAcc", HEAD + b"Content-Length: 100\r\n\r\n{"]
    nesting_codes: list[int] = []

    def hostile() -> None:
        for _ in range(300):  # bounded; stops earlier when the good client is done
            if stop.is_set():
                return
            nesting_codes.append(srv.request("POST", "/api/classify", NESTING_BODY, timeout=10)[0])

    try:
        for i in range(64):
            sock = srv.connect()
            sock.sendall(slow_kinds[i % 3])
            held.append(sock)
        clients = [threading.Thread(target=hostile, daemon=True) for _ in range(4)]
        for t in clients:
            t.start()
        time.sleep(0.3)
        answers = [srv.request("POST", "/api/classify", json.dumps({"text": f"parse the xml {i}"}).encode())
                   for i in range(20)]
        stop.set()
        for t in clients:
            t.join(15)
        codes = [a[0] for a in answers]
        slowest = max(a[3] for a in answers)
        assert codes == [200] * 20, codes
        assert slowest < 0.5, f"slowest good request {slowest:.3f} s"
        assert nesting_codes and set(nesting_codes) == {400}, set(nesting_codes)
    finally:
        stop.set()
        for sock in held:
            sock.close()
        srv.stop()


# -- origin, host, content type, token, headers (TestClient) -----------------------------------

TOKEN = "a-token-of-the-demo-0123"


@pytest.fixture(scope="module")
def guarded(tiny_bundle):
    app = create_app(tiny_bundle, ServerOptions(threads=1, model="onnx-int8"),
                     Access(host_allow_list("127.0.0.1", ("pi.lab",)), TOKEN))
    with TestClient(app, base_url="http://127.0.0.1:8000") as c:
        yield c


AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_a_text_plain_post_from_another_page_switches_nothing(guarded):
    r = guarded.post("/api/model", content=b'{"model": "tflite-fp32"}', headers={**AUTH, "content-type": "text/plain"})
    assert r.status_code == 415 and "application/json" in r.json()["error"]
    r = guarded.post("/api/model", json={"model": "tflite-fp32"},
                     headers={**AUTH, "origin": "http://evil.example", "sec-fetch-site": "cross-site"})
    assert r.status_code == 403 and "other web pages" in r.json()["error"]
    r = guarded.post("/api/model", json={"model": "tflite-fp32"}, headers={**AUTH, "origin": "null"})
    assert r.status_code == 403
    assert guarded.get("/api/status", headers=AUTH).json()["model"] == "onnx-int8"


def test_the_page_s_own_origin_drives_it(guarded):
    r = guarded.post("/api/classify", json={"text": "decimal rounding"},
                     headers={**AUTH, "origin": "http://127.0.0.1:8000", "sec-fetch-site": "same-origin"})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("host, status", [
    ("evil.example", 403), ("evil.example:8000", 403), ("rebind.attacker.test:8000", 403),
    ("127.0.0.1:8000", 200), ("localhost:8000", 200), ("[::1]:8000", 200), ("192.168.1.20:8000", 200),
    ("pi.lab:8000", 200), (f"{socket.gethostname()}:8000", 200),
])
def test_host_is_checked_against_dns_rebinding(guarded, host, status):
    r = guarded.get("/api/status", headers={**AUTH, "host": host})
    assert r.status_code == status, r.text
    if status == 403:
        assert "--allow-host" in r.json()["error"]


def test_the_token_is_asked_of_the_api_not_of_the_page(guarded):
    assert guarded.get("/").status_code == 200
    for headers in ({}, {"Authorization": "Bearer wrong-token-of-the-demo"}, {"Authorization": TOKEN}):
        r = guarded.get("/api/status", headers=headers)
        assert r.status_code == 401 and "#token=" in r.json()["error"]
        assert guarded.post("/api/classify", json={"text": "x"}, headers=headers).status_code == 401
    assert guarded.get("/api/status", headers=AUTH).status_code == 200


@pytest.mark.parametrize("path", ["/", "/api/status", "/nothing"])
def test_every_answer_has_the_security_headers(guarded, path):
    import base64
    import hashlib
    import re

    r = guarded.get(path, headers=AUTH)
    assert r.headers["x-content-type-options"] == "nosniff" and r.headers["x-frame-options"] == "DENY"
    assert r.headers["referrer-policy"] == "no-referrer"
    csp = r.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in csp and "default-src 'none'" in csp and "connect-src 'self'" in csp
    script = re.search(r"<script>(.*?)</script>", guarded.get("/").text, re.S).group(1)
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    assert f"'sha256-{digest}'" in csp  # the page's own script runs, nothing else
    assert "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]


def test_the_page_sends_the_token_it_was_given(guarded):
    page = guarded.get("/").text
    assert "#token=" in page or "token=" in page
    assert "Authorization" in page and "localStorage" in page and "history.replaceState" in page


def test_token_must_be_long_enough():
    from albert_edge.errors import AlbertEdgeError

    with pytest.raises(AlbertEdgeError, match="16 to 256"):
        ServerOptions(token="short")
    assert TOKEN not in repr(ServerOptions(token=TOKEN))


def test_status_never_shows_the_token(guarded):
    assert TOKEN not in guarded.get("/api/status", headers=AUTH).text


# -- addresses, the start warning ---------------------------------------------------------------

@pytest.mark.parametrize("host, url", [
    ("127.0.0.1", "http://127.0.0.1:8000/"), ("::1", "http://[::1]:8000/"), ("localhost", "http://localhost:8000/"),
    ("fe80::1", "http://[fe80::1]:8000/"),
])
def test_the_announced_url(host, url):
    assert url_of(host, 8000) == url


def test_exposure_warning_names_what_is_exposed():
    assert exposure("127.0.0.1", ServerOptions()) is None and exposure("::1", ServerOptions()) is None
    assert is_loopback("localhost") and not is_loopback("0.0.0.0") and not is_loopback("192.168.1.2")
    with_token = exposure("0.0.0.0", ServerOptions(token=TOKEN))
    assert "/api/status" in with_token and "token" in with_token and TOKEN not in with_token
    assert "--no-auth" in exposure("0.0.0.0", ServerOptions())


def test_token_and_no_auth_together_are_refused():
    r = CliRunner().invoke(main, ["demo", "serve", "nowhere", "--token", TOKEN, "--no-auth"])
    assert r.exit_code == 2 and "not both" in r.output


# -- faults of the server's own files -------------------------------------------------------------

@pytest.fixture()
def own_copy(tiny_bundle, tmp_path):
    copy = tmp_path / "bundle"
    shutil.copytree(tiny_bundle, copy)
    return copy


def test_a_model_file_deleted_under_the_server_is_503_and_one_log_line(own_copy, caplog):
    app = create_app(own_copy, ServerOptions(threads=1, model="onnx-int8"))
    engine = app.state.engine
    with TestClient(app) as c, caplog.at_level(logging.ERROR, logger="albert_edge.demo.faults"):
        assert c.get("/api/status").status_code == 200
        engine.bundle.file("classifier", engine.variant).unlink()
        for _ in range(3):  # the page polls every 3 s
            r = c.get("/api/status")
            assert r.status_code == 503 and "was deleted" in r.json()["error"] and "\n" not in r.json()["error"]
        r = c.post("/api/classify", json={"text": "still"})
        assert r.status_code == 503 and "was deleted" in r.json()["error"]
        lines = [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
        assert len(lines) == 1 and lines[0].exc_info is None and "was deleted" in lines[0].getMessage()
        assert c.post("/api/model", json={"model": "tflite-int8"}).status_code == 200  # good files again
        assert c.get("/api/status").status_code == 200
        assert c.post("/api/classify", json={"text": "back"}).status_code == 200


def test_a_model_file_damaged_under_the_server_is_503(own_copy):
    app = create_app(own_copy, ServerOptions(threads=1, model="onnx-int8"))
    engine = app.state.engine
    with TestClient(app) as c:
        path = engine.bundle.file("mlm", engine.variant)
        path.write_bytes(b"not a model any more")
        r = c.get("/api/status")
        assert r.status_code == 503 and "changed" in r.json()["error"]
        assert c.post("/api/fill-mask", json={"text": "a [MASK]"}).status_code == 503


def test_a_switch_to_a_variant_whose_file_is_gone_is_refused(own_copy):
    from albert_edge.demo.engine import Variant

    app = create_app(own_copy, ServerOptions(threads=1, model="onnx-int8"))
    engine = app.state.engine
    with TestClient(app) as c:
        engine.bundle.file("classifier", Variant.parse("tflite-fp32")).unlink()
        r = c.post("/api/model", json={"model": "tflite-fp32"})
        assert r.status_code == 503 and "is missing" in r.json()["error"]
        assert c.get("/api/status").json()["model"] == "onnx-int8"
        assert c.post("/api/classify", json={"text": "still here"}).status_code == 200


@pytest.mark.parametrize("name, text", [
    ("labels.json", "[" * 100_000 + "]" * 100_000),
    ("bundle.json", '{"seq_len": 32, "x": ' + "[" * 100_000 + "]" * 100_000 + "}"),
    ("classifier/manifest.json", '{"source": ' + "[" * 100_000 + "]" * 100_000 + "}"),
])
def test_a_deeply_nested_json_at_start_is_one_line_and_exit_2(own_copy, name, text):
    (own_copy / name).write_text(text)
    r = CliRunner().invoke(main, ["demo", "classify", str(own_copy), "hello"])
    assert r.exit_code == 2, r.output
    assert "cannot be read" in r.output and "bug" not in r.output and len(r.output.strip().splitlines()) == 1


def test_the_load_test_sends_the_token(tiny_bundle):
    from albert_edge.demo.loadtest import LoadTestOptions, run_load_test

    options = ServerOptions(threads=1, model="onnx-int8", token=TOKEN)
    srv = LiveServer(create_app(tiny_bundle, options, Access(host_allow_list("127.0.0.1"), TOKEN)), options)
    try:
        result = run_load_test(LoadTestOptions(url=f"http://127.0.0.1:{srv.port}", clients=2, seconds=1, warmup=2,
                                               token=TOKEN))
        assert result["errors"] == 0 and result["codes"].get("200", 0) > 0, result
        assert TOKEN not in json.dumps(result)
    finally:
        srv.stop()


def test_the_page_opens_from_a_link_on_another_site(guarded):
    r = guarded.get("/", headers={"sec-fetch-site": "cross-site", "sec-fetch-mode": "navigate"})
    assert r.status_code == 200 and "frame-ancestors 'none'" in r.headers["content-security-policy"]


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")
def test_serve_on_ipv6_loopback_announces_the_address_in_brackets(tiny_bundle, monkeypatch):
    import uvicorn

    served = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, *a, **k: served.append(self.config))  # announce only
    with socket.socket(socket.AF_INET6) as s:
        s.bind(("::1", 0))
        port = s.getsockname()[1]
    r = CliRunner().invoke(main, ["demo", "serve", str(tiny_bundle), "--host", "::1", "--port", str(port),
                                  "--token", TOKEN, "--threads", "1"])
    assert r.exit_code == 0, r.output
    assert f"albert-edge demo on http://[::1]:{port}/ " in r.output and "warning" not in r.output
    assert "#token=<your token>" in r.output and TOKEN not in r.output
    assert served and served[0].server_header is False


@pytest.mark.parametrize("extra, wants_token", [((), True), (("--no-auth",), False)])
def test_off_loopback_a_token_is_made_unless_no_auth_is_said(tiny_bundle, monkeypatch, extra, wants_token):
    """Nothing listens here: the address check and uvicorn's run are replaced, the app is asked in-process."""
    import re

    import uvicorn

    served = []
    monkeypatch.setattr(server_module, "_check_address", lambda host, port: None)
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, *a, **k: served.append(self.config))
    r = CliRunner().invoke(main, ["demo", "serve", str(tiny_bundle), "--host", "0.0.0.0", "--threads", "1", *extra])
    assert r.exit_code == 0, r.output
    assert "warning: listening on 0.0.0.0" in r.output and "/api/status" in r.output
    made = re.search(r"albert-edge demo on http://0\.0\.0\.0:8000/#token=([A-Za-z0-9_-]{20,})\s", r.output)
    assert bool(made) == wants_token, r.output
    with TestClient(served[0].app, base_url="http://192.168.1.20:8000") as c:
        assert c.get("/api/status").status_code == (401 if wants_token else 200)
        if made:
            assert c.get("/api/status", headers={"Authorization": f"Bearer {made.group(1)}"}).status_code == 200
        assert c.get("/api/status", headers={"host": "attacker.example:8000"}).status_code == 403
