"""The JavaScript runtimes of `profile --runtime`: an .onnx / .ort file timed through onnxruntime-node
in Node and through onnxruntime-web (WebAssembly) in headless Chromium, as a Node app and a web page
run it, in the same record as the native runtimes.

Each setting is one profiling child, as every setting is, and that child starts a fresh Node
process (web/profile-node.mjs) or a fresh headless Chromium on web/profile-web.html, served by the
child from 127.0.0.1. The timing loop runs in JavaScript (performance.now(), the stopping rule of
:func:`~albert_edge.profile.stats.time_until`, web/profile-loop.mjs); the call times come back and
become the record here through the same statistics and verdict as every record.

Memory: Node's figures are its own process's (process.memoryUsage().rss at each phase, the peak
from process.resourceUsage().maxRSS). In Chromium the page runs in a renderer among the browser's
other processes and a page cannot read its own resident memory, so a Chromium record has no memory
figures and says so.

The npm packages come from web/package-lock.json, which an installed wheel does not carry: the
folder is ``--web-dir`` / $ALBERT_EDGE_WEB_DIR, or the checkout's web/ when albert-edge runs from a
checkout. Device side: standard library and numpy only (no Selenium: Chromium is started as it is)."""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .record import Latency, Memory, ProfileRecord
from .settings import NATIVE, RUNTIME_CHOICES, WEB_RUNTIMES, ProfileError, parse_runtimes

if TYPE_CHECKING:
    from .job import ProfileJob

__all__ = ["NATIVE", "WEB_RUNTIMES", "RUNTIME_CHOICES", "ENV", "parse_runtimes", "web_dir", "check_web",
           "chromium_binary", "measure_web"]

ENV = "ALBERT_EDGE_WEB_DIR"
PACKAGE = {"node": "onnxruntime-node", "chromium": "onnxruntime-web", "chromium-webgpu": "onnxruntime-web"}
SCRIPT = {"node": "profile-node.mjs", "chromium": "profile-web.html", "chromium-webgpu": "profile-web.html"}
PROVIDER = {"node": "CPUExecutionProvider", "chromium": "wasm", "chromium-webgpu": "webgpu"}
# What headless Chromium needs to give a page a WebGPU adapter without a display: Dawn on Vulkan (on
# a machine without a GPU, Chromium's SwiftShader, a software adapter).
WEBGPU_FLAGS = ("--enable-unsafe-webgpu", "--enable-features=Vulkan", "--use-vulkan=native", "--use-angle=vulkan",
                "--disable-vulkan-surface")
SOFTWARE_ADAPTER_NOTE = ("the WebGPU adapter ({adapter}) is a fallback (software) adapter, the CPU drawing as a GPU: "
                         "these timings say nothing of any GPU's speed")
# Warm-up seconds at least, beside --warmup calls: V8 runs WebAssembly on baseline code first and
# swaps in optimized code for hot functions as calls go on, compiled on background threads that the
# runtime's own threads starve on a small machine (on two busy cores, calls on two threads stayed
# slow for over a second past a one-second warm-up); Node's onnxruntime is native code, warm after a
# few calls.
WARMUP_SECONDS = {"node": 0.0, "chromium": 2.0, "chromium-webgpu": 2.0}
# (Compiling it all optimized up front, V8's --no-wasm-dynamic-tiering, is no cure: the compile of the
# whole runtime then goes on in the background during the timed calls, which ran slower still.)
# Where the swap comes late all the same, the block medians differ and the verdict says so.
_CHROMIUMS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# Past the timing budget: Node or Chromium starting, the WebAssembly compiling, the file loading.
_START_SECONDS = 180.0
CHROMIUM_MEMORY_NOTE = ("info: memory not measured in Chromium: the page runs in a renderer among the browser's "
                        "processes, and a page cannot read its own resident memory (a figure for the whole browser "
                        "would not be the model's)")


def web_dir(given: str | os.PathLike | None = None) -> Path | None:
    """The folder holding package.json and node_modules: ``given``, else $ALBERT_EDGE_WEB_DIR, else
    the checkout's web/ when albert-edge runs from a checkout (None for an installed wheel)."""
    if given:
        return Path(given)
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    checkout = Path(__file__).resolve().parents[2] / "web"
    return checkout if (checkout / "package.json").is_file() else None


def chromium_binary() -> str | None:
    """Chromium (or Chrome) on PATH, or None."""
    return next((found for name in _CHROMIUMS if (found := shutil.which(name))), None)


