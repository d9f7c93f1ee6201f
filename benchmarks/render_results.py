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


# --- benchmarks/webgpu_parity.py: the transformers.js folder on WebGPU in Chromium --------------

def _refusal(message: str) -> str:
    """onnxruntime-web's error without its call and source location: what it refused."""
    return message.split("ERROR_MESSAGE: ")[-1].split("GenerateSourceCode ")[-1].rstrip(".")


def _webgpu_cells(d: dict) -> tuple[str, str]:
    """A dtype's agreement with PyTorch (or the Session, q8) and what refused it, as two cells."""
    f = d["figures"]
    if not f:
        return "refused", "; ".join(f"{who}: {_refusal(why)}" for who, why in d["errors"].items())
    parts = [f"transformers.js {f['transformers.js probabilities max_abs_diff']:.1e}, top-1 "
             f"{100 * f['transformers.js top1 agreement']:.1f}% of {d['texts'] - f['ids differ']} "
             f"(the texts its tokenizer gives albert-edge's ids, of {d['texts']})"]
    if "onnxruntime-web logits max_abs_diff" in f:
        parts.append(f"onnxruntime-web logits {f['onnxruntime-web logits max_abs_diff']:.1e}")
    return "; ".join(parts), ""


def webgpu_parity() -> str:
    """Each dtype of the transformers.js folder on WebGPU: agreement, placement, refusals."""
    name = "webgpu_parity.json"
    result = _load(name)
    rows = ["| dtype | agreement (largest difference; top-1) | onnxruntime-web placement (nodes) | refused |",
            "|---|---|---|---|"]
    for d in result["dtypes"]:
        agreement, refused = _webgpu_cells(d)
        placed = ", ".join(f"{p.replace('ExecutionProvider', '')} {v['nodes']}" for p, v in d["placement"].items())
        rows.append(f"| {d['dtype']} | {agreement} | {placed} | {refused} |")
    first = result["dtypes"][0]
    adapter = first["adapter"]
    cpu = sorted({op for d in result["dtypes"] for op in d["placement"].get("CPUExecutionProvider", {}).get("ops", [])})
    return "\n".join([
        f"{result['browser']}, onnxruntime-web {first['onnxruntime_web']}, adapter {adapter['vendor']} "
        f"{adapter['architecture']}"
        f"{' (a fallback, software adapter: its timings mean nothing)' if adapter['fallback'] else ''}"
        f", shader-f16 {'yes' if first['shader_f16'] else 'no'}. Probabilities against "
        f"{first.get('reference', 'PyTorch')} (q8: against "
        "albert-edge's Session on the same file); onnxruntime-web's nodes on its CPU provider: "
        f"{', '.join(cpu) or 'none'}.",
        "", *rows, "", _source(name, result)])


# --- benchmarks/peers.py: albert-edge's files against the files the standard tools make -----------

# The contestants' names as the pages show them.
_PEER_NAMES = {
    "pytorch eager fp32": "PyTorch eager",
    "torch.onnx.export fp32": "`torch.onnx.export`", "ort quantize_dynamic": "onnxruntime `quantize_dynamic`",
    "optimum export fp32": "optimum export", "optimum avx512_vnni": "optimum `--avx512_vnni`",
    "optimum O2 + avx512_vnni": "optimum O2 + `--avx512_vnni`",
    "TFAlbertModel + TFLiteConverter fp32": "transformers 4 `TFAlbertModel` + `TFLiteConverter`",
    "TFAlbertModel + TFLiteConverter int8": "transformers 4 `TFAlbertModel` + `TFLiteConverter`",
    "tf_albert graph + TFLiteConverter fp32": "`TFLiteConverter` on albert-edge's TF graph",
    "tf_albert graph + TFLiteConverter int8": "`TFLiteConverter` on albert-edge's TF graph",
    "executorch XNNPACK fp32": "ExecuTorch's XNNPACK flow", "executorch XNNPACK int8": "ExecuTorch's XNNPACK flow",
}
_ROUTES = {"pytorch": "PyTorch eager", "onnx-plain": "onnxruntime defaults", "tflite-plain": "Interpreter defaults",
           "executorch-plain": "ExecuTorch defaults", "session": "`Session`"}
