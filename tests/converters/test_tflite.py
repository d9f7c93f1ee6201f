"""TFLite export: builtin ops, the serving signature, parity with PyTorch in the real interpreter
(at the built length and after resizing), and every shared weight stored once."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tensorflow")
litert = pytest.importorskip("ai_edge_litert.interpreter")

from albert_edge.config import AlbertConfig  # noqa: E402
from albert_edge.converters import tflite  # noqa: E402
from albert_edge.formats.op_versions import TFLITE_RUNTIME_LAST, min_runtime, op_versions, too_new_for  # noqa: E402
from albert_edge.formats.tflite_reader import layer_form, read  # noqa: E402
from albert_edge.errors import ConversionError, OutputError  # noqa: E402
from albert_edge.model import build_model  # noqa: E402

BUILT = 16  # the tiny preset allows up to 64 positions
TINY = AlbertConfig.preset("tiny")  # V=99, E=8 != H=16, L=4, G=2

# Every head once, each on another config variant, so one conversion per case covers them all.
CASES = {
    "base": ("base", {}),
    "mlm-share-attention": ("mlm", dict(sharing="attention")),
    "pretraining-inner2": ("pretraining", dict(inner_group_num=2)),
    "classification-share-none-relu": ("classification", dict(sharing="none", hidden_act="relu", num_labels=3)),
    "token-classification-share-ffn-gelu": ("token-classification", dict(sharing="ffn", hidden_act="gelu")),
    # Twelve applications of one group: stored once, not unrolled into copies.
    "qa-L12-G1-silu": ("qa", dict(num_hidden_layers=12, num_hidden_groups=1, hidden_act="silu")),
}


def _randomize(model) -> None:
    """Random values everywhere: zero biases and unit LayerNorm weights would be folded away by
    the converter and hide both parity and storage mistakes."""
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p + 0.1 * torch.randn(p.shape, generator=gen))


# Each case in both layer forms: every check below holds for the loop as for the unrolled file.
@pytest.fixture(scope="module", params=[(case, form) for form in tflite.LAYER_FORMS for case in CASES],
                ids=lambda p: f"{p[0]}-{p[1]}")
def exported(request, tmp_path_factory):
    case, layers = request.param
    head, changes = CASES[case]
    torch.manual_seed(0)
    model = build_model(TINY.replace(**changes), head)
    _randomize(model)
    path = tflite.export(model, tmp_path_factory.mktemp("tflite") / "model.tflite", seq_len=BUILT, layers=layers)
    return model, path


def _inputs(batch: int, length: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, TINY.vocab_size, (batch, length)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[-1, length // 2:] = 0  # padding on the last row
    types = np.zeros_like(ids)
    types[:, length // 3:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def _torch_outputs(model, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    with torch.no_grad():
        out = model(*(torch.from_numpy(inputs[n]).long() for n in tflite.INPUT_NAMES))
    out = out if isinstance(out, tuple) else (out,)
    return {name: t.numpy() for name, t in zip(model.output_names, out)}


def _assert_close(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert sorted(got) == sorted(want)
    for name, expected in want.items():
        assert got[name].shape == expected.shape, name
        np.testing.assert_allclose(got[name], expected, rtol=0, atol=1e-4, err_msg=name)


def test_signature_and_builtin_ops(exported):
    model, path = exported
    interpreter = litert.Interpreter(model_path=str(path))
    signatures = interpreter.get_signature_list()
    assert list(signatures) == ["serving_default"]
    assert sorted(signatures["serving_default"]["inputs"]) == sorted(tflite.INPUT_NAMES)
    assert sorted(signatures["serving_default"]["outputs"]) == sorted(model.output_names)
    contents = read(path)
    assert {s.name: (s.dtype, s.shape) for s in contents.inputs} == {
        name: ("int32", (-1, -1)) for name in tflite.INPUT_NAMES
    }
    # No Flex or custom op: every op is a TFLite builtin (the reader names customs by their code).
    from ai_edge_litert import schema_py_generated as schema

    assert set(contents.ops) <= set(vars(schema.BuiltinOperator)) - {"CUSTOM"}
    assert contents.ops["FULLY_CONNECTED"] > 0


def test_parity_at_built_length_without_resizing(exported):
    model, path = exported
    interpreter = litert.Interpreter(model_path=str(path))
    interpreter.allocate_tensors()
    runner = interpreter.get_signature_runner("serving_default")
    details, output_details = runner.get_input_details(), runner.get_output_details()
    del runner  # the interpreter refuses to invoke while a runner holds it
    assert {name: tuple(d["shape"]) for name, d in details.items()} == {n: (1, BUILT) for n in tflite.INPUT_NAMES}
    inputs = _inputs(1, BUILT, seed=1)
    for name, detail in details.items():
        interpreter.set_tensor(detail["index"], inputs[name])
    interpreter.invoke()
    got = {name: interpreter.get_tensor(d["index"]) for name, d in output_details.items()}
    _assert_close(got, _torch_outputs(model, inputs))


def test_loop_form_writes_each_run_of_a_group_once(exported):
    """--layers loop: one WHILE per run of two or more applications of one weight group, and its
    operators once, so the file holds fewer FULLY_CONNECTEDs than the unrolled one; the unrolled
    form has no WHILE. Variants that share nothing across layers have no run to loop."""
    model, path = exported
    contents = read(path)
    runs = model.config.group_runs()
    looped = [times for _, times in runs if times > 1]
    layers = layer_form(path)
    if layers == "unrolled":
        assert "WHILE" not in contents.ops
        return
    assert contents.ops.get("WHILE", 0) == len(looped)
    per_layer = 6 * model.config.inner_group_num  # Q, K, V, attention output, FFN in, FFN out
    applications = sum(times for _, times in runs) * per_layer
    # Outside the layers, at most five: the embedding projection, the pooler, the MLM transform
    # and decoder, and the sentence-order classifier (the pretraining head has all five).
    assert contents.ops["FULLY_CONNECTED"] <= applications - sum(times - 1 for times in looped) * per_layer + 5


@pytest.mark.parametrize("length", [7, 33, 64])
def test_parity_after_resizing(exported, length):
    model, path = exported
    runner = litert.Interpreter(model_path=str(path)).get_signature_runner("serving_default")
    inputs = _inputs(2, length, seed=length)
    _assert_close(runner(**inputs), _torch_outputs(model, inputs))


def test_one_session_runs_it_at_one_length_after_another(exported):
    """albert_edge's Session (LiteRT's CompiledModel) binds the outputs of the file; resizing
    between calls must not leave an output it cannot bind (a WHILE's dynamic output)."""
    from albert_edge.runtime import Session

    model, path = exported
    session = Session(path)
    for length, batch in ((BUILT, 1), (7, 2), (33, 1)):
        inputs = _inputs(batch, length, seed=length)
        _assert_close(session.run(inputs), _torch_outputs(model, inputs))


def _digest(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a, dtype=np.float32).tobytes()).hexdigest()


