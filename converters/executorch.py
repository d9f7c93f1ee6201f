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
once from ``attention_mask``, and the pooler's first-token select. An MLM decoder tied to the
word embeddings stays outside too: lowered, XNNPACK would store its own copy of the table.

int8 (``scheme="int8-dynamic"``): the XNNPACK quantizer through pt2e (per-channel int8 weights,
activations quantized at run time) and, unless the MLM decoder is tied to it, the word-embedding
table as int8 rows with one scale each. It is made at conversion, beside the fp32 file, because
it needs the PyTorch model, and measured against the fp32 file on real text (:func:`quantized_file`).
Every file is checked by :mod:`.pte_check` before it is moved in place.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import time
import types
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from albert_edge.errors import ConversionError, install_line, optional_import

from albert_edge.formats.graph import INPUT_NAMES, GraphContents
from albert_edge.quantize.schemes import Scheme

from .native_logs import quiet_native
from .pte_check import VERIFY_LENGTHS, PteSession, check_lengths, read_contents, verify_options
from .verify import TOLERANCES, OutputMatchError, Problem, failure, weights_problems

__all__ = ["export", "lower", "longest", "check_lengths", "Lowered", "PteSession", "read_contents",
           "verify_options", "quantized_file", "SCHEMES", "BATCH", "VERIFY_LENGTHS", "MIN_COSINE", "INPUT_NAMES"]

log = logging.getLogger(__name__)

BATCH = 1  # XNNPACK reshapes take one dynamic size: the sequence axis
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
    int8_embeddings: bool = False  # the word-embedding table as int8 rows with one scale each


# How each of the target's schemes (and fp32, None) is lowered; names from albert_edge.quantize.Scheme.
SCHEMES: dict[Scheme | None, PteScheme] = {
    None: PteScheme(".pte", "float32", "float32"),
    Scheme.INT8_DYNAMIC: PteScheme(
        Scheme.INT8_DYNAMIC.file_suffix(".pte"), "int8 per channel", "int8, quantized at run time per token row (dynamic)",
        quantizer={"is_per_channel": True, "is_dynamic": True}, int8_embeddings=True,
    ),
}


@dataclass
class Lowered:
    """A lowered program and what the partitioner made of it."""

    buffer: bytes
    delegate_blocks: int
    outside_ops: Counter = field(default_factory=Counter)  # operators run by ExecuTorch's portable kernels
    max_seq_len: int = 0


def export(model, out_path: str | os.PathLike, *, seq_len: int = 128, scheme: str | None = None,
           max_seq_len: int | None = None) -> Path:
    """Write ``model`` (eval mode, forward(input_ids, attention_mask, token_type_ids)) to
    ``out_path`` as an XNNPACK-lowered .pte: int64 inputs of shape (1, T) for any T from 1 to
    ``max_seq_len`` (default max_position_embeddings), outputs in ``model.output_names`` order.
    The tensors ExecuTorch plans outside the delegates are sized for ``max_seq_len`` and allocated
    when the program loads, so a smaller bound is a smaller process. ``seq_len`` is only the
    length of the example it is exported with. ``scheme`` "int8-dynamic" quantizes the linear
    layers (per-channel int8 weights, dynamic int8 activations) with the XNNPACK quantizer."""
    out_path = Path(out_path)
    if not out_path.parent.is_dir():
        raise ConversionError(f"cannot write {out_path}: {out_path.parent} is not a directory")
    with quiet_native():  # torchao's warnings, ExecuTorch's own lines
        lowered = lower(model, seq_len=seq_len, scheme=scheme, max_seq_len=max_seq_len)
    out_path.write_bytes(lowered.buffer)
    log.info("wrote %s: %d XNNPACK delegate blocks, outside: %s", out_path.name, lowered.delegate_blocks,
             dict(lowered.outside_ops))
    return out_path


def lower(model, *, seq_len: int = 128, scheme: str | None = None, friendly: bool = True,
          max_seq_len: int | None = None) -> Lowered:
    """Export and lower ``model``; ``friendly=False`` lowers the model's own graph as it is (to
    measure what the rewrites gain)."""
    torch = _imports()["torch"]
    if scheme not in SCHEMES:
        raise ConversionError(f"unknown ExecuTorch scheme {scheme!r}; choose from "
                              f"{', '.join(s for s in SCHEMES if s)} (or none for fp32)")
    config = model.config
    top = longest(config, max_seq_len)
    T = max(2, min(seq_len, top))
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, config.vocab_size, (BATCH, T), generator=gen)
    example = (ids, torch.ones_like(ids), torch.zeros_like(ids))
    seq = torch.export.Dim("sequence", min=1, max=top)
    dynamic = tuple({1: seq} for _ in INPUT_NAMES)
    model = model.eval()
    embeddings = _int8_word_embeddings(model) if SCHEMES[scheme].int8_embeddings else contextlib.nullcontext()
    with (_exportable(model) if friendly else contextlib.nullcontext()), embeddings, torch.no_grad():
        try:
            program = torch.export.export(model, example, dynamic_shapes=dynamic, strict=False)
            if SCHEMES[scheme].quantizer is not None:
                program = _quantized(program, example, SCHEMES[scheme].quantizer, dynamic)
        except ConversionError:
            raise
        except Exception as exc:  # torch.export raises many types; the message is what matters
            raise ConversionError(f"torch.export failed: {str(exc).strip().splitlines()[0]}") from None
    return _lower(program, friendly, top)


