"""The CLI's tables fit the output and never cut a figure: `albert-edge profile ... | cat` is plain
text at most 100 columns wide (or COLUMNS) with every p50, p90 and peak-memory figure whole, long
file names shortened in the middle with their whole names in a legend, whole columns left out
(saying which) when that is not enough; in a pipe the progress is one line per step on stderr.
Real profile records of a tiny ONNX model."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from albert_edge.cli import _output, _profile_print
from albert_edge.cli._profile_print import print_measured

FAST = ["--threads", "1", "--runs", "5", "--min-seconds", "0", "--max-seconds", "0.3", "--warmup", "1"]
# A name as long as real ones ("model.int8-dynamic.onnx" and longer) makes the table wide.
NAME = "albert-tiny-classifier.int8-dynamic.onnx"


@pytest.fixture(scope="module")
def onnx_file(tmp_path_factory) -> Path:
    from albert_edge.config import AlbertConfig
    from albert_edge.converters.onnx import export

    from ..converters.conftest import tiny_model

    out = tmp_path_factory.mktemp("tables") / NAME
    export(tiny_model(AlbertConfig.preset("tiny")), out, seq_len=16)
    return out


@pytest.fixture(scope="module")
def piped_run(onnx_file, tmp_path_factory) -> tuple[str, str, list[dict]]:
    """What `albert-edge profile` prints into a pipe with no COLUMNS (stdout, stderr), and the
    records it measured."""
    records = tmp_path_factory.mktemp("records") / "records.jsonl"
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["ALBERT_EDGE_QUIET_FOR"] = "0"  # progress lines from the start (a log's first lines wait 20 s)
    proc = subprocess.run([sys.executable, "-m", "albert_edge", "profile", str(onnx_file), "--seq-len", "8,16",
                           *FAST, "--append", str(records)], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, proc.stderr, [json.loads(line) for line in records.read_text().splitlines()]


@pytest.fixture(scope="module")
def piped(piped_run) -> tuple[str, list[dict]]:
    return piped_run[0], piped_run[2]


def _ms(value: float) -> str:
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def figures(records: list[dict]) -> list[str]:
    """Every p50, p90 and peak-memory figure of ``records`` as the table writes it."""
    out = []
    for r in records:
        out += [_ms(r["latency"]["p50"]), _ms(r["latency"]["p90"]), f"{r['memory']['peak_after_timed'] / 2**20:.1f}"]
    return out


def assert_whole(text: str, records: list[dict]) -> None:
    for r in records:
        row = next((line for line in text.splitlines() if line.startswith(NAME[:6]) and _ms(r["latency"]["p50"])
                    in line), None)
        assert row is not None, f"no row with the p50 {_ms(r['latency']['p50'])} whole:\n{text}"
    for figure in figures(records):
        # whole: not part of a longer number on either side
        assert re.search(rf"(?<![\d.]){re.escape(figure)}(?![\d.])", text), f"{figure} not whole in:\n{text}"


def test_piped_table_is_plain_whole_and_100_columns(piped):
    text, records = piped
    assert len(records) == 2
    assert "\x1b[" not in text  # plain text, no terminal codes
    assert_whole(text, records)
    wide = [line for line in text.splitlines() if len(line) > 100]
    assert not wide, f"lines wider than 100 columns in a pipe without COLUMNS:\n" + "\n".join(wide)
    short = re.search(rf"^(\S*…\S*) = {re.escape(NAME)}$", text, re.M)
    assert short, f"the shortened name has no legend line with the whole name:\n{text}"
    assert all(line.startswith(short[1]) for line in text.splitlines() if _ms(records[0]["latency"]["p50"]) in line
               and "…" in line)


def test_piped_progress_is_a_line_per_step_with_elapsed_time(piped_run):
    _, err, _ = piped_run
    steps = re.findall(r"^\[profile (\d)/2 .*\] \d+:\d\d elapsed$", err, re.M)
    assert steps == ["1", "2"], err
    assert re.search(r"^\[profile done\] \d+:\d\d in all$", err, re.M), err


def test_piped_output_honours_columns(onnx_file, tmp_path):
    """COLUMNS=80 before a piped command makes its tables and lines 80 wide."""
    env = {**os.environ, "COLUMNS": "80"}
    proc = subprocess.run([sys.executable, "-m", "albert_edge", "profile", str(onnx_file), "--seq-len", "8", *FAST,
                           "--append", str(tmp_path / "r.jsonl")], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert_whole(proc.stdout, records)
    wide = [line for line in proc.stdout.splitlines() if len(line) > 80]
    assert not wide, "\n".join(wide)
    assert "columns left out to fit 80 columns" in proc.stdout


def _terminal(width: int) -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, width=width, force_terminal=True, color_system=None, markup=False), buffer


def _use(monkeypatch, console: Console) -> None:
    """Every table and line of the CLI printed on ``console``."""
    monkeypatch.setattr(_output, "console", console)
    monkeypatch.setattr(_profile_print, "console", console, raising=False)


@pytest.mark.parametrize("width", [100, 80])
def test_narrow_terminal_wraps_or_drops_never_digits(piped, monkeypatch, width):
    _, records = piped
    console, buffer = _terminal(width)
    _use(monkeypatch, console)
    print_measured(records, [], None)
    text = buffer.getvalue()
    assert all(len(line) <= width for line in text.splitlines())
    for figure in figures(records):
        assert re.search(rf"(?<![\d.]){re.escape(figure)}(?![\d.])", text), f"{figure} cut at {width}:\n{text}"


def test_narrow_terminal_names_the_columns_it_left_out(piped, monkeypatch):
    _, records = piped
    console, buffer = _terminal(60)
    _use(monkeypatch, console)
    print_measured(records, [], None)
    text = buffer.getvalue()
    for figure in figures(records):
        assert re.search(rf"(?<![\d.]){re.escape(figure)}(?![\d.])", text), f"{figure} cut at 60:\n{text}"
    left_out = re.search(r"columns left out to fit 60 columns: ([^(]*)", text, re.S)
    assert left_out, text
    assert {"p99", "first", "load"} <= {c.strip() for c in left_out.group(1).split(",")}


@pytest.mark.parametrize("terminal", [False, True])
def test_print_table_keeps_numbers_whole(monkeypatch, terminal):
    """print_table, which every other command prints through."""
    numbers = [f"{123456789.123 + i:.3f}" for i in range(12)]
    console, buffer = _terminal(100) if terminal else (Console(file=io.StringIO(), width=100, markup=False), None)
    buffer = buffer or console.file
    monkeypatch.setattr(_output, "console", console)
    _output.print_table("a wide table", [f"column {i}" for i in range(12)],
                        [numbers, ["some words that can wrap " * 2] + numbers[1:]], right=tuple(range(1, 12)))
    text = buffer.getvalue()
    left_out = re.search(r"columns left out to fit \d+ columns: ([^(]*)", text, re.S)
    gone = {c.strip() for c in left_out.group(1).split(",")} if left_out else set()
    for i, n in enumerate(numbers[1:], 1):
        assert n in text or f"column {i}" in gone, text  # whole, or its whole column named as left out
    assert len(gone) < 11  # what fits is shown
    assert all(len(line) <= console.width for line in text.splitlines())


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_real_100_column_terminal(onnx_file, tmp_path):
    """`albert-edge profile` in a real 100-column terminal (tmux)."""
    records, done = tmp_path / "records.jsonl", tmp_path / "done"
    session = f"tables-{os.getpid()}"
    command = (f"{sys.executable} -m albert_edge profile {onnx_file} --seq-len 8 {' '.join(FAST)} "
               f"--append {records}; touch {done}; sleep 60")
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "100", "-y", "60", command], check=True)
    try:
        end = time.time() + 240
        while not done.exists() and time.time() < end:
            time.sleep(0.5)
        assert done.exists(), "profile did not finish in the terminal"
        screen = subprocess.run(["tmux", "capture-pane", "-p", "-t", session, "-S", "-200"], capture_output=True,
                                text=True, check=True).stdout
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    found = [json.loads(line) for line in records.read_text().splitlines()]
    assert found
    assert all(len(line) <= 100 for line in screen.splitlines())
    for figure in figures(found):
        assert re.search(rf"(?<![\d.]){re.escape(figure)}(?![\d.])", screen), f"{figure} cut:\n{screen}"
