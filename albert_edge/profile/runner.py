"""The parent side of profiling: check the input, plan one job per file x setting, run each in a
fresh child process (its own process group), and collect the records. Ctrl-C or SIGTERM stops the
running child's whole group and removes its working directory."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..children import child_env, python
from ..device.activity import wait_quiet
from ..formats.manifest import check_beside, file_sha256
from ..formats.packed import check_packed
from ..errors import AlbertEdgeError, RuntimeUnavailable, install_line
from ..formats.kinds import TFLITE, Format, by_name, of_file
from ..runtime.engines import install_hint, packages
from ..runtime.onnx_engine import file_takes_text, ort_providers
from .inputs import model_limits
from .job import MEDIAPIPE, PASSES, ProfileJob
from .record import APP, ProfileRecord
from .settings import NATIVE, ProfileError, ProfileSettings

log = logging.getLogger(__name__)

__all__ = ["run_all", "plan", "Interrupted"]

CHILD = "albert_edge.profile._child"


class Interrupted(Exception):
    """Profiling was stopped by a signal; ``signum`` says which (the CLI exits 128 + signum)."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


def plan(files: list[Path], settings: ProfileSettings) -> list[ProfileJob]:
    """One job (the child's whole input) per file x setting, after checking every file and
    setting, so bad input fails before anything runs."""
    from .web import check_web

    web = [r for r in settings.runtimes if r != NATIVE]
    formats = [(path, _check_file(path)) for path in files]
    for path, fmt in formats:  # the files' own fault first, before what this machine lacks
        _check_web_file(path, fmt, web)
    if web:  # the jobs carry the checked folder
        settings = dataclasses.replace(settings, web_dir=check_web(web, settings.web_dir))
    jobs = [job for path, fmt in formats for job in _file_jobs(path, fmt, settings)]
    _check_machine(formats, jobs, settings)
    return jobs


def _check_web_file(path: Path, fmt: Format, web: list[str]) -> None:
    from .web import PACKAGE

    if web and not fmt.onnxruntime:
        raise ProfileError(f"{path}: --runtime {web[0]} runs .onnx and .ort files ({PACKAGE[web[0]]}), and this "
                           f"is a .{path.suffix.lower().lstrip('.')} file: profile it with --runtime native")


def _file_jobs(path: Path, fmt: Format, settings: ProfileSettings) -> list[ProfileJob]:
    """The jobs of one file: each native engine x threads x shape (also as an app opens it), each
    web runtime's, MediaPipe's; after checking the file takes the settings."""
    from .web import PACKAGE

    check_beside(path)  # a file the manifest beside it lists must be the one it lists
    check_packed(path)  # a MediaPipe file's tokenizer and labels must work with its model
    text_in = _takes_text(path, fmt)
    _check_inputs(path, fmt, settings, text_in)
    facts = {"file": str(path.resolve()), "file_as_given": str(path), "file_bytes": path.stat().st_size,
             "sha256": file_sha256(path), "settings": settings, "takes_text": text_in}
    engines = _native_engines(path, fmt, settings)
    web = [r for r in settings.runtimes if r != NATIVE]
    if web and text_in:
        raise ProfileError(f"{path}: it takes the text (its tokenizer is inside, onnxruntime-extensions' "
                           f"operators), which {PACKAGE[web[0]]} does not run: profile it with --runtime native")
    shapes = [(b, n) for b in settings.batches for n in settings.seq_lens] if settings.fixed else []
    shapes += [(1, None)] if settings.text is not None else []
    if adaptive(path, fmt):  # its cost depends on the text: real sentences only
        _check_adaptive(path, settings, web)
        shapes = [(1, None)]
    elif settings.exit_setting is not None:
        raise ProfileError(f"{path}: --exit-setting is for adaptive files (convert --adaptive), and this one runs "
                           "every pass")
    opened = (None, *([APP] if settings.as_app else []))
    jobs = [ProfileJob(**facts, **acc, threads=threads, batch=b, seq_len=n, engine=engine)
            for acc in (engines if NATIVE in settings.runtimes else [])
            for threads in settings.threads for engine in opened for b, n in shapes]
    jobs += [ProfileJob(**facts, engine=r, threads=threads, batch=b, seq_len=n)
             for r in web for threads in settings.threads for b in settings.batches for n in settings.seq_lens]
    task = _mediapipe_task(path) if settings.mediapipe and _may_be(MEDIAPIPE, fmt) else None
    if task is not None:  # as an app runs it: one text per call, MediaPipe's own threads
        shapes = [(1, n) for n in settings.seq_lens] if settings.fixed else []
        shapes += [(1, None)] if settings.text is not None else []
        jobs += [ProfileJob(**facts, **task, delegate="xnnpack", threads=settings.threads[0], batch=b, seq_len=n)
                 for b, n in shapes]
    return jobs


