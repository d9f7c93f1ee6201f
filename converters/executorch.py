"""Export an ALBERT model to an ExecuTorch program (.pte) lowered to the XNNPACK backend.

``torch.export`` with a dynamic sequence axis (1 to max_position_embeddings; the batch is 1, as
a phone runs it), then ``to_edge_transform_and_lower(..., XnnpackPartitioner())`` and
``to_executorch()``. ExecuTorch's named-data store keys every constant by its content, so each
shared layer's weights are stored once however many layer applications read them.

Lowered as it is, ALBERT falls into one XNNPACK delegate block per operator run between two
LayerNorms (38 blocks for the tiny test model, 49 for a 12-layer one): XNNPACK 1.5.1 has no
LayerNorm, and it refuses any reshape whose shape holds a symbolic size, which every per-head
view of a dynamic-length attention does. So while exporting (the model itself is not changed)
LayerNorm is written with ops XNNPACK has (mean and variance as a 1 x H linear), attention as
3-D ``bmm`` over (heads, T, head_dim), tanh-GELU spelled out (XNNPACK's GELU is the erf one),
and a pass gives each reshape's one symbolic size back as -1. The encoder then lowers as one
block; what stays outside is the embedding lookup (XNNPACK has no gather), the mask computed
once from ``attention_mask``, and the pooler's first-token select.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import types
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from albert_edge.errors import ConversionError, optional_import

from albert_edge.formats.graph import INPUT_NAMES, GraphContents, StoredTensor, TensorSpec

__all__ = ["export", "lower", "Lowered", "PteSession", "read_contents", "verify_options", "SCHEMES",
           "BATCH", "VERIFY_LENGTHS", "INPUT_NAMES"]

log = logging.getLogger(__name__)

BATCH = 1  # XNNPACK reshapes take one dynamic size: the sequence axis
VERIFY_LENGTHS = (1, 5, 16, 32, 128)  # besides the built length and the longest
TANH_GELU = ("gelu_new", "gelu_fast", "gelu_pytorch_tanh")
BACKEND = "XnnpackBackend"


@dataclass(frozen=True)
class PteScheme:
    """How one precision of the .pte is made: the file suffix, the XNNPACK quantizer's settings
    (None: fp32) and whether the embedding tables are quantized too."""

    suffix: str
    weights: str
    activations: str
    quantizer: dict[str, bool] | None = None


# The one table of .pte precisions; names as quantize.Scheme spells them.
SCHEMES: dict[str | None, PteScheme] = {
    None: PteScheme(".pte", "float32", "float32"),
    "int8-dynamic": PteScheme(
        ".int8-dynamic.pte", "int8 per channel", "int8, quantized at run time per token row (dynamic)",
        quantizer={"is_per_channel": True, "is_dynamic": True},
    ),
}


@dataclass
class Lowered:
    """A lowered program and what the partitioner made of it."""

    buffer: bytes
    delegate_blocks: int
    outside_ops: Counter = field(default_factory=Counter)  # operators run by ExecuTorch's portable kernels
    max_seq_len: int = 0


def export(model, out_path: str | os.PathLike, *, seq_len: int = 128, scheme: str | None = None) -> Path:
    """Write ``model`` (eval mode, forward(input_ids, attention_mask, token_type_ids)) to
    ``out_path`` as an XNNPACK-lowered .pte: int64 inputs of shape (1, T) for any T from 1 to
    max_position_embeddings, outputs in ``model.output_names`` order. ``seq_len`` is only the
    length of the example it is exported with. ``scheme`` "int8-dynamic" quantizes the linear
    layers (per-channel int8 weights, dynamic int8 activations) with the XNNPACK quantizer."""
    out_path = Path(out_path)
    if not out_path.parent.is_dir():
        raise ConversionError(f"cannot write {out_path}: {out_path.parent} is not a directory")
    lowered = lower(model, seq_len=seq_len, scheme=scheme)
    out_path.write_bytes(lowered.buffer)
    log.info("wrote %s: %d XNNPACK delegate blocks, outside: %s", out_path.name, lowered.delegate_blocks,
             dict(lowered.outside_ops))
    return out_path


def lower(model, *, seq_len: int = 128, scheme: str | None = None, friendly: bool = True) -> Lowered:
    """Export and lower ``model``; ``friendly=False`` lowers the model's own graph as it is (to
    measure what the rewrites gain)."""
    torch = _imports()["torch"]
    if scheme not in SCHEMES:
        raise ConversionError(f"unknown ExecuTorch scheme {scheme!r}; choose from "
                              f"{', '.join(s for s in SCHEMES if s)} (or none for fp32)")
    config = model.config
    T = max(2, min(seq_len, config.max_position_embeddings))
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, config.vocab_size, (BATCH, T), generator=gen)
    example = (ids, torch.ones_like(ids), torch.zeros_like(ids))
    seq = torch.export.Dim("sequence", min=1, max=config.max_position_embeddings)
    dynamic = tuple({1: seq} for _ in INPUT_NAMES)
    model = model.eval()
    with (_exportable(model) if friendly else contextlib.nullcontext()), torch.no_grad():
        try:
            program = torch.export.export(model, example, dynamic_shapes=dynamic, strict=False)
            if SCHEMES[scheme].quantizer is not None:
                program = _quantized(program, example, SCHEMES[scheme].quantizer, dynamic)
        except ConversionError:
            raise
        except Exception as exc:  # torch.export raises many types; the message is what matters
            raise ConversionError(f"torch.export failed: {str(exc).strip().splitlines()[0]}") from None
    return _lower(program, friendly, config.max_position_embeddings)


def _imports() -> dict[str, Any]:
    """torch and the ExecuTorch modules, or one line saying what to install."""
    try:
        import torch

        exir = optional_import("executorch.exir")
        xnnpack = optional_import("executorch.backends.xnnpack.partition.xnnpack_partitioner")
    except ImportError as exc:
        raise ConversionError(f"the executorch target needs executorch ({exc}): "
                              "pip install 'albert-edge[executorch]'") from None
    return {"torch": torch, "exir": exir, "XnnpackPartitioner": xnnpack.XnnpackPartitioner}


def _lower(program, friendly: bool, max_seq_len: int) -> Lowered:
    mods = _imports()
    passes = [_infer_one_size] if friendly else []
    try:
        edge = mods["exir"].to_edge_transform_and_lower(program, transform_passes=passes,
                                                        partitioner=[mods["XnnpackPartitioner"]()])
        blocks, outside = _partition_figures(edge.exported_program().graph_module.graph)
        buffer = edge.to_executorch().buffer
    except Exception as exc:  # the lowering raises many types; the message is what matters
        raise ConversionError(f"lowering to XNNPACK failed: {str(exc).strip().splitlines()[0]}") from None
    return Lowered(buffer, blocks, outside, max_seq_len)


def _partition_figures(graph) -> tuple[int, Counter]:
    """XNNPACK delegate calls, and the operators left to the portable kernels (by name)."""
    blocks = 0
    outside: Counter = Counter()
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        name = getattr(node.target, "__name__", str(node.target))
        if name == "executorch_call_delegate":
            blocks += 1
        elif name not in ("getitem", "sym_size.int") and not name.startswith("sym_size"):
            parts = name.split(".")  # "aten.native_layer_norm.default" -> native_layer_norm
            outside[parts[1] if len(parts) > 2 else parts[0]] += 1
    return blocks, outside


def _infer_one_size(gm):
    """Each reshape whose shape holds one symbolic size (the sequence length) gets -1 there:
    the same reshape, in the form XNNPACK's static reshape takes."""
    from executorch.exir.dialects._ops import ops as exir_ops
    from torch.fx.passes.infra.pass_base import PassResult

    changed = False
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target == exir_ops.edge.aten.view_copy.default:
            shape = list(node.args[1])
            symbolic = [i for i, d in enumerate(shape) if not isinstance(d, int)]
            if len(symbolic) == 1 and -1 not in shape:
                shape[symbolic[0]] = -1
                node.args = (node.args[0], shape)
                changed = True
    gm.recompile()
    return PassResult(gm, changed)