def longest(config, max_seq_len: int | None) -> int:
    """The longest sequence the file takes: ``max_seq_len``, checked, or the model's maximum."""
    top = config.max_position_embeddings
    if max_seq_len is None:
        return top
    if isinstance(max_seq_len, bool) or not isinstance(max_seq_len, int) or not 2 <= max_seq_len <= top:
        raise ConversionError(f"max-seq-len ({max_seq_len!r}) must be an integer from 2 to the model's "
                              f"max_position_embeddings ({top})")
    return max_seq_len


def _imports() -> dict[str, Any]:
    """torch and the ExecuTorch modules, or one line saying what to install."""
    try:
        import torch

        exir = optional_import("executorch.exir")
        xnnpack = optional_import("executorch.backends.xnnpack.partition.xnnpack_partitioner")
    except ImportError as exc:
        raise ConversionError(f"the executorch target needs executorch ({exc}): "
                              f"{install_line('convert-executorch')}") from None
    return {"torch": torch, "exir": exir, "XnnpackPartitioner": xnnpack.XnnpackPartitioner}


def _lower(program, friendly: bool, max_seq_len: int) -> Lowered:
    mods = _imports()
    passes = [_infer_one_size] if friendly else []
    try:
        partitioner = mods["XnnpackPartitioner"](configs=_configs())
        edge = mods["exir"].to_edge_transform_and_lower(program, transform_passes=passes, partitioner=[partitioner])
        blocks, outside = _partition_figures(edge.exported_program().graph_module.graph)
        buffer = edge.to_executorch().buffer
    except Exception as exc:  # the lowering raises many types; the message is what matters
        raise ConversionError(f"lowering to XNNPACK failed: {str(exc).strip().splitlines()[0]}") from None
    return Lowered(buffer, blocks, outside, max_seq_len)


def _configs() -> list:
    """XNNPACK's partitioner configs, with every matrix-product config refusing a weight that an
    embedding lookup reads too (the MLM decoder tied to the word embeddings). XNNPACK would store
    its own copy of that table beside the one the lookup reads (ExecuTorch's constant buffer),
    so a tied decoder runs in ExecuTorch's portable kernels, reading the one table."""
    from executorch.backends.xnnpack.partition.config import ALL_PARTITIONER_CONFIGS
    from executorch.backends.xnnpack.partition.config.gemm_configs import GEMMConfig

    def refuse_tied(check):
        def check_constraints(self, node, ep) -> bool:
            return not _reads_gathered_table(node) and check(self, node, ep)

        return check_constraints

    return [type(cls.__name__, (cls,), {"check_constraints": refuse_tied(cls.check_constraints)})
            if issubclass(cls, GEMMConfig) else cls for cls in ALL_PARTITIONER_CONFIGS]


