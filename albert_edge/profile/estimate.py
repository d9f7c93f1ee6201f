"""Latency estimates for devices we do not have at hand (`albert-edge profile --estimate`).

For each model file and sequence length: every operator's cost (:mod:`.opcount`) goes through a
roofline on the device's figures (:mod:`albert_edge.device.catalog`) - the larger of its compute
time at the peak for its precision and its memory time at the DRAM bandwidth - and the operators
are summed. Real kernels reach only a fraction of the roofline; that fraction, the efficiency,
comes from the host calibration (:mod:`.calibration`): every measurement on this machine is an
observation of it, kept per runtime, setting and precision, measured robustly (the fastest
block's median) and fitted across files and lengths, a quiet measurement outranking a noisy one.
The device's roofline is divided by the efficiency the fit gives for the call's work, and the
fit's leave-one-out error is the estimate's stated range.

Efficiencies above 1 are possible: the roofline streams every byte from DRAM, and a file whose
weights and activations fit in the host's caches runs faster than that. They cancel out in the
estimate only as far as the device's caches hold the same share; the range says how far.

Estimates are records of their own: ``estimated=True``, ``latency`` and ``memory`` None, every
figure in ``estimate``. Measured and estimated numbers never share a field. Device side.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from .. import __version__
from ..formats.manifest import sha256_of
from ..errors import RuntimeUnavailable
from ..device.catalog import DEVICES, GB, Device, host_device, parse_devices
from .calibration import Calibration
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
             calibration: Calibration | None = None,
             progress: Callable[[str], None] | None = None) -> list[ProfileRecord]:
    """One estimate record per file x batch x sequence length x measured setting (threads,
    provider or delegate) x device. ``devices`` is 'pi4,pi5', a list of names or of rows.
    ``measured_records`` are this machine's measurements (remote and real-text ones are left
    out): each becomes an observation of ``calibration`` (in memory when None; saved when it has
    a path). A setting the calibration knows nothing of gets the unscaled roofline for each of
    ``threads`` (all the device's cores when None), and says so. ``host`` defaults to the row the
    calibration keeps for this machine (made when it is new)."""
    rows = _devices(devices)
    batches = (batch,) if isinstance(batch, int) else tuple(batch)
    measured = [_fixed_local(r) for r in measured_records]
    measured = [r for r in measured if r is not None]
    calibration = calibration if calibration is not None else Calibration()
    if host is None and (measured or calibration.classes):
        host = Device(**calibration.host_row(lambda: host_device().to_dict()))
    records: list[ProfileRecord] = []
    for file in files:
        path = Path(file)
        mine = [r for r in measured if _same_file(r, path)]
        for b in batches:
            counted = _count_lengths(path, b, seq_lens, progress)
            for m in mine:  # every measurement is an observation, at whatever length it was taken
                if m.batch == b:
                    _observe(calibration, counted.get(m.seq_len) or count(path, b, m.seq_len), host, m)
            for seq_len, counts in counted.items():
                settings = {(r.runtime, r.runtime_version, r.provider, r.threads): r for r in mine if r.batch == b}
                for m, t in [(m, m.threads) for m in settings.values()] or \
                        [(None, t) for t in (tuple(threads) if threads else (None,))]:
                    here = next((r for r in mine if r.batch == b and r.seq_len == seq_len and m is not None
                                 and _class(r, counts) == _class(m, counts)), None)
                    fit = calibration.fit(_class(m, counts), counts.macs) if m is not None else None
                    records += [_record(path, counts, dev, host, m, here, fit, t) for dev in rows]
    calibration.save()
    return records


def _class(m: ProfileRecord, counts: GraphCount) -> str:
    """The calibration class of a measurement: runtime and version, provider or delegate,
    threads, batch, and the precision that does most of the file's multiply-accumulates."""
    by = counts.by_precision()
    precision = max(by, key=lambda p: by[p]["macs"]) if by else "fp32"
    return f"{m.runtime} {m.runtime_version}|{m.provider}|threads={m.threads}|batch={m.batch}|{precision}"


def _observe(calibration: Calibration, counts: GraphCount, host: Device, m: ProfileRecord) -> None:
    """Measurement ``m`` as an observation of the host's efficiency: its roofline over the median
    of its fastest block of calls (the p50 for records that have no blocks)."""
    robust = m.latency.fastest_block_p50 or m.latency.p50
    calibration.observe(_class(m, counts), {
        "sha256": m.sha256, "file_name": m.file_name, "seq_len": m.seq_len, "macs": counts.macs,
        "efficiency": roofline_ms(counts, host, m.threads) / robust, "host_ms": robust,
        "quality": m.latency.quality})


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


def _record(path: Path, counts: GraphCount, dev: Device, host: Device | None, m: ProfileRecord | None,
            here: ProfileRecord | None, fit, threads: int | None) -> ProfileRecord:
    """One estimate: ``m`` is a measurement of the setting (any length), ``here`` one at this
    length (or None), ``fit`` the calibration's prediction for this call (None: unscaled)."""
    device_roofline = roofline_ms(counts, dev, threads)
    figures: dict[str, Any] = {
        "device": dev.name, "device_title": dev.title, "model": MODEL, "statistic": "p50",
        "roofline_ms": device_roofline, "macs": counts.macs, "by_precision": counts.by_precision(),
        "memory_bound_share": _memory_bound_share(counts, dev, threads),
        "by_op_ms": _by_op_ms(counts, dev, threads), "host_figures": host.to_dict() if host else None,
        "device_figures": dev.to_dict(), "efficiency": None, "error": None, "ms_range": None, "calibration": None,
        "host_measured_ms": here.latency.p50 if here else None, "host_estimated_ms": None, "host_error": None,
    }
    if fit is None:
        figures.update(ms=device_roofline, note="the host did not measure this setting: unscaled roofline")
    else:
        ms = device_roofline / fit.efficiency
        host_ms = roofline_ms(counts, host, threads) / fit.efficiency
        figures.update(ms=ms, efficiency=fit.efficiency, error=fit.error,
                       ms_range=[ms * (1 - fit.error), ms * (1 + fit.error)] if fit.error is not None else None,
                       host_estimated_ms=host_ms,
                       calibration={"observations": fit.observations, "quality": fit.quality, "files": fit.files,
                                    "seq_lens": fit.lengths, "class": _class(m, counts)})
        if here is not None:
            robust = here.latency.fastest_block_p50 or here.latency.p50
            figures["host_error"] = (host_ms - robust) / robust
        if fit.error is None:
            figures["note"] = "one host measurement in this class: error unknown (profile two or more lengths)"
        if fit.efficiency > 1:
            figures["efficiency_note"] = ("above 1: the host ran faster than its roofline (the file's bytes fit in "
                                          "its caches, which the roofline's DRAM bandwidth leaves out)")
    ref = m or here
    return ProfileRecord(
        albert_edge_version=__version__,
        file=str(path), file_name=path.name, file_bytes=ref.file_bytes if ref else path.stat().st_size,
        sha256=ref.sha256 if ref else sha256_of(path), format=counts.format, scheme=ref.scheme if ref else None,
        runtime=ref.runtime if ref else "", runtime_version=ref.runtime_version if ref else "",
        provider=ref.provider if ref else "", threads=min(threads, dev.cores) if threads else dev.cores,
        batch=counts.batch, seq_len=counts.seq_len, input_mode="fixed", load_ms=None, first_call_ms=None,
        latency=None, memory=None, device=dev.to_dict(), estimated=True, estimate=figures,
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )


# --- tables for the command line ---------------------------------------------------------------

ESTIMATE_COLUMNS = ("file", "device", "thr", "batch", "seq", "est. ms", "range", "efficiency", "host p50",
                    "host fit", "calibration", "mem-bound")
DEVICE_COLUMNS = ("device", "CPU", "cores", "fp32 GFLOP/s", "int8 GOP/s", "fp16 GFLOP/s", "DRAM GB/s", "RAM GB")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.0%}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def estimate_rows(records: Iterable[ProfileRecord]) -> list[tuple]:
    """Rows under ESTIMATE_COLUMNS: the estimate, its range (the calibration's leave-one-out
    error), the efficiency used ('*' above 1), this machine's p50 at the setting and how far the
    fit misses its robust time, and what the calibration rests on."""
    rows = []
    for r in records:
        e = r.estimate or {}
        low_high = e.get("ms_range")
        cal = e.get("calibration")
        rows.append((r.file_name, e.get("device"), r.threads, r.batch, r.seq_len, _ms(e["ms"]),
                     f"{low_high[0]:.2f}-{low_high[1]:.2f}" if low_high else "unknown" if cal else "unscaled",
                     "-" if e.get("efficiency") is None else f"{e['efficiency']:.2f}" + ("*" if e["efficiency"] > 1 else ""),
                     _ms(e.get("host_measured_ms")), _pct(e.get("host_error")),
                     f"{cal['quality']}, {cal['observations']} obs" if cal else "-",
                     f"{e.get('memory_bound_share', 0):.0%}"))
    return rows


def device_rows(devices: Sequence[Device] = DEVICES) -> list[tuple]:
    """Rows under DEVICE_COLUMNS (each row's source is ``Device.source``)."""
    return [(d.name, d.cpu, d.cores, f"{d.fp32_gflops:g}", f"{d.int8_gops:g}",
             "-" if d.fp16_gflops is None else f"{d.fp16_gflops:g}", f"{d.bandwidth_gbs:g}", f"{d.ram_gb:g}")
            for d in devices]
