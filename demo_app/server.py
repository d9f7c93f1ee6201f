"""The demo's web app: one page with no external assets, and a small JSON API over the engine.

    GET  /              the page
    GET  /api/status    the loaded files, running p50/p90, process memory, the device, the limits
    POST /api/classify  {"text": ...}                 -> label, scores, latency
    POST /api/fill-mask {"text": ..., "top_k": 5}     -> predictions per [MASK] (or ___), latency
    POST /api/model     {"model": "onnx-int8"}        -> switch files live (fp32/int8, onnx/tflite/mediapipe)

Every answer names the engine that gave it ("engine": "LiteRT via albert-edge Session",
"MediaPipe Tasks TextClassifier", ...).

Safe under use: request bodies are bounded (413), text is cut to the model's length (the answer
says so), one worker runs the model and at most ``queue`` requests wait for it (more: 503 with
Retry-After, never a pile-up), each request has a time limit (504), and no input crashes it.
Device side only: no torch, no tensorflow.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from albert_edge import device
from albert_edge.errors import AlbertEdgeError
from albert_edge.text import utf8_problem

from .engine import Bundle, Engine

__all__ = ["ServerOptions", "create_app", "serve"]

log = logging.getLogger(__name__)

MAX_JSON_DEPTH = 16  # a request is one flat object; nothing it needs nests deeper than this


@dataclass(frozen=True)
class ServerOptions:
    max_body_bytes: int = 16 * 1024  # larger bodies get 413
    queue: int = 4  # requests in the worker or waiting for it; more get 503
    timeout_s: float = 10.0  # per request, waiting included; then 504
    retry_after_s: int = 1  # what a 503 tells the client
    threads: int | None = None  # runtime threads (None: the runtime's choice)
    model: str | None = None  # the variant to start with (None: int8 when there is one)
    device_refresh_s: float = 5.0  # how often the device description (temperatures...) is re-read
    mediapipe: bool = False  # a .mediapipe.tflite classifier through MediaPipe Tasks where mediapipe is installed

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "queue", "timeout_s", "retry_after_s"):
            if getattr(self, name) <= 0:
                raise AlbertEdgeError(f"{name} ({getattr(self, name)}) must be positive")


class _Busy(Exception):
    pass


class _Worker:
    """One thread runs the model; a counter bounds the requests inside (running or waiting).
    A slot is freed when the work ends, not when the client gives up waiting, so timed-out
    requests cannot pile up behind the worker."""

    def __init__(self, limit: int):
        self.limit = limit
        self._inside = 0
        self._lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="albert-demo")
        self.rejected = 0

    def submit(self, fn, *args) -> concurrent.futures.Future:
        with self._lock:
            if self._inside >= self.limit:
                self.rejected += 1
                raise _Busy
            self._inside += 1
        future = self._pool.submit(fn, *args)
        future.add_done_callback(self._release)
        return future

    def _release(self, _future) -> None:
        with self._lock:
            self._inside -= 1

    @property
    def inside(self) -> int:
        return self._inside

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class _Device:
    """device.describe(), re-read at most every ``refresh_s`` (it may run vcgencmd)."""

    def __init__(self, refresh_s: float):
        self.refresh_s = refresh_s
        self._value: dict[str, Any] | None = None
        self._at = 0.0

    def get(self) -> dict[str, Any]:
        now = time.monotonic()
        if self._value is None or now - self._at > self.refresh_s:
            self._value, self._at = device.describe(), now
        return self._value


def create_app(bundle_dir: str | os.PathLike, options: ServerOptions = ServerOptions()) -> Starlette:
    """The Starlette app serving the bundle at ``bundle_dir`` (its files are loaded now)."""
    engine = Engine(Bundle(bundle_dir), options.model, num_threads=options.threads, mediapipe=options.mediapipe)
    worker = _Worker(options.queue)
    device_info = _Device(options.device_refresh_s)
    started = time.time()
    page = resources.files(__package__).joinpath("static/index.html").read_text(encoding="utf-8")

    async def run(request: Request, answer) -> Response:
        """Read the JSON body, run ``answer(body)`` in the worker, map every failure to a status."""
        body = await _read_json(request, options.max_body_bytes)
        if isinstance(body, Response):
            return body
        try:
            future = worker.submit(answer, body)
        except _Busy:
            return _error(503, "busy: too many requests are waiting; try again shortly",
                          {"Retry-After": str(options.retry_after_s)})
        try:
            result = await asyncio.wait_for(asyncio.wrap_future(future), options.timeout_s)
        except asyncio.TimeoutError:
            return _error(504, f"no answer within {options.timeout_s:g} s")
        except AlbertEdgeError as exc:
            return _error(400, str(exc))
        except Exception:  # a runtime failing on some input must not take the server down
            log.exception("request failed")
            return _error(500, "the model failed on this input")
        return JSONResponse(result)

    async def classify(request: Request) -> Response:
        return await run(request, lambda body: engine.classify(body.get("text")))

    async def fill_mask(request: Request) -> Response:
        return await run(request, lambda body: engine.fill_mask(body.get("text"), body.get("top_k", 5)))

    async def model(request: Request) -> Response:
        return await run(request, lambda body: {"model": engine.select(_model_key(body)).key, **engine.status()})

    async def status(request: Request) -> Response:
        return JSONResponse(_status(engine, worker, device_info, options, started))

    async def index(request: Request) -> Response:
        return HTMLResponse(page)

    app = Starlette(routes=[
        Route("/", index),
        Route("/api/status", status),
        Route("/api/classify", classify, methods=["POST"]),
        Route("/api/fill-mask", fill_mask, methods=["POST"]),
        Route("/api/model", model, methods=["POST"]),
    ], lifespan=_lifespan(worker))
    app.state.engine = engine
    return app


def _status(engine: Engine, worker: _Worker, device_info: _Device, options: ServerOptions,
            started: float) -> dict[str, Any]:
    """What GET /api/status answers: the engine's status, the process and device, the queue and limits."""
    return {
        **engine.status(),
        "memory": device.process_memory(),
        "device": device_info.get(),
        "pid": os.getpid(),
        "uptime_s": round(time.time() - started, 1),
        "queue": {"inside": worker.inside, "limit": options.queue, "rejected": worker.rejected},
        "limits": {**asdict(options), "max_tokens": engine.bundle.seq_len},
        "bundle": {k: engine.bundle.info.get(k) for k in ("preset", "trained_on", "held_out_accuracy")},
    }


