"""The report's tables as plain data (title, columns, rows, notes), rendered by the markdown and
HTML writers and the terminal alike, so all three show the same figures."""

from __future__ import annotations

from typing import Any

import math
import re

from ..profile.record import APP
from .answer import COLUMNS as ANSWER_COLUMNS, TITLE as ANSWER_TITLE, answer_notes, answer_rows
from .adaptive import adaptive_table
from .cells import Z95, Table, fmt_bytes, fmt_count, wilson

__all__ = ["Table", "tables", "fmt_count", "fmt_bytes", "QUALITY_MARK", "HALF_WIDTH_NOTE", "half_width_text",
           "interval_words", "accuracy_interval"]

# What "±X%" beside a p50 is, wherever it is shown (the report, `profile`'s table, their notes).
HALF_WIDTH_NOTE = ("half the width of the p50's 95% confidence interval, as a % of the p50 (an interval 9.4% of "
                   "the p50 wide shows as ±4.7%)")


def _ms(x: float | None) -> str:
    return "" if x is None else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def tables(data: dict[str, Any]) -> list[Table]:
    out = []
    for make in (_answer, _profile, adaptive_table, _files, _accelerators, _params, _compute, _presets):
        table = make(data)
        if table is not None:
            out.append(table)
    return out


# How every parameter count of a report is counted (one count per model).
PARAMS_COUNTED = ("params: unique parameters of the base model, each shared weight once; token, position and "
                  "token-type embeddings, their LayerNorm and the pooler included, task heads left out")


def _answer(data) -> Table | None:

    rows = answer_rows(data)
    if not rows:
        return None
    return Table("answer", ANSWER_TITLE, ANSWER_COLUMNS, tuple(rows), (2, 3), tuple(answer_notes(data)), "latency",
                 keep=(1, 2, 3))


def _params(data) -> Table | None:
    params = data["params"]
    if params is None:
        return None
    rows = [(r["part"], r["shape"], f"{r['count']:,}", fmt_count(r["count"]), r["note"]) for r in params["rows"]]
    rows.append(("total (unique)", "", f"{params['total']:,}", fmt_count(params["total"]), ""))
    bert = params["bert_total"]
    rows += [
        ("BERT, same width and depth", "E = H, no sharing", f"{bert:,}", fmt_count(bert), ""),
        ("- saved by factorized embeddings", "", f"{params['factorization_saving']:,}",
         fmt_count(params["factorization_saving"]), f"{100 * params['factorization_saving'] / bert:.1f}% of BERT"),
        ("- saved by cross-layer sharing", "", f"{params['sharing_saving']:,}", fmt_count(params["sharing_saving"]),
         f"{100 * params['sharing_saving'] / bert:.1f}% of BERT"),
    ]
    notes = [f"paper: {p['model']} {p['figure_m']:g}M, ours {p['ours_m']:.2f}M: {p['note']}"
             for p in (params["paper"], params["bert_paper"]) if p]
    c = params["config"]
    title = (f"Parameters of {params['name']} (V={c['vocab_size']} E={c['embedding_size']} H={c['hidden_size']} "
             f"L={c['num_hidden_layers']} G={c['num_hidden_groups']}), beside BERT of the same shape")
    return Table("params", title, ("part", "shape", "params", "short", "note"), tuple(rows), (2, 3),
                 tuple([PARAMS_COUNTED, *notes, *params["notes"]]), "overview")


def _compute(data) -> Table | None:
    rows = data["compute"]
    if not rows:
        return None
    table = tuple((str(r["seq_len"]), fmt_count(r["macs_per_layer"]), str(r["layer_applications"]),
                   fmt_count(r["macs_total"]), fmt_count(r["bert_macs_total"]),
                   f"{r['macs_total'] / r['bert_macs_total']:.3f}", fmt_bytes(r["activation_bytes_per_layer"]))
                  for r in rows)
    notes = ("MACs of the matrix products, batch 1; sharing weights does not share work: every layer "
             "application runs",
             "activations: fp32 tensors one layer application writes (runtimes reuse them layer to layer)")
    return Table("compute", "Compute and activation memory by sequence length",
                 ("seq len", "MACs / layer", "layers run", "MACs total", "BERT MACs", "ALBERT / BERT",
                  "activations / layer"), table, (0, 1, 2, 3, 4, 5, 6), notes, "overview")


def _presets(data) -> Table:
    rows = tuple((r["name"], str(r["embedding_size"]), str(r["hidden_size"]), str(r["num_hidden_layers"]),
                  fmt_count(r["params"]), f"{r['paper_m']:g}M" if r["paper_m"] else "",
                  fmt_bytes(r["fp32_bytes"]), fmt_count(r["macs_128"])) for r in data["presets"])
    return Table("presets", "ALBERT and BERT presets", ("preset", "E", "H", "L", "params", "paper", "fp32 weights",
                                                         "MACs @128"), rows, (1, 2, 3, 4, 5, 6, 7),
                 (PARAMS_COUNTED, "BERT presets are counted as BERT is built: E = H, nothing shared and no E -> "
                  "H projection (ALBERT's layout would add H x H + H), the same figure as the parameter table's BERT "
                  "row"), "presets")


