"""`albert-edge demo`: the Raspberry Pi demo from the terminal (classify, fill-mask, an
interactive prompt), its web app (serve), and the bundle it runs (bundle, on a workstation)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click
from rich.markup import escape

from ._output import console, err_console, fmt_bytes, print_json, print_table, progress
from ._types import PORT, POSITIVE_INT, POSITIVE_SECONDS, threads_option

_BUNDLE = click.argument("bundle", type=click.Path(path_type=Path))
_TEXT = click.argument("text", required=False)
_MODEL = click.option("--model", default=None, metavar="FORMAT-SCHEME",
                      help="Which files to run: onnx-adaptive or tflite-adaptive (the classifier that stops "
                           "early; the MLM at fp32), onnx-int8, tflite-int8, onnx-fp32 or tflite-fp32 [default: "
                           "adaptive where the bundle has it, else int8; ONNX first, of what this machine runs].")
_THREADS = threads_option("Runtime threads, at least 1 [default: the runtime's choice].")
_JSON = click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON (at the prompt: one object per line).")


@click.group("demo")
def demo() -> None:
    """The Raspberry Pi demo: topic classification and fill-in-the-blank with a model bundle,
    in the terminal or as a web page with live latency and memory."""


@demo.command("classify")
@_BUNDLE
@_TEXT
@_MODEL
@_THREADS
@_JSON
def classify(bundle: Path, text: str | None, model: str | None, threads: int | None, as_json: bool) -> None:
    """The topic of TEXT, with the score of every label and the latency. Without TEXT, an
    interactive prompt: one sentence per line, an empty line or Ctrl-D ends it."""
    from ..demo.engine import Bundle, Engine

    engine = Engine(Bundle(bundle), model, num_threads=threads)
    _answer(engine.classify, text, as_json, _show_label)


@demo.command("fill-mask")
@_BUNDLE
@_TEXT
@click.option("--top-k", default=5, show_default=True, type=click.IntRange(1, 20),
              help="Predictions shown per [MASK] (1-20).")
@_MODEL
@_THREADS
@_JSON
def fill_mask(bundle: Path, text: str | None, top_k: int, model: str | None, threads: int | None,
              as_json: bool) -> None:
    """Fill in each [MASK] (or ___) in TEXT with the MLM head's best pieces. Without TEXT, an
    interactive prompt: one sentence per line, an empty line or Ctrl-D ends it."""
    from ..demo.engine import Bundle, Engine

    engine = Engine(Bundle(bundle), model, num_threads=threads)
    _answer(lambda t: engine.fill_mask(t, top_k), text, as_json, _show_masks)


def _answer(ask, text: str | None, as_json: bool, show) -> None:
    """One answer for TEXT, or a prompt loop. In the loop, text the model cannot answer is
    reported and the prompt goes on."""
    from ..errors import AlbertEdgeError

    if text is not None:
        _check_utf8(text, "TEXT")
        result = ask(text)
        print_json(result) if as_json else show(result)
        return
    number = 0
    while True:
        try:
            line = click.prompt("text", default="", show_default=False, prompt_suffix="> ", err=True)
        except click.Abort:  # Ctrl-D / Ctrl-C
            click.echo(err=True)
            break
        if not line.strip():
            break
        number += 1
        try:
            _check_utf8(line, f"line {number}")
            result = ask(line)
        except AlbertEdgeError as exc:
            err_console.print(f"[red]{escape(str(exc))}[/red]", markup=True)
            continue
        click.echo(json.dumps(result)) if as_json else show(result)


def _check_utf8(text: str, what: str) -> None:
    """Refuse text that was not UTF-8 (as `tokenizer encode` and the web API do), saying where."""
    from ..demo.engine import DemoInputError
    from ..text import utf8_problem

    problem = utf8_problem(text)
    if problem:
        raise DemoInputError(f"{what} is not UTF-8 text ({problem}): give it in UTF-8")


def _show_label(result: dict) -> None:
    passes = "" if result.get("passes") is None else f"{result['passes']} of {result['max_passes']} passes, "
    console.print(f"[bold]{escape(result['label'])}[/bold]  [dim]({result['latency_ms']:.2f} ms, {passes}"
                  f"{result['model']}, {result['tokens']} tokens)[/dim]", markup=True)
    print_table(None, ["label", "score"], [(s["label"], f"{s['score']:.1%}") for s in result["scores"]], right=(1,))
    _show_note(result)


def _show_masks(result: dict) -> None:
    console.print(f"{escape(result['filled'])}  [dim]({result['latency_ms']:.2f} ms, {result['model']}, "
                  f"{result['tokens']} tokens)[/dim]", markup=True)
    rows = [(i + 1, p["token"], f"{p['score']:.1%}") for i, m in enumerate(result["masks"]) for p in m["predictions"]]
    print_table(None, ["[MASK]", "piece", "score"], rows, right=(2,))
    _show_note(result)


def _show_note(result: dict) -> None:
    if result.get("note"):
        err_console.print(f"[yellow]note: {escape(result['note'])}[/yellow]", markup=True)


@demo.command("serve")
@_BUNDLE
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (0.0.0.0 to let other machines on the network in).")
@click.option("--port", default=8000, show_default=True, type=PORT, help="TCP port (1-65535).")
@_MODEL
@_THREADS
@click.option("--queue", default=4, show_default=True, type=POSITIVE_INT,
              help="Requests running or waiting for the model; more get HTTP 503 with Retry-After.")
@click.option("--timeout", "timeout_s", default=10.0, show_default=True, type=POSITIVE_SECONDS,
              help="Seconds a request may take, waiting included; then HTTP 504.")
@click.option("--max-body", "max_body_bytes", default=16384, show_default=True, type=POSITIVE_INT,
              help="Largest request body in bytes; larger get HTTP 413.")
@click.option("--mediapipe", is_flag=True,
              help="Answer with classifier/model.mediapipe.tflite through MediaPipe Tasks' TextClassifier (a string "
                   "in) where mediapipe is installed; without it, or without mediapipe, LiteRT runs that file "
                   "through albert-edge's Session. Each answer names its engine.")
@click.option("--token", default=None, envvar="ALBERT_EDGE_DEMO_TOKEN", show_envvar=True, metavar="TOKEN",
              help="Ask every /api/ call for this token (16+ letters, digits or -._~+/=); open the page once as "
                   "http://HOST:PORT/#token=TOKEN and it keeps it. Off loopback without --token, a random one is "
                   "made and printed.")
@click.option("--no-auth", is_flag=True,
              help="Ask for no token even off loopback: every machine that reaches this one can use the demo.")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="NAME",
              help="A host name the page may be opened by, besides localhost, this machine's name (and name.local), "
                   "the --host address and any address in digits (repeatable).")
def serve(bundle: Path, host: str, port: int, model: str | None, threads: int | None, queue: int, timeout_s: float,
          max_body_bytes: int, mediapipe: bool, token: str | None, no_auth: bool, allow_hosts: tuple[str, ...]) -> None:
    """Serve the demo page and its JSON API (/api/classify, /api/fill-mask, /api/status,
    /api/model) for BUNDLE until interrupted. Ctrl-C or SIGTERM (a service manager's stop) shut
    the server down cleanly with exit 0; a bad bundle or an address that cannot be listened on
    is one line and exit 2 before anything is announced.

    On loopback no token is asked unless given. On any other address the API wants a token:
    --token (or ALBERT_EDGE_DEMO_TOKEN), or a random one printed at start; --no-auth turns that
    off. Only the page's own origin may call the API, and a warning says what is exposed."""
    from ..demo.guard import is_loopback
    from ..demo.server import ServerOptions, exposure, serve as run_server
    from ..errors import AlbertEdgeError

    if token and no_auth:
        raise AlbertEdgeError("give --token (or ALBERT_EDGE_DEMO_TOKEN) or --no-auth, not both")
    made = not token and not no_auth and not is_loopback(host)
    if made:
        import secrets

        token = secrets.token_urlsafe(18)
    options = ServerOptions(max_body_bytes=max_body_bytes, queue=queue, timeout_s=timeout_s, threads=threads,
                            model=model, mediapipe=mediapipe, token=token or None, allow_hosts=allow_hosts)

    def ready(url: str) -> None:
        warning = exposure(host, options)
        if warning:
            err_console.print(f"[yellow]{escape(warning)}[/yellow]", markup=True)
        shown = f"{url}#token={token}" if made else url
        err_console.print(f"albert-edge demo on {shown}  (Ctrl-C stops it)", markup=False)
        if token and not made:
            err_console.print("open it once as that address followed by #token=<your token>; the page keeps it",
                              markup=False)

    run_server(bundle, host=host, port=port, options=options, on_ready=ready)


@demo.command("bundle")
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path),
              help="The bundle directory to write (bundle.json, spiece.model, labels.json, classifier/, mlm/).")
