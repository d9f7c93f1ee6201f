"""The JavaScript runtimes apps use, driven from the tests: Node (onnxruntime-node) through a small
script in web/, and headless Chromium (onnxruntime-web, MediaPipe Tasks for Web) on pages in web/
served from 127.0.0.1 and driven by Selenium. The npm packages come from web/package-lock.json
(`npm ci` in web/, as .ci/web.sh does); a test whose runtime is missing skips, saying which.

Ids go in as JSON arrays; outputs come back as the float32 bytes the runtime computed, in base64
(web/tensors.mjs), so nothing is lost to a decimal round trip."""

from __future__ import annotations

import base64
import contextlib
import functools
import http.server
import importlib.util
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from albert_edge.profile.web import WEBGPU_FLAGS

WEB = Path(__file__).resolve().parents[2] / "web"
NODE_MODULES = WEB / "node_modules"
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
NPM_CI = "run `npm ci` in web/ (.ci/web.sh does)"
# A page's work in a browser on two shared cores: loading the WebAssembly, then the files.
PAGE_SECONDS = 180
# Chromium's GPU APIs where a machine has no GPU: WebGPU on Vulkan (SwiftShader: Chromium does not
# give a page Mesa's lavapipe), WebGL2 through ANGLE on SwiftShader. Chromium here gives a page one
# or the other, not both, under one set of flags.
GPU_FLAGS = {
    "webgpu": WEBGPU_FLAGS,
    "webgl2": ("--use-angle=swiftshader", "--enable-unsafe-swiftshader"),
}


def node_missing() -> str | None:
    """Why Node cannot run here (None when it can)."""
    if shutil.which("node") is None:
        return "node is not installed (Debian: apt-get install nodejs)"
    return None


def package_missing(*packages: str) -> str | None:
    """Why these npm packages cannot be used (None when web/node_modules has them)."""
    missing = [p for p in packages if not (NODE_MODULES / p / "package.json").is_file()]
    if missing:
        return f"{', '.join(missing)} not in web/node_modules: {NPM_CI}"
    return None


def chromium_missing() -> str | None:
    """Why headless Chromium cannot be driven here (None when it can)."""
    if not (CHROMIUM.is_file() and CHROMEDRIVER.is_file()):
        return "Debian's chromium and chromium-driver are not installed"
    if importlib.util.find_spec("selenium") is None:
        return "selenium is not installed (albert-edge[dev] has it)"
    return None


def feeds_json(feeds: Mapping[str, np.ndarray]) -> dict:
    return {name: {"dims": list(a.shape), "data": a.astype(np.int64).ravel().tolist()} for name, a in feeds.items()}


def decode(tensor: dict) -> np.ndarray:
    """An output as web/tensors.mjs writes it: float32 little-endian bytes in base64."""
    assert tensor["dtype"] == "float32", tensor["dtype"]
    return np.frombuffer(base64.b64decode(tensor["base64"]), dtype="<f4").reshape(tensor["dims"])


def decoded(results: dict) -> dict[str, dict[str, np.ndarray]]:
    """A response's results, each output decoded, by file."""
    return {path: {name: decode(t) for name, t in r["outputs"].items()} for path, r in results.items()}


def run_node(script: str, request: dict, work: Path, timeout: float = 300) -> dict:
    """``node web/SCRIPT REQUEST.json RESPONSE.json``; the response, parsed. A failure shows Node's
    own error output."""
    work.mkdir(parents=True, exist_ok=True)
    req, resp = work / "request.json", work / "response.json"
    req.write_text(json.dumps(request))
    scratch = work / "node-tmp"  # onnxruntime-node leaves a mat-debug-<pid>.log in its temporary folder
    scratch.mkdir(exist_ok=True)
    done = subprocess.run(["node", str(WEB / script), str(req), str(resp)], capture_output=True, text=True,
                          timeout=timeout, cwd=WEB, env={**os.environ, "TMPDIR": str(scratch)})
    assert done.returncode == 0, f"node {script} failed (exit {done.returncode}):\n{done.stderr[-4000:]}"
    return json.loads(resp.read_text())


