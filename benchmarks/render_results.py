"""Render the benchmarks' result files as the Markdown tables README.md shows, so no figure there is
typed by hand: each table stands between ``<!-- results:NAME -->`` and ``<!-- /results:NAME -->``,
and tests/test_readme_results.py fails when README.md's copy differs from this rendering.

    python benchmarks/render_results.py            # rewrite README.md's tables from the result files
    python benchmarks/render_results.py --check    # exit 1 when they differ

Each table says which result file, machine, date and commit its figures come from.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
README = ROOT / "README.md"


def _load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def _source(name: str, result: dict) -> str:
    """Where the figures come from, in one line."""
    return (f"From `benchmarks/results/{name}` ({result['benchmark']}, {result['date'][:10]}, commit "
            f"{result['commit'][:7]}, {result['machine']['platform'].split('-with-')[0]}).")


def _mb(value: int) -> str:
    return f"{value / 1e6:.1f} MB"


def _worst(values: dict[str, float]) -> float:
    return max(values.values())


def gpu_static() -> str:
    """LiteRT's GPU accelerator on the static .tflite files of the ALBERT-base shape and the builtin
    small model's."""
    names = ("gpu_static-albert-base.json", "gpu_static-small.json")
    results = [(name, _load(name)) for name in names if (RESULTS / name).is_file()]
    first = results[0][1]
    adapter = first["machine"].get("vulkan_devices", [{}])[0].get("name", "?")
    rows = ["| shape | head | weights | ops on the GPU | largest difference from PyTorch (float32) "
            "| lowest cosine (default precision) | stored = unique weight bytes |",
            "|---|---|---|---|---|---|---|"]
    for _, result in results:
        for f in result["files"]:
            once = "yes" if f["stored_bytes"] == f["unique_bytes"] and not f["duplicates"] else "**no**"
            rows.append(f"| {result['shape']} | {f['head']} | {f['precision']} | {f['gpu_ops']} of {f['ops']} | "
                        f"{_worst(f['max_abs_diff_enforce_f32']):.1e} | "
                        f"{min(f['cosine_default_precision'].values()):.6f} | {once} ({_mb(f['stored_bytes'])}) |")
    return "\n".join([
        f"Weights {first['weights']}, `[1, {first['seq_len']}]`, ai-edge-litert {first['versions']['ai-edge-litert']} "
        f"on {adapter} (a Vulkan implementation on the CPU: it shows which operators the GPU path takes and "
        "what it computes, not how fast). The fp16 files' differences are their weights' rounding.",
        "", *rows, "", *(_source(name, result) for name, result in results)])


def onnx_partitions() -> str:
    """NNAPI and Core ML partitions of the .onnx files, by onnxruntime's own checker."""
    name = "onnx_partitions-albert-base.json"
    result = _load(name)
    providers = ("NNAPI", "CoreML MLProgram")
    rows = ["| head | file | " + " | ".join(f"{p}: partitions (nodes taken)" for p in providers)
            + " | size | int8 against fp32 on held-out text |",
            "|---|---|" + "---|" * len(providers) + "---|---|"]
    for f in result["files"]:
        by = {p["provider"]: p for p in f["partitions"]["providers"]}
        cells = [f"{by[p]['partitions']} ({by[p]['covered']} of {by[p]['nodes']})" for p in providers]
        accuracy = f.get("accuracy_against_fp32")
        measured = f"{accuracy['headline']:.4f} {accuracy['headline_of']}" if accuracy else ""
        rows.append(f"| {f['head']} | {f['file']} (`{f['name']}`) | " + " | ".join(cells)
                    + f" | {_mb(f['size'])} | {measured} |")
    return "\n".join([
        f"ALBERT-base shape, weights {result['files'][0]['weights']}, {result['seq_len']} tokens, "
        f"onnxruntime {result['versions']['onnxruntime']}'s mobile usability checker. Each partition boundary is a "
        "copy between the CPU and the accelerator.",
        "", *rows, "", _source(name, result)])


TABLES: dict[str, Callable[[], str]] = {"gpu_static": gpu_static, "onnx_partitions": onnx_partitions}


def render(text: str) -> str:
    """``text`` (README.md) with every results block replaced by its rendering."""
    for name, table in TABLES.items():
        pattern = re.compile(rf"(<!-- results:{name} -->\n)(?:.*?\n)?(<!-- /results:{name} -->)", re.S)
        if not pattern.search(text):
            raise SystemExit(f"README.md has no <!-- results:{name} --> block")
        text = pattern.sub(lambda m: m.group(1) + table() + "\n" + m.group(2), text)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when README.md differs from the rendering")
    args = parser.parse_args(argv)
    text = README.read_text(encoding="utf-8")
    new = render(text)
    if args.check:
        if new != text:
            print("README.md's result tables differ from benchmarks/results: run python benchmarks/render_results.py",
                  file=sys.stderr)
            return 1
        return 0
    README.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
