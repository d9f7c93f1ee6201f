"""The tables and lines `albert-edge profile` prints: measured records, estimates, baseline
comparisons, per-operator breakdowns, and the devices --estimate knows."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..profile.record import APP, HEADLINE, TAIL
from ..runtime import PROVIDERS
from . import _output
from ._output import Column, print_table, show_table

if TYPE_CHECKING:
    from ..profile import ProfileResult


def print_result(result: ProfileResult, baseline: Path | None) -> None:
    """The measured records' table (with their comparisons against ``baseline``), then the
    estimates' table."""
    records = result.to_dicts()
    measured = [r for r in records if not r.get("estimated")]
    if measured:
        print_measured(measured, [c for c in result.comparisons if c is not None], baseline)
    if len(measured) < len(records):
        print_estimates([r for r in records if r.get("estimated")])


def print_devices() -> None:
    """The devices --estimate knows (`profile --estimate list`), each with the source of its figures."""
    from ..device.catalog import DEVICES
    from ..profile.estimate import DEVICE_COLUMNS, device_rows

    print_table("devices for --estimate (CPU complex; peak = 2 ops per multiply-accumulate)", DEVICE_COLUMNS,
                device_rows(), right=(2, 3, 4, 5, 6, 7))
    for d in DEVICES:
        _output.console.print(f"{d.name}: {d.source}")


def print_estimates(records: list[dict]) -> None:
    from ..profile.estimate import ESTIMATE_COLUMNS, estimate_rows
    from ..profile.record import ProfileRecord

    print_table("estimate (roofline x efficiency measured here; NOT measured on the device): p50 ms",
                ESTIMATE_COLUMNS, estimate_rows(ProfileRecord.from_dict(r) for r in records),
                right=tuple(range(2, len(ESTIMATE_COLUMNS))))
    _output.console.print(
        "range: the estimate -/+ the calibration's leave-one-out error (each host measurement predicted "
        "from the others); host fit: how far the calibration misses this machine's own robust time at the "
        "setting; calibration: the quality and number of host measurements it rests on (a quiet one "
        "outranks a noisy one); efficiency * above 1: the host ran faster than its roofline (the file fits "
        "in its caches)")


def _mib(value) -> str:
    return f"{value / 2**20:.1f}" if value else "-"


def _ms(value) -> str:
    return "-" if value is None else f"{value:.3f}" if value < 10 else f"{value:.1f}"


_SHORT_RUNTIME = {"onnxruntime": "ort", "ai_edge_litert": "litert", "tflite_runtime": "tflite-rt", "tensorflow": "tf",
                  "onnxruntime-node": "ort-node", "onnxruntime-web": "ort-web"}


def _runs_on(record: dict) -> str:
    provider = {full: short for short, full in PROVIDERS.items()}.get(record["provider"], record["provider"])
    app = " app" if record.get("opened_as") == APP else ""
    gpu = f" {record['gpu_precision']}" if record.get("accelerator") == "gpu" and record.get("gpu_precision") else ""
    simd = " simd" if (record.get("web") or {}).get("simd") else ""
    return f"{_SHORT_RUNTIME.get(record['runtime'], record['runtime'])}:{provider}{simd}{gpu}{app}"


# The measured records' columns; a narrow terminal leaves out the higher ``drop`` ones last.
_MEASURED = (Column("file"), Column("scheme", drop=4), Column("runs on", drop=6), Column("thr", True, drop=5),
             Column("shape"), Column("load", True, drop=3), Column("first", True, drop=2), Column("p50", True),
             Column("±", True), Column("p90", True), Column("p99", True, drop=1), Column("MiB", True),
             Column("timing", drop=7), Column("note"))


