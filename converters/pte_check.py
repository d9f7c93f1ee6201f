"""Checking a .pte before it is moved in place: run it with ExecuTorch's own runtime, read back
what it stores with ExecuTorch's deserializer (albert_edge.runtime and albert_edge.formats read
.onnx and .tflite), and measure an int8 .pte against its fp32 parent on real text."""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from albert_edge.errors import ConversionError

from albert_edge.formats.graph import INPUT_NAMES, GraphContents, StoredTensor, TensorSpec

__all__ = ["PteSession", "read_contents", "verify_options", "quantized_file", "VERIFY_LENGTHS", "MIN_COSINE"]

log = logging.getLogger(__name__)

VERIFY_LENGTHS = (1, 5, 16, 32, 128)  # besides the built length and the longest


class PteSession:
    """A .pte run with ExecuTorch's own runtime (the C++ a phone app runs), with the interface
    converters.verify needs: names, and ``run(feeds)`` on batches of any size (one row at a
    time: the program's batch is 1)."""

    format = "executorch"
    backend_name = "executorch (XNNPACK)"

    def __init__(self, path: str | os.PathLike, output_names: tuple[str, ...]):
        try:
            from executorch.runtime import Runtime
        except ImportError as exc:
            raise ConversionError(f"cannot run {Path(path).name}: executorch is not installed ({exc})") from None
        self.path = Path(path)
        program = Runtime.get().load_program(self.path)
        self._method = program.load_method("forward")
        self.input_names = INPUT_NAMES
        self.output_names = tuple(output_names)
        count = self._method.metadata.num_outputs()
        if count != len(self.output_names):
            self.output_names = tuple(f"output_{i}" for i in range(count))

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        rows = []
        for b in range(feeds["input_ids"].shape[0]):
            inputs = [torch.from_numpy(np.ascontiguousarray(feeds[n][b:b + 1], dtype=np.int64)) for n in INPUT_NAMES]
            rows.append([o.numpy() for o in self._method.execute(inputs)])
        return {name: np.concatenate([r[i] for r in rows]) for i, name in enumerate(self.output_names)}


