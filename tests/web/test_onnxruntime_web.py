"""onnxruntime-web's WebAssembly backend in headless Chromium, as a web page runs it, on the same
files and held-out text as onnxruntime-node: web/ort-web.html served from 127.0.0.1 (with the
package's own .wasm files, from web/node_modules), driven by Selenium, its outputs read back from
the page. The page records the thread count onnxruntime-web chose and which WebAssembly build ran."""

from __future__ import annotations

import json

import pytest

from .runtimes import (check_answers, chromium, chromium_missing, decoded, feeds_json, package_missing, run_page,
                       serve)

pytestmark = pytest.mark.skipif(bool(chromium_missing() or package_missing("onnxruntime-web")),
                                reason=chromium_missing() or package_missing("onnxruntime-web") or "")


def test_onnxruntime_web_answers_as_pytorch(tmp_path, files, feeds, pytorch, int8_session, record_property):
    names = {f"{name}": path for name, path in files.items()}
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"models": [f"/files/{name}" for name in names], "feeds": feeds_json(feeds)}))
    with serve({**names, "request.json": request}) as (base, served), chromium(tmp_path / "profile") as driver:
        result = run_page(driver, f"{base}/ort-web.html?request=/files/request.json")
        shot = tmp_path / "ort-web.png"
        assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 5_000
        status = driver.find_element("id", "status").text
    assert status == f"done: {len(files)} files ran"
    by_url = decoded(result.pop("results"))
    got = {name: by_url[f"/files/{name}"] for name in files}
    figures = check_answers(got, pytorch, int8_session)
    # The WebAssembly came from web/node_modules through this server (no CDN), and it was the SIMD build.
    assert result["wasm"] and all(f"/node_modules/onnxruntime-web/dist/{w}" in served for w in result["wasm"])
    assert result["simdSupported"] and result["simd"], result
    assert result["crossOriginIsolated"] and result["threads"] >= 1, result
    record = {"runtime": f"onnxruntime-web {result['version']}", "threads": result["threads"],
              "simd": result["simd"], "wasm": result["wasm"], "browser": result["userAgent"],
              "hardwareConcurrency": result["hardwareConcurrency"], "files": figures, "screenshot": str(shot)}
    record_property("figures", record)
    print(json.dumps(record, indent=1))
