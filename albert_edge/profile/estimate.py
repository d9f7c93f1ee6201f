"""Latency estimates for devices we do not have at hand (`albert-edge profile --estimate`).

For each model file and sequence length: every operator's cost (:mod:`.opcount`) goes through a
roofline on the device's figures (:mod:`.devices`) - the larger of its compute time at the peak
for its precision and its memory time at the DRAM bandwidth - and the operators are summed. Real
kernels reach only a fraction of the roofline; that fraction is measured on the host for the same
file and setting (roofline on the host's figures / host's measured p50) and the device's roofline
is divided by it.

Estimates are records of their own: ``estimated=True``, ``latency`` and ``memory`` None, every
figure in ``estimate``. Measured and estimated numbers never share a field. Device side.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from .. import __version__
from ..formats.manifest import sha256_of
from ..errors import RuntimeUnavailable
from ..device.catalog import DEVICES, GB, Device, host_device, parse_devices
from .opcount import GraphCount, count
from .record import ProfileRecord

__all__ = ["estimate", "roofline_ms", "ESTIMATE_COLUMNS", "estimate_rows", "DEVICE_COLUMNS", "device_rows"]

log = logging.getLogger(__name__)

MODEL = "roofline"


def roofline_ms(counts: GraphCount, device: Device, threads: int | None = None) -> float:
    """One call's roofline time on ``device`` with ``threads`` cores, in milliseconds."""
    return sum(_op_seconds(op, device, threads) for op in counts.ops) * 1e3


def _op_seconds(op, device: Device, threads: int | None) -> float:
    compute = (2 * op.macs + op.flops) / device.peak(op.precision, threads)
    memory = (op.weight_bytes + op.activation_bytes) / (device.bandwidth_gbs * GB)
    return max(compute, memory)


def _by_op_ms(counts: GraphCount, device: Device, threads: int | None) -> dict[str, float]:
    out: dict[str, float] = {}
    for op in counts.ops:
        out[op.op] = out.get(op.op, 0.0) + _op_seconds(op, device, threads) * 1e3
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _memory_bound_share(counts: GraphCount, device: Device, threads: int | None) -> float:
    """The share of the roofline time spent in operators limited by memory, not compute."""
    total = bound = 0.0
    for op in counts.ops:
        seconds = _op_seconds(op, device, threads)
        total += seconds
        if (op.weight_bytes + op.activation_bytes) / (device.bandwidth_gbs * GB) >= seconds:
            bound += seconds
    return bound / total if total else 0.0


def estimate(files: Sequence[str | Path], devices: str | Sequence[str] | Sequence[Device],
             seq_lens: Iterable[int], batch: int | Iterable[int] = 1,
             measured_records: Iterable[ProfileRecord | dict[str, Any]] = (), *,
             threads: Iterable[int] | None = None, host: Device | None = None,
             progress: Callable[[str], None] | None = None) -> list[ProfileRecord]:
    """One estimate record per file x batch x sequence length x measured setting (threads,
    provider or delegate) x device. ``devices`` is 'pi4,pi5', a list of names or of rows.
    ``measured_records`` are this machine's measurements (remote and real-text ones are left
    out); a length the host did not measure gets the unscaled roofline for each of ``threads``
    (all the device's cores when None), and says so. ``host`` defaults to this machine's row."""
    rows = _devices(devices)
    batches = (batch,) if isinstance(batch, int) else tuple(batch)
    measured = [_fixed_local(r) for r in measured_records]
    measured = [r for r in measured if r is not None]
    host = host or (host_device() if measured else None)
    records: list[ProfileRecord] = []
    for file in files:
        path = Path(file)
        mine = [r for r in measured if _same_file(r, path)]
        for b in batches:
            counted = _count_lengths(path, b, seq_lens, progress)
            for seq_len, counts in counted.items():
                here = [(r, r.threads) for r in mine if r.batch == b and r.seq_len == seq_len]
                for m, t in here or [(None, t) for t in (tuple(threads) if threads else (None,))]:
                    records += [_record(path, counts, dev, host, m, t, mine, counted) for dev in rows]
    return records


def _count_lengths(path: Path, batch: int, seq_lens: Iterable[int],
                   progress: Callable[[str], None] | None) -> dict[int, GraphCount]:
    """The file's counts at each length it can run at; lengths it refuses (a fixed input shape,
    a length past its position table) are left out with a warning, an error when none is left."""
    counted: dict[int, GraphCount] = {}
    refused: list[str] = []
    for seq_len in seq_lens:
        if progress:
            progress(f"counting {path.name} at {batch} x {seq_len}")
        try:
            counted[seq_len] = count(path, batch, seq_len)
        except RuntimeUnavailable as exc:
            refused.append(str(exc))
    if refused and not counted:
        raise RuntimeUnavailable(refused[0])
    for reason in refused:
        log.warning("no estimate: %s", reason)
    return counted


def _devices(devices) -> list[Device]:
    if isinstance(devices, str):
        return parse_devices(devices)
    return [d if isinstance(d, Device) else parse_devices(d)[0] for d in devices]


# The devices are CPU rows: only CPU measurements calibrate them (onnxruntime's CPU provider,
# TFLite with or without XNNPACK), not a CUDA or TensorRT run.
_CPU_PROVIDERS = frozenset({"CPUExecutionProvider", "xnnpack", "none"})


def _fixed_local(record) -> ProfileRecord | None:
    """A fixed-length CPU measurement taken on this machine, or None."""
    r = record if isinstance(record, ProfileRecord) else ProfileRecord.from_dict(record)
    ok = (not r.estimated and r.host is None and r.input_mode == "fixed" and r.latency is not None
          and r.provider in _CPU_PROVIDERS)
    return r if ok else None


