"""An .onnx file whose graph onnxruntime has already optimized, so the device skips that step.

:func:`optimize_for_onnxruntime` runs onnxruntime's graph optimizers up to the extended level,
for the CPU execution provider, with the fusions albert_edge.runtime leaves out left out here
too, and writes the graph they leave with ``albert_edge.runtime.onnx_engine.OPTIMIZED_KEY`` in its
metadata. The extended level is the hardware-independent one (constant folding, eliminations,
and fusions into onnxruntime's own operators: DynamicQuantizeMatMul, MatMulIntegerToFloat,
FusedMatMul, Gelu); the layout level that follows depends on the CPU and is left to the device.
``albert_edge.runtime.Session`` opens a marked file with the optimizers off: it loads faster and
the process peaks a little lower, with identical outputs and latency (benchmarks/memory.py's
session route measures it; see albert_edge.runtime.onnx_engine). The file then runs in
onnxruntime only.

Before the file is put in place it must load, give the source file's outputs on a sample batch,
store no weight twice and no more weight bytes than the source.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import numpy as np

from albert_edge.formats.weights import BOUND_FACTOR, BOUND_SLACK, analyze, read_file
from albert_edge.errors import ConversionError, RuntimeUnavailable, first_line
from albert_edge.files import atomic_write, check_new_file
from albert_edge.runtime import Session
from albert_edge.runtime.onnx_engine import DISABLED_OPTIMIZERS, OPTIMIZED_KEY

__all__ = ["optimize_for_onnxruntime"]

log = logging.getLogger(__name__)

# Outputs of the optimized file against the source's on the sample batch: the same kernels run,
# so only the order of float sums may differ.
_RTOL, _ATOL = 1e-4, 1e-5


def optimize_for_onnxruntime(src: str | os.PathLike, dst: str | os.PathLike, *, force: bool = False,
                             seq_len: int = 16, num_threads: int | None = None) -> Path:
    """Write ``src`` (an .onnx file) with its graph optimized by onnxruntime to ``dst``; returns
    ``dst``. ``dst`` may be ``src`` itself with ``force``. ConversionError when onnxruntime
    cannot load ``src`` or the result fails a check; nothing is written then.

    The weights stay in the one file: albert_edge.runtime maps them from it (a separate .data
    file measured the same and is a second file to copy)."""
    import onnx
    import onnxruntime as ort

    src, dst = Path(src), Path(dst)
    if not src.is_file():
        raise ConversionError(f"{src}: no such file")
    if src.suffix.lower() != ".onnx" or dst.suffix.lower() != ".onnx":
        raise ConversionError(f"{src} -> {dst}: onnxruntime optimization reads and writes .onnx files")
    check_new_file(dst, force)
    with tempfile.TemporaryDirectory(prefix="albert-ort-opt-") as tmp:
        staged = Path(tmp) / dst.name
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        options.optimized_model_filepath = str(staged)
        options.log_severity_level = 3
        try:
            ort.InferenceSession(str(src), options, providers=["CPUExecutionProvider"],
                                 disabled_optimizers=DISABLED_OPTIMIZERS)
        except Exception as exc:  # onnxruntime raises its own exception types
            raise ConversionError(f"{src}: onnxruntime cannot load it: {first_line(exc)}") from None
        model = onnx.load(str(staged))
        kept = [p for p in model.metadata_props if p.key != OPTIMIZED_KEY]
        del model.metadata_props[:]
        model.metadata_props.extend(kept)
        model.metadata_props.add(key=OPTIMIZED_KEY, value=ort.__version__)
        data = model.SerializeToString()
        del model
        staged.write_bytes(data)
        problems = _problems(src, staged, seq_len, num_threads)
        if problems:
            raise ConversionError(f"{src}: the onnxruntime-optimized file fails its checks: " + "; ".join(problems))
    atomic_write(dst, data)
    log.info("optimized %s for onnxruntime %s: %s (%d bytes)", src.name, ort.__version__, dst, len(data))
    return dst


def _problems(src: Path, optimized: Path, seq_len: int, num_threads: int | None) -> list[str]:
    """What is wrong with ``optimized`` as a stand-in for ``src``."""
    source = Session(src, num_threads=num_threads)
    try:
        session = Session(optimized, num_threads=num_threads)
    except RuntimeUnavailable as exc:
        return [f"it does not load: {exc}"]
    if session.input_names != source.input_names or session.output_names != source.output_names:
        return [f"its inputs/outputs are {session.input_names}/{session.output_names}; "
                f"the source's are {source.input_names}/{source.output_names}"]
    feeds = _sample(source, seq_len)
    want, got = source.run(feeds), session.run(feeds)
    problems = [f"output {name} differs from the source's by {float(np.abs(got[name] - want[name]).max()):.3g}"
                for name in want if not np.allclose(got[name], want[name], rtol=_RTOL, atol=_ATOL)]
    before, after = analyze(read_file(src)), analyze(read_file(optimized))
    problems += after.problems()
    bound = int(BOUND_FACTOR * before.stored_bytes) + BOUND_SLACK
    if after.stored_bytes > bound:
        problems.append(f"it stores {after.stored_bytes} weight bytes, the source {before.stored_bytes}")
    return problems


def _sample(session: Session, seq_len: int) -> dict[str, np.ndarray]:
    """A batch of two rows for every input: ids 0 and 1 (valid in any vocabulary and segment
    table), random values for float inputs; symbolic dimensions become 2 x ``seq_len``."""
    rng = np.random.default_rng(0)
    feeds = {}
    for spec in session.inputs:
        shape = [d if isinstance(d, int) and d > 0 else (2 if i == 0 else seq_len) for i, d in enumerate(spec.shape)]
        dtype = np.dtype(spec.dtype)
        feeds[spec.name] = (rng.integers(0, 2, size=shape).astype(dtype) if dtype.kind in "iub"
                            else rng.standard_normal(shape).astype(dtype))
    return feeds