def check_web(runtimes: Sequence[str], given: str | os.PathLike | None) -> Path:
    """The web folder for ``runtimes`` after checking each can run here: Node, Chromium, the folder
    and its npm packages. ProfileError (one line, saying how to fix it) otherwise."""
    folder = web_dir(given)
    asked = ", ".join(f"--runtime {r}" for r in runtimes)
    if "node" in runtimes and shutil.which("node") is None:
        raise ProfileError("--runtime node runs onnxruntime-node, and node is not installed (Node.js 20 or later; "
                           "Debian: apt-get install nodejs)")
    for runtime in (r for r in runtimes if r.startswith("chromium")):
        if chromium_binary() is None:
            raise ProfileError(f"--runtime {runtime} runs onnxruntime-web in headless Chromium, and no chromium is on "
                               "PATH (Debian: apt-get install chromium)")
    if folder is None:
        raise ProfileError(f"{asked}: no web folder (an installed albert-edge has none): pass --web-dir DIR or set "
                           f"{ENV}, DIR being albert-edge's web/ (package.json, package-lock.json) after `npm ci` "
                           "in it")
    if not (folder / "package.json").is_file() or not all((folder / SCRIPT[r]).is_file() for r in runtimes):
        raise ProfileError(f"{asked}: {folder} is not albert-edge's web/ folder (no package.json or "
                           f"{', '.join(SCRIPT[r] for r in runtimes)} in it): pass --web-dir DIR or set {ENV}")
    missing = [PACKAGE[r] for r in runtimes if not (folder / "node_modules" / PACKAGE[r] / "package.json").is_file()]
    if missing:
        raise ProfileError(f"{asked}: {', '.join(missing)} not installed in {folder / 'node_modules'}: "
                           f"cd {folder} && npm ci")
    return folder.resolve()


def _package_version(folder: Path, package: str) -> str:
    with contextlib.suppress(OSError, ValueError):
        return json.loads((folder / "node_modules" / package / "package.json").read_text())["version"]
    return "unknown"


def measure_web(job: ProfileJob, judged: Callable, check_length: Callable) -> ProfileRecord:
    """One setting through Node or Chromium (``job.engine``): the record. Runs inside a profiling
    child, which hands over how it judges every record's timing (``judged``: the latency, the job and
    the machine's warnings -> the warnings to keep) and checks a length against the file's limits."""
    from .. import device
    from ..device import activity
    from ..errors import AlbertEdgeError
    from ..formats.kinds import of_file
    from .inputs import model_limits
    from .stats import latency

    engine, path, folder = job.engine, job.path, Path(job.settings.web_dir)
    limits = model_limits(path)
    check_length(job.seq_len, limits)
    request = _request(job, limits)
    before = device.describe()
    marks: dict[str, dict[str, Any] | None] = {}
    work = Path(job.workdir)
    if engine == "node":
        got, pid_cpu = _run_node(folder, {**request, "model": str(path)}, work, marks, job)
    else:
        got, pid_cpu = _run_chromium(folder, request, path, work, marks, job)
    during = activity.activity(marks.get("timing_start"), marks.get("timing_end"))
    if during is not None and pid_cpu is not None:  # our own cores are the JavaScript process tree's
        own = round(pid_cpu / during["seconds"], 3)
        during.update(own_cores=own, other_cores=round(max(0.0, during["busy_cores"] - own), 3))
    after = device.describe()
    if not got.get("times"):
        raise AlbertEdgeError(f"{job.file_as_given}: {PACKAGE[engine]} timed no calls")
    lat = latency(got["times"])
    lat.stopped_by = got.get("stopped_by")
    threads = int(got.get("threads") or job.threads)
    web, memory, warnings = _ran_with(job, got, request, threads, lat)
    warnings += judged(lat, job, activity.competing(during, threads) + device.throttle_warnings(before, after))
    return job.record(
        before=before, after=after, during=during, threads=threads,
        format=of_file(path).name, scheme=limits.scheme, runtime=PACKAGE[engine],
        runtime_version=got.get("version") or _package_version(folder, PACKAGE[engine]), provider=PROVIDER[engine],
        load_ms=got["load_ms"], first_call_ms=got["first_call_ms"], latency=lat, memory=memory,
        warnings=warnings, model=limits.to_dict(), input_kind="token ids",
        accelerator="gpu" if PROVIDER[engine] == "webgpu" else "cpu", web=web,
        ops=({"available": False, "source": None, "note": f"{PACKAGE[engine]} gives no per-operator times here: "
              "the breakdown is that of the native runtime's rows"} if job.settings.ops else None))