def test_each_weight_stored_once(exported):
    model, path = exported
    params = {_digest(p.detach().numpy()): name for name, p in model.named_parameters()}
    assert len(params) == len(list(model.parameters()))  # randomized: no two parameters equal
    contents = read(path)
    stored = [w for w in contents.weights if w.dtype == "float32" and w.data.size > 1]
    digests = [_digest(w.data) for w in stored]
    # Every stored float tensor is one of the model's parameters, unchanged (no folded or
    # transposed copy), each parameter is stored exactly once, and none is missing.
    assert sorted(digests) == sorted(params), [w.name for w, d in zip(stored, digests) if d not in params]
    unique_bytes = sum(p.numel() * 4 for p in model.parameters())
    assert sum(w.nbytes for w in stored) == unique_bytes
    assert contents.stored_weight_bytes <= 1.005 * unique_bytes + 64 * 1024


@pytest.mark.parametrize("seq_len", [0, 65, "128"])
def test_bad_seq_len_is_one_clear_error(tmp_path, seq_len):
    model = build_model(TINY, "base")
    with pytest.raises(ConversionError, match="seq_len"):
        tflite.export(model, tmp_path / "model.tflite", seq_len=seq_len)
    assert list(tmp_path.iterdir()) == []


def test_unknown_model_is_one_clear_error(tmp_path):
    with pytest.raises(ConversionError, match="not one of albert_edge.model's ALBERT models"):
        tflite.export(_NotAlbert(TINY), tmp_path / "model.tflite", seq_len=8)
    assert list(tmp_path.iterdir()) == []


# The write path on its own: the flatbuffer comes from the first case's real export.
@pytest.fixture
def flatbuffer_only(exported, monkeypatch):
    data = bytearray(exported[1].read_bytes())
    monkeypatch.setattr(tflite, "convert", lambda model, seq_len, layers: data)
    return bytes(data)


