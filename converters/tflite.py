"""Export an ALBERT model to TFLite: builtin ops only, one ``serving_default`` signature, each
shared weight stored once.

The graph is ALBERT re-stated in TensorFlow (:mod:`.tf_albert`) around our PyTorch weights,
converted with TFLite builtins only, so it runs on ai-edge-litert or tflite-runtime as shipped.
Inputs are (batch, sequence) int32 with both axes dynamic; the file's input shapes are set to
(1, seq_len), so a plain interpreter runs at seq_len and ``resize_tensor_input`` gives any other
length up to max_position_embeddings. Its outputs' stored shapes are set for (1, seq_len) too:
LiteRT's ``CompiledModel`` sizes its output buffers from them.

``static=True`` writes a static-shape file instead, inputs ``[1, seq_len]`` and every tensor of
a fixed size, in ops LiteRT's GPU accelerator takes whole (:mod:`.tf_albert`); it is written
unrolled, since the accelerator runs no WHILE. It stores the position embeddings of its
``seq_len`` positions only (the converter folds the slice), every other weight once as usual.
"""

from __future__ import annotations

import contextlib
import json
import logging
import mmap
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from albert_edge.children import child_env, python
from albert_edge.errors import ConversionError, install_line, optional_import, user_message

from albert_edge.formats.graph import DEFAULT_LAYER_FORM, INPUT_NAMES, LAYER_FORMS
from albert_edge.formats.op_versions import TFLITE_RUNTIME_LAST, op_versions, too_new_for
from albert_edge.formats.tflite_reader import SETTING_SIGNATURE, SIGNATURE
from albert_edge.formats.weights import model_param_bytes

from .native_logs import quiet_native, quiet_tensorflow_env

if TYPE_CHECKING:
    from torch import nn

__all__ = ["export", "INPUT_NAMES", "LAYER_FORMS", "check_layers", "layers_for"]

log = logging.getLogger(__name__)



def check_layers(layers: str) -> None:
    """``layers`` is one of ``formats.graph.LAYER_FORMS``."""
    if layers not in LAYER_FORMS:
        raise ConversionError(f"layers must be one of {', '.join(LAYER_FORMS)}, not {layers!r}")


def layers_for(layers: str | None, static: bool) -> str:
    """The layer form to write: ``layers`` as given, else the default (unrolled for a static file,
    which is for LiteRT's GPU accelerator). A static loop file is refused: its WHILE runs on the
    CPU only."""
    if layers is None:
        return "unrolled" if static else DEFAULT_LAYER_FORM
    check_layers(layers)
    if static and layers == "loop":
        raise ConversionError("--layers loop cannot be --static: LiteRT's GPU accelerator runs no WHILE (it runs "
                              "on the CPU only); leave --layers out, or give --layers unrolled")
    return layers


# A flatbuffer cannot address more than 2 GiB. Past this much fp32 weight (leaving room for the
# graph) the converter writes the weights after the flatbuffer and points at them by offset;
# the reader follows both layouts.
_BUFFER_OFFSET_ABOVE = 1 << 30
# ``export`` stores weights that way from a smaller size on: the converter then appends them to
# the flatbuffer instead of growing its builder around them, which takes ~1 GiB less at the
# peak for ALBERT-xxlarge (890 MB of fp32 weights). Every runtime albert-edge supports, down to
# tflite-runtime 2.14, reads both layouts; ALBERT-base and -large files keep the inline one.
_EXPORT_BUFFER_OFFSET_ABOVE = 256 << 20