@click.option("--preset", default="demo", show_default=True,
              help="Size of the run: 'demo' (about 10 minutes on two cores) or 'tiny' (seconds; accuracy is meaningless).")
@click.option("--threads", type=POSITIVE_INT, default=None,
              help="CPU threads for training, at least 1 [default: torch's choice].")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0, 2**32 - 1),
              help="Seed of the tokenizer sample, the weights and the data split.")
@click.option("--force", is_flag=True, help="Replace --out when it already holds a bundle (or other files).")
@click.option("--json", "as_json", is_flag=True, help="Print bundle.json's contents as JSON.")
def bundle(out_dir: Path, preset: str, threads: int | None, seed: int, force: bool, as_json: bool) -> None:
    """Make the demo's model bundle on this workstation, with no download: a tokenizer and a
    short pretraining on the builtin corpus, a topic classifier fine-tuned on labelled paragraphs
    of it, ONNX and TFLite files in fp32 and int8, early exits trained on the classifier (only
    its exit heads) and its adaptive ONNX and TFLite files, and the held-out accuracy of each file.
    Needs the build side, the [convert] extra.

    The bundle is built in .OUT.partial beside --out (OUT is the directory's name) and moved to
    --out only when complete. After Ctrl-C, SIGTERM or a crash, the same command goes on from the
    finished steps kept there (each checked by sha256 and redone when its options changed); to
    start over, delete .OUT.partial. The pretraining is also cached under ~/.cache/albert-edge."""
    from ..pipeline.bundle import BundleOptions, make_bundle, partial_dir

    opts = BundleOptions(str(out_dir), preset=preset, threads=threads, seed=seed, force=force)
    try:
        with progress() as bar:
            info = make_bundle(opts, on_progress=_shown(bar, bar.add_task("bundle", total=None)))
    except KeyboardInterrupt as exc:
        if partial_dir(out_dir).is_dir():
            from ._exits import stopped_keeping

            raise stopped_keeping(exc, f"no bundle was written; the finished steps are kept in "
                                       f"{partial_dir(out_dir)}: run the same command again to go on from them") from None
        raise
    if as_json:
        print_json(info)
        return
    _show_bundle(out_dir, info)


