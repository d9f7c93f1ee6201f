"""How fast this machine runs model files compared with their roofline: the host calibration that
turns a device's roofline into a latency estimate (:mod:`.estimate`).

One figure per file and length would carry every disturbance of that one measurement into the
estimate. Instead each measurement becomes an *observation* - the efficiency ``host roofline /
robust host time`` of one file at one length, where the robust time is the median of the
fastest block of calls (noise only ever slows a block down) - and observations are kept per
*class*: runtime and version, provider or delegate, threads, batch and the precision that does
most of the work. An estimate uses the class's fit, efficiency against the call's work
(log-linear in MACs), over the observations of the best quality the class holds (and the next,
where the best alone is a single one): a quiet ("good") measurement always outranks a noisy one,
and of two of the same quality for the same file and length the faster is kept. The fit's leave-one-out error is the stated error of each
estimate made with it.

The calibration can be kept in a JSON file (``--calibration``, by default
``$XDG_CACHE_HOME/albert-edge/host-calibration.json``) per host, so that a measurement on a busy
machine is estimated with what a quiet one measured. Device side: numpy and the standard library.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import AlbertEdgeError
from ..files import atomic_write, cache_root

__all__ = ["Calibration", "Fit", "check_calibration", "default_path", "host_key", "SCHEMA"]

log = logging.getLogger(__name__)

SCHEMA = "albert-edge.calibration/1"
_RANK = {"good": 0, "noisy": 1, "unusable": 2, None: 1}  # older records (no verdict) count as noisy


def default_path() -> Path:
    return cache_root() / "host-calibration.json"


def check_calibration(path: Path) -> None:
    """Refuse ``path`` as a calibration to add to when it exists and holds something else:
    saving would replace that file."""
    if not path.exists():
        return
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        kept = None
    if not isinstance(kept, dict) or kept.get("schema") != SCHEMA:
        raise AlbertEdgeError(f"--calibration {path} is not an albert-edge host calibration (schema {SCHEMA!r}): "
                              "saving would replace it; give a new file or delete this one")


def host_key(description: dict[str, Any]) -> str:
    """The machine a calibration belongs to: its CPU, core count and architecture."""
    return f"{description.get('cpu_model')} x{description.get('cpu_cores')} {description.get('machine')}"


@dataclass(frozen=True)
class Fit:
    """The efficiency a class predicts for a call of ``macs``, and how far it can be trusted."""

    efficiency: float
    error: float | None  # largest leave-one-out relative error of the predicted time; None below 2 observations
    observations: int
    quality: str  # the worst of the observations used: "good" | "noisy" | "unusable"
    files: int
    lengths: list[int] = field(default_factory=list)


class Calibration:
    """Observations per host and class, read from and written to ``path`` (None: in memory only)."""

    def __init__(self, path: Path | None = None, host: str = "", data: dict[str, Any] | None = None):
        self.path, self.host = path, host
        self.classes: dict[str, list[dict[str, Any]]] = (data or {}).get(host, {}).get("classes", {})
        self.device: dict[str, Any] | None = (data or {}).get(host, {}).get("device")
        self._data = data or {}

    @classmethod
    def load(cls, path: Path | None, host: str, fresh: bool = False) -> Calibration:
        """The calibration kept in ``path`` for ``host`` (``fresh``: forget this host's)."""
        data: dict[str, Any] = {}
        if path is not None and path.is_file():
            try:
                loaded = json.loads(path.read_text(encoding="utf-8"))
                data = loaded.get("hosts", {}) if loaded.get("schema") == SCHEMA else {}
            except (OSError, ValueError, AttributeError) as exc:
                log.warning("%s is not a host calibration (%s): starting a new one", path, exc)
        if fresh:
            data.pop(host, None)
        return cls(path, host, data)

    def host_row(self, make) -> dict[str, Any]:
        """The host's figures every observation of this calibration is taken against: those kept,
        else ``make()``'s (this machine's row, its bandwidth measured now), kept from then on, so
        that a copy slowed by other work later does not move the rooflines under the observations."""
        if not self.device:
            self.device = make()
        return self.device

    def observe(self, key: str, observation: dict[str, Any]) -> None:
        """Keep ``observation`` (sha256, seq_len, macs, efficiency, quality) unless the class holds a
        better one for the same file and length: of better quality, or as good and faster."""
        rows = self.classes.setdefault(key, [])
        same = [r for r in rows if (r["sha256"], r["seq_len"]) == (observation["sha256"], observation["seq_len"])]
        for old in same:
            if (_RANK[old["quality"]], -old["efficiency"]) <= (_RANK[observation["quality"]], -observation["efficiency"]):
                return
            rows.remove(old)
        rows.append({**observation, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})

    def fit(self, key: str, macs: int) -> Fit | None:
        """The class's prediction for a call of ``macs``; None when it holds no observation."""
        rows = self.classes.get(key) or []
        if not rows:
            return None
        # The best quality there is, and the next where that leaves a single observation to fit.
        ranks = sorted({_RANK[r["quality"]] for r in rows})
        best = next((rank for rank in ranks if sum(_RANK[r["quality"]] <= rank for r in rows) >= 2), ranks[-1])
        used = [r for r in rows if _RANK[r["quality"]] <= best]
        x = np.log([r["macs"] for r in used])
        y = np.log([r["efficiency"] for r in used])
        errors = []
        for i in range(len(used)):  # leave each out, predict it from the others
            keep = np.arange(len(used)) != i
            if keep.any():
                errors.append(abs(math.exp(y[i] - _predict(x[keep], y[keep], x[i])) - 1))
        return Fit(efficiency=math.exp(_predict(x, y, math.log(macs))), error=max(errors) if errors else None,
                   observations=len(used), quality=next(q for q, r in _RANK.items() if r == best and q),
                   files=len({r["sha256"] for r in used}), lengths=sorted({r["seq_len"] for r in used}))

    def save(self) -> None:
        if self.path is None:
            return
        self._data[self.host] = {"device": self.device, "classes": self.classes}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, json.dumps({"schema": SCHEMA, "hosts": self._data}, indent=1) + "\n")


def _predict(x: np.ndarray, y: np.ndarray, at: float) -> float:
    """log efficiency at log MACs ``at`` from a least-squares line through (x, y); the mean where
    the points do not spread in x (one length, or one file at one length)."""
    if len(x) < 2 or np.ptp(x) < 1e-9:
        return float(np.mean(y))
    slope, intercept = np.polyfit(x, y, 1)
    # Outside the observed range the line is held at its ends: no extrapolation of a trend.
    return float(slope * min(max(at, x.min()), x.max()) + intercept)