def _files(data) -> Table | None:
    files = data["files"]
    if not files:
        return None
    rows = []
    notes: dict[str, list[str]] = {}  # note -> the files it is about
    for f in files:
        by = ", ".join(f"{d} {fmt_bytes(n)}" for d, n in sorted(f["bytes_by_precision"].items(), key=lambda kv: -kv[1]))
        if f["accuracy"]:
            a = f["accuracy"]
            of = f" of {a['count']:,} {a['count_of']}" if a.get("count") else ""
            interval = accuracy_interval(a)
            ci = f", 95% CI {100 * interval[0]:.2f}-{100 * interval[1]:.2f}%" if interval else ""
            acc = f"{100 * a['headline']:.2f}%{of}{ci} ({a['headline_of']})"
            if f["accuracy"]["random_ids"]:
                acc += " on random ids"
        elif f["scheme"] == "fp32":
            acc = "fp32 (parent)"
        else:
            acc = "not shown (random weights)" if f["random_weights"] else "-"
        if f["accuracy_note"]:
            notes.setdefault(f["accuracy_note"], []).append(f.get("label", f["name"]))
        rows.append((f.get("label", f["name"]), f["format"], f["scheme"] or "?", fmt_bytes(f["bytes"]),
                     fmt_bytes(f.get("download_bytes")), fmt_bytes(f["stored_weight_bytes"]),
                     fmt_bytes(f["unique_weight_bytes"]), str(f["duplicates"]),
                     by, acc))
    shown = [accuracy_interval(f["accuracy"]) and f["accuracy"] for f in files if f["accuracy"]]
    if any(a and "agreement" in a["headline_of"] for a in shown):
        notes.setdefault("95% CI of an agreement: the Wilson score interval of the rate over the predictions it was "
                         "counted on (the fewer, the wider)", [])
    if any(a and "cosine" in a["headline_of"] for a in shown):
        notes.setdefault("95% CI of a mean cosine: mean ± 1.96 sqrt((1 - mean)(mean - least) / n) over its n rows, "
                         "the widest the spread can be between the least cosine recorded and 1 (the spread itself "
                         "is not recorded)", [])
    if any(f.get("download_bytes") is not None for f in files):
        notes.setdefault("download (gzip): what fetching the file costs from a server that compresses with gzip "
                         "(zlib level 6, the usual default), as a web page or an app's first start downloads it", [])
    return Table("files", "Model files", ("file", "format", "scheme", "size", "download (gzip)", "stored weights",
                                          "unique weights", "duplicates", "bytes by precision", "vs fp32 parent"),
                 tuple(rows), (3, 4, 5, 6, 7),
                 tuple(f"{', '.join(names)}: {note}" if names else note for note, names in notes.items()),
                 "file_sizes")


def accuracy_interval(accuracy: dict[str, Any]) -> tuple[float, float] | None:
    """The 95% interval of a headline accuracy figure from the sample it was measured on, or None
    when the sample is not recorded. An agreement rate over n predictions: Wilson's score
    interval. A mean cosine over n rows whose least is recorded: mean ± z sqrt((1 - mean)(mean -
    least) / n), the variance at its largest for values between the least and 1 (Bhatia-Davis)."""
    n, value = accuracy.get("count"), accuracy.get("headline")
    if not isinstance(n, int) or n < 1 or not isinstance(value, (int, float)):
        return None
    z = Z95
    if "agreement" in str(accuracy.get("headline_of")):
        return wilson(value, n)
    least = accuracy.get("cosine_min")
    if "cosine" in str(accuracy.get("headline_of")) and isinstance(least, (int, float)):
        half = z * math.sqrt(max(0.0, (1 - value) * (value - least)) / n)
        return value - half, min(1.0, value + half)
    return None


def _accelerators(data) -> Table | None:
    acc = data.get("accelerators")
    if not acc:
        return None
    names = {a["key"]: a["name"] for a in acc["accelerators"]}
    rows = tuple((r["label"], f"static [1, {r['static_len']}]" if r["static_len"] else "dynamic",
                  *(r[key]["text"] for key in names)) for r in acc["rows"])
    return Table("accelerators", "Accelerators: which file each takes, and how much of it",
                 ("file", "shape", *names.values()), rows, notes=tuple(acc["notes"]), lead=acc["sentence"])


