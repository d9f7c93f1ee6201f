"""What a converter needs to make the quantized twin of a file it converts (``convert --to ort|onnx-text
--scheme int8-dynamic``): the fp32 .onnx albert_edge.quantize starts from, verified, and the
report manifest.file_entry reads for the twin."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from albert_edge.formats.graph import GraphContents

__all__ = ["TwinReport", "verified_onnx", "check_twin"]


class TwinReport:
    """What manifest.file_entry reads: the quantized file's contents, weights and parity (against the
    fp32 parent, as for files ``albert-edge quantize`` writes)."""

    def __init__(self, contents: GraphContents, weights, figures: dict[str, Any]):
        self.contents, self.weights, self._figures = contents, weights, figures

    def parity(self) -> dict[str, Any]:
        return self._figures


def verified_onnx(model, scratch: Path, seq_len: int, tokenizer, opset: int | None = None) -> Path:
    """The fp32 .onnx of ``model`` in ``scratch`` (``opset``, None: the exporter's default),
    verified, with the manifest albert_edge.quantize reads beside it."""
    from albert_edge.formats import manifest as manifest_io

    from . import onnx as onnx_export
    from .outputs import head_of
    from .verify import verify

    path = onnx_export.export(model, scratch / "model.onnx", seq_len=seq_len, opset=opset or onnx_export.DEFAULT_OPSET)
    report = verify(model, path, seq_len=seq_len, tokenizer=tokenizer)
    if not report.ok:
        raise report.error("the .onnx the quantized file is made from failed verification", more=False)
    source = {"checkpoint": None, "format": "model", "head": head_of(model)}
    manifest_io.write(manifest_io.Manifest(source=source, config=model.config.to_hf_dict(), seq_len=seq_len,
                                           files=[manifest_io.file_entry(path, report)]), scratch)
    return path


def check_twin(name: str, weights, copies, twin: dict[str, float], atol: float, problems: list[str] = ()) -> None:
    """A VerificationError of the kind of the first problem of the quantized file ``name``, naming it
    (and how many more): those given, its ``weights`` report's, a weight of the fp32 parent stored
    more than once (``copies``: formats.copies.weight_copies), an output further than ``atol`` from
    the int8 .onnx it was made from (``twin``: the largest difference per output)."""
    from .verify import DuplicateWeightError, OutputMatchError, Problem, VerificationError, failure, weights_problems

    found = [Problem(text, VerificationError) for text in problems] + weights_problems(weights)
    found += [Problem(f"{c.name} is stored {len(c.stored_as)} times: {', '.join(n for n, _ in c.stored_as)}",
                      functools.partial(DuplicateWeightError, name=c.name))
              for c in copies if len(c.stored_as) > 1]
    found += [Problem(f"{output} differs from the int8 .onnx by {diff:.3g} (more than {atol:g})",
                      functools.partial(OutputMatchError, output=output, max_abs_diff=diff, atol=atol, rtol=0.0))
              for output, diff in twin.items() if not diff <= atol]
    if found:
        raise failure(found, f"{name} failed its checks")
