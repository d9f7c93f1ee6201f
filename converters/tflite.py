"""Export an ALBERT model to TFLite: builtin ops only, one ``serving_default`` signature, each
shared weight stored once.

The graph is ALBERT re-stated in TensorFlow (:mod:`.tf_albert`) around our PyTorch weights,
converted with TFLite builtins only, so it runs on ai-edge-litert or tflite-runtime as shipped.
Inputs are (batch, sequence) int32 with both axes dynamic; the file's input shapes are set to
(1, seq_len), so a plain interpreter runs at seq_len and ``resize_tensor_input`` gives any other
length up to max_position_embeddings.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from albert_edge.errors import ConversionError

from .graph import INPUT_NAMES
from .op_versions import TFLITE_RUNTIME_LAST, op_versions, too_new_for

if TYPE_CHECKING:
    from torch import nn

__all__ = ["export", "INPUT_NAMES"]

log = logging.getLogger(__name__)

SIGNATURE = "serving_default"

# A flatbuffer cannot address more than 2 GiB. Past this much fp32 weight (leaving room for the
# graph) the converter writes the weights after the flatbuffer and points at them by offset;
# the reader follows both layouts.
_BUFFER_OFFSET_ABOVE = 1 << 30


def export(model: nn.Module, out_path: str | os.PathLike, *, seq_len: int = 128) -> Path:
    """Convert ``model`` (any head of albert_edge.model) to a .tflite file at ``out_path``.

    The file is written under a temporary name in the same directory and renamed into place
    only once complete. Raises ConversionError (one line) when the model cannot be converted.
    """
    out_path = Path(out_path)
    config = model.config
    valid = isinstance(seq_len, int) and not isinstance(seq_len, bool)
    if not valid or not 1 <= seq_len <= config.max_position_embeddings:
        raise ConversionError(
            f"seq_len ({seq_len}) must be between 1 and max_position_embeddings "
            f"({config.max_position_embeddings})"
        )
    if not out_path.parent.is_dir():
        raise ConversionError(f"cannot write {out_path}: {out_path.parent} is not a directory")

    start = time.perf_counter()
    flatbuffer = convert(model, seq_len=seq_len)
    log.info("converted to TFLite in %.1f s (%d bytes)", time.perf_counter() - start, len(flatbuffer))

    tmp = out_path.with_name(f".{out_path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(flatbuffer)
        os.replace(tmp, out_path)
    except OSError as exc:
        raise ConversionError(f"cannot write {out_path}: {exc.strerror or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return out_path


def convert(model: nn.Module, *, seq_len: int = 128, buffer_offset: bool | None = None,
            run_converter=None, runtime: str | None = TFLITE_RUNTIME_LAST) -> bytearray:
    """The .tflite flatbuffer for ``model``, checked: builtin ops only, the expected signature,
    and operator versions that TFLite ``runtime`` loads (None: any; the default is
    tflite-runtime 2.14, the last tflite-runtime release, on Raspberry Pi OS bookworm).

    ``buffer_offset`` stores weights after the flatbuffer (needed past 2 GiB); None decides by
    the model's size. ``run_converter`` (used by albert_edge.quantize) takes the configured
    TFLiteConverter and returns the flatbuffer in place of ``converter.convert()``, so a
    quantization scheme can add its settings and rewrite the result before the checks here.
    """
    tf = _import_tensorflow()
    from .tf_albert import TFAlbert

    if buffer_offset is None:
        buffer_offset = sum(p.numel() * 4 for p in model.parameters()) > _BUFFER_OFFSET_ABOVE
    with tempfile.TemporaryDirectory(prefix="albert-edge-tflite-") as saved:
        # Through a SavedModel: its weights are variables, which the converter freezes once
        # each; weights captured as graph constants cost several times the memory and time.
        module = TFAlbert(model)
        try:
            tf.saved_model.save(module, saved, signatures={SIGNATURE: module.trace()})
        except OSError as exc:
            raise ConversionError(f"cannot write the intermediate SavedModel: {exc.strerror or exc}") from None
        del module
        flatbuffer = _run_converter(tf, saved, buffer_offset, run_converter)
    _set_input_shapes(flatbuffer, seq_len)
    _check(flatbuffer, tuple(model.output_names), runtime)
    return flatbuffer


def _run_converter(tf, saved_model: str, buffer_offset: bool, run=None) -> bytearray:
    converter = tf.lite.TFLiteConverter.from_saved_model(saved_model, signature_keys=[SIGNATURE])
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    # Folding a LayerNorm scale into the next layer's weight makes a copy of that weight per
    # layer application; tf_albert's row-shaped LayerNorm parameters already keep it from
    # matching, this keeps it off should the pattern widen.
    converter._experimental_disable_fuse_mul_and_fc = True
    converter._experimental_use_buffer_offset = buffer_offset
    try:
        return bytearray(converter.convert() if run is None else run(converter))
    except Exception as exc:  # the converter raises its own error types with pages of MLIR
        raise ConversionError(f"TFLite conversion failed: {_first_line(exc)}") from None


def _import_tensorflow():
    try:
        import tensorflow as tf
    except ImportError:
        raise ConversionError("converting to TFLite needs tensorflow (pip install 'albert-edge[convert]')") from None
    return tf


def _schema():
    from tensorflow.lite.python import schema_py_generated as schema

    return schema


def _first_line(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    wanted = [line for line in lines if "error:" in line.lower() or "not supported" in line.lower()]
    line = (wanted or lines or [type(exc).__name__])[0]
    return line if len(line) <= 300 else line[:297] + "..."


def _signature_tensors(model, schema) -> tuple[object, dict[str, int], dict[str, int]]:
    for i in range(model.SignatureDefsLength()):
        sig = model.SignatureDefs(i)
        if sig.SignatureKey().decode() == SIGNATURE:
            inputs = {m.Name().decode(): m.TensorIndex() for m in map(sig.Inputs, range(sig.InputsLength()))}
            outputs = {m.Name().decode(): m.TensorIndex() for m in map(sig.Outputs, range(sig.OutputsLength()))}
            return model.Subgraphs(sig.SubgraphIndex()), inputs, outputs
    raise ConversionError(f"the converted model has no {SIGNATURE!r} signature")


def _set_input_shapes(flatbuffer: bytearray, seq_len: int) -> None:
    """Store (1, seq_len) as the inputs' shapes, in place; their shape signatures stay (-1, -1)."""
    schema = _schema()
    model = schema.Model.GetRootAs(flatbuffer, 0)
    subgraph, inputs, _ = _signature_tensors(model, schema)
    for index in inputs.values():
        shape = subgraph.Tensors(index).ShapeAsNumpy()  # a writable view into the flatbuffer
        if getattr(shape, "shape", None) != (2,):
            raise ConversionError(f"an input of the converted model has shape {shape}, not (batch, sequence)")
        shape[:] = (1, seq_len)