def _request(job: ProfileJob, limits) -> dict[str, Any]:
    """What the JavaScript side is asked: the file's name, its feeds at the job's shape, the timing rule."""
    from .inputs import fixed_feeds

    given = job.settings
    feeds = fixed_feeds(job.batch, job.seq_len, limits.vocab_size)
    return {"name": job.path.name, "feeds": {k: {"dims": list(a.shape), "data": a.ravel().tolist()}
                                            for k, a in feeds.items()},
            "warmup_seconds": WARMUP_SECONDS[job.engine] if given.warmup else 0.0,
            "threads": job.threads, "device": PROVIDER[job.engine], "warmup": given.warmup, "runs": given.runs,
            "min_seconds": given.min_seconds,
            "max_seconds": given.max_seconds, "ci_target": given.ci_target}


def _ran_with(job: ProfileJob, got: dict[str, Any], request: dict[str, Any], threads: int,
              lat: Latency) -> tuple[dict[str, Any], Memory, list[str]]:
    """The record's ``web`` (what the JavaScript runtime ran with), its memory (Node's process; none in
    Chromium) and the warnings about them, from what the script sent back (``got``)."""
    engine = job.engine
    warnings: list[str] = []
    web: dict[str, Any] = {"runtime": engine, "threads_asked": job.threads, "threads": threads,
                           "timer": "performance.now()", "timer_resolution_ms": got.get("timer_resolution_ms"),
                           "script": SCRIPT[engine], "inputs": got.get("inputs"),
                           "warmup_calls": got.get("warmup_calls"), "warmup_seconds": request["warmup_seconds"]}
    step = got.get("timer_resolution_ms")
    if step and lat.p50 > 0 and step > 0.01 * lat.p50:
        warnings.append(f"info: {SCRIPT[engine]}'s clock (performance.now()) ticks in {step * 1e3:.1f} µs, "
                        f"{step / lat.p50:.1%} of the p50: the call times are multiples of it")
    if engine == "node":
        memory = Memory(**{k: got["memory"].get(k) for k in Memory.__dataclass_fields__})
        web.update(node=got.get("node"), simd=None, load="InferenceSession.create(path)",
                   memory="Node's process: process.memoryUsage().rss at each phase, the peak from "
                          "process.resourceUsage().maxRSS")
        return web, memory, warnings
    web.update({k: got.get(k) for k in ("simd", "simd_supported", "wasm", "workers_started", "cross_origin_isolated",
                                        "hardware_concurrency", "user_agent", "fetch_ms")},
               load="InferenceSession.create(bytes), which starts onnxruntime-web's WebAssembly (a page's first "
                    "session); the file's fetch from 127.0.0.1 is fetch_ms", memory="not measured")
    warnings.append(CHROMIUM_MEMORY_NOTE)
    if PROVIDER[engine] == "webgpu":
        web.update(adapter=got.get("adapter"), placement=got.get("placement"))
        adapter = got.get("adapter") or {}
        if adapter.get("fallback"):
            named = f"{adapter.get('vendor')} {adapter.get('architecture')}"
            warnings.append(SOFTWARE_ADAPTER_NOTE.format(adapter=named))
    if threads != job.threads:
        warnings.append(f"onnxruntime-web ran {threads} thread(s), not the {job.threads} asked for "
                        f"(cross-origin isolated: {got.get('cross_origin_isolated')})")
    return web, Memory(), warnings


def _deadline(job: ProfileJob) -> float:
    return _START_SECONDS + 2 * job.settings.max_seconds + job.settings.min_seconds


