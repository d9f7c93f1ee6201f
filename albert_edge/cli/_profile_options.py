"""The options of `albert-edge profile`, in the sections its --help shows them in; the command
(:mod:`.profile`) reads them into :class:`albert_edge.profile.ProfileOptions`. Their defaults are
the dataclasses' own (:class:`~albert_edge.profile.ProfileSettings`, ``BaselineOptions``,
``RemoteOptions``), so a default is declared once, where the Python API has it too."""

from __future__ import annotations

from pathlib import Path

import click

from ..profile import BaselineOptions, ProfileSettings, RemoteOptions
from ._profile_print import print_devices
from ._sections import section
from ._types import COUNT, PERCENT, POSITIVE_INT, SECONDS, gpu_precision_option

__all__ = ["profile_options"]

# The defaults --help shows and the command starts from.
_MEASURED, _BASELINE, _REMOTE = ProfileSettings(), BaselineOptions(), RemoteOptions()

def profile_options(f):
    """Add every option of `albert-edge profile` to the command function ``f``, section by section."""
    for add in reversed(_SECTIONS):  # click lists decorators' options from the top down
        f = add(f)
    return f


def _estimate_devices(ctx: click.Context, param: click.Parameter, value: str | None):
    """--estimate: the device rows (unknown names fail before anything is measured); 'list'
    prints the table and exits."""
    from ..device.catalog import parse_devices

    if value is not None and value.strip() == "list":
        print_devices()
        ctx.exit(0)
    return None if value is None else parse_devices(value)


def _listed(values) -> str:
    """A tuple default as the option takes it: "16,32,64,128"."""
    return ",".join(map(str, values))


def _percent(share: float) -> str:
    """A share default as the PCT the option takes: 0.02 -> "2"."""
    return f"{100 * share:g}"