def _quantized(program, example, settings: dict[str, bool], dynamic):
    """int8 through pt2e: the XNNPACK quantizer's symmetric config (ExecuTorch 1.5.1's documented
    flow), then re-exported for lowering. Dynamic activations need no calibration; one run of the
    example fixes the weight observers."""
    import torch
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(**settings))
    prepared = prepare_pt2e(program.module(), quantizer)
    prepared(*example)
    converted = convert_pt2e(prepared)
    return torch.export.export(converted, example, dynamic_shapes=dynamic, strict=False)


# -- the export-time forms of LayerNorm, attention and GELU -----------------------------------

def _layer_norm(self, x):
    avg = self._ae_mean  # (1, H) of 1/H: the mean as a linear layer, which XNNPACK runs
    d = x - _linear(x, avg)  # (1, T, H)
    var = _linear(d * d, avg)  # (1, T, 1)
    import torch

    return d * torch.rsqrt(var + self.eps) * self.weight + self.bias


def _linear(x, weight):
    import torch.nn.functional as F

    return F.linear(x, weight)


def _attention(self, x, mask_bias):
    import torch

    H = x.shape[-1]
    nh, hd = self.num_heads, self.head_dim

    def heads(t):  # (1, T, H) -> (nh, T, hd)
        return t.view(-1, nh, hd).permute(1, 0, 2)

    q, k, v = heads(self.query(x)), heads(self.key(x)), heads(self.value(x))
    scores = torch.bmm(q, k.permute(0, 2, 1)) / math.sqrt(hd)  # (nh, T, T)
    probs = torch.softmax(scores + mask_bias.view(1, 1, -1), dim=-1)
    context = torch.bmm(probs, v).permute(1, 0, 2).reshape(1, -1, H)  # (1, T, H)
    return self.LayerNorm(x + self.dense(context))


