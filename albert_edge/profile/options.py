"""What a profile run does besides measuring, one dataclass per concern, gathered in
:class:`ProfileOptions` with the :class:`~albert_edge.profile.settings.ProfileSettings` that say
what is measured (sweep, timing, inputs, engines). `albert-edge profile` shows these defaults as
its options' own. Device side."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..device.catalog import Device
from .compare import THRESHOLD
from .remote import DEFAULT_PYTHON, DEFAULT_REMOTE_DIR
from .settings import ProfileSettings

__all__ = ["OutputOptions", "BaselineOptions", "RemoteOptions", "EstimateOptions", "ProfileOptions"]

PathLike = str | os.PathLike


@dataclass(frozen=True)
class OutputOptions:
    """Files the records are also written to (``--csv``, ``--append``). Both are checked before
    anything is measured; ``force`` lets the CSV replace an existing file (never an input)."""

    csv: PathLike | None = None  # one row per record
    append: PathLike | None = None  # JSON Lines, added to (what `albert-edge report` reads)
    force: bool = False


@dataclass(frozen=True)
class BaselineOptions:
    """Earlier records to compare with (``--baseline``: a ``--json`` output or an ``--append``
    file): each new record with a match gets a Comparison; a change of the median within
    ``threshold`` (a share, 0.05 for 5 %) is 'no change'."""

    path: PathLike | None = None
    threshold: float = THRESHOLD


@dataclass(frozen=True)
class RemoteOptions:
    """Measure on these hosts over SSH instead of here (``--remote``), in parallel; ``python`` is
    the device's interpreter that has albert-edge, ``remote_dir`` its cache of copied files."""

    hosts: Sequence[str] = ()  # "user@host[:port]"; none: measure here
    ssh_config: PathLike | None = None  # ssh -F FILE
    remote_dir: str = DEFAULT_REMOTE_DIR
    python: str = DEFAULT_PYTHON


@dataclass(frozen=True)
class EstimateOptions:
    """Latency estimates for devices not at hand (``--estimate``): 'pi4,pi5', 'all', or rows of
    :data:`albert_edge.device.catalog.DEVICES`; none: no estimates. ``calibration`` is the host
    calibration file to use and add to (None: the default in the user's cache, see
    :func:`albert_edge.profile.calibration.default_path`), checked whenever it is given;
    ``recalibrate`` forgets this machine's calibration first."""

    devices: str | Sequence[str | Device] = ()
    calibration: PathLike | None = None
    recalibrate: bool = False


@dataclass(frozen=True)
class ProfileOptions:
    """Everything :func:`albert_edge.profile.run` does: ``settings`` say what is measured, the
    other groups what happens around it."""

    settings: ProfileSettings = field(default_factory=ProfileSettings)
    output: OutputOptions = field(default_factory=OutputOptions)
    baseline: BaselineOptions = field(default_factory=BaselineOptions)
    remote: RemoteOptions = field(default_factory=RemoteOptions)
    estimates: EstimateOptions = field(default_factory=EstimateOptions)
