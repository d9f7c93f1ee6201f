"""What a quantized file must prove before it is put in place: it loads and runs in its real
runtime, each weight of its fp32 parent is stored once (:mod:`.once`), no matrix product reads
a float weight it should not (:mod:`.complete`); and what ``albert-edge inspect`` can show.
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from albert_edge.formats.graph import GraphContents
from albert_edge.formats.weights import WeightsReport, analyze, read_file
from albert_edge.errors import RuntimeUnavailable
from albert_edge.runtime import Session

from albert_edge.formats.float_weights import UNEXPECTED, FloatWeight, float_weights
from albert_edge.formats.precision import describe
from albert_edge.formats.copies import MATCH, WeightCopies, same_values, tolerance, weight_copies

__all__ = ["FloatWeight", "WeightCopies", "QuantCheck", "float_weights", "weight_copies", "check_quantized",
           "describe", "same_values", "tolerance", "UNEXPECTED", "MATCH"]

log = logging.getLogger(__name__)


@dataclass
class QuantCheck:
    path: Path
    format: str
    backend: str
    contents: GraphContents
    weights: WeightsReport
    copies: list[WeightCopies]
    float_weights: list[FloatWeight]
    problems: list[str] = field(default_factory=list)
    accuracy: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def parity(self) -> dict[str, Any]:
        """What the manifest keeps as this file's parity: its accuracy against the fp32 parent."""
        return dict(self.accuracy, ok=self.ok, backend=self.backend)

    def summary(self) -> dict[str, Any]:
        return {
            "stored_bytes": self.weights.stored_bytes,
            "duplicates": [asdict(d) for d in self.weights.duplicates],
            "copies": {c.name: [n for n, _ in c.stored_as] for c in self.copies if len(c.stored_as) != 1},
            "weights_checked": len(self.copies),
            "float_weights": [asdict(w) for w in self.float_weights],
            "problems": list(self.problems),
        }


# -- the whole check ----------------------------------------------------------------------------

def check_quantized(path: str | os.PathLike, parent: str | os.PathLike, kept: dict[str, str],
                    sample: dict[str, np.ndarray], *, float16: bool = False,
                    num_threads: int | None = None) -> QuantCheck:
    """Load ``path`` in its real runtime and run ``sample`` through it, then prove each parent
    weight is stored once and no matrix product reads a float weight it should not (``kept``:
    the weights kept float on purpose, with why; ``float16``: the file is meant to be fp16)."""
    path, parent = Path(path), Path(parent)
    try:
        session = Session(path, num_threads=num_threads)
    except RuntimeUnavailable as exc:
        session, problems = None, [f"it does not load: {exc}"]
    else:
        problems = _runs(session, Session(parent, num_threads=num_threads), sample)
    contents = read_file(path)
    weights = analyze(contents)
    problems += weights.problems()
    copies = weight_copies(read_file(parent), path if contents.format == "tflite" else contents)
    for c in copies:
        if len(c.stored_as) > 1:
            problems.append(f"weight {c.name} {list(c.shape)} is stored {len(c.stored_as)} times: "
                            + ", ".join(f"{n} ({d})" for n, d in c.stored_as))
    floats = float_weights(path, kept, strict=True, float16=float16)
    problems += [f"{w.op} reads {w.name} {list(w.shape)} in {w.dtype}: {w.reason}" for w in floats if not w.expected]
    backend = session.backend_name if session is not None else "(did not load)"
    return QuantCheck(path, contents.format, backend, contents, weights, copies, floats, problems)


def _runs(session: Session, parent: Session, sample: dict[str, np.ndarray]) -> list[str]:
    """Problems running ``sample`` through ``session``: other outputs than the parent's, an
    error from the runtime, values that are not finite."""
    if sorted(session.output_names) != sorted(parent.output_names):
        return [f"outputs are {', '.join(session.output_names)}; the parent's are {', '.join(parent.output_names)}"]
    try:
        got = session.run(sample)
    except Exception as exc:  # the runtimes raise their own types; what matters is that it fails
        return [f"it does not run in {session.backend_name}: {str(exc).strip().splitlines()[0][:300]}"]
    return [f"output {name} is not finite on the sample batch" for name, value in got.items()
            if not np.all(np.isfinite(value))]
