"""What else the machine is doing: CPU time of every process against our own, CPU steal, the run
queue and the load average, read from /proc. Standard library only (device side).

A measurement is trustworthy only when nothing else competes for the cores it uses. The kernel
counts, per CPU, the time spent busy, idle, waiting for I/O and stolen by a hypervisor
(``/proc/stat``); our own process counts its CPU time (``os.times``). Two readings around a
measurement give how many cores other work kept busy meanwhile::

    start = snapshot()
    ...  # the measurement, in this process
    during = activity(start, snapshot())
    during["other_cores"]  # 0.98: another job kept about one core busy

``snapshot`` of a machine without /proc (or where it cannot be read) is None, and so is every
figure made from it: the caller says "unknown", never "quiet".
"""

from __future__ import annotations

import os
import time
from typing import Any

from . import read_text

__all__ = ["snapshot", "activity", "competing", "wait_quiet", "OTHER_CORES_WARN", "STEAL_WARN"]

# Other work keeping a fifth of a core busy on average slows and spreads a measurement visibly.
OTHER_CORES_WARN = 0.2
# A hypervisor taking 2 % of the CPU time away (steal) does the same on a virtual machine.
STEAL_WARN = 0.02
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# /proc/stat "cpu" columns: user nice system idle iowait irq softirq steal (guest time is inside user).
_IDLE, _IOWAIT, _STEAL = 3, 4, 7


def snapshot() -> dict[str, Any] | None:
    """The machine's CPU counters and this process's CPU time, now; None without /proc/stat."""
    stat = read_text("/proc/stat")
    if not stat:
        return None
    cpu = running = None
    for line in stat.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            cpu = [int(v) for v in parts[1:9]]
        elif parts and parts[0] == "procs_running":
            running = int(parts[1])
    if cpu is None or len(cpu) < 8:
        return None
    own = os.times()
    return {"time": time.monotonic(), "cpu": cpu, "own": own.user + own.system, "procs_running": running,
            "load": _loadavg()}


def _loadavg() -> list[float] | None:
    parts = (read_text("/proc/loadavg") or "").split()
    try:
        return [float(v) for v in parts[:3]] if len(parts) >= 3 else None
    except ValueError:
        return None


def activity(start: dict[str, Any] | None, end: dict[str, Any] | None, cores: int | None = None) -> dict[str, Any] | None:
    """What the machine did between two snapshots taken in the same process: the cores kept busy
    by everything (``busy_cores``), by this process (``own_cores``) and by other work
    (``other_cores``), the share of time stolen by a hypervisor, the run queue and load average at
    the end. None when either snapshot is missing or no time passed."""
    if not start or not end:
        return None
    wall = end["time"] - start["time"]
    delta = [b - a for a, b in zip(start["cpu"], end["cpu"])]
    ticks = sum(delta)
    if wall <= 0 or ticks <= 0:
        return None
    cores = cores or os.cpu_count() or 1
    busy = (ticks - delta[_IDLE] - delta[_IOWAIT] - delta[_STEAL]) / _TICK / wall
    own = (end["own"] - start["own"]) / wall
    return {
        "seconds": round(wall, 3), "cores": cores,
        "busy_cores": round(busy, 3), "own_cores": round(own, 3),
        # Tick counting rounds: our own time can exceed the machine's by a tick; never below zero.
        "other_cores": round(max(0.0, busy - own), 3),
        "steal_share": round(delta[_STEAL] / ticks, 4),
        "iowait_share": round(delta[_IOWAIT] / ticks, 4),
        "procs_running": end.get("procs_running"), "load": end.get("load"),
    }


def competing(during: dict[str, Any] | None, threads: int | None = None) -> list[str]:
    """Warnings for a measurement that shared the machine: other work busy on the cores, CPU
    steal, more runnable threads than cores. Empty for a quiet machine or an unknown one."""
    if not during:
        return []
    notes = []
    other, cores = during["other_cores"], during["cores"]
    if other >= OTHER_CORES_WARN:
        oversubscribed = threads is not None and threads + other > cores
        notes.append(f"machine busy: other work kept {other:.2f} of {cores} cores busy while measuring"
                     + (f" (with our {threads} thread{'s' * (threads != 1)}, more than the cores there are)"
                        if oversubscribed else ""))
    if during["steal_share"] >= STEAL_WARN:
        notes.append(f"cpu steal: the hypervisor took {during['steal_share']:.1%} of the CPU time while measuring")
    return notes


def wait_quiet(seconds: float, window: float = 0.5, sleep=time.sleep) -> tuple[dict[str, Any] | None, float]:
    """Watch the machine in ``window``-second steps until other work keeps less than
    OTHER_CORES_WARN of a core busy, or ``seconds`` have passed; (the last window's activity,
    seconds waited). With ``seconds`` 0 it watches one window and returns it."""
    began = time.monotonic()
    while True:
        start = snapshot()
        sleep(window)
        seen = activity(start, snapshot())
        waited = time.monotonic() - began
        if seen is None or seen["other_cores"] < OTHER_CORES_WARN or waited >= seconds:
            return seen, waited