_OURS = {"onnx": ("albert-edge ONNX", ""), "tflite": ("albert-edge TFLite", ", unrolled"),
         "tflite-loop": ("albert-edge TFLite", ", loop (the default)"), "pte": ("albert-edge `.pte`", "")}
# What each table shows, in order: (section, dtype, contestants by peers.py's names).
_PEER_SECTIONS = {
    "onnx": ("ort quantize_dynamic", "optimum avx512_vnni", "optimum O2 + avx512_vnni",
             "albert-edge onnx {d} (onnxruntime defaults)", "albert-edge onnx {d}"),
    "onnx-fp32": ("torch.onnx.export fp32", "optimum export fp32", "albert-edge onnx {d} (onnxruntime defaults)",
                  "albert-edge onnx {d}"),
    "tflite": ("TFAlbertModel + TFLiteConverter {d}", "tf_albert graph + TFLiteConverter {d}",
               "albert-edge tflite {d} (interpreter defaults)", "albert-edge tflite-loop {d} (interpreter defaults)",
               "albert-edge tflite {d}", "albert-edge tflite-loop {d}"),
    "pte": ("executorch XNNPACK {d}", "albert-edge pte {d} (executorch defaults)", "albert-edge pte {d}"),
}
# The project's targets: (albert-edge file, the peer, figure, at most). "TFLITE PEER" is the first
# TFLite peer present (TFAlbertModel's, else the converter on albert-edge's graph).
PEER_TARGETS = (
    ("albert-edge tflite-loop int8 (interpreter defaults)", "TFLITE PEER", "peak_rss", 0.6),
    ("albert-edge tflite-loop int8 (interpreter defaults)", "TFLITE PEER", "p50", 1.0),
    ("albert-edge tflite-loop int8", "TFLITE PEER", "peak_rss", 0.45),
    ("albert-edge tflite-loop int8 (interpreter defaults)", "TFLITE PEER", "size", 1.01),
    ("albert-edge onnx int8 (onnxruntime defaults)", "best onnxruntime peer", "peak_rss", 0.8),
    ("albert-edge onnx int8 (onnxruntime defaults)", "best onnxruntime peer", "p50", 0.9),
    ("albert-edge onnx int8", "best onnxruntime peer", "p50", 0.85),
    ("albert-edge onnx int8 (onnxruntime defaults)", "ort quantize_dynamic", "size", 1.01),
    ("albert-edge pte fp32 (executorch defaults)", "executorch XNNPACK fp32", "p50", 0.8),
    ("albert-edge pte int8 (executorch defaults)", "executorch XNNPACK int8", "p50", 0.8),
    ("albert-edge pte int8 (executorch defaults)", "executorch XNNPACK int8", "size", 1.0),
)
_FIGURE_NAMES = {"peak_rss": "peak RSS", "size": "file size", "p50": "p50 latency at {T} tokens"}


def _peer_name(name: str) -> str:
    """A contestant as the pages name it (its route in its own column)."""
    base = name.split(" (")[0]
    if base.startswith("albert-edge "):
        kind, dtype = base.split()[1:3]
        what, form = _OURS[kind]
        return f"{what} {'int8-dynamic' if dtype == 'int8' else dtype}{form}"
    return _PEER_NAMES.get(base, base)


def _range(value: float, spread: list[float] | None, unit: str = "", digits: int = 2) -> str:
    """A median with the range of its rounds, when they differ."""
    text = f"{value:.{digits}f}{unit}"
    if spread and (spread[0] != spread[1]):
        text += f" ({spread[0]:.{digits}f}-{spread[1]:.{digits}f})"
    return text


def _peers_result() -> tuple[str, dict]:
    return "peers.json", _load("peers.json")


def _size_cell(row: dict) -> str:
    """A file's size, on the row of the route that opens it first (a Session row repeats the file)."""
    return _mb(row["bytes"]) if row["bytes"] and row["route"] != "session" else ""


