"""A bounded load test of a running demo server on loopback: N clients post sentences for T
seconds, and the counts of 200s, 503s (deliberate: the queue is full) and anything else, the
latency percentiles of the 200s, and the server's resident memory before and after are reported.
Standard library only (plus albert_edge.device for the memory), so it runs on the Pi too.

    python -m albert_edge.demo.loadtest --url http://127.0.0.1:8000 --clients 8 --seconds 60

A server that asks for a token is given it with --token (or ALBERT_EDGE_DEMO_TOKEN).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

from albert_edge import device

__all__ = ["LoadTestOptions", "run_load_test"]

# Real sentences of different lengths, some longer than the model's limit (they are cut).
SENTENCES = (
    "Return a new event loop for the current thread.",
    "Round the decimal number to the context's precision.",
    "Parse the message headers and return an email object.",
    "Create an element tree from the XML document.",
    "Cancel the task and wait until the coroutine has finished running in the event loop.",
    "The quotient is computed exactly, then rounded with the current rounding mode. " * 20,
)


@dataclass(frozen=True)
class LoadTestOptions:
    url: str = "http://127.0.0.1:8000"
    clients: int = 8
    seconds: float = 60.0
    path: str = "/api/classify"
    warmup: int = 20  # requests before the "before" memory figure (the runtimes allocate on first use)
    timeout_s: float = 30.0
    token: str | None = field(default=None, repr=False)  # sent as Authorization: Bearer (never reported)


@dataclass
class _Tally:
    codes: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def run_load_test(opts: LoadTestOptions) -> dict[str, Any]:
    """Run the test; the server must be up. Returns counts, percentiles and memory figures."""
    parts = urlsplit(opts.url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    status = _get_json(host, port, "/api/status", opts)
    pid = status["pid"]
    for i in range(opts.warmup):
        _post(http.client.HTTPConnection(host, port, timeout=opts.timeout_s), opts, SENTENCES[i % len(SENTENCES)])
    before = device.process_memory(pid)
    tally = _Tally()
    deadline = time.monotonic() + opts.seconds
    threads = [threading.Thread(target=_client, args=(host, port, opts, deadline, i, tally), daemon=True)
               for i in range(opts.clients)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    after = device.process_memory(pid)
    ok = sorted(tally.latencies_ms)
    status_after = _get_json(host, port, "/api/status", opts)
    return {
        "options": {k: v for k, v in asdict(opts).items() if k != "token"},
        "model": status_after["model"],
        "seconds": round(elapsed, 2),
        "requests": sum(tally.codes.values()) + len(tally.errors),
        "codes": tally.codes,
        "ok_per_s": round(len(ok) / elapsed, 2) if elapsed else None,
        "errors": len(tally.errors) + sum(n for c, n in tally.codes.items() if c not in ("200", "503")),
        "error_samples": tally.errors[:5],
        "latency_ms": {"p50": _pct(ok, 50), "p90": _pct(ok, 90), "p99": _pct(ok, 99), "max": ok[-1] if ok else None},
        "server_model_latency": {t: m["latency"] for t, m in status_after["models"].items()},
        "rss_before": before["rss"], "rss_after": after["rss"], "peak_rss": after["peak_rss"],
        "rss_change": round(after["rss"] / before["rss"] - 1, 4) if before["rss"] and after["rss"] else None,
    }


def _client(host: str, port: int, opts: LoadTestOptions, deadline: float, index: int, tally: _Tally) -> None:
    conn = http.client.HTTPConnection(host, port, timeout=opts.timeout_s)
    i = index
    while time.monotonic() < deadline:
        i += 1
        start = time.perf_counter()
        try:
            code = _post(conn, opts, SENTENCES[i % len(SENTENCES)])
        except (OSError, http.client.HTTPException) as exc:
            with tally.lock:
                tally.errors.append(f"{type(exc).__name__}: {exc}")
            conn.close()
            conn = http.client.HTTPConnection(host, port, timeout=opts.timeout_s)
            continue
        ms = (time.perf_counter() - start) * 1000
        with tally.lock:
            tally.codes[str(code)] = tally.codes.get(str(code), 0) + 1
            if code == 200:
                tally.latencies_ms.append(ms)
        if code == 503:
            time.sleep(0.05)  # a polite client backs off a little (the server says Retry-After: 1)
    conn.close()


def _auth(opts: LoadTestOptions) -> dict[str, str]:
    return {"Authorization": f"Bearer {opts.token}"} if opts.token else {}


def _post(conn: http.client.HTTPConnection, opts: LoadTestOptions, text: str) -> int:
    body = json.dumps({"text": text if "fill" not in opts.path else text + " [MASK]"})
    conn.request("POST", opts.path, body=body, headers={"Content-Type": "application/json", **_auth(opts)})
    response = conn.getresponse()
    response.read()
    return response.status


def _get_json(host: str, port: int, path: str, opts: LoadTestOptions) -> dict:
    conn = http.client.HTTPConnection(host, port, timeout=opts.timeout_s)
    try:
        conn.request("GET", path, headers=_auth(opts))
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    k = min(len(values) - 1, max(0, round(q / 100 * (len(values) - 1))))
    return round(values[k], 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=LoadTestOptions.url, help="the demo server (loopback)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long they post")
    parser.add_argument("--path", default="/api/classify", help="/api/classify or /api/fill-mask")
    parser.add_argument("--warmup", type=int, default=20, help="requests before the 'before' memory figure")
    parser.add_argument("--token", default=os.environ.get("ALBERT_EDGE_DEMO_TOKEN"),
                        help="the server's token, when it asks for one [default: $ALBERT_EDGE_DEMO_TOKEN]")
    args = parser.parse_args(argv)
    result = run_load_test(LoadTestOptions(args.url, args.clients, args.seconds, args.path, args.warmup,
                                           token=args.token))
    print(json.dumps(result, indent=2))
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
