"""Profile model files on the device: load time, first call, latency percentiles, memory by phase
and (optionally) per-operator cost, each file x setting measured in a fresh child process.

Device side: imports neither torch nor tensorflow. The parent (this package) plans the sweep,
starts one child (`python -m albert_edge.profile._child`) per file x setting, and collects one
:class:`~albert_edge.profile.record.ProfileRecord` from each.

:func:`run` is what `albert-edge profile` does, as a function: measure here or on ``--remote``
hosts, add estimates for devices not at hand, write CSV / JSON Lines, compare with a baseline::

    from pathlib import Path
    from albert_edge.profile import BaselineOptions, OutputOptions, ProfileOptions, ProfileSettings, run

    result = run([Path("model.onnx")], ProfileOptions(
        settings=ProfileSettings(seq_lens=(16, 64), threads=(1, 2)),
        output=OutputOptions(append="results.jsonl"),
        baseline=BaselineOptions(path="old.json")))
    for record, comparison in zip(result.records, result.comparisons):
        print(record.file_name, record.seq_len, record.latency.p90, comparison and comparison.verdict)

:func:`profile` only measures, here: ``profile([Path("model.onnx")], ProfileSettings(seq_lens=(16,)))``
returns the records. The modules:

- ``settings``: :class:`ProfileSettings` (what is measured: sweep, timing, inputs, engines) and
  the command line that asks another machine for the same;
- ``options``: :class:`ProfileOptions`, the settings with the output, baseline, remote and
  estimate options; ``orchestrate``: :func:`run` and :class:`ProfileResult`;
- ``job``: :class:`ProfileJob`, one child's whole input (a file x one setting, with the settings),
  and the fields of its record; ``runner``: the plan of jobs and the children; ``_child``: one
  measurement;
- ``inputs``, ``stats``: what a child feeds and how its call times become figures;
- ``ops``, ``tflite_ops``: the per-operator breakdown; ``record``: the record; ``output``: CSV,
  JSON Lines and the checks of those files; ``compare``: against a baseline;
- ``web``: ``--runtime node / chromium``, an .onnx / .ort timed through onnxruntime-node in Node and
  onnxruntime-web in headless Chromium (the scripts in the checkout's web/ or ``--web-dir``);
- ``remote``, ``ssh``: profiling over SSH; ``estimate``, ``opcount``, ``calibration``: estimates
  for devices not at hand.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from ..runtime import DELEGATES, PROVIDERS
from .job import ProfileJob
from .options import BaselineOptions, EstimateOptions, OutputOptions, ProfileOptions, RemoteOptions
from .orchestrate import ProfileResult, run
from .record import SCHEMA, Latency, Memory, ProfileRecord
from .settings import MLPERF, ProfileError, ProfileSettings, forward_args

__all__ = ["run", "ProfileOptions", "ProfileResult", "OutputOptions", "BaselineOptions", "RemoteOptions",
           "EstimateOptions", "ProfileSettings", "ProfileJob", "ProfileError", "profile", "forward_args", "MLPERF",
           "PROVIDERS", "DELEGATES", "ProfileRecord", "Latency", "Memory", "SCHEMA"]


def profile(files: Sequence[str | os.PathLike], settings: ProfileSettings,
            progress: Callable[[str], None] | None = None) -> list[ProfileRecord]:
    """Measure every file under every setting, each in a fresh child process; one record each.
    ``progress`` is called with a short line before each child starts."""
    from .runner import run_all

    return run_all([Path(f) for f in files], settings, progress)