def _p50_cells(row: dict, lens: list[int]) -> str:
    """The row's p50 at each length, each with the range of the rounds' medians."""
    return " | ".join(_range(row[f"p50_ms@{T}"], row.get(f"p50_ms_range@{T}"), " ms") for T in lens)


def _peers_rows(result: dict, section: str, dtype: str) -> list[str]:
    by = {r["name"]: r for r in result["rows"]}
    lens = result["setup"]["seq_lens"]
    rows = [f"| {dtype} | route | size | peak RSS | " + " | ".join(f"p50 at {T}" for T in lens) + " |",
            "|---|---|---:|---:|" + "---:|" * len(lens)]
    for name in _PEER_SECTIONS[section]:
        row = by.get(name.format(d=dtype))
        if row is None:
            continue
        rows.append(f"| {_peer_name(row['name'])} | {_ROUTES[row['route']]} | {_size_cell(row)} | "
                    f"{_range(row['peak_rss_mib'], row.get('peak_rss_range'), ' MiB', 1)} | {_p50_cells(row, lens)} |")
    return rows


def _peers_caption(result: dict) -> str:
    setup, cpu = result["setup"], result["machine"]["cpu"]
    return (f"`{result['command']}`: {setup.get('preset') or 'a checkpoint'} shape, random weights, batch "
            f"{setup['batch']}, {setup['threads']} threads, each file and route in a fresh process that reads the "
            f"file cold, {setup['rounds']} interleaved rounds of {setup['runs']} calls; medians, with the range of "
            f"the rounds' medians in brackets. {cpu['model']}, {cpu['cores']} cores "
            f"(flags: {', '.join(cpu['flags']) or 'none of those recorded'}), load average "
            f"{result['machine']['load_at_start'][0]} at the start and {result['machine']['load_at_end'][0]} at the end.")


def peers_files() -> str:
    """Every contestant of the last peers.py run: ONNX and TFLite, int8 and fp32."""
    name, result = _peers_result()
    blocks = [_peers_caption(result), ""]
    for title, section, dtype in (("ONNX, int8", "onnx", "int8"), ("TFLite, int8", "tflite", "int8"),
                                  ("ONNX, fp32", "onnx-fp32", "fp32"), ("TFLite, fp32", "tflite", "fp32")):
        blocks += [f"**{title}**", "", *_peers_rows(result, section, dtype), ""]
    eager = next(r for r in result["rows"] if r["route"] == "pytorch")
    lens = result["setup"]["seq_lens"]
    blocks += [f"PyTorch eager fp32 in the same run: peak RSS {eager['peak_rss_mib']:.1f} MiB, p50 "
               + " / ".join(f"{eager[f'p50_ms@{T}']:.2f} ms" for T in lens) + f" at {' / '.join(map(str, lens))} tokens.",
               "", *(f"Note: {n}." for n in result["notes"]), _source(name, result)]
    return "\n".join(blocks).replace("\n\n\n", "\n\n")


def peers_executorch() -> str:
    """The .pte files against ExecuTorch's own XNNPACK flow, from the same peers.py run."""
    name, result = _peers_result()
    by = {r["name"]: r for r in result["rows"]}
    lens = result["setup"]["seq_lens"]
    rows = ["| | route | size | delegate blocks | peak RSS | load | " + " | ".join(f"p50 at {T}" for T in lens) + " |",
            "|---|---|---:|---:|---:|---:|" + "---:|" * len(lens)]
    for dtype in ("fp32", "int8"):
        for contestant in _PEER_SECTIONS["pte"]:
            row = by.get(contestant.format(d=dtype))
            if row is None:
                continue
            who = _peer_name(row["name"]) + ("" if row["name"].startswith("albert-edge") else f" {dtype}")
            rows.append(f"| {who} | {_ROUTES[row['route']]} | {_size_cell(row)} | {row.get('delegate_blocks') or ''} | "
                        f"{_range(row['peak_rss_mib'], row.get('peak_rss_range'), ' MiB', 1)} | {row['load_s']:.2f} s | "
                        f"{_p50_cells(row, lens)} |")
    return "\n".join(["The same run as above:", "", *rows, "", _source(name, result)])