def _lifespan(worker: _Worker):
    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        worker.shutdown()

    return lifespan


def _model_key(body: dict) -> str:
    key = body.get("model")
    if not isinstance(key, str):
        raise AlbertEdgeError('give the model as {"model": "onnx-int8"} (format-scheme)')
    return key


async def _read_json(request: Request, limit: int) -> dict | Response:
    """The request's JSON object, or the error response to send instead."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        return _error(413, f"request body is larger than {limit} bytes")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                return _error(413, f"request body is larger than {limit} bytes")
            chunks.append(chunk)
    except ClientDisconnect:
        return _error(400, "the client went away")
    data = b"".join(chunks)
    problem = utf8_problem(data)
    if problem:
        return _error(400, f"the request body is not UTF-8 ({problem})")
    if _nesting(data) > MAX_JSON_DEPTH:  # json.loads recurses per level: refuse before it runs out of stack
        return _error(400, f"the request body nests arrays or objects more than {MAX_JSON_DEPTH} deep; "
                           'send {"text": "..."}')
    try:
        body = json.loads(data.decode("utf-8"))
    except ValueError:
        return _error(400, 'the request body is not JSON; send {"text": "..."}')
    if not isinstance(body, dict):
        return _error(400, 'send a JSON object: {"text": "..."}')
    return body


_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_NOT_BRACKET = re.compile(rb"[^\[\]{}]+")


def _nesting(data: bytes) -> int:
    """How deep the arrays and objects of a JSON text nest (brackets inside strings not counted)."""
    depth = deepest = 0
    for byte in _NOT_BRACKET.sub(b"", _JSON_STRING.sub(b"", data)):
        depth += 1 if byte in b"[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def serve(bundle_dir: str | os.PathLike, host: str = "127.0.0.1", port: int = 8000,
          options: ServerOptions = ServerOptions(), on_ready: Callable[[str], None] | None = None) -> None:
    """Serve the demo with uvicorn until interrupted. The bundle is loaded and the address
    checked first, so a bad bundle or a port in use is one error before anything is announced;
    ``on_ready`` then gets the URL."""
    import uvicorn

    app = create_app(bundle_dir, options)
    _check_address(host, port)
    url = f"http://{host}:{port}/"
    log.info("serving %s on %s", bundle_dir, url)
    if on_ready is not None:
        on_ready(url)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False,
                limit_concurrency=options.queue * 8 + 16, timeout_keep_alive=5)


def _check_address(host: str, port: int) -> None:
    """Raise AlbertEdgeError when ``host``:``port`` cannot be listened on (an unknown name, an
    address of another machine, a port in use or reserved)."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError, OverflowError) as exc:
        raise AlbertEdgeError(f"cannot listen on {host}:{port}: {exc}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            raise AlbertEdgeError(f"cannot listen on {host}:{port}: {exc.strerror or exc} "
                                  "(choose another --port or --host)") from None