class _Handler(http.server.SimpleHTTPRequestHandler):
    """web/ at /, the test's own files at /files/NAME. Every answer says the page is cross-origin
    isolated (COOP + COEP), which browsers require before they give WebAssembly threads."""

    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, ".mjs": "text/javascript",
                      ".js": "text/javascript", ".wasm": "application/wasm", ".json": "application/json",
                      ".tflite": "application/octet-stream", ".onnx": "application/octet-stream",
                      ".ort": "application/octet-stream"}
    files: Mapping[str, Path] = {}
    served: list[str]

    def translate_path(self, path: str) -> str:
        name = path.split("?", 1)[0]
        if name.startswith("/files/"):
            found = self.files.get(name[len("/files/"):])
            return str(found) if found else str(WEB / "no such file")
        return super().translate_path(path)

    def end_headers(self) -> None:
        self.send_header("Cross-Origin-Opener-Policy", "same-origin")
        self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, format, *args) -> None:  # noqa: A002  (the base class's name)
        self.served.append(self.path)


@contextlib.contextmanager
def serve(files: Mapping[str, Path]) -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on 127.0.0.1 (a free port) in a thread: web/ and ``files`` at /files/NAME.
    Yields its base URL and the list of paths it has answered."""
    served: list[str] = []
    handler = type("Handler", (_Handler,), {"files": dict(files), "served": served})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(WEB)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", served
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextlib.contextmanager
def chromium(profile: Path, gpu: str | None = None):
    """Debian's headless Chromium through Selenium and chromedriver (no download), with its
    console log kept (the report and demo page tests drive it the same way). ``gpu``: a key of
    :data:`GPU_FLAGS`, the GPU API it offers pages (none by default)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless", "--no-sandbox", *(GPU_FLAGS[gpu] if gpu else ("--disable-gpu",)),
                 "--disable-background-networking", "--disable-component-update", "--no-first-run",
                 "--window-size=1000,700", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def run_page(driver, url: str, timeout: float = PAGE_SECONDS) -> dict:
    """Open ``url`` (a page of web/ that sets ``window.albertEdge``) and wait until it is done; its
    result. A page that failed fails here with its error and console."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url)
    WebDriverWait(driver, timeout, poll_frequency=0.5).until(
        lambda d: d.execute_script("return window.albertEdge && window.albertEdge.done"))
    state = driver.execute_script("return window.albertEdge")
    if state["error"]:
        console = "\n".join(e["message"] for e in driver.get_log("browser"))
        raise AssertionError(f"{url} failed: {state['error']}\nconsole:\n{console}")
    return state["result"]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two (rows, dims) arrays, in float64."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


# What every runtime must give on the held-out text: fp32 files within ATOL of PyTorch and their
# embeddings (the pooled vector) at a cosine of at least COSINE; the int8 file the same label as
# albert-edge's own Session on that file for at least AGREEMENT of the texts.
ATOL = 1e-4
COSINE = 0.9999
AGREEMENT = 0.99


def check_answers(got: Mapping[str, Mapping[str, np.ndarray]], pytorch: Mapping[str, Mapping[str, np.ndarray]],
                  int8_session: np.ndarray) -> dict[str, dict[str, float]]:
    """Hold a runtime's outputs (by file name: base.onnx, base.ort, classifier.onnx, classifier.ort,
    classifier.int8.onnx) to the thresholds above. Returns the figures measured, by file."""
    figures: dict[str, dict[str, float]] = {}
    for name in ("base.onnx", "base.ort", "classifier.onnx", "classifier.ort"):
        reference = pytorch[name.split(".")[0]]
        assert set(got[name]) == set(reference), (name, sorted(got[name]))
        f = figures[name] = {}
        for output, want in reference.items():
            assert got[name][output].shape == want.shape, (name, output, got[name][output].shape, want.shape)
            f[f"{output} max_abs_diff"] = float(np.abs(got[name][output] - want).max())
        if "pooler_output" in reference:
            f["pooler_output min_cosine"] = float(cosines(got[name]["pooler_output"], reference["pooler_output"]).min())
        if "logits" in reference:
            same = got[name]["logits"].argmax(1) == reference["logits"].argmax(1)
            f["top1 agreement with pytorch"] = float(same.mean())
    int8 = got["classifier.int8.onnx"]["logits"]
    assert int8.shape == int8_session.shape
    figures["classifier.int8.onnx"] = {
        "top1 agreement with albert-edge Session": float((int8.argmax(1) == int8_session.argmax(1)).mean()),
        "logits max_abs_diff vs Session": float(np.abs(int8 - int8_session).max()),
        "rows": int8.shape[0]}
    for name, f in figures.items():
        for key, value in f.items():
            if key.endswith("max_abs_diff") and not key.endswith("vs Session"):
                assert value <= ATOL, (name, key, value)
            elif key.endswith("min_cosine"):
                assert value >= COSINE, (name, key, value)
            elif "agreement" in key:
                assert value >= AGREEMENT, (name, key, value)
    return figures
