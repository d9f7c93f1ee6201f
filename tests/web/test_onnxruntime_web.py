"""onnxruntime-web's WebAssembly backend in headless Chromium, as a web page runs it, on the same
files and held-out text as onnxruntime-node: web/ort-web.html served from 127.0.0.1 (with the
package's own .wasm files, from web/node_modules), driven by Selenium, its outputs read back from
the page. The page records the thread count onnxruntime-web chose and which WebAssembly build ran;
the files run again on two threads (what a cross-origin isolated page gets on a four-core device)."""

from __future__ import annotations

import json

import pytest

from .runtimes import (check_answers, chromium, chromium_missing, decoded, feeds_json, package_missing, run_page,
                       serve)

pytestmark = pytest.mark.skipif(bool(chromium_missing() or package_missing("onnxruntime-web")),
                                reason=chromium_missing() or package_missing("onnxruntime-web") or "")


def test_onnxruntime_web_answers_as_pytorch(tmp_path, files, feeds, pytorch, int8_session, record_property):
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"models": [f"/files/{name}" for name in files], "feeds": feeds_json(feeds)}))
    results = {}
    with serve({**files, "request.json": request}) as (base, served), chromium(tmp_path / "profile") as driver:
        for threads in ("", "2"):  # the library's default, then two
            results[threads] = run_page(driver, f"{base}/ort-web.html?request=/files/request.json&threads={threads}")
            assert driver.find_element("id", "status").text == f"done: {len(files)} files ran"
            shot = tmp_path / f"ort-web{threads}.png"
            assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 5_000
    records = []
    for threads, result in results.items():
        by_url = decoded(result.pop("results"))
        figures = check_answers({name: by_url[f"/files/{name}"] for name in files}, pytorch, int8_session)
        # The WebAssembly came from web/node_modules through this server (no CDN), and it was the SIMD build.
        assert result["wasm"] and all(f"/node_modules/onnxruntime-web/dist/{w}" in served for w in result["wasm"])
        assert result["simdSupported"] and result["simd"], result
        assert result["crossOriginIsolated"] and result["threads"] == (int(threads) if threads else result["threads"])
        # Threads beyond the first are Web Workers the page really started.
        assert result["workersStarted"] >= result["threads"] - 1, result
        records.append({"runtime": f"onnxruntime-web {result['version']}", "threads": result["threads"],
                        "threads asked": threads or "default", "workers started": result["workersStarted"],
                        "simd": result["simd"], "wasm": result["wasm"],
                        "browser": result["userAgent"], "hardwareConcurrency": result["hardwareConcurrency"],
                        "files": figures})
    assert records[0]["threads"] >= 1 and records[1]["threads"] == 2
    record_property("figures", records)
    print(json.dumps(records, indent=1))
