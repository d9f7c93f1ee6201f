"""One measurement in its own process: ``python -m albert_edge.profile._child JOB_JSON``.

Loads one model file with one setting, times it, reads this process's memory from /proc at each
phase, and writes one ProfileRecord as JSON to its standard output (the runtime's own chatter is
sent to stderr). Imports only the device side and the one runtime the file needs. On bad input it
writes ``{"error": "..."}`` and exits 2.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import device
from ..device import activity
from ..errors import AlbertEdgeError, RuntimeUnavailable, first_line
from ..formats.kinds import EXECUTORCH, TFLITE, of_file
from ..runtime import Session
from ..runtime.engines import version_of
from ..runtime.mediapipe_tasks import MediaPipeTask
from ..runtime.onnx_text import TEXT_INPUT
from . import ops as ops_mod
from .inputs import (ModelLimits, fixed_feeds, ids_counter, model_limits, packed_counter, sentence_feeds, text_feeds,
                     text_of_length, token_stats)
from .job import MEDIAPIPE, PASSES, ProfileJob
from .record import APP, Latency, Memory, ProfileRecord
from .settings import WEB_RUNTIMES
from .stats import BLOCKS, judge, latency, spread, time_until


@dataclass
class _Feeds:
    """What the calls are fed, prepared before the model loads where it can be (then nothing but the
    model allocates between the first memory reading and the last)."""

    mediapipe: bool  # run through MediaPipe Tasks, the text in
    text_in: bool  # each call is fed the text and runs the file's tokenizer too
    count: Callable[[str], int] | None = None  # a text -> its number of ids, as the file's tokenizer counts
    feeds: list[dict[str, Any]] = field(default_factory=list)  # fixed length: one; real text: every sentence
    text_stats: dict[str, Any] | None = None  # real text: where the sentences came from, their lengths


def measure(job: ProfileJob) -> ProfileRecord:
    """Load the job's file with its setting, time it, and read this process's memory before the
    load, after it, after the first call and after the timed calls."""
    path = job.path
    before = device.describe()
    # Everything that allocates besides the model is done before the first memory reading, so the
    # last high-water mark is the process's own peak.
    versions = {engine.package: version_of(engine.package) for engine in of_file(path).engines}
    memory = Memory()
    warnings: list[str] = []
    fed = _before_load(path, job, versions, warnings)
    memory.before_load_rss, memory.peak_before_load = _memory()

    start = time.perf_counter()
    app = job.engine == APP
    session = (MediaPipeTask(path, job.task) if fed.mediapipe else
               Session(path, num_threads=job.threads, provider=job.provider, delegate=job.delegate,
                       app_defaults=app, accelerator=job.accelerator, gpu_precision=job.gpu_precision))
    load_ms = (time.perf_counter() - start) * 1e3
    if job.settings.exit_setting is not None:  # an adaptive file at another setting than its own
        in_effect = session.set_exit_setting(job.settings.exit_setting)
        if fed.text_stats is not None:
            fed.text_stats["exit_setting"] = in_effect
    memory.after_load_rss, memory.peak_after_load = _memory()
    limits = _after_load(session, path, job, fed, warnings)

    start = time.perf_counter()
    _run(session, fed.feeds[0], job)
    first_ms = (time.perf_counter() - start) * 1e3
    memory.after_first_call_rss, memory.peak_after_first_call = _memory()
    if fed.text_in and job.seq_len is None:  # the token counts, as the file's own tokenizer gives them
        fed.text_stats.update(token_stats([fed.count(str(f[TEXT_INPUT][0])) for f in fed.feeds]))
    if PASSES in getattr(session, "output_names", ()):  # an adaptive file: the passes each sentence ran
        fed.text_stats["passes"] = pass_stats([_run(session, f, job)[PASSES] for f in fed.feeds])

    lat, during = _timed(session, fed, job)
    # The statistics and the second device reading come before the last memory reading, so that
    # reading is this process's peak (what GNU time's maximum RSS reports for it).
    after = device.describe()
    memory.after_timed_rss, memory.peak_after_timed = _memory()
    placement = getattr(session, "placement", None)
    warnings += _judged(lat, job, activity.competing(during, job.threads) + device.throttle_warnings(before, after),
                        _software_gpu(placement))
    # Real text profiles the first sentence only, which the latency over all sentences does not describe.
    ops = _ops(path, job, fed.feeds[0], lat.p50 if job.seq_len is not None else None) if job.settings.ops else None
    return job.record(
        before=before, after=after, during=during,
        format=session.format, scheme=limits.scheme, runtime=session.backend_name,
        runtime_version=versions.get(session.backend_name) or "unknown",
        weights_once=getattr(session, "weights_once", None), provider=session.accelerator,
        load_ms=load_ms, first_call_ms=first_ms, latency=lat, memory=memory,
        text=fed.text_stats, ops=ops, warnings=warnings, model=limits.to_dict(),
        input_kind="text" if fed.text_in else "token ids", opened_as=APP if app else None,
        accelerator=job.accelerator, gpu_precision=getattr(session, "gpu_precision", None),
        placement=placement.to_dict() if placement is not None else None)


def _before_load(path: Path, job: ProfileJob, versions: dict[str, str], warnings: list[str]) -> _Feeds:
    """What can be fed before the model loads: MediaPipe imported and its token counter (read from
    the file's packed spiece.model), the sentences of real text. Adds to ``versions`` and ``warnings``."""
    limits = model_limits(path)
    # A file that takes the text (convert --to onnx-text), or one MediaPipe Tasks runs (the text in,
    # its tokenizer from the file's metadata): each call runs the tokenizer and the model.
    mediapipe = job.engine == MEDIAPIPE
    fed = _Feeds(mediapipe, mediapipe or job.takes_text)
    if mediapipe:  # imported before the memory readings: what the file adds is read from them
        MediaPipeTask.modules()
        versions["mediapipe"] = MediaPipeTask.version()
        fed.count = packed_counter(path, job.input_shape[1])
        if "tensorflow" in sys.modules:
            warnings.append("info: mediapipe's Python package imported TensorFlow before the file loaded (its memory "
                            "is in this process's peak, not in an app's): what the file costs is after_load_rss "
                            "minus before_load_rss")
    if job.seq_len is None:
        given = job.settings
        fed.feeds, fed.text_stats = (sentence_feeds(given.text, given.max_sentences) if fed.text_in else
                                     text_feeds(given.text, given.tokenizer, given.max_sentences, limits.max_seq_len))
    return fed


def _after_load(session, path: Path, job: ProfileJob, fed: _Feeds, warnings: list[str]) -> ModelLimits:
    """What needs the loaded file: the limits of its declared input shape, a token counter that runs
    it (a file that takes the text), and the feed at the job's fixed length. Adds to ``fed`` and
    ``warnings``."""
    shape = (job.input_shape if fed.mediapipe else None if fed.text_in else
             session.inputs[0].shape if session.inputs else None)
    limits = model_limits(path, shape)
    if not fed.mediapipe and fed.text_in:
        fed.count = ids_counter(lambda feeds: _run(session, feeds, job))
    if fed.mediapipe:
        warnings.append(f"info: through MediaPipe Tasks' {job.task}, as an app runs the file (its Python API sets no "
                        f"thread count: MediaPipe's own default); MediaPipe pads every text to the file's "
                        f"{shape[1]} tokens, so the model's part costs that much whatever the text's length")
    if job.seq_len is None:
        return limits
    _check_length(job.seq_len, limits)
    if fed.text_in:
        feed, calls = _text_of_length(fed.count, job)
        fed.feeds = [feed]
        counted = "counted by running the file" if not fed.mediapipe else "counted by the spiece.model packed in it"
        warnings.append(f"info: the file takes the text, so each call times its tokenizer and the model: fed the "
                        f"builtin corpus' first words, {job.seq_len} tokens as its tokenizer counts them "
                        f"({counted}, {calls} times, before the first call timed here)")
    else:
        fed.feeds = [fixed_feeds(job.batch, job.seq_len, limits.vocab_size)]
    return limits


def _timed(session, fed: _Feeds, job: ProfileJob) -> tuple[Latency, dict[str, Any]]:
    """The timed calls and their statistics: at the fixed length, after the warm-up, until
    :func:`time_until` stops; or the real sentences (:func:`_time_text`). With them, what other work
    the machine did meanwhile."""
    stopped_by, given = None, job.settings
    if job.seq_len is not None:
        call = session.prepare(fed.feeds[0])
        for _ in range(given.warmup):
            call()
        start = activity.snapshot()
        times, stopped_by = time_until(call, given.runs, given.min_seconds, given.max_seconds, given.ci_target)
    else:
        start = activity.snapshot()
        times, fed.text_stats["same_shape_again"] = _time_text(session, fed.feeds, job)
    during = activity.activity(start, activity.snapshot())
    lat = latency(times)
    lat.stopped_by = stopped_by
    if job.seq_len is None:
        # Sentences differ in length, so blocks are compared only as whole passes over them all.
        lat.block_spread = pass_spread(times, len(fed.feeds))
    return lat, during


def _judged(lat: Latency, job: ProfileJob, machine: list[str], unusable: list[str] = ()) -> list[str]:
    """Judge the timing (sets ``lat.quality`` and its reasons) from its statistics and ``machine``,
    the warnings about other work and throttling, and ``unusable``, reasons that make any timing
    meaningless (a software GPU); those warnings, then the timing's own reasons."""
    lat.quality, lat.quality_reasons = judge(lat, job.settings.ci_target,
                                             [m for m in machine if not m.startswith("info:")],
                                             fixed_shape=job.seq_len is not None)
    if unusable:
        lat.quality, lat.quality_reasons = "unusable", [*unusable, *lat.quality_reasons]
    timing = [r for r in lat.quality_reasons if r not in machine and r not in unusable]
    return [*unusable, *machine] + ([f"timing {lat.quality}: {'; '.join(timing)}"] if timing else [])


def _software_gpu(placement) -> list[str]:
    """On a software Vulkan device (lavapipe) the timing says nothing about a GPU: the warning that
    makes it unusable, or none."""
    if placement is None:
        return []
    from ..runtime.accelerator import software_warning

    warning = software_warning(placement.adapter)
    return [warning] if warning else []


def _memory() -> tuple[int | None, int | None]:
    mem = device.process_memory()
    return mem["rss"], mem["peak_rss"]


def _check_length(seq_len: int, limits) -> None:
    if limits.max_seq_len is not None and seq_len > limits.max_seq_len:
        raise AlbertEdgeError(f"--seq-len {seq_len} is above the model's maximum {limits.max_seq_len} "
                              f"(from its {limits.max_seq_len_source})")


def _run(session: Session, feeds, job: ProfileJob):
    try:
        return session.run(feeds)
    except Exception as exc:  # the runtimes raise their own types; name the shape that failed
        if TEXT_INPUT in feeds:
            raise AlbertEdgeError(f"{job.file_as_given}: the model fails on the text "
                                  f"{str(feeds[TEXT_INPUT][0])[:40]!r}: {first_line(exc)}")
        shape = "x".join(str(d) for d in feeds["input_ids"].shape)
        raise AlbertEdgeError(f"{job.file_as_given}: the model fails on input {shape} (batch x sequence): "
                              f"{first_line(exc)}")


def pass_stats(passes: list[np.ndarray]) -> dict[str, Any]:
    """How many passes the sentences ran: mean, median, 90th percentile and the count of each."""
    ran = np.concatenate([np.asarray(p).reshape(-1) for p in passes]).astype(int)
    values, counts = np.unique(ran, return_counts=True)
    return {"mean": float(ran.mean()), "p50": float(np.median(ran)), "p90": float(np.percentile(ran, 90)),
            "counts": {str(v): int(c) for v, c in zip(values, counts)}, "sentences": int(ran.size)}


def _text_of_length(count, job: ProfileJob):
    try:
        return text_of_length(count, job.seq_len)
    except ValueError as exc:
        raise AlbertEdgeError(f"{job.file_as_given}: {exc}; profile it on real sentences (--text builtin)")


def _time_text(session: Session, feeds_list, job: ProfileJob) -> tuple[list[float], dict[str, Any]]:
    """Real sentences in their order, each at its own length: every call as it comes (the runtime
    meets a new shape; TFLite re-allocates its tensors) is timed, then the same sentence once more
    (same shape again), so the cost of a shape change can be read from the difference."""
    calls = [session.prepare(f) for f in feeds_list]
    for call in calls[: job.settings.warmup]:
        call()
    clock = time.perf_counter_ns
    as_comes: list[float] = []
    again: list[float] = []
    deadline = clock() + int(job.settings.min_seconds * 1e9)
    i = 0
    # Whole passes over the sentences only, so that each pass can be compared with the others.
    while len(as_comes) < max(job.settings.runs, len(calls)) or clock() < deadline or len(as_comes) % len(calls):
        call = calls[i % len(calls)]
        t0 = clock()
        call()
        t1 = clock()
        call()
        t2 = clock()
        as_comes.append((t1 - t0) / 1e6)
        again.append((t2 - t1) / 1e6)
        i += 1
    extra = np.asarray(as_comes) - np.asarray(again)
    return as_comes, {
        "latency_p50_ms": float(np.median(again)), "latency_p90_ms": float(np.percentile(again, 90)),
        "shape_change_cost_p50_ms": float(np.median(extra)),
        "shape_change_cost_share": float(np.median(extra) / np.median(as_comes)) if np.median(as_comes) else None,
        "note": "latency is per sentence as it comes (a new shape each time); same_shape_again times the "
                "same sentence right after, so the difference is what a shape change costs",
    }


def pass_spread(times: list[float], per_pass: int) -> float | None:
    """Block spread where each block is whole passes over the same sentences (None for one pass)."""
    passes = len(times) // per_pass
    if passes < 2:
        return None
    return spread(np.array_split(np.asarray(times[: passes * per_pass]).reshape(passes, per_pass),
                                 min(passes, BLOCKS)))


def _ops(path: Path, job: ProfileJob, feeds, latency_p50: float | None) -> dict[str, Any]:
    """Per-operator cost from a second session with the profiler on, so the latency above was
    measured without the profiler's overhead: ``job.settings.ops_runs`` profiled calls after one that
    allocates, set against ``latency_p50`` (the timed calls' p50). The trace is deleted."""
    if job.engine == MEDIAPIPE:
        return ops_mod.tflite_unavailable("MediaPipe Tasks runs its own interpreter, which gives no per-operator "
                                          "times: the breakdown is that of the file run through Session")
    fmt = of_file(path)
    if not fmt.onnxruntime:  # LiteRT's profiler, or none
        return _OTHER_BREAKDOWNS[fmt](path, job, feeds, latency_p50)
    prefix = Path(job.workdir) / "ort-trace"
    session = Session(path, num_threads=job.threads, provider=job.provider, ops_trace=prefix,
                      app_defaults=job.engine == APP)  # the graph onnxruntime's defaults make of it
    try:
        call = session.prepare(feeds)
        for _ in range(job.settings.ops_runs + 1):  # onnxruntime traces the first call too; the breakdown drops it
            call()
        trace = session.end_profiling()
        return ops_mod.onnx_breakdown(trace, latency_p50)
    finally:
        for leftover in Path(job.workdir).glob("ort-trace*"):
            leftover.unlink(missing_ok=True)


def _tflite_ops(path: Path, job: ProfileJob, feeds, latency_p50: float | None) -> dict[str, Any]:
    if job.delegate != "xnnpack":
        return ops_mod.tflite_unavailable(ops_mod.TFLITE_NONE_NOTE)
    from .tflite_ops import tflite_breakdown

    try:
        ops = tflite_breakdown(path, job.threads, feeds, job.settings.ops_runs, latency_p50)
        if job.engine == APP and ops.get("available"):
            ops["note"] = ("profiled through LiteRT's CompiledModel, which runs the same XNNPACK operators: the "
                           "Interpreter's Python API has no profiler")
        return ops
    except RuntimeUnavailable as exc:
        from ..runtime.compiled import cpu_runs_compiled_model, unavailable_reason

        cpu_reason = None if cpu_runs_compiled_model() else unavailable_reason()
        return ops_mod.tflite_unavailable(ops_mod.tflite_unavailable_note(str(exc), cpu_reason))


def _pte_ops(path: Path, job: ProfileJob, feeds, latency_p50: float | None) -> dict[str, Any]:
    return ops_mod.tflite_unavailable(ops_mod.PTE_NOTE)


# The per-operator breakdown of the formats onnxruntime does not run (it traces the others').
_OTHER_BREAKDOWNS = {TFLITE: _tflite_ops, EXECUTORCH: _pte_ops}


def main(argv: list[str]) -> int:
    # The record goes to the real stdout; anything the runtimes print goes to stderr.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    try:
        job = ProfileJob.from_json(argv[0])
        if job.engine in WEB_RUNTIMES:  # timed in JavaScript: onnxruntime-node, onnxruntime-web
            from .web import measure_web

            record = measure_web(job, _judged, _check_length)
        else:
            record = measure(job)
    except AlbertEdgeError as exc:
        out.write(json.dumps({"error": str(exc)}) + "\n")
        out.flush()
        return 2
    out.write(json.dumps(record.to_dict()) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