def _tanh_gelu(x):
    import torch

    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


@contextlib.contextmanager
def _exportable(model):
    """While exporting, every LayerNorm, attention and tanh-GELU of ``model`` takes the form
    above (same values within float rounding); the model is restored afterwards."""
    import torch

    from albert_edge.model import AlbertAttention

    tanh_gelu = model.config.hidden_act in TANH_GELU
    patched: list[tuple[Any, str, bool]] = []  # (module, attribute, was it a buffer)
    try:
        for module in model.modules():  # each shared module once
            if isinstance(module, torch.nn.LayerNorm):
                H = module.normalized_shape[-1]
                module.register_buffer("_ae_mean", torch.full((1, H), 1.0 / H), persistent=False)
                patched.append((module, "_ae_mean", True))
                module.forward = types.MethodType(_layer_norm, module)
                patched.append((module, "forward", False))
            elif isinstance(module, AlbertAttention):
                module.forward = types.MethodType(_attention, module)
                patched.append((module, "forward", False))
            if tanh_gelu and "activation" in module.__dict__:
                module.__dict__["_ae_activation"] = module.__dict__["activation"]
                module.activation = _tanh_gelu
                patched.append((module, "activation", False))
        yield
    finally:
        for module, name, buffer in reversed(patched):
            if buffer:
                del module._buffers[name]
            elif name == "activation":
                module.__dict__["activation"] = module.__dict__.pop("_ae_activation")
            else:
                module.__dict__.pop(name, None)


# -- running and reading a .pte for verify() ---------------------------------------------------

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
    import time

    from albert_edge.formats import manifest as manifest_io
    from albert_edge.formats.weights import analyze

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
    low = [o for o in accuracy.outputs if o.kind in ("tokens", "examples") and o.cosine_mean < MIN_COSINE]
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
