"""Figures of devices we may not have at hand, for roofline estimates (`albert-edge profile
--estimate`). Standard library only (device side).

Every row is the CPU complex the profiler's runtimes use (onnxruntime's CPU provider, TFLite with
XNNPACK); GPUs and NPUs are not modelled. Peak figures are theoretical: cores x clock x the
vector width the cores retire per cycle. Real kernels reach a fraction of that, which is why an
estimate is scaled by the efficiency measured on the host for the same file. Throughputs count
two operations per multiply-accumulate (MAC), for fp32 and int8 alike.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from typing import Any

from . import read_text
from ..errors import AlbertEdgeError

__all__ = ["Device", "DEVICES", "UnknownDevice", "device", "parse_devices", "host_device"]

GB = 1e9


class UnknownDevice(AlbertEdgeError):
    """A device name that is not in the table."""


@dataclass(frozen=True)
class Device:
    """One device: its name, CPU, and the figures a roofline needs. ``fp16_gflops`` is None when
    the cores have no fp16 arithmetic (fp16 work then runs at the fp32 rate)."""

    name: str
    title: str
    cpu: str
    cores: int
    fp32_gflops: float  # peak, all cores, 2 ops per FMA
    int8_gops: float  # peak, all cores, 2 ops per int8 MAC
    fp16_gflops: float | None
    bandwidth_gbs: float  # DRAM bandwidth, GB/s (1e9 bytes)
    ram_gb: float
    source: str  # where the figures come from, in one line
    board: str | None = None  # how the board names itself (device tree), to recognise it as the host

    def peak(self, precision: str, threads: int | None = None) -> float:
        """Operations per second at ``precision`` ("fp32" | "fp16" | "int8") on ``threads`` cores
        (all cores when None)."""
        per_precision = {"fp32": self.fp32_gflops, "fp16": self.fp16_gflops or self.fp32_gflops,
                         "int8": self.int8_gops}
        used = self.cores if threads is None else max(1, min(int(threads), self.cores))
        return per_precision.get(precision, self.fp32_gflops) * GB * used / self.cores

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


# Per-core operations per cycle, from the cores' NEON/SVE pipelines (Arm Software Optimization
# Guides for each core): A53 and A57 retire one 128-bit fp32 FMA per cycle (8 flop/cycle), A72,
# A76, A78 two (16 flop/cycle), X1 four (32). Cores without the Armv8.2 dot-product instructions
# (A53, A57, A72) multiply int8 through 16-bit widening MLAs (SMLAL: 8 MACs per 128-bit op);
# A76/A78 have SDOT (16 int8 MACs per 128-bit op) on two pipes, X1 on four.
DEVICES: tuple[Device, ...] = (
    Device(
        name="pi3b", title="Raspberry Pi 3 Model B", cpu="4x Cortex-A53 @ 1.2 GHz (BCM2837)", cores=4,
        # derived: 4 cores x 1.2 GHz x 8 flop/cycle = 38.4
        fp32_gflops=38.4,
        # derived: 4 x 1.2 GHz x 8 MAC/cycle (SMLAL, no dot product) x 2 = 76.8
        int8_gops=76.8,
        fp16_gflops=None,  # Armv8.0: no fp16 arithmetic
        # derived: LPDDR2 at 900 MT/s x 32-bit bus = 3.6 GB/s (raspberrypi.com product brief)
        bandwidth_gbs=3.6,
        ram_gb=1.0,  # raspberrypi.com product brief
        source="Raspberry Pi 3B product brief (SoC, clock, RAM); peaks derived from Cortex-A53 pipelines",
        board="Raspberry Pi 3 Model B",
    ),
    Device(
        name="pi4", title="Raspberry Pi 4 Model B", cpu="4x Cortex-A72 @ 1.8 GHz (BCM2711)", cores=4,
        # derived: 4 cores x 1.8 GHz (boards since 2020 and the 8 GB model; early ones 1.5) x 16 = 115.2
        fp32_gflops=115.2,
        # derived: 4 x 1.8 GHz x 16 MAC/cycle (two SMLAL pipes, no dot product) x 2 = 230.4
        int8_gops=230.4,
        fp16_gflops=None,  # Armv8.0: no fp16 arithmetic
        # derived: LPDDR4-3200 x 32-bit bus = 12.8 GB/s (raspberrypi.com product brief)
        bandwidth_gbs=12.8,
        ram_gb=4.0,  # the common model; 1, 2, 4 and 8 GB exist
        source="Raspberry Pi 4B product brief (SoC, clock, LPDDR4-3200, RAM); peaks derived from Cortex-A72 pipelines",
        board="Raspberry Pi 4 Model B",
    ),
    Device(
        name="pi5", title="Raspberry Pi 5", cpu="4x Cortex-A76 @ 2.4 GHz (BCM2712)", cores=4,
        # derived: 4 cores x 2.4 GHz x 16 flop/cycle = 153.6
        fp32_gflops=153.6,
        # derived: 4 x 2.4 GHz x 32 MAC/cycle (two SDOT pipes) x 2 = 614.4
        int8_gops=614.4,
        # derived: Armv8.2 fp16 arithmetic, 8 lanes per 128-bit FMA: 2 x fp32
        fp16_gflops=307.2,
        # derived: LPDDR4X-4267 x 32-bit bus = 17.1 GB/s (raspberrypi.com product brief)
        bandwidth_gbs=17.1,
        ram_gb=8.0,  # 2, 4, 8 and 16 GB exist
        source="Raspberry Pi 5 product brief (SoC, clock, LPDDR4X-4267, RAM); peaks derived from Cortex-A76 pipelines",
        board="Raspberry Pi 5",
    ),
    Device(
        name="jetson-nano", title="NVIDIA Jetson Nano (4 GB)", cpu="4x Cortex-A57 @ 1.43 GHz", cores=4,
        # derived: 4 cores x 1.43 GHz x 8 flop/cycle = 45.8
        fp32_gflops=45.8,
        # derived: 4 x 1.43 GHz x 8 MAC/cycle (SMLAL, no dot product) x 2 = 91.5
        int8_gops=91.5,
        fp16_gflops=None,  # Armv8.0: no fp16 arithmetic on the CPU
        # NVIDIA Jetson Nano module data sheet: 64-bit LPDDR4, 25.6 GB/s
        bandwidth_gbs=25.6,
        ram_gb=4.0,  # data sheet
        source="NVIDIA Jetson Nano data sheet (CPU, clock, memory); peaks derived from Cortex-A57 pipelines",
        board="NVIDIA Jetson Nano",
    ),
    Device(
        name="jetson-orin-nano", title="NVIDIA Jetson Orin Nano (8 GB)", cpu="6x Cortex-A78AE @ 1.5 GHz",
        cores=6,
        # derived: 6 cores x 1.5 GHz x 16 flop/cycle = 144 (1.7 GHz in the "Super" power mode)
        fp32_gflops=144.0,
        # derived: 6 x 1.5 GHz x 32 MAC/cycle (two SDOT pipes) x 2 = 576
        int8_gops=576.0,
        fp16_gflops=288.0,  # derived: 2 x fp32 (Armv8.2 fp16 arithmetic)
        # NVIDIA Jetson Orin Nano series data sheet: 128-bit LPDDR5, 68 GB/s (102 GB/s "Super")
        bandwidth_gbs=68.0,
        ram_gb=8.0,  # data sheet
        source="NVIDIA Jetson Orin Nano data sheet (CPU, clock, LPDDR5 68 GB/s); peaks derived from Cortex-A78AE pipelines",
        board="NVIDIA Jetson Orin Nano",
    ),
    Device(
        name="phone-sd888", title="Snapdragon 888 phone (big cores)", cpu="1x Cortex-X1 @ 2.84 GHz + 3x Cortex-A78 @ 2.42 GHz",
        cores=4,  # the four big cores; the four Cortex-A55 are left out (inference threads run on big cores)
        # derived: X1 2.84 GHz x 32 flop/cycle = 90.9 + 3 x A78 2.42 GHz x 16 = 116.2 -> 207.1
        fp32_gflops=207.1,
        # derived: X1 2.84 GHz x 64 MAC/cycle x 2 = 363.5 + 3 x A78 2.42 GHz x 32 x 2 = 464.6 -> 828.1
        int8_gops=828.1,
        fp16_gflops=414.2,  # derived: 2 x fp32 (Armv8.2 fp16 arithmetic)
        # Qualcomm Snapdragon 888 product brief: LPDDR5 at 3200 MHz, 4x16-bit = 51.2 GB/s
        bandwidth_gbs=51.2,
        ram_gb=8.0,  # typical phone with this SoC (6-16 GB)
        source="Qualcomm Snapdragon 888 product brief (cores, clocks, LPDDR5-6400); peaks derived from Cortex-X1/A78 pipelines",
    ),
)


def device(name: str) -> Device:
    for row in DEVICES:
        if row.name == name:
            return row
    raise UnknownDevice(f"unknown device {name!r}; known devices: {', '.join(d.name for d in DEVICES)}")


def parse_devices(spec: str) -> list[Device]:
    """'pi4,pi5' -> their rows; 'all' -> every row. UnknownDevice names the known ones."""
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if names == ["all"]:
        return list(DEVICES)
    if not names:
        raise UnknownDevice(f"no device named; known devices: {', '.join(d.name for d in DEVICES)}")
    return [device(n) for n in dict.fromkeys(names)]


# --- the machine we run on ----------------------------------------------------------------------

# fp32 flop / int8 op / fp16 flop per cycle per core for the widest vector extension the CPU
# reports (/proc/cpuinfo "flags" on x86, "Features" on Arm), first match wins. x86 figures assume
# two FMA ports (Intel optimization manual, Skylake-SP and later; AMD Zen 2+); int8 on AVX2
# through VPMADDUBSW, on AVX-512 VNNI through VPDPBUSD.
_ISA: tuple[tuple[str, float, float, float | None], ...] = (
    ("avx512_vnni", 64, 256, None),
    ("avx512f", 64, 128, None),
    ("avx2", 32, 64, None),
    ("asimddp", 16, 64, 32),  # Armv8.2 with dot product (A76, A78, X1, ...)
    ("asimdhp", 16, 32, 32),
    ("asimd", 16, 32, None),  # Armv8.0 (A72; A53 and A57 reach half of it)
    ("sse2", 8, 16, None),
)


def _cpu_flags(cpuinfo: str) -> set[str]:
    match = re.search(r"^(?:flags|Features)\s*:\s*(.*)$", cpuinfo, re.MULTILINE)
    return set(match.group(1).split()) if match else set()


def _max_freq_ghz(cpuinfo: str) -> float | None:
    khz = (read_text("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq") or "").strip()
    if khz.isdigit():
        return int(khz) / 1e6
    mhz = [float(m) for m in re.findall(r"^cpu MHz\s*:\s*([\d.]+)", cpuinfo, re.MULTILINE)]
    return max(mhz) / 1e3 if mhz else None


def memory_bandwidth_gbs(size: int = 256 << 20, repeats: int = 5) -> float:
    """This machine's copy bandwidth in GB/s (read + write), the best of ``repeats`` one-thread
    copies of ``size`` bytes: what a memory-bound operator can stream here. 256 MiB is past the
    last-level cache of current CPUs: smaller copies can stay in a large cache and read several
    times faster than memory."""
    import numpy as np

    src = np.ones(size // 8, dtype=np.float64)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return 2 * size / best / GB


def host_device(description: dict[str, Any] | None = None) -> Device:
    """A row for the machine we run on: a table row when the board names one (a Pi measuring
    itself), else peaks from its cores x clock x the vector extension it reports, and the copy
    bandwidth measured now."""
    from . import describe

    info = description or describe()
    board = (info.get("board") or "").lower()
    for row in DEVICES:
        if row.board and row.board.lower() in board:
            return row
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (info.get("cpu_cores") or 1)
    cpuinfo = read_text("/proc/cpuinfo") or ""
    ghz = _max_freq_ghz(cpuinfo) or 2.0
    flags = _cpu_flags(cpuinfo)
    isa, fp32, int8, fp16 = next((row for row in _ISA if row[0] in flags), ("unknown", 8, 16, None))
    return Device(
        name="host", title="this machine", cpu=f"{cores}x {info.get('cpu_model') or 'unknown CPU'} @ {ghz:.2f} GHz",
        cores=cores, fp32_gflops=cores * ghz * fp32, int8_gops=cores * ghz * int8,
        fp16_gflops=cores * ghz * fp16 if fp16 else None,
        bandwidth_gbs=round(memory_bandwidth_gbs(min(256 << 20, (info.get("ram_bytes") or 2**31) // 8)), 2),
        ram_gb=round((info.get("ram_bytes") or 0) / 2**30, 1),
        source=f"derived: {cores} cores x {ghz:.2f} GHz x per-cycle peak of {isa}; bandwidth measured (numpy copy)",
    )