def adaptive(path: Path, fmt: Format) -> bool:
    """Whether ``path`` is an adaptive classifier (convert --adaptive): it outputs the passes it ran.
    A file that cannot be read is not called one here: the run says what is wrong with it."""
    try:
        return any(spec.name == PASSES for spec in fmt.read(path).outputs)
    except Exception:  # each reader fails its own way on a damaged file
        return False


def _check_adaptive(path: Path, settings: ProfileSettings, web: list[str]) -> None:
    if settings.exit_setting is not None:  # a value outside the file's rule: one line, before any child
        from ..runtime import Session

        try:
            Session(path, num_threads=1).set_exit_setting(settings.exit_setting)
        except ValueError as exc:
            raise ProfileError(f"--exit-setting: {exc}") from None
    if settings.text is None:
        raise ProfileError(f"{path}: an adaptive file runs as many passes as each text needs, so a time on token ids "
                           f"of one length is not its speed: profile it on real sentences (--text builtin, or "
                           f"--text FILE, with --tokenizer)")
    if web:
        raise ProfileError(f"{path}: an adaptive file is profiled on real sentences, which --runtime {web[0]} does not "
                           f"feed: profile it with --runtime native")


def _check_inputs(path: Path, fmt: Format, settings: ProfileSettings, text_in: bool) -> None:
    """The file takes the settings' inputs: --text's tokenizer, --batch, a static file's one
    shape, --seq-len within the model's maximum."""
    if settings.text is not None and settings.tokenizer is None and not text_in:
        raise ProfileError(f"{path}: --text needs --tokenizer (the spiece.model matching the model's vocabulary; "
                           "a file that takes the text, convert --to onnx-text, needs none)")
    if text_in and settings.fixed and max(settings.batches) > 1:
        raise ProfileError(f"{path}: it takes one text per call (its tokenizer is inside), so --batch "
                           f"{max(settings.batches)} cannot be fed: profile it at --batch 1")
    _check_static(path, fmt, settings)
    limits = model_limits(path)
    too_long = [n for n in settings.seq_lens if limits.max_seq_len and n > limits.max_seq_len]
    if settings.fixed and too_long:
        said = {"file entry": "the longest this file takes, from its entry in the manifest beside it"}
        raise ProfileError(f"{path}: --seq-len {', '.join(map(str, too_long))} is above the model's maximum "
                           f"{limits.max_seq_len} ({said.get(limits.max_seq_len_source, 'max_position_embeddings in the manifest beside it')})")


def _native_engines(path: Path, fmt: Format, settings: ProfileSettings) -> list[dict[str, Any]]:
    """The engine part of the native jobs of ``path``: each execution provider of a file onnxruntime
    runs, each delegate of another file; on --accelerator gpu, the GPU's (after checking it takes the file)."""
    if settings.accelerator == "gpu":
        return _gpu_jobs(path, fmt, settings)
    if fmt.onnxruntime:
        return [{"provider": p, "delegate": "xnnpack"} for p in settings.providers]
    return [{"provider": None, "delegate": d} for d in settings.delegates]