@pytest.mark.parametrize("exported", [("base", "unrolled")], indirect=True, ids=["base"])
def test_failed_write_leaves_neither_file_nor_temporary(exported, flatbuffer_only, tmp_path, monkeypatch):
    """The exporter writes in the folder convert stages: a write that fails leaves nothing."""
    from albert_edge import files
    from albert_edge.converters.export import convert

    out, real = tmp_path / "out", files._put_in_place

    def full_disk(moves):
        if any(dst == out for _, dst in moves):
            raise OSError(28, "No space left on device")
        return real(moves)

    # the file written and verified, then putting the folder in place fails (the step of files.install
    # that staged takes)
    monkeypatch.setattr(files, "_put_in_place", full_disk)
    with pytest.raises(OutputError, match=f"cannot write {out}: the disk is full"):
        convert(exported[0], out, targets=("tflite",), seq_len=BUILT)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("exported", [("base", "unrolled")], indirect=True, ids=["base"])
def test_export_replaces_an_existing_file(flatbuffer_only, tmp_path):
    target = tmp_path / "model.tflite"
    target.write_bytes(b"old")
    tflite.export(build_model(TINY, "base"), target, seq_len=8)
    assert target.read_bytes() == flatbuffer_only
    assert [p.name for p in tmp_path.iterdir()] == ["model.tflite"]


def test_missing_directory_is_one_clear_error(tmp_path):
    with pytest.raises(ConversionError, match="is not a directory"):
        tflite.export(build_model(TINY, "base"), tmp_path / "missing" / "model.tflite", seq_len=8)


class _NotAlbert(torch.nn.Module):
    output_names = ("logits",)

    def __init__(self, config):
        super().__init__()
        self.config = config


def test_loads_in_tflite_runtime_214_and_inspect_says_so(exported):
    """Every operator version the exporter writes is one tflite-runtime 2.14 (Raspberry Pi OS
    bookworm) registers; `inspect` lists each with the first runtime that has it."""
    import json

    from click.testing import CliRunner

    from albert_edge.cli import main

    _, path = exported
    ops = op_versions(path)
    assert not too_new_for(ops, TFLITE_RUNTIME_LAST)
    shown = CliRunner().invoke(main, ["inspect", "--json", str(path)])
    assert shown.exit_code == 0, shown.output
    report = json.loads(shown.stdout)
    assert report["min_runtime"] == min_runtime(ops)
    assert report["loads_in_tflite_runtime"] == {TFLITE_RUNTIME_LAST: True}
    assert {(o["op"], o["version"]) for o in report["op_versions"]} == {(o.op, o.version) for o in ops}
    table = CliRunner().invoke(main, ["inspect", str(path)])
    assert f"minimum TFLite runtime: {min_runtime(ops)} (tflite-runtime {TFLITE_RUNTIME_LAST}: yes)" in table.output


def test_operator_versions_newer_than_the_runtime_are_refused(tmp_path):
    """A converter that writes FULLY_CONNECTED version 12 (per-channel hybrid, runtime 2.17):
    the exporter refuses the file unless asked for no runtime floor."""
    from albert_edge.formats.tflite_model import load, pack

    def fc_version_12(converter):
        model = load(converter.convert())
        for code in model.obj.operatorCodes:
            if max(code.builtinCode, code.deprecatedBuiltinCode) == model.schema.BuiltinOperator.FULLY_CONNECTED:
                code.version = 12
        return pack(model)

    torch.manual_seed(0)
    model = build_model(TINY, "base")
    with pytest.raises(ConversionError, match=r"would not load in TFLite runtime 2\.14\.0: it needs "
                                              r"FULLY_CONNECTED version 12 \(runtime 2\.17\.0\)"):
        tflite.convert(model, seq_len=BUILT, run_converter=fc_version_12)
    flatbuffer = tflite.convert(model, seq_len=BUILT, run_converter=fc_version_12, runtime=None)
    assert min_runtime(op_versions(flatbuffer)) == "2.17.0"


_EXPORT_IN_FRESH_PROCESS = """
import sys
import torch
from albert_edge.config import AlbertConfig
from albert_edge.converters import tflite
from albert_edge.errors import ConversionError
from albert_edge.model import build_model

print("buffered before the conversion", end=" ")  # stdout is a pipe: held in the buffer
torch.manual_seed(0)
model = build_model(AlbertConfig.preset("tiny"), "base")
with torch.no_grad():
    for p in model.parameters():
        p.add_(0.1 * torch.randn_like(p))
tflite.export(model, sys.argv[1] + "/model.tflite", seq_len=16)
assert "tensorflow" not in sys.modules, "the conversion ran in this process"
torch.save(model.state_dict(), sys.argv[1] + "/state.pt")
tflite._EXPORT_BUFFER_OFFSET_ABOVE = 0  # the layout export picks for ALBERT-xxlarge
tflite.export(model, sys.argv[1] + "/offset.tflite", seq_len=16)
other = torch.nn.Linear(2, 2)
other.config, other.output_names = model.config, ("logits",)
try:
    tflite.export(other, sys.argv[1] + "/other.tflite", seq_len=16)
except ConversionError as exc:
    print("refused:", exc)
"""