def export(model: nn.Module, out_path: str | os.PathLike, *, seq_len: int = 128,
           layers: str | None = None, static: bool = False) -> Path:
    """Convert ``model`` (any head of albert_edge.model) to a .tflite file at ``out_path``;
    ``layers`` is how the shared layer applications are written (``LAYER_FORMS``: "loop" writes
    each run of one weight group as a WHILE operator over one body subgraph; None: "loop", or
    "unrolled" for a static file). ``static`` writes a static-shape file, inputs ``[1, seq_len]``,
    for LiteRT's GPU accelerator.

    The file is written at ``out_path`` itself (``convert`` writes it in the folder it stages).
    Raises ConversionError (one line) when the model cannot be converted.
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
    layers = layers_for(layers, static)
    static_len = seq_len if static else None

    start = time.perf_counter()
    try:
        # TensorFlow's start-up lines (absl, CUDA probing) from this process and its children
        with quiet_native(tensorflow=True):
            if _converts_in_child():
                _convert_in_children(model, out_path, seq_len, layers, static_len)
            else:
                out_path.write_bytes(convert(model, seq_len=seq_len, layers=layers,
                                             **({"static": True} if static else {})))
            log.info("converted to TFLite in %.1f s (%d bytes)", time.perf_counter() - start, out_path.stat().st_size)
    except OSError as exc:
        if user_message(exc) is not None:  # a full disk, a read-only file system: the staging writer says those
            raise
        raise ConversionError(f"cannot write {out_path}: {exc.strerror or exc}") from None
    return out_path


def _convert_in_children(model: nn.Module, path: Path, seq_len: int, layers: str,
                         static_len: int | None = None) -> None:
    """What ``convert`` does, in two child processes: a forked one writes the SavedModel (it
    reads the weights this process holds, copy-on-write), a fresh Python converts it and writes
    ``path`` (it needs nothing of this process, so it maps none of it). TensorFlow gives little
    of its memory back: in one process the converter's peak came on top of the SavedModel's and
    stayed through verification. Split this way, the largest process holds about half of what one
    process held, and all of them together less than it (benchmarks/convert_sizes.py measures it)."""
    with _private_tempdir() as private:
        saved = os.path.join(private, "saved_model")
        _in_child(_save, model, saved, layers, static_len)
        offset = model_param_bytes(model, 4) > _EXPORT_BUFFER_OFFSET_ABOVE
        _in_fresh_process(saved, offset, tuple(model.output_names), path, seq_len, _signature_keys(model))


@contextlib.contextmanager
def _private_tempdir() -> Iterator[str]:
    """A temporary directory that is also every temporary file's, for the time of a conversion,
    removed afterwards with all in it. TensorFlow writes a module per function autograph converts
    (``__autograph_generated_file*.py``) to the temporary directory and never removes them; here
    they go into this one: ``tempfile.tempdir`` for this process and a forked child, ``$TMPDIR``
    for a fresh one."""
    with tempfile.TemporaryDirectory(prefix="albert-edge-tflite-", ignore_cleanup_errors=True) as private:
        before, before_env = tempfile.tempdir, os.environ.get("TMPDIR")
        tempfile.tempdir, os.environ["TMPDIR"] = private, private
        try:
            yield private
        finally:
            tempfile.tempdir = before
            if before_env is None:
                os.environ.pop("TMPDIR", None)
            else:
                os.environ["TMPDIR"] = before_env


def _convert_saved(saved: str, buffer_offset: bool, output_names: tuple[str, ...], path: Path, seq_len: int,
                   keys: Sequence[str] = (SIGNATURE,)) -> None:
    """The SavedModel converted, checked and written to ``path``, holding one copy of the
    flatbuffer: checked as the converter returned it, written, then its input shapes set in
    the file."""
    flatbuffer = _run_converter(saved, buffer_offset, keys=keys)
    _check(flatbuffer, output_names, TFLITE_RUNTIME_LAST)
    try:
        with open(path, "wb") as f:
            f.write(flatbuffer)
        del flatbuffer
        with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as view:
            _set_input_shapes(view, seq_len)
    except OSError as exc:
        raise ConversionError(f"cannot write {path.name}: {exc.strerror or exc}") from None


_FRESH_PROCESS_MAIN = "import sys; from albert_edge.converters.tflite import _fresh_process_main; _fresh_process_main(sys.argv[1:])"


def _in_fresh_process(saved: str, buffer_offset: bool, output_names: tuple[str, ...], path: Path,
                      seq_len: int, keys: Sequence[str] = (SIGNATURE,)) -> None:
    """:func:`_convert_saved` in a new Python process; its errors raised here as ConversionError."""
    with tempfile.NamedTemporaryFile(prefix="albert-edge-tflite-", suffix=".error") as error:
        args = json.dumps([saved, buffer_offset, list(output_names), str(path), seq_len, list(keys), error.name])
        # Its stdout onto stderr: this process's stdout may be a --json answer.
        done = subprocess.run(python("-c", _FRESH_PROCESS_MAIN, args), env=quiet_tensorflow_env(child_env()),
                              stdin=subprocess.DEVNULL, stdout=2)
        _raise_for(done.returncode, Path(error.name).read_text(errors="replace").strip())


def _fresh_process_main(argv: list[str]) -> None:
    saved, buffer_offset, output_names, path, seq_len, keys, error = json.loads(argv[0])
    _report_to(error, _convert_saved, saved, buffer_offset, tuple(output_names), Path(path), seq_len, keys)


def _converts_in_child() -> bool:
    """Whether ``export`` converts in forked children (:func:`_convert_in_children`): only where
    fork is safe for it, on Linux with TensorFlow not yet imported here (its thread pools do not
    survive a fork); otherwise in this process."""
    return sys.platform.startswith("linux") and "tensorflow" not in sys.modules


def _in_child(work, *args) -> None:
    """``work(*args)`` in a forked child, which shares this process's weights copy-on-write;
    its errors raised here as ConversionError."""
    with tempfile.NamedTemporaryFile(prefix="albert-edge-tflite-", suffix=".error") as error:
        for stream in filter(None, (sys.stdout, sys.stderr)):
            stream.flush()  # or the child would write out what is buffered here a second time
        pid = os.fork()
        if pid == 0:  # the child: never returns into the caller's stack
            _report_to(error.name, work, *args)
        try:
            _, status = os.waitpid(pid, 0)
        except BaseException:  # an interrupt: the child goes with us
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise
        _raise_for(os.waitstatus_to_exitcode(status), Path(error.name).read_text(errors="replace").strip())


def _report_to(error_file: str, work, *args) -> None:
    """Run ``work(*args)`` as a child's whole life: exit 0, or write the error to ``error_file``
    and exit 2 (a ConversionError: its message) or 1 (anything else: its type and message)."""
    code = 0
    try:
        work(*args)
    except BaseException as exc:  # noqa: BLE001 (everything goes back to the parent)
        code = 2 if isinstance(exc, ConversionError) else 1
        message = str(exc) if code == 2 else "".join(traceback.format_exception_only(exc)).strip()
        with open(error_file, "w") as f:
            f.write(message)
    finally:
        for stream in filter(None, (sys.stdout, sys.stderr)):
            stream.flush()
        os._exit(code)


def _raise_for(code: int, message: str) -> None:
    """The ConversionError for a child's exit ``code`` (negative: killed by that signal)."""
    if code < 0:
        sig = signal.Signals(-code)
        hint = " (out of memory?)" if sig == signal.SIGKILL else ""
        raise ConversionError(f"the TFLite converter process was killed by {sig.name}{hint}")
    if code == 2:
        raise ConversionError(message)
    if code != 0:
        raise ConversionError(f"TFLite conversion failed: {message or f'exit status {code}'}")