def _check(flatbuffer: bytearray, output_names: tuple[str, ...], runtime: str | None = None) -> None:
    """Builtin ops only, the signature albert-edge promises, and nothing ``runtime`` cannot load."""
    schema = _schema()
    model = schema.Model.GetRootAs(flatbuffer, 0)
    custom = schema.BuiltinOperator.CUSTOM
    for i in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(i)
        if max(code.BuiltinCode(), code.DeprecatedBuiltinCode()) == custom:
            name = (code.CustomCode() or b"?").decode()
            raise ConversionError(f"the converted model needs the non-builtin op {name}")
    subgraph, inputs, outputs = _signature_tensors(model, schema)
    if sorted(inputs) != sorted(INPUT_NAMES):
        raise ConversionError(f"the converted model's inputs are {sorted(inputs)}, not {sorted(INPUT_NAMES)}")
    if sorted(outputs) != sorted(output_names):
        raise ConversionError(f"the converted model's outputs are {sorted(outputs)}, not {sorted(output_names)}")
    int32 = schema.TensorType.INT32
    for name, index in inputs.items():
        if subgraph.Tensors(index).Type() != int32:
            raise ConversionError(f"input {name} of the converted model is not int32")
    too_new = too_new_for(op_versions(flatbuffer), runtime) if runtime is not None else []
    if too_new:
        needs = ", ".join(f"{o.op} version {o.version} (runtime {o.min_runtime or 'unknown'})" for o in too_new)
        raise ConversionError(f"the converted model would not load in TFLite runtime {runtime}: it needs {needs}")