def _check_machine(formats: list[tuple[Path, Format]], jobs: list[ProfileJob],
                   settings: ProfileSettings) -> None:
    """What this machine needs for ``jobs`` of the files in ``formats``: MediaPipe, the text and
    tokenizer, a GPU provider, Vulkan."""
    if settings.mediapipe:
        _check_mediapipe([path for path, _ in formats], jobs)
    if settings.text is not None:
        check_text(settings)
    if settings.accelerator != "gpu" and any(job.provider not in (None, "cpu", "CPUExecutionProvider")
                                             for job in jobs):
        _check_providers(settings.providers)
    # LiteRT's GPU accelerator (a GPU format onnxruntime does not run) computes through Vulkan.
    if settings.accelerator == "gpu" and any(fmt.gpu and not fmt.onnxruntime for _, fmt in formats):
        _check_vulkan()


def _takes_text(path: Path, fmt: Format) -> bool:
    """Whether the file takes the text (convert --to onnx-text: its tokenizer inside), as its
    content says; only a file in the format onnx-text files are written in can."""
    return _may_be("onnx-text", fmt) and file_takes_text(path)


def _may_be(variant: str, fmt: Format) -> bool:
    """Whether a file of ``fmt`` can be the ``variant`` (kinds.VARIANTS) that convert writes; its
    content says whether it is."""
    return by_name(variant) is fmt


def _static_len(path: Path, fmt: Format) -> int | None:
    """N of a static-shape file's [1, N] inputs (convert --static): a .tflite's own signature, another
    format's entry in the manifest beside it; None for a dynamic file."""
    own = _SIGNATURE_LEN.get(fmt)
    if own is not None:
        return own(path, fmt)
    from .inputs import read_manifest

    entry = next((f for f in read_manifest(path.parent / "manifest.json").get("files") or []
                  if isinstance(f, dict) and f.get("name") == path.name), {})
    n = entry.get("static_len")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def _tflite_static_len(path: Path, fmt: Format) -> int | None:
    """N from a .tflite's own signature, read without loading it (LiteRT's CompiledModel reader)."""
    from ..runtime.compiled import read_signature
    from ..runtime.static import static_length

    try:
        signature = read_signature(path)
    except RuntimeUnavailable:  # a damaged file: its child says so, as for any file it cannot load
        return None
    n = static_length([s.shape for s in signature[1]]) if signature else None
    # Fixed inputs over a graph that resizes (a MediaPipe task file) take any shape.
    return None if n is None or fmt.sized_at_run_time(path) else n


# The formats whose files' own signatures say their static length (the others: the manifest beside them).
_SIGNATURE_LEN = {TFLITE: _tflite_static_len}


def _check_static(path: Path, fmt: Format, settings: ProfileSettings) -> None:
    """A static-shape file takes its one shape: another --seq-len or --batch fails here, in one line."""
    from ..runtime.static import length_problem

    n = _static_len(path, fmt)
    if n is None:
        return
    if settings.fixed:
        if settings.seq_lens == ProfileSettings().seq_lens and settings.seq_lens != (n,):
            # The lengths nobody typed: the message names the option, not a value the user never gave.
            raise ProfileError(f"{path}: this file takes {n} tokens ([1, {n}] inputs), and without --seq-len "
                               f"profile measures {','.join(map(str, settings.seq_lens))}: give --seq-len {n}")
        for asked in settings.seq_lens:
            problem = length_problem(n, asked, instead=f"profile it at --seq-len {n}")
            if problem:
                raise ProfileError(f"{path}: --seq-len {asked}: {problem}")
        if max(settings.batches) > 1:
            raise ProfileError(f"{path}: --batch {max(settings.batches)}: this file takes one row ([1, {n}] inputs): "
                               "profile it at --batch 1")
    if settings.text is not None:
        raise ProfileError(f"{path}: --text feeds sentences at their own lengths, and this file takes {n} tokens "
                           f"([1, {n}] inputs): profile it at --seq-len {n}")


