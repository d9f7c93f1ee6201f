"""Render the benchmarks' result files as the Markdown tables the documentation shows, so no figure
there is typed by hand: each table stands between ``<!-- results:NAME -->`` and
``<!-- /results:NAME -->`` in a page of docs/. The site's build renders them again from the files
(tools/docs_hooks.py), and tests/test_docs_results.py fails when a page's copy differs.

    python benchmarks/render_results.py            # rewrite the pages' tables from the result files
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
DOCS = ROOT / "docs"


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


# What each difference class of the tokenizer parity means (converters/tokenizer_json.py names them).
_TOKENIZER_CLASSES = {
    "same": "the same ids as albert-edge's tokenizer",
    "digit-comma-cut": "ALBERT cuts a piece such as \"2,\" again after sentencepiece chose it (\"▁\" \"2\" \",\"); a "
                       "Unigram model cannot, and gives \"▁2\" \",\": the same text in other pieces",
    "score-tie": "another cut of the same total score (\"000\" as \"00\" \"0\")",
    "other": "none of the above: normalization, case, accents, whitespace or special tokens differ",
}


def tokenizer_json_parity() -> str:
    """tokenizer.json (convert --to transformers-js) against albert-edge's tokenizer, by class."""
    name = "tokenizer_json_parity.json"
    result = _load(name)
    engines = list(result["results"])
    classes = sorted({c for r in result["results"].values() for c in r["counts"]},
                     key=lambda c: (list(_TOKENIZER_CLASSES).index(c) if c in _TOKENIZER_CLASSES else 99, c))
    rows = ["| class | what it is | " + " | ".join(engines) + " |", "|---|---|" + "---:|" * len(engines)]
    for c in classes:
        rows.append(f"| `{c}` | {_TOKENIZER_CLASSES.get(c, '')} | "
                    + " | ".join(f"{result['results'][e]['counts'].get(c, 0):,}" for e in engines) + " |")
    return "\n".join([
        f"{result['strings']:,} generated hard strings (converters/tokenizer_parity.py), the builtin "
        f"{result['tokenizer']['vocab']:,}-piece spiece.model, cut at {result['max_len']} tokens, tokenizers "
        f"{result['versions']['tokenizers']} loading each tokenizer.json:",
        "", *rows, "", _source(name, result)])


TABLES: dict[str, Callable[[], str]] = {"gpu_static": gpu_static, "onnx_partitions": onnx_partitions,
                                        "tokenizer_json_parity": tokenizer_json_parity}


def render(text: str) -> str:
    """``text`` (a page) with every results block it holds replaced by its rendering; a block of a
    name no table renders is an error."""
    for name in re.findall(r"<!-- results:(\w+) -->", text):
        if name not in TABLES:
            raise SystemExit(f"no table renders <!-- results:{name} -->: one of {', '.join(TABLES)}")
        pattern = re.compile(rf"(<!-- results:{name} -->\n)(?:.*?\n)?(<!-- /results:{name} -->)", re.S)
        if not pattern.search(text):
            raise SystemExit(f"<!-- results:{name} --> has no <!-- /results:{name} --> after it")
        text = pattern.sub(lambda m, table=TABLES[name]: m.group(1) + table() + "\n" + m.group(2), text)
    return text


def pages() -> list[Path]:
    """The documentation pages that hold a results block."""
    return [p for p in sorted(DOCS.rglob("*.md")) if "<!-- results:" in p.read_text(encoding="utf-8")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a page differs from the rendering")
    args = parser.parse_args(argv)
    differ = []
    for page in pages():
        text = page.read_text(encoding="utf-8")
        new = render(text)
        if new != text:
            differ.append(page.relative_to(ROOT))
            if not args.check:
                page.write_text(new, encoding="utf-8")
    if args.check and differ:
        print(f"{', '.join(map(str, differ))}: result tables differ from benchmarks/results: run python "
              "benchmarks/render_results.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
