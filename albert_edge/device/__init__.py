"""What machine are we on: CPU, board (Raspberry Pi / Jetson), memory, OS, governor, temperatures,
throttling, and the process's own resident memory. Standard library only (device side).

Every reader tolerates a missing or unreadable source and returns None, so the same code runs on a
Pi, a Jetson, a phone-class board, a laptop or a container. Boards differ only in which files and
tools they have: the sources are rows in tables below, not branches per device.

:mod:`.catalog` holds the devices we may not have at hand (Raspberry Pis, Jetsons, phone-class
cores) as rows of figures, for estimates, and recognises the host among them.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["describe", "process_memory", "throttle_warnings", "read_text", "THROTTLE_FLAGS"]

# Where a board names itself (device tree), in order of preference.
_MODEL_FILES = ("/proc/device-tree/model", "/sys/firmware/devicetree/base/model")
# Jetson power mode: the tool first, then its configuration file.
_NVPMODEL_CONF = "/etc/nvpmodel.conf"
_CPUFREQ = Path("/sys/devices/system/cpu/cpufreq")
_THERMAL = Path("/sys/class/thermal")

# Bits of `vcgencmd get_throttled` (Raspberry Pi firmware documentation, "get_throttled").
THROTTLE_FLAGS = {
    0: "under-voltage detected",
    1: "arm frequency capped",
    2: "currently throttled",
    3: "soft temperature limit active",
    16: "under-voltage has occurred",
    17: "arm frequency capping has occurred",
    18: "throttling has occurred",
    19: "soft temperature limit has occurred",
}
# A temperature rise (degrees C) during a measurement worth a warning.
TEMPERATURE_RISE_WARN = 10.0


def describe() -> dict[str, Any]:
    """The machine and its state right now, as a JSON-able dict. Keys are stable (the profile
    record, the report and the demo page read them); a value is None when it cannot be read."""
    return {
        "cpu_model": cpu_model(),
        "cpu_cores": os.cpu_count(),
        "machine": platform.machine() or None,
        "ram_bytes": ram_bytes(),
        "os": os_name(),
        "python": platform.python_version(),
        "board": board(),
        "jetson_power_mode": jetson_power_mode(),
        "throttled": throttled(),
        "governor": governor(),
        "cpu_freq_khz": cpu_freq_khz(),
        "temperatures": temperatures(),
    }


def process_memory(pid: int | str = "self") -> dict[str, int | None]:
    """Resident memory of a process from /proc/<pid>/status, in bytes: ``rss`` (VmRSS, now) and
    ``peak_rss`` (VmHWM, the high-water mark). None where /proc is not available."""
    fields = _status_fields(f"/proc/{pid}/status", ("VmRSS", "VmHWM"))
    return {"rss": fields.get("VmRSS"), "peak_rss": fields.get("VmHWM")}


def throttle_warnings(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Warnings about a measurement taken between two describe() snapshots: throttling flags set
    (Raspberry Pi firmware), a temperature rise, and (informational) a governor that is not
    'performance'."""
    notes: list[str] = []
    flags = [f for snap in (before, after) for f in ((snap or {}).get("throttled") or {}).get("flags", [])]
    if flags:
        notes.append("throttling: " + ", ".join(dict.fromkeys(flags)))
    t0, t1 = (before or {}).get("temperatures") or {}, (after or {}).get("temperatures") or {}
    for zone in t1:
        if zone in t0 and t1[zone] is not None and t0[zone] is not None \
                and t1[zone] - t0[zone] >= TEMPERATURE_RISE_WARN:
            notes.append(f"temperature of {zone} rose from {t0[zone]:.1f} to {t1[zone]:.1f} C")
    governors = (after or {}).get("governor") or []
    other = [g for g in governors if g != "performance"]
    if other:
        notes.append(f"info: cpu frequency governor is {', '.join(other)} (not 'performance')")
    return notes


# --- the readers -------------------------------------------------------------------------------