def _gpu_jobs(path: Path, fmt: Format, settings: ProfileSettings) -> list[dict[str, Any]]:
    """The engine part of the jobs of ``path`` on --accelerator gpu, after checking the GPU takes it."""
    from ..runtime.accelerator import StaticShapeOnly, input_shapes as _input_shapes, refusal_message as _refusal_message

    gpu = {"accelerator": "gpu", "gpu_precision": settings.gpu_precision}
    if fmt.onnxruntime:
        from ..runtime.accelerator import onnx_gpu_provider

        providers = [p for p in settings.providers if p.lower() not in ("cpu", "cpuexecutionprovider")] or ["cuda"]
        try:
            return [{"provider": onnx_gpu_provider(p), "delegate": "xnnpack", **gpu} for p in providers]
        except RuntimeUnavailable as exc:
            raise RuntimeUnavailable(
                f"{path}: --accelerator gpu runs a .{fmt.name} file on onnxruntime's CUDA provider, and {exc}; the "
                "GPU path of phones and Pis here is LiteRT's, for .tflite files: profile a static .tflite "
                "(convert --to tflite --static) with --accelerator gpu") from None
    if not fmt.gpu:
        raise ProfileError(f"{path}: --accelerator gpu runs .tflite files (LiteRT's GPU accelerator) and .onnx / .ort "
                           f"files (onnxruntime's CUDA provider); a .{fmt.name} file runs on the CPU here")
    if fmt.structure_check is not None:
        fmt.structure_check(path)  # a damaged file: the one line Session gives
    shapes = _input_shapes(path)
    if any(d < 0 for shape in shapes for d in shape):
        raise StaticShapeOnly(_refusal_message(path, "inputs are dynamic-sized", shapes))
    return [{"provider": None, "delegate": "xnnpack", **gpu}]


def _check_vulkan() -> None:
    """No Vulkan device for LiteRT's GPU accelerator: one line before anything is measured."""
    from ..runtime.accelerator import no_vulkan as _no_vulkan, vulkan_available

    reason = vulkan_available()
    if reason is not None:
        raise _no_vulkan(reason)


def _mediapipe_task(path: Path) -> dict[str, Any] | None:
    """What a MediaPipe job of ``path`` needs: the text task its metadata describes and the file's
    input shape (MediaPipe pads every text to its length); None for a file without such metadata."""
    from ..formats.tflite_metadata import read_metadata
    from ..formats.tflite_reader import read

    try:
        meta = read_metadata(path)
    except ValueError as exc:
        raise ProfileError(f"{path}: {exc}") from None
    if meta is None or meta.task not in ("TextClassifier", "TextEmbedder"):
        return None
    return {"engine": MEDIAPIPE, "task": meta.task, "input_shape": tuple(read(path).inputs[0].shape)}


def _check_mediapipe(files: list[Path], jobs: list[ProfileJob]) -> None:
    if not any(job.engine == MEDIAPIPE for job in jobs):
        raise ProfileError(f"--mediapipe: no file given has MediaPipe metadata ({', '.join(p.name for p in files)}; "
                           "convert --to mediapipe writes such files: a text task with its tokenizer inside)")
    if importlib.util.find_spec("mediapipe") is None:
        raise ProfileError("--mediapipe runs files through MediaPipe Tasks, and mediapipe is not installed: "
                           f"{install_line('mobile')}")


def run_all(files: list[Path], settings: ProfileSettings,
            progress: Callable[[str], None] | None = None) -> list[ProfileRecord]:
    jobs = plan(files, settings)
    records = []
    with _signals_raise():
        for i, job in enumerate(jobs, 1):
            if progress:
                progress(f"[{i}/{len(jobs)}] {describe_job(job)}")
            before = _watch(settings.wait_quiet, progress)
            records.append(run_child(dataclasses.replace(job, machine_before=before)))
    return records


def _watch(wait: float, progress: Callable[[str], None] | None) -> dict[str, Any] | None:
    """The machine just before a child starts: a short look at what other work keeps busy, or,
    with ``wait`` seconds, a wait (that long at most) for it to stop."""
    if wait and progress:
        progress(f"waiting up to {wait:g} s for other work on the machine to stop")
    seen, waited = wait_quiet(wait, window=0.5 if wait else 0.25)
    if seen is not None:
        seen["waited_seconds"] = round(waited, 1) if wait else 0.0
    return seen