def _reads_gathered_table(node) -> bool:
    """Whether an input of ``node`` (directly, or through a transpose) is also an embedding
    lookup's table."""
    for arg in node.all_input_nodes:
        sources = [arg, *arg.all_input_nodes] if "permute" in str(arg.target) or "t_copy" in str(arg.target) else [arg]
        for source in sources:
            if any("embedding" in str(user.target) for user in source.users):
                return True
    return False


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
    example fixes the weight observers. Each user of a dynamically quantized activation gets its
    own choose-qparams/quantize/dequantize chain (ExecuTorch's DuplicateDynamicQuantChainPass, as
    its own LLM export does): a chain shared by the Q, K and V products cut the encoder into one
    XNNPACK block per layer (13 for ALBERT-base), with it the encoder is one block as in fp32."""
    import torch
    from executorch.backends.transforms.duplicate_dynamic_quant_chain import DuplicateDynamicQuantChainPass
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(**settings))
    prepared = prepare_pt2e(program.module(), quantizer)
    prepared(*example)
    converted = convert_pt2e(prepared)
    DuplicateDynamicQuantChainPass()(converted)
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


@contextlib.contextmanager
def _int8_word_embeddings(model):
    """While exporting, the word-embedding table (V x E, most of an int8 file otherwise) is
    looked up as int8 rows, each with its own fp32 scale (symmetric, per row), and the fp32
    table leaves the file. A table the MLM decoder is tied to stays fp32: its decoder reads it
    whole, and a second, int8 copy would only add bytes."""
    import torch

    from albert_edge.model import AlbertEmbeddings

    patched = []
    try:
        for module in model.modules():
            if not isinstance(module, AlbertEmbeddings):
                continue
            table = module.word_embeddings
            if any(p is table.weight for name, p in model.named_parameters(remove_duplicate=False)
                   if not name.endswith("word_embeddings.weight")):
                log.info("word embeddings tied to the MLM decoder: kept fp32")
                continue
            weight = table.weight
            w = weight.detach()
            scale = (w.abs().amax(dim=1, keepdim=True) / 127.0).clamp(min=1e-12)  # (V, 1)
            table.register_buffer("_ae_q", torch.round(w / scale).clamp(-127, 127).to(torch.int8), persistent=False)
            table.register_buffer("_ae_scale", scale, persistent=False)
            del table._parameters["weight"]
            table.forward = types.MethodType(_int8_lookup, table)
            patched.append((table, weight))
        yield
    finally:
        for table, weight in patched:
            table.__dict__.pop("forward", None)
            del table._buffers["_ae_q"], table._buffers["_ae_scale"]
            table._parameters["weight"] = weight


def _int8_lookup(self, ids):
    import torch
    import torch.nn.functional as F

    return F.embedding(ids, self._ae_q).to(torch.float32) * F.embedding(ids, self._ae_scale)  # (B, T, E)


# Checking a .pte: kept in their own module, offered here as this exporter's interface to convert().


# -- the int8 file, measured against its fp32 parent ------------------------------------------

MIN_COSINE = TOLERANCES["executorch"].min_cosine  # mean cosine of every output against the fp32 .pte on real text


class _QuantizedReport:
    """What manifest.file_entry reads: the int8 file's contents, weights and its parity, which
    is against the fp32 parent (as for files ``albert-edge quantize`` writes)."""

    def __init__(self, contents: GraphContents, weights, figures: dict[str, Any]):
        self.contents, self.weights, self._figures = contents, weights, figures

    def parity(self) -> dict[str, Any]:
        return self._figures


def quantized_file(model, parent, path: Path, scheme: str, *, tokenizer=None, seq_len: int = 128,
                   max_seq_len: int | None = None):
    """Write ``model`` with ``scheme`` at ``path``, beside its verified fp32 .pte ``parent`` (a
    converters.result.ConvertedFile), check that it stores each weight once, and
    measure it against the parent, both run in ExecuTorch, on held-out real text (the builtin
    corpus, with ``tokenizer``; random ids without one). Raises ConversionError when the mean
    cosine of an output is under MIN_COSINE. Returns its ConvertedFile."""
    from albert_edge.formats import manifest as manifest_io
    from albert_edge.formats.weights import analyze

    from .result import ConvertedFile

    recipe = SCHEMES.get(scheme)
    if scheme is None or recipe is None:
        raise ConversionError(f"unknown ExecuTorch scheme {scheme!r}; choose from {', '.join(s for s in SCHEMES if s)}")
    t0 = time.perf_counter()
    export(model, path, seq_len=seq_len, scheme=scheme, max_seq_len=max_seq_len)
    t1 = time.perf_counter()
    names = tuple(model.output_names)
    contents = read_contents(path, names)
    weights = analyze(contents, model)
    accuracy, text = _accuracy(model, parent.path, path, tokenizer, min(seq_len, longest(model.config, max_seq_len)))
    figures = {
        "against": "fp32 parent", "parent": parent.name, "parent_sha256": parent.entry.sha256, "scheme": scheme,
        "weights": recipe.weights, "activations": recipe.activations,
        "max_abs_diff": {o.name: o.max_abs_diff for o in accuracy.outputs},
        "cosine_mean": {o.name: o.cosine_mean for o in accuracy.outputs},
        "agreement": {o.name: o.agreement for o in accuracy.outputs if o.agreement is not None},
        "accuracy": accuracy.to_dict(), "calibration": {"evaluation": text, "method": None},
        "backend": PteSession.backend_name, "ok": True,
    }
    problems = weights_problems(weights)
    low = [o for o in accuracy.outputs if o.cosine_mean < MIN_COSINE]
    problems += [Problem(f"{o.name} mean cosine {o.cosine_mean:.5f} to the fp32 file is under {MIN_COSINE}",
                         functools.partial(OutputMatchError, output=o.name)) for o in low]
    if problems:
        raise failure(problems, f"{path.name} failed its checks")
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
    from .outputs import head_of

    return head_of(model)