# Machines whose onnxruntime CPU provider runs fp16 products through fp32 casts (its fp16 kernels are Arm's).
_NO_ORT_FP16 = {"x86_64", "amd64", "i686", "x86"}


# The JavaScript runtimes of profile --runtime node / chromium, named in the row (their provider is not enough).
WEB_RUNTIMES = ("onnxruntime-node", "onnxruntime-web")


def _profile(data) -> Table | None:
    records = data["profile_rows"]
    if not records:
        return None
    warned: list[str] = []  # the records' warnings, numbered as their rows mark them
    doubled = _fp16_memory_above_fp32(records)
    rows = tuple(_profile_row(r, warned, doubled) for r in records)
    return Table("profile", "Latency and memory (from profile records)",
                 ("file", "scheme", "device", "runtime", "batch", "seq len", "kind", "p50 ms", "p50 ±", "p90 ms",
                  "timing", "load ms", "peak RSS"), rows, (4, 5, 7, 8, 9, 11, 12),
                 tuple(_profile_notes(data, doubled, warned)), "latency", keep=(5, 7, 9))


def _profile_row(r: dict[str, Any], warned: list[str], doubled: dict[int, tuple[dict, dict]]) -> tuple[str, ...]:
    """One record's row; its own warnings, each kept, go to ``warned`` and mark its cell."""
    seq = str(r["seq_len"]) if r["seq_len"] else "real text"
    kind = "ESTIMATE" if r["estimated"] else "measured"
    mark = ""
    if r.get("warnings"):  # the record's own warnings, each kept: a marked cell, its note below
        said = [interval_words(w, {"p50": r["p50_ms"], "p50_ci": r.get("p50_ci")}) for w in r["warnings"]]
        warned.append(f"[{len(warned) + 1}] {r['file_name']}, seq len {seq}: {'; '.join(said)}")
        mark = f" [{len(warned)}]"
    return (r["file_name"], r["scheme"] or "", r["device"], _runs_on(r),
            str(r["batch"]), seq, kind + mark, QUALITY_MARK.get(r.get("quality"), "") + _ms(r["p50_ms"]),
            _interval(r), _ms(r["p90_ms"]), r.get("quality") or ("range" if r.get("ms_range") else ""),
            _ms(r["load_ms"]), fmt_bytes(r["peak_rss"]) + (" †" if id(r) in doubled else ""))


def _runs_on(r: dict[str, Any]) -> str:
    """The runtime cell: what ran the file, with what, and how it was opened and fed."""
    return ("MediaPipe Tasks, own threads" if r.get("runtime") == "mediapipe" else
            f"LiteRT GPU accelerator, {r.get('gpu_precision') or 'fp32'}" if r.get("accelerator") == "gpu" else
            f"{r['runtime'] + ', ' if r.get('runtime') in WEB_RUNTIMES else ''}{r['provider']}, "
            f"{r['threads']} thr") + (", text in" if r.get("input_kind") == "text" else "") \
        + (", app defaults" if r.get("opened_as") == APP else "")


def _profile_notes(data, doubled: dict[int, tuple[dict, dict]], warned: list[str]) -> list[str]:
    """The notes under the profile table: what its marks and figures mean, where its rows have them."""
    records = data["profile_rows"]
    notes = ["estimates are computed for a device nobody ran on; they are never shown as measurements"] \
        if any(r["estimated"] for r in records) else []
    software = sorted({r["gpu_adapter"].split(", arch=")[0] for r in records if r.get("accelerator") == "gpu"
                       and "software" in (r.get("gpu_adapter") or "").lower()})
    if software:
        notes.append(f"GPU rows ran on {', '.join(software)}, a software Vulkan device (Mesa's lavapipe, on the CPU): "
                     "their timings mean nothing about a GPU")
    if any(r.get("opened_as") == APP for r in records):
        notes.append("app defaults: the file opened as an app opens it, the runtime's own API with its default options "
                     "(profile --as-app); the other rows ran with albert-edge's settings (runtime.Session)")
    if any(r.get("input_kind") == "text" for r in records):
        notes.append("text in: the file was fed the text, as an app feeds it, so the time is its tokenizer's and the "
                     "model's (seq len: the tokens the text comes to)")
    if any(r["scheme"] == "fp16" and r["format"] == "onnx" and not r["estimated"]
           and str(r.get("machine") or "").lower() in _NO_ORT_FP16 for r in records):
        notes.append("fp16 .onnx files are slow on x86 CPUs: onnxruntime's CPU provider has no fp16 kernels there, so "
                     "the weights are cast to fp32 around each product (fp16 saves file size and memory, not time)")
    if any(_interval(r).startswith("±") for r in records):
        notes.append(f"p50 ±: {HALF_WIDTH_NOTE}; an estimate shows instead the range its calibration's error gives")
    if any(r.get("quality") for r in records):
        notes.append("timing: 'good' = the p50's interval is narrow on a quiet machine; " + QUALITY_MARK["noisy"]
                     + " noisy = other work "
                     "on the machine, drift or held-up calls: compare such figures with care; " + QUALITY_MARK["unusable"]
                     + " unusable = too few calls or too much spread to say anything (the note of each says why)")
    if doubled:
        pairs = "; ".join(f"{r['file_name']}, seq len {r['seq_len'] or 'real text'}: {fmt_bytes(r['peak_rss'])} "
                          f"against {fmt_bytes(fp32['peak_rss'])} of {fp32['file_name']}"
                          for r, fp32 in doubled.values())
        notes.append(f"† fp16 .tflite peak memory above its fp32 file's at the same setting ({pairs}), though fp16 "
                     "stores its weights in half the bytes: on the CPU the runtime dequantizes the fp16 weights to "
                     "fp32 when it loads the file and keeps both copies (fp16 saves file size and download, not "
                     "memory, on a CPU)")
    drawn = {c["name"] for c in data.get("charts") or ()}
    left_out = unusable_left_out(data)
    if left_out and "latency" in drawn:
        notes.append(f"{left_out} unusable timing{'s are' if left_out > 1 else ' is'} left out of the latency chart "
                     f"(their rows are marked {QUALITY_MARK['unusable']} above): too few calls or too much spread to "
                     "draw a trend from")
    if warned:
        notes += ["[n] marks a record the profiler warned about: read its figures with that in mind", *warned]
    return notes