def test_export_converts_in_a_child_process(tmp_path):
    """In a process that has not imported TensorFlow, the conversion runs in child processes
    (their memory goes back before verification): TensorFlow never enters the parent, the file
    agrees with PyTorch in both weight layouts, the child's ConversionError reaches the caller
    as one line, and nothing the parent had buffered is printed twice."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # stdout buffered, as usual
    done = subprocess.run([sys.executable, "-c", _EXPORT_IN_FRESH_PROCESS, str(tmp_path)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused: Linear is not one of albert_edge.model's ALBERT models" in done.stdout
    assert done.stdout.count("buffered before the conversion") == 1  # not written again by the fork
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.tflite", "offset.tflite", "state.pt"]
    model = build_model(TINY, "base")
    model.load_state_dict(torch.load(tmp_path / "state.pt", weights_only=True))
    inputs = _inputs(1, 16, seed=3)
    for name, offsets in (("model.tflite", False), ("offset.tflite", True)):
        assert _has_offset_buffers(tmp_path / name) is offsets, name
        runner = litert.Interpreter(model_path=str(tmp_path / name)).get_signature_runner(tflite.SIGNATURE)
        _assert_close(runner(**inputs), _torch_outputs(model.eval(), inputs))
        unique_bytes = sum(p.numel() * 4 for p in model.parameters())
        assert unique_bytes <= read(tmp_path / name).stored_weight_bytes <= 1.005 * unique_bytes + 64 * 1024


def _has_offset_buffers(path) -> bool:
    """Whether the file keeps its weights after the flatbuffer (buffers with an offset)."""
    from tensorflow.lite.python import schema_py_generated as schema

    model = schema.Model.GetRootAs(path.read_bytes(), 0)
    return any(model.Buffers(i).Offset() > 1 for i in range(model.BuffersLength()))


def _raises_conversion_error():
    raise ConversionError("the converter said no")


def _raises_value_error():
    raise ValueError("a bug")


def _killed():
    import os
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.parametrize("work, message", [
    (_raises_conversion_error, r"^the converter said no$"),
    (_raises_value_error, r"^TFLite conversion failed: ValueError: a bug$"),
    (_killed, r"^the TFLite converter process was killed by SIGKILL \(out of memory\?\)$"),
])
def test_a_failing_child_is_one_conversion_error(work, message):
    with pytest.raises(ConversionError, match=message):
        tflite._in_child(work)


def _autograph_files(root) -> list:
    """TensorFlow's generated modules, and our own temporary files, under ``root``."""
    return sorted(p.name for pattern in ("__autograph_generated_file*", "albert-edge-tflite-*")
                  for p in root.rglob(pattern))


def test_a_conversion_leaves_nothing_in_the_temporary_directory(tmp_path):
    """TensorFlow's autograph writes a module per converted function to the temporary directory
    and never removes it: every conversion used to leave some behind, even a successful one.
    Both routes: `albert-edge convert` (forked and fresh child processes) in a real process with
    its own TMPDIR, and ``convert`` in this process (what quantize runs)."""
    import os
    import subprocess
    import sys

    from albert_edge import checkpoints

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    torch.manual_seed(0)
    ckpt = checkpoints.save(build_model(TINY, "base"), tmp_path / "ckpt")
    proc = subprocess.run([sys.executable, "-m", "albert_edge", "convert", str(ckpt), "--to", "tflite", "--seq-len",
                           str(BUILT), "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TMPDIR": str(tmp)})
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "model.tflite").is_file()
    assert _autograph_files(tmp) == []  # (torch keeps its own compile cache there: not ours to remove)

    import tempfile

    before = tempfile.tempdir
    tempfile.tempdir = str(tmp)
    try:
        tflite.convert(build_model(TINY, "base"), seq_len=BUILT)
        assert tempfile.tempdir == str(tmp)  # given back as it was
    finally:
        tempfile.tempdir = before
    assert _autograph_files(tmp) == []