def print_measured(records: list[dict], comparisons: list, baseline: Path | None) -> None:
    from ..report.tables import HALF_WIDTH_NOTE, half_width_text, interval_words

    rows, notes = [], []
    for r in records:
        lat, mem = r.get("latency") or {}, r.get("memory") or {}
        seq = r["seq_len"] if r["input_mode"] == "fixed" else "text"
        shape = f"{r['batch']}x{seq}" if r["input_mode"] == "fixed" else "text"
        warnings = ["estimate"] if r.get("estimated") else [interval_words(w) for w in r.get("warnings") or []]
        if warnings:
            notes.append(f"[{len(notes) + 1}] {r['file_name']} {_runs_on(r)} threads={r['threads']} seq={seq}: "
                         + "; ".join(warnings))
        rows.append((
            r["file_name"] + (f" @{r['host']}" if r.get("host") else ""), r.get("scheme") or "-",
            _runs_on(r), r["threads"], shape, _ms(r.get("load_ms")), _ms(r.get("first_call_ms")),
            _ms(lat.get("p50")), half_width_text(lat) or "-", _ms(lat.get("p90")), _ms(lat.get("p99")),
            _mib(mem.get("peak_after_timed")), lat.get("quality") or "-", f"[{len(notes)}]" if warnings else ""))
    show_table(f"latency in ms ({HEADLINE} is the headline, {TAIL} beside it for the tail); peak resident memory of "
               "the measuring process", _MEASURED, rows)
    if any(half_width_text(r.get("latency")) for r in records):
        _output.console.print(f"±: {HALF_WIDTH_NOTE}")
    for note in notes:
        _output.console.print(note)
    if any(r.get("opened_as") == APP for r in records):
        _output.console.print("app: opened as an app opens the file, the runtime's own API with its default "
                              "options (the other rows: albert-edge's settings, runtime.Session)")
    if any((r.get("latency") or {}).get("quality") not in (None, "good") for r in records):
        _output.console.print("timing: 'good' = the p50's interval met --ci-target on a quiet machine; 'noisy' = "
                              "other work, drift or held-up calls (the note says which): compare such figures with "
                              "care; 'unusable' = too few calls or too much spread to say anything")
    for line in web_lines(records):
        _output.console.print(line)
    for line in placement_lines(records):
        _output.console.print(line)
    versions = sorted({f"{r['runtime']} {r.get('runtime_version')}" for r in records})
    dev = records[0].get("device") or {} if records else {}
    _output.console.print(f"{', '.join(versions)}; {dev.get('cpu_model')} x{dev.get('cpu_cores')}"
                  + (f", {dev['board']}" if dev.get("board") else "") + f", {dev.get('os')}")
    for (name, runtime), r in {(r["file_name"], r["runtime"]): r for r in records if not r.get("web")}.items():
        through = " through MediaPipe Tasks" if runtime == "mediapipe" else ""
        _output.console.print(f"{name}{through}: {_supports(r.get('model') or {}, r.get('input_kind'))}")
    for r in records:
        if r.get("text"):
            t = r["text"]
            again = t.get("same_shape_again") or {}
            _output.console.print(f"real text ({r['file_name']}, {r['provider']}, {r['threads']} threads): "
                          f"{t['sentences']} sentences from {t['source']}, tokens p50 {t['tokens']['p50']:.0f} "
                          f"p90 {t['tokens']['p90']:.0f} max {t['tokens']['max']}; a shape change costs "
                          f"{_ms(again.get('shape_change_cost_p50_ms'))} ms per call (p50)")
        if r.get("ops"):
            _print_ops(r)
    if comparisons:
        print_comparisons(comparisons, baseline)
    elif baseline is not None:
        _output.console.print(f"no record in {baseline} matches these files and settings")


def web_lines(records: list[dict]) -> list[str]:
    """What each JavaScript runtime ran with (--runtime node / chromium), once per runtime and version."""
    lines = []
    for (runtime, version, _), r in {(r["runtime"], r.get("runtime_version"), r.get("provider")): r
                                     for r in records if r.get("web")}.items():
        w = r["web"]
        if w.get("adapter") is not None:
            lines.append(_webgpu_line(runtime, version, w))
        elif w.get("runtime") == "node":
            lines.append(f"{runtime} {version} in Node {w.get('node')}: calls timed in JavaScript "
                         f"({w.get('timer')}); MiB is the Node process's peak")
        else:
            wasm = ", ".join(w.get("wasm") or []) or "no .wasm seen"
            lines.append(f"{runtime} {version} in headless Chromium: WebAssembly SIMD "
                         f"{'ran' if w.get('simd') else 'did not run'} ({wasm}), "
                         f"threads as it got them (cross-origin isolated: {w.get('cross_origin_isolated')}); calls "
                         f"timed in JavaScript ({w.get('timer')}); memory not measured (MiB '-')")
    return lines


def _webgpu_line(runtime: str, version: str, w: dict) -> str:
    """onnxruntime-web on WebGPU: the adapter (and whether it is software) and where the nodes ran."""
    a = w["adapter"]
    placed = ", ".join(f"{n} on {p.replace('ExecutionProvider', '')}" for p, n in (w.get("placement") or {}).items())
    software = " (a fallback, software adapter: the timings mean nothing for a GPU)" if a.get("fallback") else ""
    return (f"{runtime} {version} in headless Chromium on WebGPU: adapter {a.get('vendor')} {a.get('architecture')}"
            f"{software}; nodes: {placed or 'placement not logged'}; calls timed in JavaScript ({w.get('timer')}); "
            "memory not measured (MiB '-')")


def placement_lines(records: list[dict]) -> list[str]:
    """Where LiteRT's GPU accelerator put each file's operators, once per file and precision."""
    lines = []
    for (name, precision), r in {(r["file_name"], r.get("gpu_precision")): r for r in records
                                 if r.get("placement")}.items():
        p = r["placement"]
        fallbacks = "; ".join(f"{f['op']}: {f['reason']}" for f in p.get("fallbacks") or []) or "no fallbacks"
        lines.append(f"GPU ({precision}) {name}: {p['gpu_ops']} of {p['ops']} operators on the GPU, {p['cpu_ops']} on "
                     f"the CPU ({fallbacks}); adapter: {p.get('adapter') or 'not named'}")
    return lines


# The comparison's columns: a narrow output leaves out the settings and the details first, never
# the file, the p50 ratio or the verdict.
_COMPARED = (Column("file"), Column("provider", drop=3), Column("thr", True, drop=4), Column("batch", True, drop=2),
             Column("seq", True), Column("p50 new/old", True), Column("95% interval", True, drop=6),
             Column("p", True, drop=5), Column("p90 new/old", True, drop=7), Column("peak mem", True, drop=1),
             Column("verdict"))