def convert(model: nn.Module, *, seq_len: int = 128, buffer_offset: bool | None = None,
            run_converter=None, runtime: str | None = TFLITE_RUNTIME_LAST,
            layers: str | None = None, static: bool = False) -> bytearray:
    """The .tflite flatbuffer for ``model``, checked: builtin ops only, the expected signature,
    and operator versions that TFLite ``runtime`` loads (None: any; the default is
    tflite-runtime 2.14, the last tflite-runtime release, on Raspberry Pi OS bookworm).

    ``buffer_offset`` stores weights after the flatbuffer (needed past 2 GiB); None decides by
    the model's size. ``run_converter`` (used by albert_edge.quantize) takes the configured
    TFLiteConverter and returns the flatbuffer in place of ``converter.convert()``, so a
    quantization scheme can add its settings and rewrite the result before the checks here.
    ``layers`` and ``static`` are :func:`export`'s.
    """
    layers = layers_for(layers, static)
    flatbuffer = bytearray(_converted(model, buffer_offset, run_converter, layers, seq_len if static else None))
    _set_input_shapes(flatbuffer, seq_len)
    _check(flatbuffer, tuple(model.output_names), runtime)
    return flatbuffer


def _converted(model: nn.Module, buffer_offset: bool | None = None, run_converter=None,
               layers: str = DEFAULT_LAYER_FORM, static_len: int | None = None) -> bytes:
    """The converter's flatbuffer for ``model``, as it returned it."""
    with _private_tempdir() as private:
        saved = os.path.join(private, "saved_model")
        _save(model, saved, layers, static_len)
        return _run_converter(saved, _buffer_offset(model, buffer_offset), run_converter, _signature_keys(model))