def _tree_cpu(root: int) -> float | None:
    """CPU seconds (user + system) of process ``root`` and its live descendants (Chromium's renderers
    and helpers, Node's threads are in its own figure), or None without /proc."""
    tick, parent, cpu = os.sysconf("SC_CLK_TCK"), {}, {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after the name: state, ppid, ...
            pid = int(stat.parent.name)
            parent[pid], cpu[pid] = int(fields[1]), (int(fields[11]) + int(fields[12])) / tick
    if root not in cpu:
        return None
    tree, grown = {root}, True
    while grown:
        more = {pid for pid, ppid in parent.items() if ppid in tree} - tree
        tree |= more
        grown = bool(more)
    return sum(cpu[pid] for pid in tree)


class _Marks:
    """The snapshots of the machine at the start and the end of the timed calls, and the CPU time
    the JavaScript process tree had spent at each (its own share of the busy cores)."""

    def __init__(self, marks: dict[str, Any]):
        self.marks, self.cpu, self.pid = marks, {}, None

    def mark(self, name: str) -> None:
        from ..device import activity

        if name in ("timing_start", "timing_end") and name not in self.marks:
            self.marks[name] = activity.snapshot()
            self.cpu[name] = _tree_cpu(self.pid) if self.pid else None

    def own_cpu(self) -> float | None:
        start, end = self.cpu.get("timing_start"), self.cpu.get("timing_end")
        return end - start if start is not None and end is not None else None


def _run_node(folder: Path, request: dict, work: Path, marks: dict, job: ProfileJob) -> tuple[dict, float | None]:
    from ..errors import AlbertEdgeError

    req, resp = work / "request.json", work / "response.json"
    req.write_text(json.dumps(request))
    seen = _Marks(marks)
    err = work / "node.stderr"
    # onnxruntime-node's telemetry leaves an empty mat-debug-<pid>.log in the temporary folder on
    # every run: Node gets one of its own, inside the job's, which is removed with it.
    scratch = work / "node-tmp"
    scratch.mkdir(exist_ok=True)
    with err.open("w") as stderr:
        node = subprocess.Popen(["node", str(folder / SCRIPT["node"]), str(req), str(resp)], cwd=folder,
                                stdout=subprocess.PIPE, stderr=stderr, text=True,
                                env={**os.environ, "TMPDIR": str(scratch)})
        seen.pid = node.pid
        timer = threading.Timer(_deadline(job), _stop, (node,))
        timer.start()
        try:
            for line in node.stdout:
                with contextlib.suppress(ValueError, AttributeError):
                    seen.mark(json.loads(line).get("mark"))
            node.wait()
        finally:
            timer.cancel()
            _stop(node)
    if node.returncode != 0 or not resp.is_file():
        tail = (err.read_text(errors="replace").strip().splitlines() or [f"exit code {node.returncode}"])
        said = next((line for line in tail if "Error" in line), tail[-1])
        raise AlbertEdgeError(f"{job.file_as_given}: onnxruntime-node failed in Node: {said.strip()[:300]}")
    return json.loads(resp.read_text()), seen.own_cpu()


class _Handler(http.server.SimpleHTTPRequestHandler):
    """web/ at /, the request at /request.json and the model at /model; POSTs to /mark and /result.
    Every answer says the page is cross-origin isolated (COOP + COEP), which browsers require before
    they give WebAssembly threads."""

    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, ".mjs": "text/javascript",
                      ".js": "text/javascript", ".wasm": "application/wasm", ".json": "application/json"}
    request_bytes: bytes = b""
    model: Path
    seen: _Marks
    result: dict
    done: threading.Event

    def do_GET(self) -> None:  # noqa: N802  (the base class's name)
        name = self.path.split("?", 1)[0]
        if name in ("/request.json", "/model"):
            body = self.request_bytes if name == "/request.json" else self.model.read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", "application/json" if name == "/request.json" else
                             "application/octet-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.path == "/mark":
            self.seen.mark(body.get("mark"))
        elif self.path == "/result":
            self.result.update(body)
            self.done.set()
        self.send_response(204)
        self.end_headers()

    def end_headers(self) -> None:
        self.send_header("Cross-Origin-Opener-Policy", "same-origin")
        self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, format, *args) -> None:  # noqa: A002  (the base class's name)
        pass


@contextlib.contextmanager
def _serve(folder: Path, handler: type) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _run_chromium(folder: Path, request: dict, model: Path, work: Path, marks: dict,
                  job: ProfileJob) -> tuple[dict, float | None]:
    from ..errors import AlbertEdgeError

    seen, result, done = _Marks(marks), {}, threading.Event()
    handler = type("Handler", (_Handler,), {"request_bytes": json.dumps(request).encode(), "model": model,
                                            "seen": seen, "result": result, "done": done})
    with _serve(folder, handler) as base:
        gpu = WEBGPU_FLAGS if PROVIDER[job.engine] == "webgpu" else ("--disable-gpu",)
        flags = ["--headless", "--no-sandbox", *gpu, "--disable-extensions", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--mute-audio", f"--user-data-dir={work / 'chromium-profile'}"]
        browser = subprocess.Popen([chromium_binary(), *flags, f"{base}/{SCRIPT[job.engine]}"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        seen.pid = browser.pid
        try:
            finished = done.wait(_deadline(job))
        finally:
            _stop(browser)
    if not finished:
        raise AlbertEdgeError(f"{job.file_as_given}: onnxruntime-web in Chromium gave no result within "
                              f"{_deadline(job):.0f} s")
    if result.get("error") or not result.get("result"):
        said = str(result.get("error") or "no result").strip().splitlines()[0]
        raise AlbertEdgeError(f"{job.file_as_given}: onnxruntime-web failed in Chromium: {said[:300]}")
    return result["result"], seen.own_cpu()


def _stop(process: subprocess.Popen) -> None:
    """Stop ``process``: SIGTERM (Chromium then closes its renderers and helpers), SIGKILL after five
    seconds. Node and Chromium stay in the profiling child's process group, so the parent's stop of
    that group (Ctrl-C, SIGTERM) reaches them too."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