def read_contents(path: str | os.PathLike, output_names: tuple[str, ...]) -> GraphContents:
    """What the .pte stores, read back with ExecuTorch's own deserializer: each stored buffer
    once (the named-data store's unique buffers, and the program's constant buffers), the
    inputs and outputs, and the delegate calls of its execution plan."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    from .executorch import BATCH

    path = Path(path)
    pte = deserialize_pte_binary(path.read_bytes())
    plan = pte.program.execution_plan[0]
    weights = [StoredTensor(f"constant_buffer[{i}]", np.frombuffer(bytes(b.storage), dtype=np.uint8))
               for i, b in enumerate(pte.program.constant_buffer) if len(b.storage)]
    if pte.named_data is not None:
        names = {}
        for key, entry in pte.named_data.pte_data.items():
            names.setdefault(entry.buffer_index, key)
        weights += [StoredTensor(f"named_data[{names.get(i, i)}]", np.frombuffer(bytes(b), dtype=np.uint8))
                    for i, b in enumerate(pte.named_data.buffers)]

    longest = max((int(plan.values[i].val.sizes[1]) for i in plan.inputs), default=0)

    def spec(index: int, name: str) -> TensorSpec:
        tensor = plan.values[index].val
        dtype = str(getattr(tensor.scalar_type, "name", tensor.scalar_type)).lower()
        dtype = {"long": "int64", "int": "int32", "float": "float32"}.get(dtype, dtype)
        shape: tuple[int | str, ...] = tuple(int(s) for s in tensor.sizes)
        # Sizes are upper bounds; the sequence axis is the dynamic one of the inputs' length.
        dynamic = getattr(tensor.shape_dynamism, "name", "STATIC") != "STATIC"
        if dynamic and len(shape) > 1 and shape[1] == longest:
            shape = (shape[0], "sequence", *shape[2:])
        return TensorSpec(name, dtype, shape)

    outputs = output_names if len(output_names) == len(plan.outputs) else [f"output_{i}" for i in range(len(plan.outputs))]
    ops = Counter(op.name for op in plan.operators)
    ops.update({f"delegate:{d.id}": 1 for d in plan.delegates})
    delegates = Counter(d.id for d in plan.delegates)
    return GraphContents(
        format="executorch",
        inputs=[spec(i, n) for i, n in zip(plan.inputs, INPUT_NAMES)],
        outputs=[spec(i, n) for i, n in zip(plan.outputs, outputs)],
        ops=ops, weights=weights,
        metadata={"format_version": {"executorch_version": _version(), "delegate_blocks": int(sum(delegates.values())),
                                     "backends": dict(delegates), "batch": BATCH}},
    )


def _version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("executorch")
    except metadata.PackageNotFoundError:
        return None


def verify_options(model, path: Path, seq_len: int) -> dict[str, Any]:
    """What converters.verify needs to check a .pte: its session, its contents and the lengths
    (16, 32, 128 and the usual ones, up to the model's maximum)."""
    top = model.config.max_position_embeddings
    lengths = tuple(sorted({T for T in (*VERIFY_LENGTHS, seq_len, top) if T <= top}))
    return {"session": PteSession(path, tuple(model.output_names)),
            "contents": read_contents(path, tuple(model.output_names)), "seq_lens": lengths}


# -- the int8 file, measured against its fp32 parent ------------------------------------------

MIN_COSINE = 0.999  # mean cosine of every output against the fp32 .pte on real text


class _QuantizedReport:
    """What manifest.file_entry reads: the int8 file's contents, weights and its parity, which
    is against the fp32 parent (as for files ``albert-edge quantize`` writes)."""

    def __init__(self, contents: GraphContents, weights, figures: dict[str, Any]):
        self.contents, self.weights, self._figures = contents, weights, figures

    def parity(self) -> dict[str, Any]:
        return self._figures


def quantized_file(model, parent, tmp: Path, scheme: str, *, tokenizer=None, seq_len: int = 128):
    """Write ``model`` with ``scheme`` beside its verified fp32 .pte ``parent`` (a
    converters.export.ConvertedFile) in ``tmp``, check that it stores each weight once, and
    measure it against the parent, both run in ExecuTorch, on held-out real text (the builtin
    corpus, with ``tokenizer``; random ids without one). Raises ConversionError when the mean
    cosine of an output is under MIN_COSINE. Returns its ConvertedFile."""
    from albert_edge.formats import manifest as manifest_io
    from albert_edge.formats.weights import analyze

    from .executorch import SCHEMES, export
    from .export import ConvertedFile

    recipe = SCHEMES.get(scheme)
    if scheme is None or recipe is None:
        raise ConversionError(f"unknown ExecuTorch scheme {scheme!r}; choose from {', '.join(s for s in SCHEMES if s)}")
    path = tmp / ("model" + recipe.suffix)
    t0 = time.perf_counter()
    export(model, path, seq_len=seq_len, scheme=scheme)
    t1 = time.perf_counter()
    names = tuple(model.output_names)
    contents = read_contents(path, names)
    weights = analyze(contents, model)
    accuracy, text = _accuracy(model, parent.path, path, tokenizer, seq_len)
    figures = {
        "against": "fp32 parent", "parent": parent.name, "parent_sha256": parent.entry.sha256, "scheme": scheme,
        "weights": recipe.weights, "activations": recipe.activations,
        "max_abs_diff": {o.name: o.max_abs_diff for o in accuracy.outputs},
        "cosine_mean": {o.name: o.cosine_mean for o in accuracy.outputs},
        "agreement": {o.name: o.agreement for o in accuracy.outputs if o.agreement is not None},
        "accuracy": accuracy.to_dict(), "calibration": {"evaluation": text, "method": None},
        "backend": PteSession.backend_name, "ok": True,
    }
    problems = weights.problems()
    low = [o for o in accuracy.outputs if o.cosine_mean < MIN_COSINE]
    problems += [f"{o.name} mean cosine {o.cosine_mean:.5f} to the fp32 file is under {MIN_COSINE}" for o in low]
    if problems:
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        raise ConversionError(f"{path.name} failed its checks: {problems[0]}{more}")
    entry = manifest_io.file_entry(path, _QuantizedReport(contents, weights, figures))
    entry.precision = scheme
    report = _QuantizedReport(contents, weights, figures)
    return ConvertedFile(path.name, path, "executorch", t1 - t0, time.perf_counter() - t1, report, entry)


def _accuracy(model, parent: Path, path: Path, tokenizer, seq_len: int):
    """quantize.accuracy.measure of the two files on held-out builtin text (or random ids)."""
    from albert_edge.quantize.accuracy import measure
    from albert_edge.quantize.calibration import load_tokenizer, random_batches, split_text, text_batches
    from albert_edge.text import read_sentences

    config = model.config
    names = tuple(model.output_names)
    length = min(seq_len, config.max_position_embeddings)
    mask_id = 4 if "prediction_logits" in names and config.vocab_size > 4 else None
    if tokenizer is None:
        batches = random_batches(config.vocab_size, length, 32, 8, mask_id=mask_id, seed=0)
        text = "32 rows of random ids (no tokenizer: give one to measure on real text)"
    else:
        tok = tokenizer if callable(tokenizer) else load_tokenizer(tokenizer, config.vocab_size)
        sentences, _ = read_sentences(("builtin",))
        split = split_text(sentences, 0, 64, seed=0)
        batches = text_batches(tok, split.evaluation, length, 8, mask_id=tok.mask_id if mask_id else None, seed=0)
        text = f"{len(split.evaluation)} held-out sentences of the builtin corpus"
    head = _head_name(model)
    return measure(PteSession(parent, names), PteSession(path, names), batches, head, text=text), text


def _head_name(model) -> str:
    from .export import head_of

    return head_of(model)