_SECTIONS = [
    section("Sweep",
            click.option("--seq-len", default=_listed(_MEASURED.seq_lens), show_default=True, metavar="N,...",
                         help="Sequence lengths of the fixed-length sweep; at most the model's maximum."),
            click.option("--batch", default=_listed(_MEASURED.batches), show_default=True, metavar="N,...",
                         help="Batch sizes of the sweep."),
            click.option("--threads", default=_listed(_MEASURED.threads), show_default=True, metavar="N,...",
                         help="Runtime thread counts."),
            click.option("--fixed/--no-fixed", default=_MEASURED.fixed, show_default=True,
                         help="Run the fixed-length sweep (--no-fixed with --text: real text only)."),
            click.option("--exit-setting", type=float, default=None, metavar="X",
                         help="Adaptive files (convert --adaptive): run at this setting of their exit rule (its "
                              "patience, confidence or entropy) instead of their own, as an app changes it at run "
                              "time; a value outside the rule's range is refused.")),
    section("Engines",
            click.option("--delegate", default=_listed(_MEASURED.delegates), show_default=True, metavar="NAME,...",
                         help="TFLite files: 'xnnpack' (the interpreter's default delegate) and/or 'none' (builtin "
                              "kernels)."),
            click.option("--provider", default=_listed(_MEASURED.providers), show_default=True, metavar="NAME,...",
                         help="ONNX files: onnxruntime execution providers, cpu, cuda and/or tensorrt (GPU builds "
                              "only)."),
            click.option("--accelerator", type=click.Choice(["cpu", "gpu"]), default=_MEASURED.accelerator,
                         show_default=True,
                         help="Where the model computes. 'gpu': a static .tflite (convert --static) on LiteRT's GPU "
                              "accelerator, the operators it leaves on the CPU; an .onnx on onnxruntime's CUDA "
                              "provider. Each record carries the accelerator's own report (operators on the GPU and "
                              "the CPU, each fallback with its reason, the adapter). On a software Vulkan device "
                              "(Mesa's lavapipe) the timings mean nothing: the record says so."),
            gpu_precision_option("With --accelerator gpu: the GPU's arithmetic, float32 (as exact as the CPU) or "
                                 "float16 (the accelerator's own default)."),
            click.option("--as-app", is_flag=True,
                         help="Also measure every setting with each file opened as an app opens it: the runtime's "
                              "own API with its default options, the thread count the only setting (the TFLite "
                              "Interpreter with its default XNNPACK delegate; onnxruntime's InferenceSession by "
                              "path; ExecuTorch without its weights cache), beside albert-edge's settings "
                              "(runtime.Session: weights packed once, mapped). The table marks those rows 'app'."),
            click.option("--runtime", default=_listed(_MEASURED.runtimes), show_default=True, metavar="NAME,...",
                         help="Which runtimes time each file: 'native' (albert-edge's Session), 'node' (an .onnx "
                              "/ .ort through onnxruntime-node), 'chromium' (onnxruntime-web's WebAssembly in "
                              "headless Chromium, served from 127.0.0.1), 'chromium-webgpu' (its WebGPU provider: "
                              "the record names the adapter, a software one as such, and where the nodes ran), or "
                              "'web' for native, node and chromium. Each setting runs in a fresh Node or Chromium, "
                              "timed in JavaScript by the same rule; the record says its threads and SIMD, not "
                              "Chromium's memory. Needs node, chromium and --web-dir."),
            click.option("--web-dir", type=click.Path(path_type=Path, file_okay=False), default=_MEASURED.web_dir,
                         metavar="DIR",
                         envvar="ALBERT_EDGE_WEB_DIR", show_envvar=True,
                         help="With --runtime node / chromium: albert-edge's web/ folder (its scripts, package.json "
                              "and package-lock.json) after `npm ci` in it. An installed albert-edge has none; run "
                              "from a checkout, the checkout's web/ is the default."),
            click.option("--mediapipe", is_flag=True,
                         help="Also run each file with MediaPipe metadata (convert --to mediapipe) through "
                              "MediaPipe Tasks' TextClassifier / TextEmbedder, the text in, as an app runs it: each "
                              "call times the tokenizer and the model, at a text of each --seq-len's tokens "
                              "(MediaPipe pads it to the file's length) and on --text; MediaPipe picks its own "
                              "threads. Needs the [mobile] extra.")),
    section("Timing",
            click.option("--runs", type=POSITIVE_INT, default=_MEASURED.runs, show_default=True,
                         help="Timed calls at least (then timing goes on until --ci-target or --max-seconds)."),
            click.option("--min-seconds", type=SECONDS, default=_MEASURED.min_seconds, show_default=True,
                         help="Seconds of timed calls at least."),
            click.option("--ci-target", type=PERCENT, default=_percent(_MEASURED.ci_target), show_default=True,
                         metavar="PCT",
                         help="After --runs and --min-seconds, go on timing until the p50's 95% confidence interval "
                              "is narrower than PCT % of the p50 (or --max-seconds have passed)."),
            click.option("--max-seconds", type=SECONDS, default=_MEASURED.max_seconds, show_default=True,
                         help="Seconds of timed calls at most per setting while narrowing the interval."),
            click.option("--wait-quiet", type=SECONDS, default=_MEASURED.wait_quiet, show_default=True,
                         metavar="SECONDS",
                         help="Before each setting, wait up to SECONDS for other work on the machine to stop (it is "
                              "watched in /proc/stat either way; a record measured beside other work says so and is "
                              "judged 'noisy')."),
            click.option("--warmup", type=COUNT, default=_MEASURED.warmup, show_default=True,
                         help="Untimed calls before timing."),
            click.option("--mlperf", is_flag=True,
                         help="MLPerf single-stream minimums: 1024 calls and 60 s per setting.")),
    section("Inputs",
            click.option("--text", default=_MEASURED.text, metavar="FILE|builtin",
                         help="Also time real sentences at their own lengths (no padding): a UTF-8 text file, or "
                              "'builtin' for the builtin English corpus. Needs --tokenizer."),
            click.option("--tokenizer", type=click.Path(path_type=Path), default=_MEASURED.tokenizer, metavar="SPIECE",
                         help="spiece.model (or a directory with one) for --text."),
            click.option("--max-sentences", type=POSITIVE_INT, default=_MEASURED.max_sentences, show_default=True,
                         help="Sentences fed with --text.")),
    section("Operators",
            click.option("--ops", is_flag=True,
                         help="Per-operator breakdown after the timed calls, so they are not slowed by it: time per "
                              "op type, top nodes, time per shared-layer application (ONNX: onnxruntime's profiler; "
                              "TFLite with xnnpack: LiteRT's profiler)."),
            click.option("--ops-runs", type=POSITIVE_INT, default=_MEASURED.ops_runs, show_default=True,
                         help="--ops: profiled calls (after one that allocates); each figure is the median over "
                              "them, with the 10th-90th percentiles.")),
    section("Output",
            click.option("--json", "as_json", is_flag=True, help="Print the records as JSON (a list)."),
            click.option("--csv", "csv_path", type=click.Path(path_type=Path), default=None, metavar="FILE",
                         help="Also write the records as CSV (one row each)."),
            click.option("--append", "append_path", type=click.Path(path_type=Path), default=None, metavar="FILE.jsonl",
                         help="Also append the records to a JSON Lines file (what `albert-edge report` reads)."),
            click.option("--force", is_flag=True, help="Overwrite an existing --csv file.")),
    section("Baseline",
            click.option("--baseline", type=click.Path(path_type=Path), default=None, metavar="OLD.json",
                         help="Earlier results (--json output or --append file): print new/old ratios, mark "
                              "regressions."),
            click.option("--threshold", type=PERCENT, default=_percent(_BASELINE.threshold), show_default=True,
                         metavar="PCT",
                         help="With --baseline: a change of the median within PCT % is 'no change'; beyond it, "
                              "'slower' or 'faster' only when the 95% interval of the ratio lies wholly beyond it "
                              "and the Mann-Whitney test says p < 0.01. A noisy record is 'inconclusive', never a "
                              "regression."),
            click.option("--fail-on-regression", is_flag=True,
                         help="Exit 1 when --baseline finds a record 'slower' (or with more than 5% more peak "
                              "memory).")),
    section("Remote",
            click.option("--remote", multiple=True, metavar="USER@HOST[:PORT]",
                         help="Profile on this host over SSH instead of here (repeatable; hosts run in parallel). "
                              "The files, tokenizer and text are copied into --remote-dir there (skipped when "
                              "already there) and the same settings run with the device's albert-edge. Every host "
                              "runs to its end: the records of the hosts that worked are printed, then one line "
                              "names each host that failed (exit 2). Uses the ssh client in batch mode: keys or an "
                              "agent, never a password prompt."),
            click.option("--ssh-config", type=click.Path(path_type=Path), default=None, metavar="FILE",
                         help="ssh client configuration for --remote (passed as ssh -F FILE)."),
            click.option("--remote-dir", default=_REMOTE.remote_dir, show_default=True, metavar="DIR",
                         help="Cache directory on the --remote device; files are kept there by content hash."),
            click.option("--remote-python", default=_REMOTE.python, show_default=True, metavar="PYTHON",
                         help="Python on the --remote device that has albert-edge installed, e.g. a venv's "
                              "/home/pi/venv/bin/python.")),
    section("Estimates",
            click.option("--estimate", "estimate_devices", default=None, metavar="DEVICE,...",
                         callback=_estimate_devices, is_eager=True,
                         help="Also estimate latency on devices not at hand: the roofline from the file's operator "
                              "counts and each device's figures, divided by this machine's efficiency (its host "
                              "calibration, see --calibration), shown as a range with its error in a table of their "
                              "own (with --remote nothing is measured here: the estimates are then the unscaled "
                              "roofline unless the calibration knows the setting). 'all' for every device, 'list' "
                              "to print the device table and exit."),
            click.option("--calibration", type=click.Path(path_type=Path, dir_okay=False), default=None, metavar="FILE",
                         help="With --estimate: the host calibration to use and add to (default "
                              "$XDG_CACHE_HOME/albert-edge/host-calibration.json). Every measurement here is kept "
                              "in it per runtime, setting and precision, so an estimate made on a busy machine uses "
                              "what a quiet one measured."),
            click.option("--recalibrate", is_flag=True,
                         help="With --estimate: forget this machine's calibration first.")),
]
