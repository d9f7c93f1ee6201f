"""albert_edge.device: the machine description, read from /proc and /sys, tolerant of what a
board lacks."""

from __future__ import annotations

import json
import mmap
import os

import pytest

from albert_edge import device

KEYS = {"cpu_model", "cpu_cores", "machine", "ram_bytes", "os", "python", "board", "jetson_power_mode",
        "throttled", "governor", "cpu_freq_khz", "temperatures"}


def test_describe_this_machine():
    info = device.describe()
    assert set(info) == KEYS
    json.dumps(info)  # JSON-able as it is
    assert info["cpu_cores"] == os.cpu_count() and info["ram_bytes"] > 2**20
    assert info["python"].count(".") == 2 and info["os"]


def test_process_memory_grows_with_an_allocation():
    before = device.process_memory()
    assert before["peak_rss"] >= before["rss"] > 0
    # A fresh anonymous mapping: its pages become resident only when touched (a bytearray could
    # reuse heap pages a long test run has already made resident).
    block = mmap.mmap(-1, 64 * 2**20)
    for offset in range(0, len(block), mmap.PAGESIZE):
        block[offset] = 1
    after = device.process_memory()
    block.close()
    assert after["rss"] - before["rss"] > 48 * 2**20 and after["peak_rss"] >= after["rss"]
    assert device.process_memory(os.getpid())["rss"] > 0
    assert device.process_memory(2**22 + 12345) == {"rss": None, "peak_rss": None}  # no such process


def test_board_from_the_device_tree(tmp_path, monkeypatch):
    model = tmp_path / "model"
    model.write_bytes(b"Raspberry Pi 4 Model B Rev 1.4\x00")
    monkeypatch.setattr(device, "_MODEL_FILES", (str(tmp_path / "missing"), str(model)))
    assert device.board() == "Raspberry Pi 4 Model B Rev 1.4"
    monkeypatch.setattr(device, "_MODEL_FILES", (str(tmp_path / "missing"),))
    assert device.board() is None


def test_sys_readers_tolerate_missing_and_read_present(tmp_path, monkeypatch):
    monkeypatch.setattr(device, "_CPUFREQ", tmp_path / "cpufreq")
    monkeypatch.setattr(device, "_THERMAL", tmp_path / "thermal")
    assert device.governor() is None and device.cpu_freq_khz() is None and device.temperatures() is None
    for policy, gov in (("policy0", "ondemand"), ("policy4", "ondemand")):
        (tmp_path / "cpufreq" / policy).mkdir(parents=True)
        (tmp_path / "cpufreq" / policy / "scaling_governor").write_text(gov + "\n")
        (tmp_path / "cpufreq" / policy / "scaling_cur_freq").write_text("1800000\n")
    zone = tmp_path / "thermal" / "thermal_zone0"
    zone.mkdir(parents=True)
    (zone / "type").write_text("cpu-thermal\n")
    (zone / "temp").write_text("48312\n")
    assert device.governor() == ["ondemand"]
    assert device.cpu_freq_khz() == {"policy0": 1800000, "policy4": 1800000}
    assert device.temperatures() == {"cpu-thermal": pytest.approx(48.312)}


def test_jetson_power_mode_from_the_config_file(tmp_path, monkeypatch):
    conf = tmp_path / "nvpmodel.conf"
    conf.write_text("< PM_CONFIG DEFAULT=2 >\n")
    monkeypatch.setattr(device, "_NVPMODEL_CONF", str(conf))
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvpmodel tool
    assert device.jetson_power_mode() == f"default mode 2 (from {conf})"


@pytest.mark.parametrize("text, flags", [
    ("throttled=0x0\n", []),
    ("throttled=0x50005\n", ["under-voltage detected", "currently throttled", "under-voltage has occurred",
                             "throttling has occurred"]),
    ("error\n", None),
])
def test_parse_throttled(text, flags):
    parsed = device.parse_throttled(text)
    assert (parsed is None) if flags is None else parsed["flags"] == flags


def test_throttle_warnings():
    quiet = {"throttled": {"raw": "0x0", "flags": []}, "temperatures": {"cpu": 50.0}, "governor": ["performance"]}
    assert device.throttle_warnings(quiet, quiet) == []
    hot = {"throttled": {"raw": "0x20002", "flags": ["arm frequency capped"]}, "temperatures": {"cpu": 71.5},
           "governor": ["ondemand"]}
    notes = device.throttle_warnings(quiet, hot)
    assert any("throttling: arm frequency capped" in n for n in notes)
    assert any("rose from 50.0 to 71.5" in n for n in notes)
    assert any(n.startswith("info:") and "ondemand" in n for n in notes)
    assert device.throttle_warnings({}, {}) == []


def _busy(seconds: float):
    """One process that keeps a core busy, stopping by itself."""
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-c", f"import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass"])


def test_activity_tells_other_work_from_our_own():
    from albert_edge.device import activity

    start = activity.snapshot()
    assert start is not None and len(start["cpu"]) == 8 and start["load"] is not None
    end = start["time"] + 0.5
    import time

    while time.monotonic() < end:  # our own work: one core
        pass
    ours = activity.activity(start, activity.snapshot())
    assert ours["own_cores"] > 0.3 and ours["busy_cores"] >= ours["own_cores"] - 0.05  # a shared machine: not 1.0
    busy = _busy(3)
    try:
        time.sleep(0.3)
        seen, waited = activity.wait_quiet(1.0, window=0.5)
    finally:
        busy.kill()
        busy.wait()
    # Another process kept a core busy the whole time: seen as other work, and waited for in vain.
    assert seen["other_cores"] > 0.7 and seen["own_cores"] < 0.1 and waited >= 1.0
    assert activity.competing(seen, threads=2)[0].startswith(f"machine busy: other work kept {seen['other_cores']:.2f}")
    assert activity.competing({**seen, "other_cores": 0.0, "steal_share": 0.0}) == []
    assert activity.competing({**seen, "other_cores": 0.0, "steal_share": 0.1})[0].startswith("cpu steal")
    assert activity.activity(None, start) is None
