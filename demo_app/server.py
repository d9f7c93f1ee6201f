"""The demo's web app: one page with no external assets, and a small JSON API over the engine.

    GET  /              the page
    GET  /api/status    the loaded files, running p50/p90, process memory, the device, the limits
    POST /api/classify  {"text": ...}                 -> label, scores, latency (and passes, from an adaptive file)
    POST /api/fill-mask {"text": ..., "top_k": 5}     -> predictions per [MASK] (or ___), latency
    POST /api/model     {"model": "onnx-int8"}        -> switch files live (adaptive/fp32/int8, onnx/tflite/mediapipe)

Every answer names the engine that gave it ("engine": "LiteRT via albert-edge Session",
"MediaPipe Tasks TextClassifier", ...).

Safe under use: request bodies are bounded (413), text is cut to the model's length (the answer
says so), one worker runs the model and at most ``queue`` requests wait for it (more: 503 with
Retry-After, never a pile-up), each request has a time limit (504), and no input crashes it. The
body is parsed in the worker, after admission, by a check linear in its size. Before a request
reaches the app, :mod:`.guard` bounds its headers and body in time, the connections in number,
and checks its framing, Host, Origin and token; POSTs must be ``application/json``. A model file
deleted or changed under the server is one log line and a 503 with the reason.
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
from dataclasses import dataclass, field
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
from .faults import Fault, LoadedFiles
from .guard import Access, Guard, Limits, guarded_protocol, host_allow_list, is_loopback, page_csp, url_of

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
    header_timeout_s: float = Limits.header_timeout_s  # to send a request's headers; then the connection is closed
    body_timeout_s: float = Limits.body_timeout_s  # to send its body after the headers; then closed
    max_connections: int = Limits.max_connections  # open connections; more get 503 with Retry-After
    max_connections_per_client: int = Limits.max_connections_per_client  # open connections from one address
    token: str | None = field(default=None, repr=False)  # asked of every /api/ call when set
    allow_hosts: tuple[str, ...] = ()  # Host names answered besides loopback's, the bound one and this machine's

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "queue", "timeout_s", "retry_after_s", "header_timeout_s", "body_timeout_s",
                     "max_connections", "max_connections_per_client"):
            if getattr(self, name) <= 0:
                raise AlbertEdgeError(f"{name} ({getattr(self, name)}) must be positive")
        if self.token is not None and not _TOKEN.fullmatch(self.token):
            raise AlbertEdgeError("the token must be 16 to 256 letters, digits or -._~+/= (make one with "
                                  "`python -c 'import secrets; print(secrets.token_urlsafe())'`)")

    def limits(self) -> Limits:
        return Limits(self.header_timeout_s, self.body_timeout_s, self.max_connections,
                      self.max_connections_per_client, self.retry_after_s)


_TOKEN = re.compile(r"[A-Za-z0-9._~+/=-]{16,256}")
_SHOWN_LIMITS = ("max_body_bytes", "queue", "timeout_s", "retry_after_s", "threads", "model", "device_refresh_s",
                 "mediapipe", "header_timeout_s", "body_timeout_s", "max_connections", "max_connections_per_client")


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


def create_app(bundle_dir: str | os.PathLike, options: ServerOptions = ServerOptions(),
               access: Access | None = None) -> Starlette:
    """The Starlette app serving the bundle at ``bundle_dir`` (its files are loaded now), behind
    :class:`.guard.Guard` with ``access`` (default: any Host, and ``options.token``)."""
    engine = Engine(Bundle(bundle_dir), options.model, num_threads=options.threads, mediapipe=options.mediapipe)
    worker = _Worker(options.queue)
    device_info = _Device(options.device_refresh_s)
    files = LoadedFiles(engine)
    started = time.time()
    page = resources.files(__package__).joinpath("static/index.html").read_text(encoding="utf-8")

    async def run(request: Request, answer) -> Response:
        """Read the body, parse it and run ``answer(body)`` in the worker, map every failure to a status."""
        data = await _read_body(request, options.max_body_bytes)
        if isinstance(data, Response):
            return data
        try:
            future = worker.submit(lambda: answer(_parse(data)))
        except _Busy:
            return _error(503, "busy: too many requests are waiting; try again shortly",
                          {"Retry-After": str(options.retry_after_s)})
        try:
            result = await asyncio.wait_for(asyncio.wrap_future(future), options.timeout_s)
        except asyncio.TimeoutError:
            return _error(504, f"no answer within {options.timeout_s:g} s")
        except AlbertEdgeError as exc:
            return _error(400, str(exc))
        except Fault as exc:
            return _error(503, str(exc))
        except Exception:  # a runtime failing on some input must not take the server down
            fault = files.fault()
            if fault:
                return _error(503, fault)
            log.exception("request failed")
            return _error(500, "the model failed on this input")
        return JSONResponse(result)

    def answering(ask):
        def answer(body: dict) -> dict:
            fault = files.fault()
            if fault:
                raise Fault(fault)
            return ask(body)

        return answer

    async def classify(request: Request) -> Response:
        return await run(request, answering(lambda body: engine.classify(body.get("text"))))

    async def fill_mask(request: Request) -> Response:
        return await run(request, answering(lambda body: engine.fill_mask(body.get("text"), body.get("top_k", 5))))

    async def model(request: Request) -> Response:
        return await run(request, lambda body: {"model": files.switch(_model_key(body)).key, **engine.status()})

    async def status(request: Request) -> Response:
        fault = files.fault()
        if fault is None:
            try:
                return JSONResponse(_status(engine, worker, device_info, options, started))
            except OSError as exc:  # a file gone between the check and the status
                fault = files.fault() or f"the model files cannot be read: {exc.strerror or exc}"
        return _error(503, fault)

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
    app.add_middleware(Guard, access=access or Access(token=options.token), csp=page_csp(page))
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
        "limits": {**{k: getattr(options, k) for k in _SHOWN_LIMITS}, "max_tokens": engine.bundle.seq_len},
        "bundle": {k: engine.bundle.info.get(k) for k in ("preset", "trained_on", "held_out_accuracy", "adaptive")},
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


async def _read_body(request: Request, limit: int) -> bytes | Response:
    """The request's body (at most ``limit`` bytes, and JSON by its Content-Type), or the error
    response to send instead."""
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
    media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type != "application/json":  # a form or text/plain POST is what another web page can send
        return _error(415, 'send the body as JSON with "Content-Type: application/json"')
    return b"".join(chunks)


def _parse(data: bytes) -> dict:
    """The JSON object in ``data``; AlbertEdgeError (a 400) when it is not one. Linear in the
    size of ``data``, the nesting bounded before json.loads recurses."""
    problem = utf8_problem(data)
    if problem:
        raise AlbertEdgeError(f"the request body is not UTF-8 ({problem})")
    if _nesting(data) > MAX_JSON_DEPTH:  # json.loads recurses per level: refuse before it runs out of stack
        raise AlbertEdgeError(f"the request body nests arrays or objects more than {MAX_JSON_DEPTH} deep; "
                              'send {"text": "..."}')
    try:
        body = json.loads(data.decode("utf-8"))
    except ValueError:
        raise AlbertEdgeError('the request body is not JSON; send {"text": "..."}') from None
    if not isinstance(body, dict):
        raise AlbertEdgeError('send a JSON object: {"text": "..."}')
    return body


# A string (to its closing quote, or to the end when it has none) or a run of other bytes: each
# byte is looked at once, so the check is linear however the quotes and backslashes are laid out.
_NOT_BRACKETS = re.compile(rb'"(?:[^"\\]|\\.)*"?|[^"\[\]{}]+', re.S)


def _nesting(data: bytes) -> int:
    """How deep the arrays and objects of a JSON text nest (brackets inside strings not counted)."""
    depth = deepest = 0
    for byte in _NOT_BRACKETS.sub(b"", data):
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

    app = create_app(bundle_dir, options, Access(host_allow_list(host, options.allow_hosts), options.token))
    _check_address(host, port)
    url = url_of(host, port)
    log.info("serving %s on %s", bundle_dir, url)
    if on_ready is not None:
        on_ready(url)
    try:
        uvicorn.Server(uvicorn_config(app, host, port, options)).run()
    except KeyboardInterrupt:  # uvicorn raises the signal it stopped on again once it has shut down
        pass  # Ctrl-C and a service manager's SIGTERM end the demo cleanly, exit 0 (as uvicorn.run does)


def uvicorn_config(app, host: str, port: int, options: ServerOptions):
    """uvicorn's configuration for ``app``: the guarded h11 protocol (time limits and connection
    counts of ``options``), no server banner, no access log."""
    import uvicorn

    return uvicorn.Config(app, host=host, port=port, http=guarded_protocol(options.limits()), log_level="warning",
                          access_log=False, server_header=False, timeout_keep_alive=5, lifespan="on")


def exposure(host: str, options: ServerOptions) -> str | None:
    """The warning to print when ``host`` lets other machines in (None on loopback)."""
    if is_loopback(host):
        return None
    what = ("classify text, switch the loaded model and read /api/status (this device, its OS, the process id "
            "and memory)")
    if options.token:
        return (f"warning: listening on {host}: every machine that can reach this one can open the page; "
                f"with the token it can {what}. There is no TLS: the network can see the token and the text")
    return (f"warning: listening on {host} with no token (--no-auth): every machine that can reach this one "
            f"can {what}")


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
