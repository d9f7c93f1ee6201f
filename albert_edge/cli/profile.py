"""`albert-edge profile`: latency, memory and per-operator cost of model files on this device."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..errors import AlbertEdgeError
from ..profile.record import APP
from ..profile.remote import DEFAULT_PYTHON, DEFAULT_REMOTE_DIR
from ..runtime import PROVIDERS
from ._output import console, err_console, print_json, print_table
from ._types import COUNT, PERCENT, POSITIVE_INT, SECONDS


def _int_list(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise AlbertEdgeError(f"{option} takes whole numbers separated by commas, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise AlbertEdgeError(f"{option} values must be 1 or more, got {text!r}")
    return values


def _name_list(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(",") if v.strip())


def _estimate_devices(ctx: click.Context, param: click.Parameter, value: str | None):
    """--estimate: the device rows (unknown names fail before anything is measured); 'list'
    prints the table and exits."""
    from ..device.catalog import parse_devices
    from ..profile.estimate import DEVICE_COLUMNS, device_rows

    if value is None:
        return None
    if value.strip() == "list":
        from ..device.catalog import DEVICES

        print_table("devices for --estimate (CPU complex; peak = 2 ops per multiply-accumulate)", DEVICE_COLUMNS,
                    device_rows(), right=(2, 3, 4, 5, 6, 7))
        for d in DEVICES:
            console.print(f"{d.name}: {d.source}")
        ctx.exit(0)
    return parse_devices(value)


@click.command("profile", short_help="Latency, memory and per-op cost of .onnx / .tflite files on this device.")
@click.argument("model_files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--seq-len", default="16,32,64,128", show_default=True, metavar="N,...",
              help="Sequence lengths of the fixed-length sweep; at most the model's maximum.")
@click.option("--batch", default="1", show_default=True, metavar="N,...", help="Batch sizes of the sweep.")
@click.option("--threads", default="1,2", show_default=True, metavar="N,...", help="Runtime thread counts.")
@click.option("--delegate", default="xnnpack", show_default=True, metavar="NAME,...",
              help="TFLite files: 'xnnpack' (the interpreter's default delegate) and/or 'none' (builtin kernels).")
@click.option("--provider", default="cpu", show_default=True, metavar="NAME,...",
              help="ONNX files: onnxruntime execution providers, cpu, cuda and/or tensorrt (GPU builds only).")
@click.option("--runs", type=POSITIVE_INT, default=50, show_default=True,
              help="Timed calls at least (then timing goes on until --ci-target or --max-seconds).")
@click.option("--min-seconds", type=SECONDS, default=1.0, show_default=True, help="Seconds of timed calls at least.")
@click.option("--ci-target", type=PERCENT, default="2", show_default=True, metavar="PCT",
              help="After --runs and --min-seconds, go on timing until the p50's 95% confidence interval is "
                   "narrower than PCT % of the p50 (or --max-seconds have passed).")
@click.option("--max-seconds", type=SECONDS, default=5.0, show_default=True,
              help="Seconds of timed calls at most per setting while narrowing the interval.")
@click.option("--wait-quiet", type=SECONDS, default=0.0, show_default=True, metavar="SECONDS",
              help="Before each setting, wait up to SECONDS for other work on the machine to stop (it is "
                   "watched in /proc/stat either way; a record measured beside other work says so and is "
                   "judged 'noisy').")
@click.option("--warmup", type=COUNT, default=5, show_default=True, help="Untimed calls before timing.")
@click.option("--mlperf", is_flag=True, help="MLPerf single-stream minimums: 1024 calls and 60 s per setting.")
@click.option("--text", default=None, metavar="FILE|builtin",
              help="Also time real sentences at their own lengths (no padding): a UTF-8 text file, or "
                   "'builtin' for the builtin English corpus. Needs --tokenizer.")
@click.option("--tokenizer", type=click.Path(path_type=Path), default=None, metavar="SPIECE",
              help="spiece.model (or a directory with one) for --text.")
@click.option("--max-sentences", type=POSITIVE_INT, default=200, show_default=True, help="Sentences fed with --text.")
@click.option("--fixed/--no-fixed", default=True, show_default=True,
              help="Run the fixed-length sweep (--no-fixed with --text: real text only).")
@click.option("--mediapipe", is_flag=True,
              help="Also run each file with MediaPipe metadata (convert --to mediapipe) through MediaPipe Tasks' "
                   "TextClassifier / TextEmbedder, the text in, as an app runs it: each call times the tokenizer "
                   "and the model, at a text of each --seq-len's tokens (MediaPipe pads it to the file's length) "
                   "and on --text; MediaPipe picks its own threads. Needs albert-edge[mobile].")
@click.option("--as-app", is_flag=True,
              help="Also measure every setting with each file opened as an app opens it: the runtime's own API "
                   "with its default options, the thread count the only setting (the TFLite Interpreter with its "
                   "default XNNPACK delegate; onnxruntime's InferenceSession by path; ExecuTorch without its weights "
                   "cache), beside albert-edge's settings (runtime.Session: weights packed once, mapped). The "
                   "table marks those rows 'app'.")
@click.option("--ops", is_flag=True, help="Per-operator breakdown after the timed calls, so they are not slowed "
                                          "by it: time per op type, top nodes, time per shared-layer application "
                                          "(ONNX: onnxruntime's profiler; TFLite with xnnpack: LiteRT's profiler).")
@click.option("--ops-runs", type=POSITIVE_INT, default=20, show_default=True,
              help="--ops: profiled calls (after one that allocates); each figure is the median over them, with "
                   "the 10th-90th percentiles.")
@click.option("--baseline", type=click.Path(path_type=Path), default=None, metavar="OLD.json",
              help="Earlier results (--json output or --append file): print new/old ratios, mark regressions.")
@click.option("--threshold", type=PERCENT, default="5", show_default=True, metavar="PCT",
              help="With --baseline: a change of the median within PCT % is 'no change'; beyond it, 'slower' or "
                   "'faster' only when the 95% interval of the ratio lies wholly beyond it and the Mann-Whitney "
                   "test says p < 0.01. A noisy record is 'inconclusive', never a regression.")
@click.option("--fail-on-regression", is_flag=True,
              help="Exit 1 when --baseline finds a record 'slower' (or with more than 5% more peak memory).")
@click.option("--json", "as_json", is_flag=True, help="Print the records as JSON (a list).")
@click.option("--csv", "csv_path", type=click.Path(path_type=Path), default=None, metavar="FILE",
              help="Also write the records as CSV (one row each).")
@click.option("--append", "append_path", type=click.Path(path_type=Path), default=None, metavar="FILE.jsonl",
              help="Also append the records to a JSON Lines file (what `albert-edge report` reads).")
@click.option("--force", is_flag=True, help="Overwrite an existing --csv file.")
@click.option("--remote", multiple=True, metavar="USER@HOST[:PORT]",
              help="Profile on this host over SSH instead of here (repeatable; hosts run in parallel). The "
                   "files, tokenizer and text are copied into --remote-dir there (skipped when already there) "
                   "and the same settings run with the device's albert-edge. Every host runs to its end: the "
                   "records of the hosts that worked are printed, then one line names each host that failed "
                   "(exit 2). Uses the ssh client in batch mode: keys or an agent, never a password prompt.")
@click.option("--ssh-config", type=click.Path(path_type=Path), default=None, metavar="FILE",
              help="ssh client configuration for --remote (passed as ssh -F FILE).")
@click.option("--remote-dir", default=DEFAULT_REMOTE_DIR, show_default=True, metavar="DIR",
              help="Cache directory on the --remote device; files are kept there by content hash.")
@click.option("--remote-python", default=DEFAULT_PYTHON, show_default=True, metavar="PYTHON",
              help="Python on the --remote device that has albert-edge installed, e.g. a venv's "
                   "/home/pi/venv/bin/python.")
@click.option("--estimate", "estimate_devices", default=None, metavar="DEVICE,...", callback=_estimate_devices,
              is_eager=True, help="Also estimate latency on devices not at hand: the roofline from the file's "
                                  "operator counts and each device's figures, divided by this machine's efficiency "
                                  "(its host calibration, see --calibration), shown as a range with its error in a "
                                  "table of their own (with --remote nothing is measured here: the estimates are "
                                  "then the unscaled roofline unless the calibration knows the setting). 'all' for "
                                  "every device, 'list' to print the device table and exit.")
@click.option("--calibration", type=click.Path(path_type=Path, dir_okay=False), default=None, metavar="FILE",
              help="With --estimate: the host calibration to use and add to (default "
                   "$XDG_CACHE_HOME/albert-edge/host-calibration.json). Every measurement here is kept in it per "
                   "runtime, setting and precision, so an estimate made on a busy machine uses what a quiet one "
                   "measured.")
@click.option("--recalibrate", is_flag=True, help="With --estimate: forget this machine's calibration first.")
def profile(model_files: tuple[Path, ...], seq_len: str, batch: str, threads: str, delegate: str, provider: str,
            runs: int, min_seconds: float, ci_target: float, max_seconds: float, wait_quiet: float, warmup: int,
            mlperf: bool, text: str | None, tokenizer: Path | None, max_sentences: int, fixed: bool,
            mediapipe: bool, as_app: bool, ops: bool,
            ops_runs: int, baseline: Path | None, threshold: float, fail_on_regression: bool,
            as_json: bool, csv_path: Path | None, append_path: Path | None, force: bool, remote: tuple[str, ...],
            ssh_config: Path | None, remote_dir: str, remote_python: str, estimate_devices: list | None,
            calibration: Path | None, recalibrate: bool) -> None:
    """Measure each MODEL_FILE (.onnx / .tflite) on this device: load time, first call, latency
    percentiles (p90 is the headline), memory by phase and, with --ops, the cost per operator.
    Each file x setting runs in a fresh child process, so its memory is its own."""
    from ..profile import MLPERF, ProfileSettings
    from ..profile import profile as run_profile
    from ..profile.calibration import default_path as default_calibration
    from ..profile.output import append_jsonl, load_records, write_csv
    from ..profile.runner import Interrupted

    if mlperf:
        runs, min_seconds = max(runs, MLPERF["runs"]), max(min_seconds, MLPERF["min_seconds"])
    settings = ProfileSettings(
        seq_lens=_int_list(seq_len, "--seq-len"), batches=_int_list(batch, "--batch"),
        threads=_int_list(threads, "--threads"), delegates=_name_list(delegate), providers=_name_list(provider),
        runs=runs, min_seconds=min_seconds, warmup=warmup, text=text, tokenizer=tokenizer,
        max_sentences=max_sentences, ops=ops, ops_runs=ops_runs, fixed=fixed, ci_target=ci_target,
        max_seconds=max(max_seconds, min_seconds), wait_quiet=wait_quiet, mediapipe=mediapipe, as_app=as_app)
    if fail_on_regression and baseline is None:
        raise click.UsageError("--fail-on-regression needs --baseline")
    old = load_records(baseline) if baseline else None
    _check_outputs(csv_path, append_path, calibration, force, [*model_files, baseline, tokenizer, text])
    try:
        with err_console.status("profiling") as status:
            local = [] if remote else run_profile(model_files, settings, progress=_shown(status, "profiling"))
    except Interrupted as exc:
        click.echo(f"Interrupted: {exc}; child processes stopped", err=True)
        sys.exit(128 + exc.signum)
    records = [r.to_dict() for r in local]
    # remote and estimate records join here
    remote_error = None
    if remote:
        got, remote_error = _remote(remote, model_files, settings, ssh_config, remote_dir, remote_python)
        records += [r.to_dict() for r in got]
    if estimate_devices:
        records += [r.to_dict() for r in _estimates(model_files, estimate_devices, settings, local,
                                                    calibration or default_calibration(), recalibrate)]
    if csv_path:
        write_csv(records, csv_path, force=force)
    if append_path:
        append_jsonl(records, append_path)
    comparisons = []
    if old is not None:  # each record's comparison rides along in --json
        for record in records:
            for c in _compare([record], old, threshold):
                record["baseline_comparison"] = c.to_dict()
                comparisons.append(c)
    if as_json:
        print_json(records)
    else:
        measured = [r for r in records if not r.get("estimated")]
        if measured:
            _print(measured, comparisons, baseline)
        if len(measured) < len(records):
            _print_estimates([r for r in records if r.get("estimated")])
    if remote_error is not None:
        raise remote_error
    if fail_on_regression and any(c.regression for c in comparisons):
        click.echo("Error: regression against the baseline", err=True)
        sys.exit(1)


def _check_outputs(csv_path: Path | None, append_path: Path | None, calibration: Path | None, force: bool,
                   inputs: list) -> None:
    """Refuse outputs that cannot be written before anything is measured: one that is an input
    (a model file, the baseline, --force or not), a --csv that exists (without --force) or lies
    under a file, an --append file that holds something other than profile records (appending to
    it would bury them in a file nothing reads), a --calibration file that is not one."""
    from ..files import check_new_file, check_not_input
    from ..profile.calibration import check_calibration
    from ..profile.output import load_records

    for path, option in ((csv_path, "--csv"), (append_path, "--append"), (calibration, "--calibration")):
        if path:
            check_new_file(path, force=True, option=option)  # a directory or a path under a file first
            check_not_input(path, inputs, option=option)
    if calibration:
        check_calibration(calibration)
    if csv_path:
        check_new_file(csv_path, force=force, option="--csv")
    if append_path:
        check_new_file(append_path, force=True, option="--append")
        if append_path.exists() and append_path.stat().st_size:
            load_records(append_path)


def _shown(status, what: str):
    """Progress lines: a spinner on a terminal, one line each on stderr in a log."""
    if err_console.is_terminal:
        return lambda line: status.update(f"{what} {line}")
    return lambda line: click.echo(f"{what} {line}", err=True)


def _remote(hosts, files, settings, ssh_config, remote_dir, python):
    """Records from the --remote hosts, and the error naming the hosts that failed (or None)."""
    from ..profile.remote import RemoteError, profile_remote

    try:
        with err_console.status("remote profiling") as status:
            return profile_remote(hosts, files, settings, ssh_config=ssh_config, remote_dir=remote_dir,
                                  python=python, progress=_shown(status, "remote")), None
    except RemoteError as exc:
        return exc.records, exc


def _estimates(files, devices, settings, measured, calibration_path: Path, fresh: bool):
    from .. import device
    from ..profile.calibration import Calibration, host_key
    from ..profile.estimate import estimate

    calibration = Calibration.load(calibration_path, host_key(device.describe()), fresh=fresh)
    with err_console.status("estimating") as status:
        return estimate(files, devices, settings.seq_lens, settings.batches, measured, threads=settings.threads,
                        calibration=calibration, progress=_shown(status, "estimating"))


def _print_estimates(records: list[dict]) -> None:
    from ..profile.estimate import ESTIMATE_COLUMNS, estimate_rows
    from ..profile.record import ProfileRecord

    print_table("estimate (roofline x efficiency measured here; NOT measured on the device): p50 ms",
                ESTIMATE_COLUMNS, estimate_rows(ProfileRecord.from_dict(r) for r in records),
                right=tuple(range(2, len(ESTIMATE_COLUMNS))))
    console.print("range: the estimate -/+ the calibration's leave-one-out error (each host measurement predicted "
                  "from the others); host fit: how far the calibration misses this machine's own robust time at the "
                  "setting; calibration: the quality and number of host measurements it rests on (a quiet one "
                  "outranks a noisy one); efficiency * above 1: the host ran faster than its roofline (the file fits "
                  "in its caches)")


def _compare(records, old, threshold):
    from ..profile.compare import compare

    return compare(records, old, threshold)


def _mib(value) -> str:
    return f"{value / 2**20:.1f}" if value else "-"


def _ms(value) -> str:
    return "-" if value is None else f"{value:.3f}" if value < 10 else f"{value:.1f}"


_SHORT_RUNTIME = {"onnxruntime": "ort", "ai_edge_litert": "litert", "tflite_runtime": "tflite-rt", "tensorflow": "tf"}


def _runs_on(record: dict) -> str:
    provider = {full: short for short, full in PROVIDERS.items()}.get(record["provider"], record["provider"])
    app = " app" if record.get("opened_as") == APP else ""
    return f"{_SHORT_RUNTIME.get(record['runtime'], record['runtime'])}:{provider}{app}"


def _print(records: list[dict], comparisons: list, baseline: Path | None) -> None:
    from rich import box
    from rich.table import Table

    from ..profile.stats import interval_text

    table = Table(title="latency in ms (p90 is the headline); peak resident memory of the measuring process",
                  title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for i, col in enumerate(["file", "scheme", "runs on", "thr", "shape", "load", "first", "p50", "±95%", "p90",
                             "p99", "MiB", "timing", "note"]):
        table.add_column(col, justify="right" if 3 <= i <= 11 else "left", no_wrap=True)
    notes = []
    for r in records:
        lat, mem = r.get("latency") or {}, r.get("memory") or {}
        seq = r["seq_len"] if r["input_mode"] == "fixed" else "text"
        shape = f"{r['batch']}x{seq}" if r["input_mode"] == "fixed" else "text"
        warnings = ["estimate"] if r.get("estimated") else list(r.get("warnings") or [])
        if warnings:
            notes.append(f"[{len(notes) + 1}] {r['file_name']} {_runs_on(r)} threads={r['threads']} seq={seq}: "
                         + "; ".join(warnings))
        table.add_row(*(str(v) for v in (
            r["file_name"] + (f" @{r['host']}" if r.get("host") else ""), r.get("scheme") or "-",
            _runs_on(r), r["threads"], shape, _ms(r.get("load_ms")), _ms(r.get("first_call_ms")),
            _ms(lat.get("p50")), interval_text(lat) or "-", _ms(lat.get("p90")), _ms(lat.get("p99")),
            _mib(mem.get("peak_after_timed")), lat.get("quality") or "-", f"[{len(notes)}]" if warnings else "")))
    console.print(table)
    for note in notes:
        console.print(note)
    if any(r.get("opened_as") == APP for r in records):
        console.print("app: opened as an app opens the file, the runtime's own API with its default options (the "
                      "other rows: albert-edge's settings, runtime.Session)")
    if any((r.get("latency") or {}).get("quality") not in (None, "good") for r in records):
        console.print("timing: 'good' = the p50's interval met --ci-target on a quiet machine; 'noisy' = other work, "
                      "drift or held-up calls (the note says which): compare such figures with care; 'unusable' = too "
                      "few calls or too much spread to say anything")
    versions = sorted({f"{r['runtime']} {r.get('runtime_version')}" for r in records})
    dev = records[0].get("device") or {} if records else {}
    console.print(f"{', '.join(versions)}; {dev.get('cpu_model')} x{dev.get('cpu_cores')}"
                  + (f", {dev['board']}" if dev.get("board") else "") + f", {dev.get('os')}")
    for (name, runtime), r in {(r["file_name"], r["runtime"]): r for r in records}.items():
        through = " through MediaPipe Tasks" if runtime == "mediapipe" else ""
        console.print(f"{name}{through}: {_supports(r.get('model') or {}, r.get('input_kind'))}")
    for r in records:
        if r.get("text"):
            t = r["text"]
            again = t.get("same_shape_again") or {}
            console.print(f"real text ({r['file_name']}, {r['provider']}, {r['threads']} threads): "
                          f"{t['sentences']} sentences from {t['source']}, tokens p50 {t['tokens']['p50']:.0f} "
                          f"p90 {t['tokens']['p90']:.0f} max {t['tokens']['max']}; a shape change costs "
                          f"{_ms(again.get('shape_change_cost_p50_ms'))} ms per call (p50)")
        if r.get("ops"):
            _print_ops(r)
    if comparisons:
        _print_comparisons(comparisons, baseline)
    elif baseline is not None:
        console.print(f"no record in {baseline} matches these files and settings")


def _print_comparisons(comparisons: list, baseline: Path) -> None:
    threshold = comparisons[0].threshold
    print_table(f"against {baseline} (p50 new/old with its 95% interval; Mann-Whitney p; threshold "
                f"{threshold:.0%})",
                ["file", "provider", "thr", "batch", "seq", "p50 new/old", "95% interval", "p", "p90 new/old",
                 "peak mem", "verdict"],
                [(c.file_name, c.setting["provider"], c.setting["threads"], c.setting["batch"],
                  c.setting["seq_len"] if c.setting["input_mode"] == "fixed" else "text", f"{c.p50_ratio:.3f}",
                  f"{c.ratio_ci[0]:.3f}-{c.ratio_ci[1]:.3f}" if c.ratio_ci else "-",
                  "-" if c.p_value is None else f"{c.p_value:.2g}", f"{c.p90_ratio:.3f}",
                  "-" if c.memory_ratio is None else f"{c.memory_ratio:.3f}",
                  ("REGRESSION: " if c.regression else "") + c.verdict
                  + (f" (peak memory {c.memory_ratio:.2f}x)" if c.memory_grew else ""))
                 for c in comparisons], right=(2, 3, 5, 6, 7, 8, 9))
    for c in comparisons:
        if c.verdict != "no change":
            console.print(f"{c.file_name} threads={c.setting['threads']} seq={c.setting['seq_len'] or 'text'}: "
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
        console.print(f"ops ({label}): {ops.get('note')}")
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
        console.print(line)


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


COMMANDS = [profile]