def print_comparisons(comparisons: list, baseline: Path) -> None:
    threshold = comparisons[0].threshold
    show_table(f"against {baseline} (p50 new/old with its 95% interval; Mann-Whitney p; threshold {threshold:.0%})",
               _COMPARED,
               [(c.file_name, c.setting["provider"], c.setting["threads"], c.setting["batch"],
                 c.setting["seq_len"] if c.setting["input_mode"] == "fixed" else "text", f"{c.p50_ratio:.3f}",
                 f"{c.ratio_ci[0]:.3f}-{c.ratio_ci[1]:.3f}" if c.ratio_ci else "-",
                 "-" if c.p_value is None else f"{c.p_value:.2g}", f"{c.p90_ratio:.3f}",
                 "-" if c.memory_ratio is None else f"{c.memory_ratio:.3f}",
                 ("REGRESSION: " if c.regression else "") + c.verdict
                 + (f" (peak memory {c.memory_ratio:.2f}x)" if c.memory_grew else ""))
                for c in comparisons])
    for c in comparisons:
        if c.verdict != "no change":
            _output.console.print(f"{c.file_name} threads={c.setting['threads']} seq={c.setting['seq_len'] or 'text'}: "
                          f"{c.verdict}: {c.why}")


def _supports(model: dict, input_kind: str | None = None) -> str:
    """What a file takes, in words: declared input shape, whether it is dynamic, the longest input."""
    shape = model.get("input_shape")
    kind = ("batch and sequence length dynamic" if model.get("dynamic") else
            "fixed shape" if model.get("dynamic") is False else "shape unknown")
    longest = (f"at most {model['max_seq_len']} tokens (from its {model['max_seq_len_source']})"
               if model.get("max_seq_len") else "maximum length unknown (no manifest beside it)")
    if input_kind == "text":
        return f"one text per call, its tokenizer inside (each call times the tokenizer and the model), {longest}"
    return f"inputs {shape} ({kind}), {longest}"


def _print_ops(r: dict) -> None:
    ops = r["ops"]
    label = f"{r['file_name']} {r['provider']} threads={r['threads']} seq={r['seq_len'] or 'text'}"
    if not ops.get("available"):
        _output.console.print(f"ops ({label}): {ops.get('note')}")
        return
    spread = ops.get("spread") or f"{ops.get('calls')} calls"
    print_table(f"time per op type, {label} ({ops['total_ms']:.3f} ms of kernels per call; median, {spread})",
                ["op", "ms per call", "p10-p90", "share", "nodes"],
                [(o["op"], f"{o['ms']:.4f}", _band(o), f"{o['share']:.1%}", o["nodes"])
                 for o in ops["op_types"][:12]], right=(1, 2, 3, 4))
    print_table(f"top nodes, {label}", ["node", "op", "ms per call", "p10-p90", "share"],
                [(o["node"], o["op"], f"{o['ms']:.4f}", _band(o), f"{o['share']:.1%}")
                 for o in ops["top_nodes"][:10]], right=(2, 3, 4))
    if ops["layers"]:
        print_table(f"shared layers per application, {label}", ["depth", "group", "inner", "application",
                                                                 "ms per call", "p10-p90", "share"],
                    [(o["depth"], o["group"], o["inner"], o["application"], f"{o['ms']:.4f}", _band(o),
                      f"{o['share']:.1%}") for o in ops["layers"]], right=(0, 1, 2, 3, 4, 5, 6))
    for line in _reconcile_lines(ops):
        _output.console.print(line)


def _band(row: dict) -> str:
    return f"{row['ms_low']:.4f}-{row['ms_high']:.4f}" if row.get("ms_low") is not None else "-"


def _reconcile_lines(ops: dict) -> list[str]:
    """Where the profiled call's time went: kernels, outside them, the profiler, in ms per call."""
    if ops.get("call_ms") is None:  # a record written before these figures were kept
        return []
    union = ops.get("kernels_union_ms")
    kernels = f"kernels {ops['total_ms']:.3f} ms (sum, median)" + (
        f", {union:.3f} ms with some kernel running" if union is not None else "")
    outside, overhead = ops.get("outside_kernels_ms"), ops.get("profiler_overhead_ms")
    lines = [f"{kernels}; profiled call {ops['call_ms']:.3f} ms (median, {ops['call_ms_low']:.3f}-"
             f"{ops['call_ms_high']:.3f})" + (f"; unprofiled p50 {ops['latency_p50_ms']:.3f} ms"
                                              if ops.get("latency_p50_ms") is not None else ""),
             f"outside kernels {_ms(outside)} ms (profiled call - kernels: framework work between kernels, such as "
             f"input copies, allocation, scheduling, and the profiler's own records); profiler overhead "
             f"{_ms(overhead)} ms (profiled call - unprofiled p50)"]
    if ops.get("reconcile_note"):
        lines.append(f"note: {ops['reconcile_note']}")
    return lines
