"""Profile records on disk: CSV (one flat row per record), JSON Lines (appended, one record per
line; `albert-edge report` reads it) and reading either back. Every write is atomic."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Any

from ..errors import AlbertEdgeError
from ..files import atomic_write, check_new_file, check_not_input
from .record import records_problem

__all__ = ["flat", "write_csv", "append_jsonl", "load_records", "check_outputs", "CSV_COLUMNS"]

_LATENCY = ("count", "mean", "std", "min", "p50", "p90", "p95", "p99", "max", "block_spread")
_MEMORY = ("before_load_rss", "peak_before_load", "after_load_rss", "peak_after_load", "after_first_call_rss",
           "peak_after_first_call", "after_timed_rss", "peak_after_timed")
_TOP = ("file", "file_name", "sha256", "format", "scheme", "runtime", "runtime_version", "provider", "threads",
        "batch", "seq_len", "input_mode", "load_ms", "first_call_ms")
_DEVICE = ("cpu_model", "cpu_cores", "machine", "board", "os")
CSV_COLUMNS = (*_TOP, *(f"latency_{k}_ms" if k not in ("count", "block_spread") else f"latency_{k}" for k in _LATENCY),
               *(f"memory_{k}" for k in _MEMORY), *(f"device_{k}" for k in _DEVICE),
               "estimated", "host", "warnings", "created")


def flat(record: dict[str, Any]) -> dict[str, Any]:
    """One record as one CSV row (the columns of CSV_COLUMNS)."""
    row = {k: record.get(k) for k in _TOP}
    latency = record.get("latency") or {}
    for k in _LATENCY:
        row[f"latency_{k}_ms" if k not in ("count", "block_spread") else f"latency_{k}"] = latency.get(k)
    memory = record.get("memory") or {}
    row.update({f"memory_{k}": memory.get(k) for k in _MEMORY})
    dev = record.get("device") or {}
    row.update({f"device_{k}": dev.get(k) for k in _DEVICE})
    row.update(estimated=record.get("estimated", False), host=record.get("host"),
               warnings="; ".join(record.get("warnings") or []), created=record.get("created"))
    return row


def write_csv(records: list[dict[str, Any]], path: str | os.PathLike, force: bool = False) -> Path:
    path = check_new_file(path, force=force, option="--csv")
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(CSV_COLUMNS), lineterminator="\n")
    writer.writeheader()
    writer.writerows(flat(r) for r in records)
    return atomic_write(path, buf.getvalue())


def append_jsonl(records: list[dict[str, Any]], path: str | os.PathLike) -> Path:
    """Add one line per record to ``path`` (created when missing); the file is replaced whole,
    so a reader never sees half a line."""
    path = Path(path)
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    if old and not old.endswith("\n"):
        old += "\n"
    return atomic_write(path, old + "".join(json.dumps(r) + "\n" for r in records))


def load_records(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Records from a `--json` file (a JSON list, or one record) or a JSON Lines file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AlbertEdgeError(f"{path}: cannot read it as profile results: {exc}") from None
    try:
        data = json.loads(text)
        records = data if isinstance(data, list) else [data]
    except json.JSONDecodeError:
        try:
            records = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise AlbertEdgeError(f"{path}: not profile results (neither JSON nor JSON Lines): {exc}") from None
    if not records or not all(isinstance(r, dict) and "file_name" in r and "latency" in r for r in records):
        raise AlbertEdgeError(f"{path}: not profile results (expected records of `albert-edge profile --json`)")
    problem = records_problem(records)
    if problem:
        raise AlbertEdgeError(f"{path}: {problem}: not profile results as `albert-edge profile --json` writes them")
    return records


def check_outputs(csv_path: Path | None, append_path: Path | None, calibration: Path | None, force: bool,
                  inputs: list) -> None:
    """Refuse outputs that cannot be written before anything is measured: one that is an input
    (a model file, the baseline, --force or not), a --csv that exists (without --force) or lies
    under a file, an --append file that holds something other than profile records (appending to
    it would bury them in a file nothing reads), a --calibration file that is not one."""
    from .calibration import check_calibration

    for path, option in ((csv_path, "--csv"), (append_path, "--append"), (calibration, "--calibration")):
        if path:
            check_new_file(path, force=True, option=option)  # a directory or a path under a file first
            check_not_input(path, inputs, option=option)
    if calibration:
        check_calibration(calibration)
    if csv_path:
        check_new_file(csv_path, force=force, option="--csv")
    if append_path:
        check_new_file(append_path, force=True, option="--append")
        if append_path.exists() and append_path.stat().st_size:
            load_records(append_path)