def _buffer_offset(model: nn.Module, asked: bool | None) -> bool:
    return asked if asked is not None else model_param_bytes(model, 4) > _BUFFER_OFFSET_ABOVE


def _signature_keys(model: nn.Module) -> list[str]:
    """The signatures of ``model``'s file, serving first: an adaptive classifier's (convert
    --adaptive) also changes its exit setting."""
    from .task_heads import AdaptiveClassifier

    return [SIGNATURE, SETTING_SIGNATURE] if isinstance(model, AdaptiveClassifier) else [SIGNATURE]


def _save(model: nn.Module, saved: str, layers: str = DEFAULT_LAYER_FORM, static_len: int | None = None) -> None:
    """``model`` as a SavedModel in ``saved``: its weights are variables, which the converter
    freezes once each; weights captured as graph constants cost several times the memory and time.
    ``static_len``: the static-shape graph for inputs ``[1, static_len]``."""
    tf = _import_tensorflow()
    from .tf_albert import TFAlbert

    module = TFAlbert(model, layers, static_len)
    signatures = module.signatures()
    try:
        tf.saved_model.save(module, saved, signatures=signatures)
    except OSError as exc:
        raise ConversionError(f"cannot write the intermediate SavedModel: {exc.strerror or exc}") from None


def _run_converter(saved_model: str, buffer_offset: bool, run=None, keys: Sequence[str] = (SIGNATURE,)) -> bytes:
    tf = _import_tensorflow()
    converter = tf.lite.TFLiteConverter.from_saved_model(saved_model, signature_keys=list(keys))
    # An adaptive file's exit setting is the one variable a signature assigns: it stays a variable
    # (VAR_HANDLE, READ/ASSIGN_VARIABLE), every weight is frozen into a constant as before.
    converter.experimental_enable_resource_variables = len(keys) > 1
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    # Folding a LayerNorm scale into the next layer's weight makes a copy of that weight per
    # layer application; tf_albert's row-shaped LayerNorm parameters already keep it from
    # matching, this keeps it off should the pattern widen.
    converter._experimental_disable_fuse_mul_and_fc = True
    converter._experimental_use_buffer_offset = buffer_offset
    try:
        return converter.convert() if run is None else run(converter)
    except Exception as exc:  # the converter raises its own error types with pages of MLIR
        raise ConversionError(f"TFLite conversion failed: {_first_line(exc)}") from None


def _import_tensorflow():
    if "tensorflow" not in sys.modules:
        quiet_tensorflow_env()  # read as TensorFlow loads; a level the user set is kept
    try:
        tf = optional_import("tensorflow")
    except ImportError:
        raise ConversionError(f"converting to TFLite needs tensorflow ({install_line('convert')})") from None
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
    """Store (1, seq_len) as the inputs' shapes, and each output's shape at (1, seq_len), in
    place; the shape signatures stay as they are (-1 where dynamic).

    The converter stores 1 for each dynamic axis: an output (-1, -1, H) reads (1, 1, H).
    LiteRT's ``CompiledModel`` sizes its output buffers from the stored shape, without working
    it out from the inputs, so the run would write past a (1, 1, H) buffer and corrupt the heap;
    stored as (1, seq_len, H) the file runs there at its default length."""
    schema = _schema()
    model = schema.Model.GetRootAs(flatbuffer, 0)
    subgraph, inputs, outputs = _signature_tensors(model, schema)
    for index in inputs.values():
        shape = subgraph.Tensors(index).ShapeAsNumpy()  # a writable view into the flatbuffer
        if getattr(shape, "shape", None) != (2,):
            raise ConversionError(f"an input of the converted model has shape {shape}, not (batch, sequence)")
        shape[:] = (1, seq_len)
    for index in outputs.values():
        tensor = subgraph.Tensors(index)
        shape, signature = tensor.ShapeAsNumpy(), tensor.ShapeSignatureAsNumpy()
        if isinstance(signature, int) or len(signature) != len(shape):  # no signature: every axis fixed
            continue
        # -1 on the batch axis is 1; on any other axis it is the sequence (the only other dynamic one)
        shape[:] = [d if d >= 0 else 1 if axis == 0 else seq_len for axis, d in enumerate(signature)]


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