def describe_job(job: ProfileJob) -> str:
    from .web import PACKAGE

    acc = f"mediapipe {job.task}" if job.engine == MEDIAPIPE else job.provider or f"delegate={job.delegate}"
    if job.engine in PACKAGE:
        acc = f"{PACKAGE[job.engine]} in {'Node' if job.engine == 'node' else 'Chromium'}"
    if job.accelerator == "gpu":
        acc = f"{job.provider or 'gpu'} ({job.gpu_precision})"
    acc += " as an app opens it (runtime defaults)" if job.engine == APP else ""
    shape = f"seq={job.seq_len}" if job.seq_len is not None else "real text"
    return f"{Path(job.file_as_given).name} {acc} threads={job.threads} batch={job.batch} {shape}"


def run_child(job: ProfileJob) -> ProfileRecord:
    """Run one job in a fresh child process (a new session, so its whole group can be killed)."""
    child = None
    with tempfile.TemporaryDirectory(prefix="albert-edge-profile-", ignore_cleanup_errors=True) as workdir:
        try:
            with _signals_deferred():  # a signal while the child starts is raised once we hold it
                child = subprocess.Popen(python("-m", CHILD, dataclasses.replace(job, workdir=workdir).to_json()),
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                         start_new_session=True, env=child_env())
            out, err = child.communicate()
        finally:
            if child is not None and child.returncode is None:
                _kill_group(child)
    result = _last_json(out)
    if result is None:
        tail = (err or "").strip().splitlines()[-1:] or [f"exit code {child.returncode}"]
        raise AlbertEdgeError(f"{job.file_as_given}: the profiling child failed ({describe_job(job)}): {tail[0]}")
    if "error" in result:
        raise AlbertEdgeError(result["error"])
    return ProfileRecord.from_dict(result)


def _kill_group(child: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def _last_json(out: str | None) -> dict[str, Any] | None:
    for line in reversed((out or "").strip().splitlines()):
        with contextlib.suppress(json.JSONDecodeError):
            data = json.loads(line)
            if isinstance(data, dict):
                return data
    return None


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGINT and SIGTERM raise Interrupted in the main thread, so the running child's group is
    killed and its working directory removed on the way out."""
    def handler(signum, _frame):
        if _deferring:
            _pending.append(signum)
            return
        raise Interrupted(signum)

    if sys.platform == "win32" or not _main_thread():
        yield
        return
    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


# While a child is being started, the handler above only notes a signal (see run_child).
_deferring = False
_pending: list[int] = []


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    global _deferring
    _deferring = True
    try:
        yield
    finally:
        _deferring = False
        if _pending:
            signum = _pending[-1]
            _pending.clear()
            raise Interrupted(signum)


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _check_file(path: Path) -> Format:
    """The file's Format, after checking it is one (its suffix, the identifier its first bytes carry)
    and one of its engines is installed."""
    if not path.is_file():
        raise RuntimeUnavailable(f"{path}: no such model file")
    fmt = of_file(path)
    fmt.check_identifier(path)
    modules = packages(fmt)
    if not any(importlib.util.find_spec(m) is not None for m in modules):
        raise RuntimeUnavailable(f"{path}: running .{fmt.name} files needs {' or '.join(modules)} "
                                 f"({install_hint({fmt})})")
    return fmt


def _check_providers(providers) -> None:
    """A GPU execution provider missing from this onnxruntime build fails before anything runs."""
    import onnxruntime

    available = onnxruntime.get_available_providers()
    for provider in providers:
        ort_providers(provider, available)


def check_text(settings: ProfileSettings) -> None:
    if settings.text != "builtin" and not Path(settings.text).is_file():
        raise ProfileError(f"--text {settings.text}: no such file (give a UTF-8 text file or 'builtin')")
    if settings.tokenizer is not None and not Path(settings.tokenizer).exists():
        raise ProfileError(f"--tokenizer {settings.tokenizer}: no such file or directory")