def _verdict(value: float, spread: list[float] | None, target: float) -> str:
    """met / not met, or within the rounds' spread when the range straddles the target."""
    low, high = spread if spread else (value, value)
    if high <= target:
        return "met"
    if low > target:
        return "not met"
    return "within the rounds' spread"


def peers_ratios() -> str:
    """The ratios the project has targets for, from the same run, each with its verdict."""
    name, result = _peers_result()
    by = {r["name"]: r for r in result["rows"]}
    names = set(by)
    tflite_peer = next((p for p in ("TFAlbertModel + TFLiteConverter int8", "tf_albert graph + TFLiteConverter int8")
                        if p in names), None)
    ratios = {(r["file"], r["versus"]): r for r in result["ratios"]}
    lens = result["setup"]["seq_lens"]
    rows = ["| albert-edge's file, route | against | figure | target | measured (rounds' range) | verdict |",
            "|---|---|---|---:|---:|---|"]
    for file, versus, figure, target in PEER_TARGETS:
        versus = tflite_peer if versus == "TFLITE PEER" else versus
        ratio = ratios.get((file, versus))
        if ratio is None:
            continue
        # a file's size is the same on every route
        route = "" if figure == "size" else f", {_ROUTES[by[file]['route']]}"
        whose = ratio.get("best_of", {})
        for key in ([f"p50@{T}" for T in lens] if figure == "p50" else [figure]):
            value, spread = ratio[key], ratio.get(f"{key} range")
            if value is None:
                continue
            against = _peer_name(versus) if versus in names else f"{versus}: {_peer_name(whose.get(key, ''))}"
            against = against.replace("transformers 4 ", "")  # the table above names the peers in full
            label = _FIGURE_NAMES[figure].format(T=key.partition("@")[2])
            measured = _range(value, spread, digits=3)
            rows.append(f"| {_peer_name(file).removeprefix('albert-edge ')}{route} | {against} | {label} | ≤ {target} | {measured} | "
                        f"{_verdict(value, spread, target)} |")
    return "\n".join([
        "albert-edge's file over the peer's, each as an app opens it unless the route says `Session`; below 1 is "
        "better. The range is the lowest of albert-edge's rounds over the highest of the peer's to the highest over "
        "the lowest: a target inside it is neither met nor missed by this run.", "", *rows, "", _source(name, result)])


# --- benchmarks/pipeline_run.py: the main job from nothing cached ----------------------------------

def _pipeline() -> tuple[str, dict]:
    return "pipeline.json", _load("pipeline.json")


def _model(result: dict, name: str) -> dict:
    return next(m for m in result["models"] if m["model"] == name)


def _mib(value: float) -> str:
    return f"{value / 2**20:.2f} MiB"


def pipeline_run() -> str:
    """How long the main job took from nothing cached, and its largest process's peak."""
    name, result = _pipeline()
    cpu = result["machine"]["cpu"]
    minutes, seconds = divmod(round(result["wall_s"]), 60)
    cache = "From nothing cached" if result["cache"].startswith("fresh") else "With the user's cache"
    return (f"{cache}, `albert-edge pipeline` took **{minutes} min {seconds} s** wall "
            f"time, its largest process peaking at {result['peak_rss_bytes'] / 2**30:.1f} GiB, on {cpu['model']} "
            f"({cpu['cores']} cores; load average {result['machine']['load_at_start'][0]} at the start, "
            f"{result['machine']['load_at_end'][0]} at the end). {_source(name, result)}")