def _show_bundle(out_dir: Path, info: dict) -> None:
    """Each file of the bundle with its size, and a classifier's held-out accuracy (an adaptive
    one's with its mean passes)."""
    from ..demo.engine import TASK_DIRS, VARIANTS

    acc = info["held_out_accuracy"]
    early = (info.get("adaptive") or {}).get("held_out", {})
    rows = []
    for task in TASK_DIRS:
        for variant in VARIANTS:
            path = out_dir / variant.folder(task) / variant.file_name
            if not path.is_file() or (variant.adaptive and task != "classifier"):
                continue
            score = acc.get(variant.key) if task == "classifier" else None
            figures = early.get(variant.key) if task == "classifier" and variant.adaptive else None
            if figures:
                score = figures["accuracy"]
            rows.append((f"{variant.folder(task)}/{path.name}", variant.key, fmt_bytes(path.stat().st_size),
                         "" if score is None else f"{score:.1%}",
                         f"{figures['mean_passes']:.2f} of {info['adaptive']['max_passes']}" if figures else ""))
    print_table(f"Bundle {out_dir} ({info['build_seconds']:.0f} s)",
                ["file", "model", "size", "held-out accuracy", "passes"], rows, right=(2, 3, 4))
    console.print(f"{acc['examples']} held-out paragraphs; majority class {acc['majority_class']:.1%}")


def _shown(bar, task, every_s: float = 30.0):
    """The build's progress: a live line on a terminal; in a log, a line per step and a training
    line at most every ``every_s`` seconds. Reused steps are said in both."""
    last = [0.0]

    def show(p) -> None:
        line = f"bundle {p}"
        if err_console.is_terminal:
            if p.reused:
                err_console.print(line)
            bar.update(task, description=str(p), completed=p.done, total=p.total)
        elif p.reused or p.train_step is None or time.monotonic() - last[0] >= every_s:
            last[0] = time.monotonic()
            click.echo(line, err=True)

    return show


COMMANDS: list = [demo]