def _fp16_memory_above_fp32(records: list[dict[str, Any]]) -> dict[int, tuple[dict, dict]]:
    """The measured fp16 .tflite rows on the CPU whose peak memory is above the fp32 .tflite
    file's at the same setting, by id: (the row, the fp32 row)."""
    def setting(r: dict[str, Any]) -> tuple:
        return (r["device"], r.get("runtime"), r.get("provider"), r.get("threads"), r.get("batch"),
                r.get("seq_len"), r.get("input_mode"), r.get("opened_as"))

    def measured(r: dict[str, Any], scheme: str) -> bool:
        return (r["format"] == "tflite" and r["scheme"] == scheme and not r["estimated"] and bool(r["peak_rss"])
                and r.get("accelerator", "cpu") == "cpu")

    fp32 = {setting(r): r for r in records if measured(r, "fp32")}
    return {id(r): (r, fp32[setting(r)]) for r in records if measured(r, "fp16") and setting(r) in fp32
            and r["peak_rss"] > fp32[setting(r)]["peak_rss"]}


# A p50 cell of a record whose timing the profiler did not trust starts with its mark.
QUALITY_MARK = {"noisy": "≈", "unusable": "✗"}


def half_width_text(lat: Any) -> str:
    """'±4.7%' for a p50 whose 95% interval is 9.4% of it wide (HALF_WIDTH_NOTE), '' without one.
    ``lat``: a record's latency (dict or Latency) with p50 and p50_ci."""
    if lat is None:
        return ""
    get = lat.get if isinstance(lat, dict) else lambda k: getattr(lat, k, None)
    ci, p50 = get("p50_ci"), get("p50")
    if not ci or not p50:
        return ""
    return f"±{(ci[1] - ci[0]) / 2 / p50:.1%}"


# How the profiler words a p50 interval's width in its warnings ("the p50's interval is 9.4% of it wide").
_WIDTH_WORDS = re.compile(r"the p50's interval is (\d+(?:\.\d+)?)% of it wide")


def interval_words(text: str, lat: Any = None) -> str:
    """A record's warning with the p50 interval's width put as the table puts it: "the p50's
    interval is 9.4% of it wide" -> "the p50's 95% interval is ±4.7% of it" (from the record's
    own interval when ``lat`` has it, so the note and the ± column show the same figure)."""
    def half(match: re.Match) -> str:
        figure = half_width_text(lat) or f"±{float(match.group(1)) / 2:g}%"
        return f"the p50's 95% interval is {figure} of it"

    return _WIDTH_WORDS.sub(half, text)


def _interval(r: dict[str, Any]) -> str:
    """'±1.3%' of a measured p50's interval (HALF_WIDTH_NOTE), '1.8-2.4' of an estimate's range,
    '' without either."""
    measured = half_width_text({"p50": r.get("p50_ms"), "p50_ci": r.get("p50_ci")})
    if measured:
        return measured
    if r.get("ms_range"):
        return "-".join(_ms(v) for v in r["ms_range"])
    return ""


def unusable_left_out(data) -> int:
    """How many timings the latency chart leaves out because their record calls them unusable."""
    return sum(1 for r in data["profile_rows"] if r["seq_len"] and r["p50_ms"] is not None
               and r.get("quality") == "unusable")