def pipeline_files() -> str:
    """The ALBERT-base shape's files: sizes and weights stored once."""
    name, result = _pipeline()
    model = _model(result, "albert-base-v2-random")
    rows = ["| file | scheme | size | stored weights | unique weights | duplicates | bytes by precision |",
            "|---|---|---:|---:|---:|---:|---|"]
    for f in model["files"]:
        precision = ", ".join(f"{k} {_mib(v)}" for k, v in sorted(f["bytes_by_precision"].items(), key=lambda kv: -kv[1])
                              if v >= 2**16)
        rows.append(f"| {f['name']} | {f['scheme']} | {_mib(f['bytes'])} | {_mib(f['stored_weight_bytes'])} | "
                    f"{_mib(f['unique_weight_bytes'])} | {len(f['duplicates'] or [])} | {precision} |")
    return "\n".join([*rows, "", _source(name, result)])


def pipeline_compute() -> str:
    """Compute per sequence length against BERT's (from the model's config: counted, not timed)."""
    name, result = _pipeline()
    model = _model(result, "albert-base-v2-random")
    rows = ["| seq len | MACs / layer | layers run | MACs total | BERT MACs | ALBERT / BERT | activations / layer |",
            "|---:|---:|---:|---:|---:|---:|---:|"]
    for c in model["compute"]:
        rows.append(f"| {c['seq_len']} | {c['macs_per_layer'] / 1e6:.2f}M | {c['layer_applications']} | "
                    f"{c['macs_total'] / 1e9:.2f}G | {c['bert_macs_total'] / 1e9:.2f}G | "
                    f"{c['macs_total'] / c['bert_macs_total']:.3f} | {_mib(c['activation_bytes_per_layer'])} |")
    return "\n".join([*rows, "", _source(name, result)])


def pipeline_latency() -> str:
    """The ALBERT-base files' p50 with its 95 % interval and the profiler's verdict on the timing."""
    name, result = _pipeline()
    model = _model(result, "albert-base-v2-random")
    lens = sorted({r["seq_len"] for r in model["profile"]})
    rows = ["| file | " + " | ".join(f"p50 at {T} (95% interval)" for T in lens) + f" | peak RSS at {lens[-1]} | timing |",
            "|---|" + "---:|" * len(lens) + "---:|---|"]
    for file in dict.fromkeys(r["file_name"] for r in model["profile"]):
        by = {r["seq_len"]: r for r in model["profile"] if r["file_name"] == file}
        cells = [f"{by[T]['p50_ms']:.1f} ms ({by[T]['p50_ci'][0]:.1f}-{by[T]['p50_ci'][1]:.1f})" if T in by else ""
                 for T in lens]
        quality = sorted({r["quality"] for r in by.values()})
        peak = _mib(by[lens[-1]]["peak_rss"]).replace(".00 MiB", " MiB") if lens[-1] in by else ""
        rows.append(f"| {file} | " + " | ".join(cells) + f" | {peak} | {', '.join(quality)} |")
    first = model["profile"][0]
    return "\n".join([f"Batch {first['batch']}, {first['threads']} threads, each file in a fresh process; the timing "
                      "column is the profiler's own verdict (good: a narrow interval on a quiet machine; noisy: "
                      "compare with care).", "", *rows, "", _source(name, result)])


def pipeline_accuracy() -> str:
    """The small trained model's int8 and fp16 files against their fp32 parent on held-out text."""
    name, result = _pipeline()
    model = _model(result, "albert-small-builtin")
    rows = ["| file | size | parent | agreement with the parent | on |", "|---|---:|---|---:|---|"]
    for f in model["files"]:
        if f["accuracy"]:
            a = f["accuracy"]
            rows.append(f"| {f['name']} | {_mib(f['bytes'])} | {f['parent']} | {a['headline']:.2%} | "
                        f"{a['headline_of']}, {a['count']} {a['count_of']} of {a['text']} |")
    return "\n".join([*rows, "", _source(name, result)])


# --- benchmarks/adaptive.py: adaptive-depth files against the same model at full depth ----------