def _same_file(record: ProfileRecord, path: Path) -> bool:
    try:
        return Path(record.file).resolve() == path.resolve()
    except OSError:
        return record.file == str(path)


def _efficiency(counts: GraphCount, host: Device, m: ProfileRecord) -> tuple[float, float]:
    """(host roofline ms, roofline / measured p50) for measured record ``m``."""
    host_ms = roofline_ms(counts, host, m.threads)
    return host_ms, host_ms / m.latency.p50


def _record(path: Path, counts: GraphCount, dev: Device, host: Device | None, m: ProfileRecord | None,
            threads: int | None, mine: list[ProfileRecord], counted: dict[int, GraphCount]) -> ProfileRecord:
    device_roofline = roofline_ms(counts, dev, threads)
    figures: dict[str, Any] = {
        "device": dev.name, "device_title": dev.title, "model": MODEL, "statistic": "p50",
        "roofline_ms": device_roofline, "macs": counts.macs, "by_precision": counts.by_precision(),
        "memory_bound_share": _memory_bound_share(counts, dev, threads),
        "by_op_ms": _by_op_ms(counts, dev, threads), "host_figures": host.to_dict() if host else None, "device_figures": dev.to_dict(),
    }
    if m is None:
        figures.update(ms=device_roofline, efficiency=None, host_measured_ms=None, host_estimated_ms=None,
                       host_error=None, host_error_kind=None, roofline_error=None,
                       note="the host did not measure this setting: unscaled roofline")
    else:
        host_ms, eff = _efficiency(counts, host, m)
        measured_ms = m.latency.p50
        figures.update(ms=device_roofline / eff, efficiency=eff, host_measured_ms=measured_ms,
                       host_estimated_ms=host_ms, roofline_error=(host_ms - measured_ms) / measured_ms)
        figures.update(_host_error(m, mine, counted, host, measured_ms, host_ms))
    return ProfileRecord(
        albert_edge_version=__version__,
        file=str(path), file_name=path.name, file_bytes=m.file_bytes if m else path.stat().st_size,
        sha256=m.sha256 if m else sha256_of(path), format=counts.format, scheme=m.scheme if m else None,
        runtime=m.runtime if m else "", runtime_version=m.runtime_version if m else "",
        provider=m.provider if m else "", threads=min(threads, dev.cores) if threads else dev.cores,
        batch=counts.batch, seq_len=counts.seq_len, input_mode="fixed", load_ms=None, first_call_ms=None,
        latency=None, memory=None, device=dev.to_dict(), estimated=True, estimate=figures,
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )


def _host_error(m: ProfileRecord, mine: list[ProfileRecord], counted: dict[int, GraphCount], host: Device,
                measured_ms: float, host_ms: float) -> dict[str, Any]:
    """How well the scaled roofline predicts the host itself: this length is predicted with the
    efficiency of the host's nearest other measured sequence length (same file, batch, threads,
    provider; nearest on a log scale, the median where two are as near), leaving this one out.
    Needs two or more measured lengths; otherwise the raw roofline error is all there is."""
    others = [r for r in mine if r.seq_len != m.seq_len and r.seq_len in counted and r.batch == m.batch
              and r.threads == m.threads and r.provider == m.provider]
    if not others:
        return {"host_error": None, "host_error_kind": None}
    distance = {r.seq_len: abs(math.log(r.seq_len / m.seq_len)) for r in others}
    nearest = [r for r in others if distance[r.seq_len] == min(distance.values())]
    eff = statistics.median(_efficiency(counted[r.seq_len], host, r)[1] for r in nearest)
    return {"host_error": (host_ms / eff - measured_ms) / measured_ms, "host_error_kind": "leave-one-out",
            "host_error_from_seq_len": sorted({r.seq_len for r in nearest})}


# --- tables for the command line ---------------------------------------------------------------

ESTIMATE_COLUMNS = ("file", "device", "thr", "batch", "seq", "est. ms", "efficiency", "host p50", "host roofline",
                    "host error", "mem-bound")
DEVICE_COLUMNS = ("device", "CPU", "cores", "fp32 GFLOP/s", "int8 GOP/s", "fp16 GFLOP/s", "DRAM GB/s", "RAM GB")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.0%}"


def estimate_rows(records: Iterable[ProfileRecord]) -> list[tuple]:
    """Rows under ESTIMATE_COLUMNS. 'host error' is the leave-one-out error of the scaled
    estimate on the host when there is one, else the raw roofline's error (marked 'raw')."""
    rows = []
    for r in records:
        e = r.estimate or {}
        error = _pct(e.get("host_error")) if e.get("host_error") is not None else (
            f"{_pct(e.get('roofline_error'))} raw" if e.get("roofline_error") is not None else "unscaled")
        rows.append((r.file_name, e.get("device"), r.threads, r.batch, r.seq_len, f"{e['ms']:.2f}",
                     "-" if e.get("efficiency") is None else f"{e['efficiency']:.2f}",
                     "-" if e.get("host_measured_ms") is None else f"{e['host_measured_ms']:.2f}",
                     "-" if e.get("host_estimated_ms") is None else f"{e['host_estimated_ms']:.2f}",
                     error, f"{e.get('memory_bound_share', 0):.0%}"))
    return rows


def device_rows(devices: Sequence[Device] = DEVICES) -> list[tuple]:
    """Rows under DEVICE_COLUMNS (each row's source is ``Device.source``)."""
    return [(d.name, d.cpu, d.cores, f"{d.fp32_gflops:g}", f"{d.int8_gops:g}",
             "-" if d.fp16_gflops is None else f"{d.fp16_gflops:g}", f"{d.bandwidth_gbs:g}", f"{d.ram_gb:g}")
            for d in devices]
