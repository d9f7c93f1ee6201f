"""Profile model files on the device: load time, first call, latency percentiles, memory by phase
and (optionally) per-operator cost, each file x setting measured in a fresh child process.

Device side: imports neither torch nor tensorflow. The parent (this package) plans the sweep,
starts one child (`python -m albert_edge.profile._child`) per file x setting, and collects one
:class:`~albert_edge.profile.record.ProfileRecord` from each.

    from albert_edge.profile import ProfileSettings, profile
    records = profile([Path("model.onnx")], ProfileSettings(seq_lens=(16, 64), threads=(1, 2)))
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from ..runtime import DELEGATES, PROVIDERS
from .record import SCHEMA, Latency, Memory, ProfileRecord
from .settings import MLPERF, ProfileError, ProfileSettings, forward_args

__all__ = ["ProfileSettings", "ProfileError", "profile", "forward_args", "MLPERF", "PROVIDERS", "DELEGATES",
           "ProfileRecord", "Latency", "Memory", "SCHEMA"]


def profile(files: Sequence[str | os.PathLike], settings: ProfileSettings,
            progress: Callable[[str], None] | None = None) -> list[ProfileRecord]:
    """Measure every file under every setting, each in a fresh child process; one record each.
    ``progress`` is called with a short line before each child starts."""
    from .runner import run_all

    return run_all([Path(f) for f in files], settings, progress)
