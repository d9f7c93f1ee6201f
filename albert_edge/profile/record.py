"""One record of one measurement: a model file x one setting, measured (or estimated) once.

This is the contract between the profiler (which writes records), `albert-edge report` and the
demo (which read them). Field names are stable; README.md documents them. Device side: standard
library only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["SCHEMA", "ProfileRecord", "Latency", "Memory"]

SCHEMA = "albert-edge.profile/1"


@dataclass
class Latency:
    """Milliseconds over the timed calls (after warm-up)."""

    count: int
    mean: float
    std: float
    min: float
    p50: float
    p90: float  # the headline figure (MLPerf single-stream convention)
    p95: float
    p99: float
    max: float
    # Relative spread (max - min) / median of the medians of the repeated blocks of timed calls.
    block_spread: float | None = None


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
    runtime: str  # "onnxruntime", "ai_edge_litert", "tflite_runtime", "tensorflow"
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
    ops: dict[str, Any] | None = None  # --ops breakdown
    weights_once: bool | None = None  # TFLite: run by LiteRT's CompiledModel with one packed copy per shared weight
    model: dict[str, Any] | None = None  # what the file takes: max_seq_len (and its source), vocab, input shape, dynamic
    warnings: list[str] = field(default_factory=list)
    host: str | None = None  # None when measured locally; "user@host" for --remote
    created: str | None = None  # ISO 8601 UTC
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
