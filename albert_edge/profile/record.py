"""One record of one measurement: a model file x one setting, measured (or estimated) once.

This is the contract between the profiler (which writes records), `albert-edge report` and the
demo (which read them). Field names are stable; README.md documents them. Device side: standard
library only.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["SCHEMA", "APP", "HEADLINE", "TAIL", "ProfileRecord", "Latency", "Memory", "record_problem",
           "records_problem"]

SCHEMA = "albert-edge.profile/1"
APP = "app"  # ProfileRecord.opened_as of a file opened as an app opens it (profile --as-app)


# The one latency figure every place leads with: profile's table, the report's tables, answer and
# chart, and the docs. The p50 is the call an app's user typically waits, and it is the figure
# whose interval the profiler narrows and --baseline compares; the p90 (one call in ten is slower:
# the tail, MLPerf single-stream's figure) is shown beside it, never instead of it.
HEADLINE = "p50"
TAIL = "p90"


@dataclass
class Latency:
    """Milliseconds over the timed calls (after warm-up)."""

    count: int
    mean: float
    std: float
    min: float
    p50: float  # the headline figure (HEADLINE); the p90 is shown beside it
    p90: float
    p95: float
    p99: float
    max: float
    # Relative spread (max - min) / median of the medians of the repeated blocks of timed calls.
    block_spread: float | None = None
    # The 95 % confidence intervals [low, high] of p50 and p90 (order statistics), and the p50's
    # interval width as a share of the p50. None in older records.
    p50_ci: list[float] | None = None
    p90_ci: list[float] | None = None
    ci_level: float | None = None
    p50_ci_width: float | None = None
    fastest_block_p50: float | None = None  # the lowest median of the blocks: the least disturbed stretch
    stopped_by: str | None = None  # "interval" (narrow enough) | "budget" (--max-seconds ran out) | None
    quality: str | None = None  # "good" | "noisy" | "unusable"
    quality_reasons: list[str] = field(default_factory=list)
    samples: list[float] | None = None  # the call times in order (at most 4000, evenly thinned)


@dataclass
class Memory:
    """Resident memory of the child process that held this one model, in bytes, read from
    /proc/self/status: ``*_rss`` is VmRSS at that moment, ``peak_*`` is VmHWM (the high-water mark)
    at that moment."""

    before_load_rss: int | None = None
    peak_before_load: int | None = None
    after_load_rss: int | None = None
    peak_after_load: int | None = None
    after_first_call_rss: int | None = None
    peak_after_first_call: int | None = None
    after_timed_rss: int | None = None
    peak_after_timed: int | None = None


@dataclass
class ProfileRecord:
    """One model file x one setting. ``estimated`` is True only for figures computed for a device
    we did not run on; such records carry ``estimate`` and leave ``latency``/``memory`` None."""

    file: str  # path as given
    file_name: str
    file_bytes: int
    sha256: str
    format: str  # "onnx" | "tflite"
    scheme: str | None  # "fp32", "int8-dynamic", ... from the manifest beside the file, else None
    # "onnxruntime", "ai_edge_litert", "tflite_runtime", "tensorflow", "onnxruntime-node", "onnxruntime-web"
    runtime: str
    runtime_version: str
    provider: str  # onnx execution provider ("CPUExecutionProvider", ...) or tflite delegate ("xnnpack" | "none")
    threads: int
    batch: int
    seq_len: int | None  # None for the real-text mode
    input_mode: str  # "fixed" | "real-text"
    load_ms: float | None
    first_call_ms: float | None
    latency: Latency | None
    memory: Memory | None
    device: dict[str, Any]  # albert_edge.device.describe() taken in the child, before and after
    estimated: bool = False
    estimate: dict[str, Any] | None = None
    text: dict[str, Any] | None = None  # real-text mode: source, sentences, token-length stats
    # What a call is fed: "token ids", or "text" for a file that takes the text (convert --to
    # onnx-text), where each call times its tokenizer and the model; None in older records.
    input_kind: str | None = None
    # How the file was opened: APP ("app") as an app opens it, the runtime's own API with its
    # default options (profile --as-app); None with albert-edge's settings (runtime.Session).
    opened_as: str | None = None
    ops: dict[str, Any] | None = None  # --ops breakdown
    weights_once: bool | None = None  # TFLite: run by LiteRT's CompiledModel with one packed copy per shared weight
    # Where the model computed: "cpu" | "gpu" (profile --accelerator); None in older records (the CPU).
    accelerator: str | None = None
    gpu_precision: str | None = None  # on the GPU: "fp32" (float32 arithmetic) | "fp16"; None on the CPU
    # On LiteRT's GPU accelerator: its own report of the file (GpuPlacement.to_dict(): ops, gpu_ops,
    # cpu_ops, fallbacks with op and reason, refused, reason, adapter, enforce_f32, runtime).
    placement: dict[str, Any] | None = None
    # profile --runtime node / chromium: the JavaScript runtime (onnxruntime-node in Node, onnxruntime-web's
    # WebAssembly in headless Chromium) and what it ran with: threads asked and got, Web Workers started,
    # whether the SIMD build ran (None in Node, which runs native code), the .wasm files, the browser or
    # Node version, the timer, and what its memory figures are ("not measured" in Chromium).
    web: dict[str, Any] | None = None
    model: dict[str, Any] | None = None  # what the file takes: max_seq_len (and its source), vocab, input shape, dynamic
    # Other work on the machine: "before" (watched by the parent before the child started) and
    # "during" (the timed calls): cores busy with other work, CPU steal, run queue, load average.
    machine: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    host: str | None = None  # None when measured locally; "user@host" for --remote
    created: str | None = None  # ISO 8601 UTC
    albert_edge_version: str | None = None  # the albert-edge that measured (or estimated) it; None in older records
    schema: str = SCHEMA

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProfileRecord:
        """The record a ``to_dict()`` (or a JSON line of it) came from; unknown keys are ignored."""
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        if isinstance(known.get("latency"), dict):
            known["latency"] = Latency(**known["latency"])
        if isinstance(known.get("memory"), dict):
            known["memory"] = Memory(**known["memory"])
        return cls(**known)


def record_problem(data: Any) -> str | None:
    """What is wrong with ``data`` as the dict of a ProfileRecord (the first thing found), or
    None when every field the record has is of its declared type and none it needs is missing:
    "'latency' is a string ('fast'), not an object (Latency) or null". Keys the schema does not
    know are left alone, as ``from_dict`` leaves them."""
    if not isinstance(data, dict):
        return f"is not an albert-edge profile record (it is {_kind(data)})"
    if data.get("schema") != SCHEMA:
        return f"is not an albert-edge profile record (its schema is {data.get('schema')!r}, not {SCHEMA!r})"
    return _fields_problem(ProfileRecord, data, "")


def records_problem(records: list) -> str | None:
    """The first record of ``records`` that is not a ProfileRecord's dict, as "record N: what":
    what both readers of profile results (``--baseline``, ``report``) check before any work."""
    for i, record in enumerate(records, 1):
        problem = record_problem(record)
        if problem:
            return f"record {i}: {problem}"
    return None


def _fields_problem(cls: type, data: dict, prefix: str) -> str | None:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        name = prefix + f.name
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                return f"lacks {name!r}"
            continue
        problem = _value_problem(hints[f.name], data[f.name], name)
        if problem:
            return problem
    return None


def _value_problem(kind: Any, value: Any, name: str) -> str | None:
    union = isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union
    arms = typing.get_args(kind) if union else (kind,)
    for arm in arms:
        if dataclasses.is_dataclass(arm) and isinstance(value, dict):
            return _fields_problem(arm, value, f"{name}.")
        if _fits(arm, value):
            return None
        if typing.get_origin(arm) is list and isinstance(value, list):
            item = typing.get_args(arm)[0]
            i = next(i for i, v in enumerate(value) if not _fits(item, v))
            return f"{name}[{i}] is {_kind(value[i])}, not {_expected(item)}"
    return f"{name!r} is {_kind(value)}, not {' or '.join(_expected(arm) for arm in arms)}"


def _fits(kind: Any, value: Any) -> bool:
    if kind is Any:
        return True
    if kind is type(None):
        return value is None
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is str:
        return isinstance(value, str)
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is dict:
        return isinstance(value, dict)
    if origin is list:
        return isinstance(value, list) and all(_fits(args[0], v) for v in value)
    return False


def _expected(kind: Any) -> str:
    if dataclasses.is_dataclass(kind):
        return f"an object ({kind.__name__})"
    names = {type(None): "null", bool: "true or false", int: "a whole number", float: "a number", str: "a string"}
    if kind in names:
        return names[kind]
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is list:
        return f"a list of {_expected(args[0]).removeprefix('a ')}s"
    return "an object" if origin is dict else str(kind)


def _kind(value: Any) -> str:
    """A JSON value's kind, with a glimpse of it: "a string ('fast')", "a list", "null"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"a string ({value[:30]!r})"
    return "a list" if isinstance(value, list) else "an object" if isinstance(value, dict) else type(value).__name__