def _adaptive_caption(result: dict) -> str:
    """The model, how it was trained, the texts and the full-depth figures of one adaptive result."""
    shape, training, full = result["shape"], result["training"], result["full_depth"]
    fine, exits = training["fine_tuning"], training["exits"]
    tokens = result["texts"]["tokens"]
    return (f"**{result['model']}** (H={shape['hidden_size']}, {shape['num_hidden_layers']} passes, vocabulary "
            f"{shape['vocab_size']:,}), from {training['start']}: fine-tuned on {training['train_examples']:,} texts "
            f"({_training_time(fine)}), held-out accuracy {fine['metrics']['acc']:.1%}; "
            f"frozen exits {_training_time(exits)}. Full depth: TFLite "
            f"{full['tflite']['ms_per_text']:.2f} ms, ORT {full['onnx']['ms_per_text']:.2f} ms per text, "
            f"accuracy {full['tflite']['accuracy']['rate']:.1%}. {result['texts']['count']} held-out texts of "
            f"{tokens['min']}-{tokens['max']} tokens (mean {tokens['mean']}) at their own lengths, "
            f"{result['rounds']} rounds; default rule {result['default_rule']['kind']} "
            f"{result['default_rule']['setting']:g}.{_untrained(fine['metrics'])}")


def _untrained(metrics: dict) -> str:
    """A warning where the classifier did not learn the task: its held-out accuracy is no better than
    always answering the majority class."""
    majority = metrics.get("majority_acc")
    if majority is None or metrics["acc"] > majority + 0.02:
        return ""
    return (f" **This classifier did not learn the task** (held-out accuracy {metrics['acc']:.1%}, the majority "
            f"class {majority:.1%}): its answers barely depend on the text, so its agreement figures say nothing of "
            "a trained one; its times show what each pass costs at this shape.")


def _training_time(step: dict) -> str:
    """A training step's length: its optimizer steps and minutes (when recorded)."""
    minutes = f", {step['seconds'] / 60:.1f} min" if step.get("seconds") is not None else ", time not recorded"
    return f"{step['steps']} steps{minutes}"


def _adaptive_rows(result: dict) -> list[str]:
    rows = ["| setting | passes | speedup TFLite | speedup ORT | agreement % [95 %]; ORT's | accuracy Δ |",
            "|---|---:|---:|---:|---|---:|"]
    default = (result["default_rule"]["kind"], float(result["default_rule"]["setting"]))
    settings = dict.fromkeys((r["kind"], r["setting"]) for r in result["rows"])
    for kind, setting in sorted(settings, key=lambda k: (k[0], k[1])):
        by = {r["runtime"]: r for r in result["rows"] if (r["kind"], r["setting"]) == (kind, setting)}
        t, o = by["tflite"], by["onnx"]
        low, high = t["agreement"]["interval"]
        ort = "same" if o["agreement"]["rate"] == t["agreement"]["rate"] else f"{100 * o['agreement']['rate']:.1f}"
        name = f"{kind} {setting:g}" + (" *" if (kind, setting) == default else "")
        rows.append(f"| {name} | {t['mean_passes']:.2f} | {_range(t['speedup'], t['speedup_spread'])} | "
                    f"{_range(o['speedup'], o['speedup_spread'])} | {100 * t['agreement']['rate']:.1f} "
                    f"[{100 * low:.1f}-{100 * high:.1f}]; {ort} | {t['accuracy_delta_points']:+.1f} |")
    return rows


def _adaptive_targets(result: dict) -> str:
    """The issue's size and memory targets, as measured."""
    rows = result["rows"]
    over = max(r["file_bytes"] - r["full_bytes"] for r in rows if r["runtime"] == "tflite")
    over_onnx = max(r["file_bytes"] - r["full_bytes"] for r in rows if r["runtime"] == "onnx")
    return (f"Adaptive files against full depth: the .tflite {over / 1e3:+.1f} kB, the .onnx "
            f"{over_onnx / 1e3:+.1f} kB (the exit heads are {result['exit_heads_bytes'] / 1e3:.1f} kB); peak "
            f"resident memory at most {max(r['peak_rss_ratio'] for r in rows):.3f}x the full-depth child's.")


