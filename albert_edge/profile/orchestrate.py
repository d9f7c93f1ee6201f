"""The whole of a profile run as one function, :func:`run`: check the outputs, measure here (or on
the ``--remote`` hosts), add the estimates, write the CSV and JSON Lines files, compare with the
baseline. It returns a :class:`ProfileResult`; showing it is the caller's business (the command
line prints tables or JSON). Device side."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .compare import Comparison
from .options import EstimateOptions, ProfileOptions, RemoteOptions
from .record import ProfileRecord
from .settings import ProfileSettings
from .ssh import RemoteError

__all__ = ["ProfileResult", "run"]

Progress = Callable[[str], None]


@dataclass
class ProfileResult:
    """The records of a run (measured here or remotely, then the estimates) and, one for each,
    its comparison with the baseline (None without a match, or without a baseline).
    ``remote_error`` names the ``--remote`` hosts that failed; the others' records are here."""

    records: list[ProfileRecord]
    comparisons: list[Comparison | None]
    remote_error: RemoteError | None = None

    @property
    def regression(self) -> bool:
        """Whether a record is a regression against the baseline (slower, or more peak memory)."""
        return any(c is not None and c.regression for c in self.comparisons)

    def to_dicts(self) -> list[dict[str, Any]]:
        """The records as `profile --json` prints them: each with its ``baseline_comparison``
        where it has one."""
        out = []
        for record, comparison in zip(self.records, self.comparisons, strict=True):
            data = record.to_dict()
            if comparison is not None:
                data["baseline_comparison"] = comparison.to_dict()
            out.append(data)
        return out


def run(files: Sequence[str | os.PathLike], options: ProfileOptions | None = None,
        progress: Progress | None = None) -> ProfileResult:
    """Profile ``files`` as `albert-edge profile` does with ``options``. Bad input (a setting, an
    output that cannot be written, a baseline that is not profile records) fails before anything
    is measured. ``progress`` is called with a short line as the work goes on, each starting with
    its phase ('profiling', 'remote', 'estimating')."""
    from .output import append_jsonl, check_outputs, load_records, write_csv
    from .runner import run_all

    options = options or ProfileOptions()
    settings, out, baseline = options.settings, options.output, options.baseline
    if settings.accelerator == "gpu" and options.estimates.devices:
        from .settings import ProfileError

        raise ProfileError("--accelerator gpu: --estimate scales CPU rooflines by this machine's CPU efficiency: "
                           "estimate from a CPU profile")
    files = [Path(f) for f in files]
    csv_path, append_path, calibration = (Path(p) if p else None for p in (out.csv, out.append,
                                                                           options.estimates.calibration))
    old = load_records(baseline.path) if baseline.path else None
    check_outputs(csv_path, append_path, calibration, out.force,
                  [*files, baseline.path, settings.tokenizer, settings.text])
    hosts = options.remote.hosts
    local = [] if hosts else run_all(files, settings, _phase(progress, "profiling"))
    records: list[ProfileRecord] = list(local)
    # remote and estimate records join here
    remote_error = None
    if hosts:
        got, remote_error = _remote(files, settings, options.remote, _phase(progress, "remote"))
        records += got
    if options.estimates.devices:
        records += _estimates(files, settings, options.estimates, local, _phase(progress, "estimating"))
    dicts = [r.to_dict() for r in records]
    if csv_path:
        write_csv(dicts, csv_path, force=out.force)
    if append_path:
        append_jsonl(dicts, append_path)
    comparisons = [_compare(d, old, baseline.threshold) if old is not None else None for d in dicts]
    return ProfileResult(records, comparisons, remote_error)


def _phase(progress: Progress | None, what: str) -> Progress | None:
    return (lambda line: progress(f"{what} {line}")) if progress else None


def _remote(files: list[Path], settings: ProfileSettings, remote: RemoteOptions,
            progress: Progress | None) -> tuple[list[ProfileRecord], RemoteError | None]:
    """Records from the hosts, and the error naming the hosts that failed (or None)."""
    from .remote import profile_remote

    try:
        return profile_remote(remote.hosts, files, settings, ssh_config=remote.ssh_config,
                              remote_dir=remote.remote_dir, python=remote.python, progress=progress), None
    except RemoteError as exc:
        return exc.records, exc


def _estimates(files: list[Path], settings: ProfileSettings, estimates: EstimateOptions,
               measured: list[ProfileRecord], progress: Progress | None) -> list[ProfileRecord]:
    from .. import device
    from .calibration import Calibration, default_path, host_key
    from .estimate import estimate

    path = Path(estimates.calibration) if estimates.calibration else default_path()
    calibration = Calibration.load(path, host_key(device.describe()), fresh=estimates.recalibrate)
    return estimate(files, estimates.devices, settings.seq_lens, settings.batches, measured,
                    threads=settings.threads, calibration=calibration, progress=progress)


def _compare(record: dict[str, Any], old: list[dict[str, Any]], threshold: float) -> Comparison | None:
    """The record's comparison with its match in ``old``, or None."""
    from .compare import compare

    found = compare([record], old, threshold)
    return found[0] if found else None
