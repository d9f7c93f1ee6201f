"""`albert-edge profile`: latency, memory and per-operator cost of model files on this device."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..errors import AlbertEdgeError
from ..profile.remote import DEFAULT_PYTHON, DEFAULT_REMOTE_DIR
from ._output import console, err_console, print_json, print_table
from ._profile_print import print_estimates, print_measured
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
    from ..profile.output import append_jsonl, check_outputs, load_records, write_csv
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
    check_outputs(csv_path, append_path, calibration, force, [*model_files, baseline, tokenizer, text])
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
            print_measured(measured, comparisons, baseline)
        if len(measured) < len(records):
            print_estimates([r for r in records if r.get("estimated")])
    if remote_error is not None:
        raise remote_error
    if fail_on_regression and any(c.regression for c in comparisons):
        click.echo("Error: regression against the baseline", err=True)
        sys.exit(1)


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


def _compare(records, old, threshold):
    from ..profile.compare import compare

    return compare(records, old, threshold)





COMMANDS = [profile]