def adaptive() -> str:
    """Each adaptive result: speedup and agreement with the full-depth file per exit-rule setting."""
    names = sorted(p.name for p in RESULTS.glob("adaptive-*.json"))
    parts = ["Speedup is full-depth time over adaptive time per text, median of the rounds' ratios with their "
             "range; agreement is top-1 with the full-depth file of the same runtime (TFLite's, with its Wilson "
             "interval, then ORT's); accuracy Δ is in points against the labels, from full depth; * marks the "
             "default setting, the rule fine-tuning chose and recorded."]
    for name in names:
        result = _load(name)
        parts += ["", _adaptive_caption(result), "", *_adaptive_rows(result), "", _adaptive_targets(result),
                  "", _source(name, result)]
    return "\n".join(parts)


# --- figures recorded before their benchmark wrote result files ---------------------------------

RECORDED = RESULTS / "recorded"


def recorded(name: str) -> str:
    """A table of figures measured before its benchmark wrote a result file: the figures as the
    docs of their commit gave them, with that commit, its date and what the text said of the
    machine. ``history`` entries are superseded results, kept with their date."""
    result = json.loads((RECORDED / f"{name}.json").read_text(encoding="utf-8"))
    rows = ["| " + " | ".join(result["columns"]) + " |", "|" + "---|" * len(result["columns"])]
    rows += ["| " + " | ".join(row) + " |" for row in result["rows"]]
    command = f" with `{result['command']}`" if result.get("command") else ""
    when = (f"Measured{command} on {result['machine']['platform']}, at commit {result['commit'][:7]} "
            f"({result['date'][:10]}); transcribed from that commit's documentation into "
            f"`benchmarks/results/recorded/{name}.json`, not measured again since.")
    if result.get("status") == "history":
        when = f"History, superseded. {when}"
    return "\n".join([*rows, "", when])


TABLES: dict[str, Callable[[], str]] = {"gpu_static": gpu_static, "onnx_partitions": onnx_partitions,
                                        "tokenizer_json_parity": tokenizer_json_parity,
                                        "peers_files": peers_files, "peers_executorch": peers_executorch,
                                        "peers_ratios": peers_ratios, "pipeline_run": pipeline_run,
                                        "pipeline_files": pipeline_files, "pipeline_compute": pipeline_compute,
                                        "pipeline_latency": pipeline_latency, "pipeline_accuracy": pipeline_accuracy,
                                        "adaptive": adaptive, "webgpu_parity": webgpu_parity}


def table(name: str) -> Callable[[], str] | None:
    """The renderer of a results block: one of TABLES, or ``recorded/NAME`` for a recorded file."""
    if name.startswith("recorded/"):
        stem = name.partition("/")[2]
        return (lambda: recorded(stem)) if (RECORDED / f"{stem}.json").is_file() else None
    return TABLES.get(name)


def render(text: str) -> str:
    """``text`` (a page) with every results block it holds replaced by its rendering; a block of a
    name no table renders is an error."""
    for name in re.findall(r"<!-- results:([\w/-]+) -->", text):
        renderer = table(name)
        if renderer is None:
            raise SystemExit(f"no table renders <!-- results:{name} -->: one of {', '.join(TABLES)}, or "
                             f"recorded/NAME for a file in {RECORDED.relative_to(ROOT)}")
        pattern = re.compile(rf"(<!-- results:{re.escape(name)} -->\n)(?:.*?\n)?(<!-- /results:{re.escape(name)} -->)",
                             re.S)
        if not pattern.search(text):
            raise SystemExit(f"<!-- results:{name} --> has no <!-- /results:{name} --> after it")
        text = pattern.sub(lambda m, render=renderer: m.group(1) + render() + "\n" + m.group(2), text)
    return text


# The folders' READMEs that the site shows as pages of its own (tools/docs_hooks.py).
README_PAGES = (ROOT / "demo_app" / "README.md", ROOT / "benchmarks" / "README.md")


def pages() -> list[Path]:
    """The documentation pages that hold a results block."""
    return [p for p in [*sorted(DOCS.rglob("*.md")), *README_PAGES] if "<!-- results:" in p.read_text(encoding="utf-8")]


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