def read_text(path: str | os.PathLike) -> str | None:
    """A small system file's text (/proc, /sys, /etc), None when it cannot be read."""
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return None


def _status_fields(path: str, names: tuple[str, ...]) -> dict[str, int]:
    text = read_text(path) or ""
    found = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in names:
            parts = value.split()
            if parts and parts[0].isdigit():
                found[key] = int(parts[0]) * 1024  # "VmRSS:  1234 kB"
    return found


def _run(*argv: str) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def cpu_model() -> str | None:
    text = read_text("/proc/cpuinfo") or ""
    # x86 says "model name"; ARM kernels say "Hardware" / "Model" or only "CPU part".
    for key in ("model name", "Model", "Hardware", "cpu model", "Processor"):
        match = re.search(rf"^{key}\s*:\s*(.+)$", text, re.MULTILINE)
        if match:
            return match.group(1).strip()
    return platform.processor() or None


def ram_bytes() -> int | None:
    return _status_fields("/proc/meminfo", ("MemTotal",)).get("MemTotal")


def os_name() -> str | None:
    text = read_text("/etc/os-release") or ""
    match = re.search(r'^PRETTY_NAME="?([^"\n]*)"?$', text, re.MULTILINE)
    pretty = match.group(1) if match else platform.system()
    kernel = platform.release()
    return f"{pretty} (kernel {kernel})" if kernel else pretty or None


def board() -> str | None:
    """The board's model string from the device tree ("Raspberry Pi 4 Model B Rev 1.4",
    "NVIDIA Jetson Orin Nano Developer Kit"); None on machines without one."""
    for path in _MODEL_FILES:
        text = read_text(path)
        if text:
            return text.replace("\x00", "").strip() or None
    return None


def jetson_power_mode() -> str | None:
    out = _run("nvpmodel", "-q")
    if out:
        match = re.search(r"NV Power Mode:\s*(.+)", out)
        if match:
            return match.group(1).strip()
    conf = read_text(_NVPMODEL_CONF)
    if conf:
        match = re.search(r"<\s*PM_CONFIG\s+DEFAULT\s*=\s*(\d+)\s*>", conf)
        if match:
            return f"default mode {match.group(1)} (from {_NVPMODEL_CONF})"
    return None


def throttled() -> dict[str, Any] | None:
    out = _run("vcgencmd", "get_throttled")
    return parse_throttled(out) if out else None


def parse_throttled(text: str) -> dict[str, Any] | None:
    """'throttled=0x50005' -> {'raw': '0x50005', 'flags': [...]}."""
    match = re.search(r"throttled=(0x[0-9a-fA-F]+)", text)
    if not match:
        return None
    value = int(match.group(1), 16)
    return {"raw": match.group(1), "flags": [name for bit, name in THROTTLE_FLAGS.items() if value >> bit & 1]}


def _policies() -> list[Path]:
    try:
        return sorted(p for p in _CPUFREQ.iterdir() if p.name.startswith("policy"))
    except OSError:
        return []


def governor() -> list[str] | None:
    found = [(read_text(p / "scaling_governor") or "").strip() for p in _policies()]
    found = list(dict.fromkeys(g for g in found if g))
    return found or None


def cpu_freq_khz() -> dict[str, int] | None:
    freqs = {}
    for p in _policies():
        text = (read_text(p / "scaling_cur_freq") or "").strip()
        if text.isdigit():
            freqs[p.name] = int(text)
    return freqs or None


def temperatures() -> dict[str, float] | None:
    temps: dict[str, float] = {}
    try:
        zones = sorted(_THERMAL.glob("thermal_zone*"))
    except OSError:
        return None
    for zone in zones:
        kind = (read_text(zone / "type") or zone.name).strip()
        value = (read_text(zone / "temp") or "").strip()
        if value.lstrip("-").isdigit():
            name = kind if kind not in temps else f"{kind}:{zone.name}"
            temps[name] = int(value) / 1000.0  # millidegrees
    return temps or None
