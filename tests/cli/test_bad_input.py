"""Bad input across every command. Each case asserts the contract: its exit code, exactly one
line of message on stderr (progress lines aside), no traceback, nothing on stdout, and every
file under the case's directory and the shared inputs unchanged (nothing written, nothing
half-written, no temporary file left).

The cases are tables: damaged model files x the commands that read them, wrong-typed configs x
the commands that load them, unwritable outputs x the commands that write, option and data
nonsense per command. They run in-process through click's CliRunner; interrupts and the
entry point run as real subprocesses."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from albert_edge import checkpoints
from albert_edge.cli import main
from albert_edge.config import AlbertConfig
from albert_edge.model import build_model

from .bad_input import World, damage, leftovers, mounted, snapshot, write_jsonl

pytestmark = pytest.mark.filterwarnings("ignore")

DATA = Path(__file__).parents[1] / "data"
SCRIPT = Path(sys.executable).with_name("albert-edge")
TINY = AlbertConfig.preset("tiny").replace(vocab_size=400)  # the size of the shared spiece_model
# the lines training and the profiler print when stderr is not a terminal
PROGRESS = ("step ", "eval at step ", "profiling ", "[pipeline ", "[convert ", "[quantize ", "[profile ")


# ------------------------------------------------------------------------------------- world
@pytest.fixture(scope="module")
def world(tmp_path_factory, spiece_model) -> World:
    from albert_edge.converters.export import convert
    from albert_edge.tokenizer import train_spiece

    root = tmp_path_factory.mktemp("world")
    torch.manual_seed(0)
    ckpt = checkpoints.save(build_model(TINY, "pretraining"), root / "ckpt", spiece=spiece_model)
    targets = ("onnx", "ort", "tflite") if _has("tensorflow") else ("onnx", "ort")
    convert(ckpt, root / "conv", targets=targets, seq_len=16)
    big = train_spiece([DATA / "corpus.txt"], root / "big", vocab_size=430)
    small = train_spiece([DATA / "corpus.txt"], root / "small", vocab_size=99)
    cls = root / "cls.csv"
    cls.write_text("text,label\n" + "".join(f"{'a good module' if i % 2 else 'a bad function'} {i},{i % 2}\n"
                                            for i in range(8)), encoding="utf-8")
    tags = write_jsonl(root / "tags.jsonl", [{"tokens": ["the", "os", "module"], "tags": ["O", "B", "O"]}] * 4)
    qa = write_jsonl(root / "qa.jsonl", [{"question": "which module?", "context": "the os module reads files",
                                          "answer": "os", "answer_start": 4}] * 4)
    return World(root, ckpt, spiece_model, big, small, root / "conv", DATA / "corpus.txt", cls, tags, qa)


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


@pytest.fixture(scope="module")
def mounts(tmp_path_factory):
    """A read-only file system and a full one, each mounted once for the module (as root)."""
    base = tmp_path_factory.mktemp("mounts")
    with mounted(base / "readonly", "readonly") as ro, mounted(base / "full", "full") as full:
        yield {"readonly": (base / "readonly", ro), "full": (base / "full", full)}


# ------------------------------------------------------------------------------ the contract
def one_line(result, code: int, message: str) -> str:
    """The contract every case keeps; returns the line."""
    text = result.output + (result.stderr or "")
    assert "Traceback" not in text, text
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith(PROGRESS)]
    assert result.exit_code == code, (result.exit_code, text)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: "), lines
    assert message in lines[0], (message, lines[0])
    assert result.stdout == "", result.stdout
    return lines[0]


Setup = Callable[[World, Path], None]


@dataclass(frozen=True)
class Case:
    args: tuple[str, ...]  # {ckpt}, {onnx}, {scratch}, ... are filled in from the world
    message: str  # a part of the one line
    setup: Setup | None = None  # makes the bad input under {scratch}
    mount: str | None = None  # "readonly" | "full": {mnt} is that file system
    code: int = 2


def run_case(case, world, scratch: Path, mounts=None) -> str:
    """Run one table case in-process: ``world`` gives the shared inputs (``fields()``, ``root``)."""
    fields = world.fields(scratch)
    watched = [scratch, world.root]
    if case.mount:
        path, reason = mounts[case.mount]
        if reason:
            pytest.skip(reason)
        fields["mnt"] = str(path)
        watched.append(path)
    if getattr(case, "setup", None):
        case.setup(world, scratch)
    args = [a.format(**fields) for a in case.args]
    before = snapshot(*watched)
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    line = one_line(result, case.code, case.message.format(**fields))
    assert snapshot(*watched) == before, "an output changed or was left behind"
    return line


def cases(table: dict[str, Case]):
    return pytest.mark.parametrize("case", list(table.values()), ids=list(table))


# -------------------------------------------------------------------------------- setups
def _file(name: str, data: bytes | str = "keep\n") -> Setup:
    def setup(world: World, scratch: Path) -> None:
        path = scratch / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return setup


def _dir(name: str) -> Setup:
    return lambda world, scratch: (scratch / name).mkdir(parents=True)


def _damaged(fmt: str, how: str, beside_manifest: bool = False) -> Setup:
    """scratch/model.<fmt> damaged ``how`` (renamed: the other format's file under this name);
    with ``beside_manifest`` it sits in a copy of the conversion output, manifest and all."""
    def setup(world: World, scratch: Path) -> None:
        if fmt == "tflite" and not world.tflite.exists():
            pytest.skip("tensorflow is not installed: no .tflite file to damage")
        if beside_manifest:
            for item in world.conv.iterdir():
                shutil.copyfile(item, scratch / item.name)
        other = world.tflite if fmt == "onnx" else world.onnx
        source = other if how == "renamed" else getattr(world, fmt)
        if how == "renamed" and not source.exists():
            source = DATA / "corpus.txt"
        target = scratch / f"model.{fmt}"
        target.unlink(missing_ok=True)
        damage(source, target, how)
    return setup


def _config(change: dict, name: str = "config.json", weights: bool = True) -> Setup:
    """scratch/bad: the world's checkpoint with its config.json changed."""
    def setup(world: World, scratch: Path) -> None:
        bad = scratch / "bad"
        bad.mkdir()
        data = {**json.loads((world.ckpt / "config.json").read_text()), **change}
        (bad / name).write_text(json.dumps(data))
        if weights:
            shutil.copyfile(world.ckpt / "model.safetensors", bad / "model.safetensors")
    return setup


def _checkpoint(how: str) -> Setup:
    """scratch/bad: the world's checkpoint damaged ``how``."""
    def setup(world: World, scratch: Path) -> None:
        bad = scratch / "bad"
        shutil.copytree(world.ckpt, bad)
        weights = bad / "model.safetensors"
        if how == "truncated":
            weights.write_bytes(weights.read_bytes()[:300])
        elif how == "no-weights":
            weights.unlink()
        elif how == "no-config":
            (bad / "config.json").unlink()
        elif how == "config-not-json":
            (bad / "config.json").write_text("{not json")
        elif how == "config-not-utf8":
            (bad / "config.json").write_bytes(b'{"hidden_size": "\xff"}')
        elif how == "int32":
            from safetensors.torch import load_file, save_file

            state = load_file(weights)
            key = next(iter(state))
            state[key] = state[key].to(torch.int32)
            save_file(state, weights)
        elif how == "pickle":
            weights.unlink()

            class Evil:
                def __reduce__(self):
                    return (print, ("unpickled",))

            torch.save({"x": Evil()}, bad / "pytorch_model.bin")
        elif how == "empty-dir":
            shutil.rmtree(bad)
            bad.mkdir()
    return setup


# ----------------------------------------------------------------- damaged model files
DAMAGE_KINDS = ("truncated", "first-64-bytes", "empty", "zeros", "random", "text", "renamed", "directory")
MODEL_FILE_CASES = {
    f"{cmd}-{fmt}-{how}": Case((cmd, "{scratch}/model." + fmt), "model." + fmt, _damaged(fmt, how))
    for cmd in ("info", "inspect") for fmt in ("onnx", "ort", "tflite") for how in DAMAGE_KINDS
    # info describes a directory (a checkpoint) by what it holds, not by its name
    if not (cmd == "info" and how == "directory")
}
MODEL_FILE_CASES.update({
    f"quantize-{fmt}-{how}": Case(("quantize", "{scratch}/model." + fmt, "--scheme", "int8-dynamic", "--out",
                                   "{scratch}/q." + fmt), "model." + fmt, _damaged(fmt, how, beside_manifest=True))
    for fmt in ("onnx", "tflite") for how in DAMAGE_KINDS
})
MODEL_FILE_CASES.update({
    "info-missing": Case(("info", "{scratch}/nothing.onnx"), "does not exist"),
    "inspect-missing": Case(("inspect", "{scratch}/nothing.onnx"), "no such file"),
    "inspect-not-a-model": Case(("inspect", "{corpus}"), "not a model file"),
    "quantize-ort": Case(("quantize", "{ort}", "--scheme", "int8-dynamic", "--out", "{scratch}/q.ort"),
                         "quantized at conversion: albert-edge convert --to ort --scheme int8-dynamic"),
    "convert-ort-unknown-scheme": Case(("convert", "{ckpt}", "--to", "ort", "--scheme", "int4", "--out",
                                        "{scratch}/out"), "unknown ort scheme 'int4'"),
    "quantize-missing": Case(("quantize", "{scratch}/nothing.onnx", "--scheme", "int8-dynamic", "--out",
                              "{scratch}/q.onnx"), "no such file"),
    "quantize-no-manifest": Case(("quantize", "{scratch}/model.onnx", "--scheme", "int8-dynamic", "--out",
                                  "{scratch}/q.onnx"), "no manifest.json",
                                 lambda w, s: shutil.copyfile(w.onnx, s / "model.onnx")),
})


@cases(MODEL_FILE_CASES)
def test_damaged_model_files(case, world, tmp_path):
    run_case(case, world, tmp_path)


# -------------------------------------------------------------------- wrong-typed configs
WRONG_VALUES = {
    "hidden_size": ["abc", 1.5, True, -16, 0, [16]],
    "hidden_dropout_prob": ["abc", True, 1.5, -0.1, [0.1]],
    "layer_norm_eps": ["tiny", 0, -1],
    "hidden_act": [3, "swishy"],
    "num_hidden_groups": [0, "2", 99],
    "vocab_size": ["big", 0],
    "max_position_embeddings": ["x", 2.5],
    "pad_token_id": [1.5, 500],
    "albert_edge_sharing": ["most", 1],
    "id2label": [{"a": "x", "b": "y"}, [1, 2], {"0": "a", "2": "b"}, "labels"],
    "num_labels": ["two"],
    "eos_token_id": [[[]], ["a"], [True]],
    "intermediate_size": [10**4000],
}
CONFIG_CASES = {}
for _field, _values in WRONG_VALUES.items():
    for _i, _value in enumerate(_values):
        _shown = "sharing" if _field == "albert_edge_sharing" else _field
        if _field == "num_labels":  # only read when there is no id2label
            _change = {"num_labels": _value, "id2label": None}
        else:
            _change = {_field: _value}
        CONFIG_CASES[f"params-{_field}-{_i}"] = Case(("params", "{scratch}/bad/config.json"), _shown,
                                                     _config(_change, weights=False))
        CONFIG_CASES[f"info-{_field}-{_i}"] = Case(("info", "{scratch}/bad"), _shown, _config(_change))
        CONFIG_CASES[f"convert-{_field}-{_i}"] = Case(("convert", "{scratch}/bad", "--out", "{scratch}/out"),
                                                      _shown, _config(_change))
CONFIG_CASES.update({
    "params-manifest": Case(("params", "{conv}/manifest.json"), "is an albert-edge manifest"),
    "params-empty-object": Case(("params", "{scratch}/c.json"), "not a model config", _file("c.json", "{}")),
    "params-any-object": Case(("params", "{scratch}/c.json"), "not a model config",
                              _file("c.json", '{"name": "x", "size": 3}')),
    "params-list": Case(("params", "{scratch}/c.json"), "does not hold a JSON object", _file("c.json", "[1, 2]")),
    "params-not-json": Case(("params", "{scratch}/c.json"), "not valid JSON", _file("c.json", "{oops")),
    "params-not-utf8": Case(("params", "{scratch}/c.json"), "not valid JSON", _file("c.json", b'{"a": "\xff"}')),
    "params-bert": Case(("params", "{scratch}/c.json"), "not 'albert'", _file("c.json", '{"model_type": "bert"}')),
    "params-unknown-preset": Case(("params", "albert-huge"), "neither a preset"),
    "params-bad-head": Case(("params", "tiny", "--head", "ner"), "Invalid value for '--head'"),
    "params-5000-digits": Case(("params", "{scratch}/c.json"), "holds a number of more than 4300 digits",
                               _file("c.json", '{"model_type": "albert", "hidden_size": ' + "9" * 5000 + "}")),
    # A config that no machine can build, beside weights of the real size: the weights' shapes are
    # checked (on the meta device) before anything is allocated.
    "convert-beyond-ram": Case(("convert", "{scratch}/bad", "--out", "{scratch}/out"),
                               "but the config needs [100000000000, 16]", _config({"intermediate_size": 10**11})),
    "params-original-bad-act": Case(("params", "{scratch}/albert_config.json"), "hidden_act",
                                    _file("albert_config.json", json.dumps(
                                        {**AlbertConfig.preset("tiny").to_original_dict(), "hidden_act": "swish"}))),
})


@cases(CONFIG_CASES)
def test_wrong_typed_configs(case, world, tmp_path):
    run_case(case, world, tmp_path)


# ------------------------------------------------------------------------- checkpoints
CHECKPOINT_KINDS = {
    "truncated": "truncated or corrupt", "no-weights": "bad", "no-config": "bad", "config-not-json": "not valid JSON",
    "config-not-utf8": "not valid JSON", "pickle": "Unsupported global", "empty-dir": "bad", "int32": "int32",
}
CHECKPOINT_CASES = {}
for _how, _message in CHECKPOINT_KINDS.items():
    CHECKPOINT_CASES[f"convert-{_how}"] = Case(("convert", "{scratch}/bad", "--out", "{scratch}/out", "--seq-len",
                                                "16"), _message, _checkpoint(_how))
    if _how != "int32":  # info describes what is stored; the dtype check is convert's
        CHECKPOINT_CASES[f"info-{_how}"] = Case(("info", "{scratch}/bad"), _message, _checkpoint(_how))
    CHECKPOINT_CASES[f"finetune-{_how}"] = Case(
        ("finetune", "--task", "classification", "--train", "{cls}", "--eval", "{cls}", "--model", "{scratch}/bad",
         "--tokenizer", "{spiece}", "--max-seq-length", "16", "--out", "{scratch}/out"),
        _message, _checkpoint(_how))
del CHECKPOINT_CASES["finetune-int32"]  # the dtype check is convert's
CHECKPOINT_CASES.update({
    "convert-missing": Case(("convert", "{scratch}/nothing", "--out", "{scratch}/out"), "nothing"),
    "convert-bad-target": Case(("convert", "{ckpt}", "--to", "coreml", "--out", "{scratch}/out"),
                               "unknown target 'coreml'"),
    "convert-bad-head": Case(("convert", "{ckpt}", "--head", "ner", "--out", "{scratch}/out"), "unknown head 'ner'"),
    "convert-missing-head": Case(("convert", "{ckpt}", "--head", "qa", "--out", "{scratch}/out", "--seq-len", "16"),
                                 "no weights for head 'qa'"),
    "convert-seq-len-0": Case(("convert", "{ckpt}", "--seq-len", "0", "--out", "{scratch}/out"), "seq-len"),
    "convert-seq-len-too-long": Case(("convert", "{ckpt}", "--seq-len", "65", "--out", "{scratch}/out"),
                                     "max_position_embeddings (64)"),
    "convert-old-opset": Case(("convert", "{ckpt}", "--opset", "11", "--out", "{scratch}/out"),
                              "opset 11 is too old"),
    "convert-future-opset": Case(("convert", "{ckpt}", "--opset", "99", "--out", "{scratch}/out"),
                                 "opset 99 is too new"),
    "convert-opset-word": Case(("convert", "{ckpt}", "--opset", "new", "--out", "{scratch}/out"),
                               "Invalid value for '--opset'"),
    "convert-deep-out-fails-clean": Case(("convert", "{ckpt}", "--seq-len", "65", "--out", "{scratch}/a/b/c"),
                                         "max_position_embeddings"),
})


@cases(CHECKPOINT_CASES)
def test_bad_checkpoints(case, world, tmp_path):
    run_case(case, world, tmp_path)


# ------------------------------------------------------------------ outputs that cannot be written
CONVERT = ("convert", "{ckpt}", "--seq-len", "16", "--out")
QUANTIZE = ("quantize", "{onnx}", "--scheme", "int8-dynamic", "--tokenizer", "{spiece}", "--samples", "4",
            "--eval-samples", "4", "--seq-len", "16", "--out")
TOKENIZER = ("tokenizer", "train", "{corpus}", "--vocab-size", "99", "--out")
PRETRAIN = ("pretrain", "--corpus", "{corpus}", "--tokenizer", "{spiece}", "--config", "{ckpt}", "--steps", "1",
            "--batch-size", "2", "--max-seq-length", "16", "--eval-examples", "4", "--threads", "1", "--out")
FINETUNE = ("finetune", "--task", "classification", "--train", "{cls}", "--eval", "{cls}", "--model", "{ckpt}",
            "--epochs", "1", "--batch-size", "4", "--max-seq-length", "16", "--threads", "1", "--out")
WRITERS = {"convert": CONVERT, "quantize": QUANTIZE, "tokenizer-train": TOKENIZER, "pretrain": PRETRAIN,
           "finetune": FINETUNE}


def _out(command: str, directory: str) -> str:
    return f"{directory}/q.onnx" if command == "quantize" else f"{directory}/out"


_WRITE_KINDS: dict[str, tuple[Callable[[str], str], Callable[[str], str], Setup | None, str | None]] = {
    # kind: (--out, message, setup, mount)
    "out-is-a-file": (lambda c: "{scratch}/afile" + (".onnx" if c == "quantize" else ""),
                      lambda c: {"quantize": "already exists",
                                 "tokenizer-train": "is a file"}.get(c, "is a file, not a directory"),
                      None, None),
    "out-is-a-directory": (lambda c: "{scratch}/adir.onnx", lambda c: "is a directory", _dir("adir.onnx"), None),
    "out-under-a-file": (lambda c: _out(c, "{scratch}/afile"), lambda c: "not a directory", _file("afile"), None),
    "out-exists": (lambda c: "{scratch}/full" + ("/q.onnx" if c == "quantize" else ""),
                   lambda c: {"quantize": "already exists; pass --force", "tokenizer-train": "pass --force",
                              "finetune": "already holds a model"}.get(c, "already holds files"),
                   None, None),
    "read-only": (lambda c: _out(c, "{mnt}"), lambda c: "not writable", None, "readonly"),
    "full-disk": (lambda c: "{mnt}/q.onnx" if c == "quantize" else "{mnt}/" + c + "/out",
                  lambda c: "the disk is full", None, "full"),
}


def _exists(command: str) -> Setup:
    if command == "quantize":
        return _file("full/q.onnx")
    return _file("full/spiece.model" if command == "tokenizer-train" else "full/keep.txt")


def _afile(command: str) -> Setup:
    return _file("afile.onnx" if command == "quantize" else "afile")


WRITE_CASES: dict[str, Case] = {}
for _cmd, _base in WRITERS.items():
    for _kind, (_where, _msg, _setup, _mount) in _WRITE_KINDS.items():
        if _kind == "out-is-a-directory" and _cmd != "quantize":
            continue  # a directory is what the other commands write into
        _setup = {"out-exists": _exists(_cmd), "out-is-a-file": _afile(_cmd)}.get(_kind, _setup)
        WRITE_CASES[f"{_cmd}-{_kind}"] = Case((*_base, _where(_cmd)), _msg(_cmd), _setup, _mount)
WRITE_CASES.update({
    "finetune-out-is-model": Case((*FINETUNE[:-1], "--out", "{ckpt}"), "is the input"),
    "pretrain-over-checkpoints": Case((*PRETRAIN, "{scratch}/run"), "already holds checkpoints",
                                      _file("run/checkpoint-0000001/trainer_state.json", '{"step": 1}')),
    "quantize-out-is-parent": Case((*QUANTIZE[:-1], "--out", "{onnx}"), "is the fp32 file itself"),
    "quantize-out-wrong-suffix": Case((*QUANTIZE, "{scratch}/q.tflite"), "must end in .onnx"),
    "quantize-out-missing-dir": Case((*QUANTIZE, "{scratch}/no/such/q.onnx"), "does not exist"),
    "tokenizer-train-out-under-file-deep": Case((*TOKENIZER, "{scratch}/afile/a/b"), "not a directory",
                                                _file("afile")),
})


@cases(WRITE_CASES)
def test_unwritable_outputs(case, world, tmp_path, mounts):
    run_case(case, world, tmp_path, mounts)


# ---------------------------------------------------------------------- option nonsense
def _opt(base: tuple[str, ...], out: str, *extra: str) -> tuple[str, ...]:
    return (*base, out, *extra)


OPTION_CASES: dict[str, Case] = {}
for _cmd, _base in (("quantize", QUANTIZE), ("pretrain", PRETRAIN), ("finetune", FINETUNE)):
    for _value in ("0", "-1", "-8", "many"):
        _base_args = list(_base)
        if "--threads" in _base_args:
            del _base_args[_base_args.index("--threads"):_base_args.index("--threads") + 2]
        OPTION_CASES[f"{_cmd}-threads-{_value}"] = Case(
            (*_base_args, _out(_cmd, "{scratch}"), "--threads", _value), "Invalid value for '--threads'")
_PRETRAIN_BAD = {
    "holdout-every--1": (("--holdout-every", "-1"), "--holdout-every"),
    "keep-checkpoints--1": (("--keep-checkpoints", "-1"), "--keep-checkpoints"),
    "steps-0": (("--steps", "0"), "--steps"),
    "batch-size-0": (("--batch-size", "0"), "--batch-size"),
    "grad-accum-0": (("--grad-accum", "0"), "--grad-accum"),
    "max-seq-length-4": (("--max-seq-length", "4"), "--max-seq-length"),
    "max-seq-length-too-long": (("--max-seq-length", "1000"), "max_position_embeddings"),
    "warmup--1": (("--warmup-steps", "-1"), "--warmup-steps"),
    "warmup-over-steps": (("--warmup-steps", "5"), "warmup_steps (5)"),
    "eval-every-0": (("--eval-every", "0"), "--eval-every"),
    "save-every-0": (("--save-every", "0"), "--save-every"),
    "log-every-0": (("--log-every", "0"), "--log-every"),
    "chunk-documents-0": (("--chunk-documents", "0"), "--chunk-documents"),
    "eval-examples--1": (("--eval-examples", "-1"), "--eval-examples"),
    "device-tpu": (("--device", "tpu"), "device 'tpu'"),
    "device-empty": (("--device", ""), "device ''"),
    "device-mps": (("--device", "mps"), "device 'mps'"),
    "precision": (("--precision", "fp8"), "--precision"),
    "optimizer": (("--optimizer", "sgd"), "--optimizer"),
    "corpus-missing": (("--corpus", "{scratch}/nothing.txt"), "nothing.txt"),
    "eval-corpus-missing": (("--eval-corpus", "{scratch}/nothing.txt"), "nothing.txt"),
    "tokenizer-missing": (("--tokenizer", "{scratch}/nothing.model"), "nothing.model"),
    "tokenizer-too-big": (("--tokenizer", "{big_spiece}"), "430"),
    "config-unknown": (("--config", "albert-huge"), "albert-huge"),
    "resume-missing": (("--resume", "{scratch}/nothing"), "nothing"),
    "set-word-for-int": (("--set", "hidden_size=abc"), "hidden_size"),
    "set-word-for-float": (("--set", "hidden_dropout_prob=abc"), "hidden_dropout_prob"),
    "set-bool-for-float": (("--set", "hidden_dropout_prob=true"), "hidden_dropout_prob"),
    "set-list": (("--set", "hidden_size=[16]"), "hidden_size"),
    "set-unknown-field": (("--set", "nosuch=1"), "not a config field"),
    "set-extra": (("--set", "extra=1"), "not a config field"),
    "set-no-value": (("--set", "novalue"), "KEY=VALUE"),
    "set-no-key": (("--set", "=3"), "KEY=VALUE"),
    "set-act-number": (("--set", "hidden_act=3"), "hidden_act"),
    "set-sharing": (("--set", "sharing=most"), "sharing"),
    "set-vocab-0": (("--set", "vocab_size=0"), "vocab_size"),
    "set-groups": (("--set", "num_hidden_groups=99"), "num_hidden_groups"),
    "set-eps": (("--set", "layer_norm_eps=-1"), "layer_norm_eps"),
    "set-labels": (("--set", "label_names=5"), "label_names"),
    "set-heads": (("--set", "num_attention_heads=3"), "num_attention_heads"),
    "set-beyond-ram": (("--set", "intermediate_size=100000000000"), "GiB of fp32 weights, more than this machine's"),
    "set-beyond-any-tensor": (("--set", f"hidden_size={2**70}"), "larger than any tensor dimension can be"),
}
_FINETUNE_BAD = {
    "epochs-0": (("--epochs", "0"), "--epochs"),
    "batch-size-0": (("--batch-size", "0"), "--batch-size"),
    "max-seq-length-4": (("--max-seq-length", "4"), "--max-seq-length"),
    "max-seq-length-too-long": (("--max-seq-length", "1000"), "max_position_embeddings"),
    "warmup-ratio": (("--warmup-ratio", "2"), "warmup_ratio"),
    "device-tpu": (("--device", "tpu"), "device 'tpu'"),
    "task": (("--task", "translation"), "--task"),
    "train-missing": (("--train", "{scratch}/nothing.csv"), "nothing.csv"),
    "train-txt": (("--train", "{corpus}"), "unknown file type"),
    "model-missing": (("--model", "{scratch}/nothing"), "nothing"),
    "tokenizer-too-big": (("--tokenizer", "{big_spiece}"), "430"),
    "label-column": (("--label-column", "nope"), "no column 'nope'"),
    "qa-on-classification-data": (("--task", "qa"), "no column 'question'"),
}
_QUANTIZE_BAD = {
    "scheme": (("--scheme", "int9"), "int9"),
    "tflite-scheme-on-onnx": (("--scheme", "int16x8"), "int16x8"),
    "method": (("--scheme", "int8-static", "--method", "magic"), "magic"),
    "samples-0": (("--samples", "0"), "--samples"),
    "eval-samples--5": (("--eval-samples", "-5"), "--eval-samples"),
    "seq-len-0": (("--seq-len", "0"), "--seq-len"),
    "seq-len-too-long": (("--seq-len", "65"), "max_position_embeddings"),
    "max-drop-2": (("--max-drop", "2"), "max_drop"),
    "max-drop--1": (("--max-drop", "-1"), "max_drop"),
    "calibration-missing": (("--calibration", "{scratch}/nothing.txt"), "nothing.txt"),
    "calibration-empty": (("--calibration", "{scratch}/empty.txt"), "empty"),
    "calibration-not-utf8": (("--calibration", "{scratch}/latin1.txt"), "not UTF-8"),
    "calibration-binary": (("--calibration", "{scratch}/nul.txt"), "NUL"),
    "tokenizer-missing": (("--tokenizer", "{scratch}/nothing.model"), "nothing.model"),
    "tokenizer-too-big": (("--tokenizer", "{big_spiece}"), "430 pieces"),
    "tokenizer-not-a-model": (("--tokenizer", "{corpus}"), "corpus.txt"),
}


def _texts(world: World, scratch: Path) -> None:
    (scratch / "empty.txt").write_text("")
    (scratch / "latin1.txt").write_bytes("Le café est très bon. Une autre phrase ici.\n".encode("latin-1") * 20)
    (scratch / "nul.txt").write_bytes(b"some text\x00more text\n" * 20)


for _cmd, _table, _base in (("pretrain", _PRETRAIN_BAD, PRETRAIN), ("finetune", _FINETUNE_BAD, FINETUNE),
                             ("quantize", _QUANTIZE_BAD, QUANTIZE)):
    for _name, (_extra, _message) in _table.items():
        OPTION_CASES[f"{_cmd}-{_name}"] = Case((*_base, _out(_cmd, "{scratch}"), *_extra), _message,
                                               _texts if _cmd == "quantize" else None)
OPTION_CASES.update({
    "quantize-already-quantized": Case(("quantize", "{scratch}/model.int8-dynamic.onnx", "--scheme", "int8-dynamic",
                                        "--out", "{scratch}/qq.onnx"), "model.int8-dynamic.onnx"),
    "quantize-changed-file": Case(("quantize", "{scratch}/model.onnx", "--scheme", "int8-dynamic", "--out",
                                   "{scratch}/q.onnx"), "has changed", _damaged("onnx", "zeros", beside_manifest=True)),
    "quantize-no-scheme": Case(("quantize", "{onnx}", "--out", "{scratch}/q.onnx"), "--scheme"),
    # what a hidden corpus of malformed inputs found: options passed over or refused in unclear words
    "convert-static-with-a-dynamic-only-target": Case(
        (*CONVERT, "{scratch}/out", "--to", "onnx", "--to", "transformers-js", "--static"),
        "--static is for the onnx, tflite and ort targets, and transformers-js writes dynamic-shape files only"),
    **{f"convert-static-seq-len-{n}": Case(("convert", "{ckpt}", "--to", "onnx", "--static", "--seq-len", str(n),
                                            "--out", "{scratch}/out"), f"--seq-len {n} is too short for a static "
                                           "file, which pads every input to --seq-len ids, [CLS] and [SEP] included: "
                                           "give 3 or more") for n in (1, 2)},
    "pipeline-seq-len-2": Case(("pipeline", "{ckpt}", "--seq-len", "2", "--profile-seq-len", "2", "--out",
                                "{scratch}/pp"), "--seq-len 2 is too short"),
    "convert-executorch-max-seq-len-0": Case((*CONVERT, "{scratch}/out", "--to", "executorch", "--max-seq-len", "0"),
                                             "--max-seq-len (0) is the longest input the .pte takes: give 16 or more"),
    **{f"{cmd}-gpu-precision-without-gpu": Case((cmd, "{onnx}", "--gpu-precision", "fp16", *extra),
                                                 "--gpu-precision fp16 sets the GPU's arithmetic and goes with "
                                                 "--accelerator gpu (given: --accelerator cpu)")
       for cmd, extra in (("inspect", ()), ("profile", ("--runs", "1", "--min-seconds", "0", "--warmup", "0")))},
    "inspect-partitions-of-a-tflite": Case(("inspect", "{tflite}", "--partitions"),
                                           "model.tflite: --partitions shows how onnxruntime's NPU providers would "
                                           "split an .onnx, and this is a .tflite file", lambda w, s: _needs_tflite(w)),
})


def _needs_tflite(world: World) -> None:
    if not world.tflite.exists():
        pytest.skip("tensorflow is not installed: no .tflite file")


@cases(OPTION_CASES)
def test_option_nonsense(case, world, tmp_path):
    if case.args[1].endswith("model.int8-dynamic.onnx"):
        _quantized_copy(world, tmp_path)
    run_case(case, world, tmp_path)


def _quantized_copy(world: World, scratch: Path) -> None:
    from albert_edge.quantize import QuantizeConfig, quantize

    for item in world.conv.iterdir():
        shutil.copyfile(item, scratch / item.name)
    quantize(scratch / "model.onnx", QuantizeConfig("int8-dynamic", tokenizer=world.spiece, num_samples=4,
                                                     eval_samples=4, seq_len=16))


# ------------------------------------------------------------------ labelled data and text
def _rows(name: str, rows: list[dict]) -> Setup:
    return lambda world, scratch: write_jsonl(scratch / name, rows) and None


_QA = {"question": "which module?", "context": "the os module reads files", "answer": "os"}
DATA_CASES: dict[str, Case] = {}
_LATIN1 = "text,label\ncafé crème,1\nthé,0\n".encode("latin-1")
for _suffix, _content in ((".csv", _LATIN1), (".tsv", _LATIN1.replace(b",", b"\t")),
                          (".jsonl", '{"text": "café", "label": 1}\n'.encode("latin-1"))):
    for _which in ("train", "eval"):
        _args = list(FINETUNE) + ["{scratch}/out"]
        _args[_args.index(f"--{_which}") + 1] = "{scratch}/latin1" + _suffix
        DATA_CASES[f"finetune-{_which}-not-utf8{_suffix}"] = Case(tuple(_args), "not UTF-8",
                                                                  _file("latin1" + _suffix, _content))
_QA_ROWS = {
    "start-word": {**_QA, "answer_start": "x"}, "start-negative": {**_QA, "answer_start": -1},
    "start-fraction": {**_QA, "answer_start": 1.5}, "start-bool": {**_QA, "answer_start": True},
    "start-list": {**_QA, "answer_start": [4]}, "start-past-end": {**_QA, "answer_start": 999},
    "start-wrong-place": {**_QA, "answer_start": 0}, "answer-absent": {**_QA, "answer": "sys"},
    "answer-blank": {**_QA, "answer": " "}, "no-context": {"question": "q", "answer": "os"},
}
for _name, _row in _QA_ROWS.items():
    _args = list(FINETUNE) + ["{scratch}/out"]
    _args[_args.index("classification")] = "qa"
    _args[_args.index("--train") + 1] = "{scratch}/qa.jsonl"
    _args[_args.index("--eval") + 1] = "{qa}"
    DATA_CASES[f"finetune-qa-{_name}"] = Case(tuple(_args), "qa.jsonl row 1",
                                              _rows("qa.jsonl", [_row, *[{**_QA, "answer_start": 4}] * 3]))
_TAGS = list(FINETUNE) + ["{scratch}/out"]
_TAGS[_TAGS.index("classification")] = "token-classification"
_TAGS[_TAGS.index("--eval") + 1] = "{tags}"
_TAGS[_TAGS.index("--train") + 1] = "{scratch}/tags.jsonl"
_GOOD_TAGS = {"tokens": ["the", "os"], "tags": ["O", "B"]}
DATA_CASES.update({
    "finetune-tags-count": Case(tuple(_TAGS), "2 tokens but 1 tags",
                                _rows("tags.jsonl", [{"tokens": ["a", "b"], "tags": ["O"]}, _GOOD_TAGS])),
    "finetune-one-label": Case((*FINETUNE[:-1], "--train", "{scratch}/one.csv", "--out", "{scratch}/out"),
                               "1 distinct label", _file("one.csv", "text,label\na,1\nb,1\n")),
    "finetune-empty-file": Case((*FINETUNE[:-1], "--train", "{scratch}/none.csv", "--out", "{scratch}/out"),
                                "holds no rows", _file("none.csv", "text,label\n")),
    "finetune-jsonl-not-json": Case((*FINETUNE[:-1], "--train", "{scratch}/x.jsonl", "--out", "{scratch}/out"),
                                    "line 2 is not JSON", _file("x.jsonl", '{"text": "a", "label": 1}\n{oops\n')),
    "finetune-jsonl-list": Case((*FINETUNE[:-1], "--train", "{scratch}/x.jsonl", "--out", "{scratch}/out"),
                                "line 1 is not a JSON object", _file("x.jsonl", "[1, 2]\n")),
    "finetune-eval-unknown-label": Case((*FINETUNE[:-1], "--eval", "{scratch}/e.csv", "--out", "{scratch}/out"),
                                        "label '7'", _file("e.csv", "text,label\na,7\n")),
    "finetune-csv-huge-field": Case((*FINETUNE[:-1], "--train", "{scratch}/h.csv", "--out", "{scratch}/out"),
                                    "not a readable CSV", _file("h.csv", 'text,label\n"' + "a" * 200_000 + '",1\n')),
    "encode-not-utf8": Case(("tokenizer", "encode", "{spiece}", "caf\udce9"),
                            "TEXT is not UTF-8 text (byte 0xe9 at offset 3)"),
    "encode-pair-not-utf8": Case(("tokenizer", "encode", "{spiece}", "ok", "caf\udce9"),
                                 "TEXT_B is not UTF-8 text (byte 0xe9 at offset 3)"),
    "encode-max-length-drops-b": Case(("tokenizer", "encode", "{spiece}", "hello world", "second text here",
                                       "--max-length", "4"), "leaves none of TEXT"),
    "encode-max-length-drops-a": Case(("tokenizer", "encode", "{spiece}", "hello world", "second text here",
                                       "--max-length", "3"), "leaves none of TEXT"),
    "encode-max-length-2": Case(("tokenizer", "encode", "{spiece}", "hello", "--max-length", "2"), "--max-length"),
    "encode-max-length-negative": Case(("tokenizer", "encode", "{spiece}", "hello", "--max-length", "-1"),
                                       "--max-length"),
    "encode-missing-model": Case(("tokenizer", "encode", "{scratch}/nothing.model", "hello"), "nothing.model"),
    "encode-dir-without-model": Case(("tokenizer", "encode", "{scratch}", "hello"), "spiece.model"),
    "encode-random-bytes": Case(("tokenizer", "encode", "{scratch}/spiece.model", "hello"), "spiece.model",
                                _file("spiece.model", bytes(range(256)) * 8)),
    "encode-truncated-model": Case(("tokenizer", "encode", "{scratch}/spiece.model", "hello"), "spiece.model",
                                   lambda w, s: (s / "spiece.model").write_bytes(w.spiece.read_bytes()[:1000])),
    "encode-no-text": Case(("tokenizer", "encode", "{spiece}"), "Missing argument 'TEXT'"),
    "train-vocab-5": Case((*TOKENIZER[:4], "5", "--out", "{scratch}/out"), "--vocab-size"),
    "train-vocab-word": Case((*TOKENIZER[:4], "many", "--out", "{scratch}/out"), "--vocab-size"),
    "train-missing-file": Case(("tokenizer", "train", "{scratch}/nothing.txt", "--out", "{scratch}/out"),
                               "nothing.txt"),
    "train-coverage-2": Case((*TOKENIZER, "{scratch}/out", "--character-coverage", "2"), "--character-coverage"),
    "train-sentence-size-50": Case((*TOKENIZER, "{scratch}/out", "--input-sentence-size", "50"),
                                   "input_sentence_size (50)"),
    "train-sentence-size-negative": Case((*TOKENIZER, "{scratch}/out", "--input-sentence-size", "-1"),
                                         "--input-sentence-size"),
    "train-empty-text": Case(("tokenizer", "train", "{scratch}/empty.txt", "--out", "{scratch}/out"), "empty.txt",
                             _file("empty.txt", "")),
    "train-too-many-pieces": Case(("tokenizer", "train", "{scratch}/small.txt", "--vocab-size", "5000", "--out",
                                   "{scratch}/out"), "5000", _file("small.txt", "a few words only\n" * 3)),
    "no-such-command": Case(("translate",), "No such command"),
    "tokenizer-no-such-command": Case(("tokenizer", "split"), "No such command"),
})

# The device-half commands keep the same contract through the same error path.
DATA_CASES.update({
    "profile-missing": Case(("profile", "{scratch}/nothing.onnx"), "nothing.onnx"),
    "profile-threads-0": Case(("profile", "{onnx}", "--threads", "0"), "--threads"),
    "report-missing": Case(("report", "{scratch}/nothing.json", "--out", "{scratch}/rep"), "nothing.json"),
    "report-unknown-json": Case(("report", "{scratch}/o.json", "--out", "{scratch}/rep"), "o.json",
                                _file("o.json", '{"a": 1}')),
    "demo-no-bundle": Case(("demo", "classify", "{scratch}/nothing", "some text"), "nothing"),
    # the line names --out as given, not the build directory made beside it (.nb.partial)
    "demo-bundle-out-under-proc": Case(("demo", "bundle", "--out", "/proc/nb", "--preset", "tiny", "--threads", "1"),
                                       "cannot create --out /proc/nb: "),
    "pipeline-missing": Case(("pipeline", "{scratch}/nothing", "--out", "{scratch}/pp"), "nothing"),
})


@cases(DATA_CASES)
def test_bad_data_and_text(case, world, tmp_path):
    run_case(case, world, tmp_path)


# ----------------------------------------------------------------------- --force keeps data
def _invoke(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_force_replaces_and_keeps_what_it_does_not_replace(world, tmp_path):
    out = tmp_path / "ft"
    ft = [a.format(**world.fields(tmp_path)) for a in FINETUNE] + [str(out)]
    assert _invoke(*ft).exit_code == 0
    (out / "notes.txt").write_text("mine")
    before = (out / "model.safetensors").stat().st_mtime_ns
    # --out is the --model being fine-tuned: refused, --force or not (it would delete the model)
    again = [*ft[:ft.index("--model") + 1], str(out), *ft[ft.index("--model") + 2:]]
    one_line(_invoke(*again), 2, "is the input")
    one_line(_invoke(*again, "--force"), 2, "is the input")
    assert (out / "model.safetensors").stat().st_mtime_ns == before
    # an earlier output of the same command: --force replaces it
    assert _invoke(*ft, "--force").exit_code == 0
    assert (out / "notes.txt").read_text() == "mine"  # not written again: kept
    assert (out / "model.safetensors").stat().st_mtime_ns != before
    assert {"config.json", "spiece.model", "eval_results.json"} <= {p.name for p in out.iterdir()}
    assert leftovers(tmp_path) == []


def test_quantize_force_and_a_smaller_tokenizer(world, tmp_path):
    for item in world.conv.iterdir():
        shutil.copyfile(item, tmp_path / item.name)
    q = ["quantize", tmp_path / "model.onnx", "--scheme", "int8-dynamic", "--samples", "4", "--eval-samples", "4",
         "--seq-len", "16", "--out", tmp_path / "q.onnx"]
    # 99 pieces for a 400-word model: every id it gives is in range, so it calibrates
    assert _invoke(*q, "--tokenizer", world.small_spiece).exit_code == 0
    first = (tmp_path / "q.onnx").stat().st_mtime_ns
    one_line(_invoke(*q, "--tokenizer", world.spiece), 2, "already exists; pass --force")
    assert (tmp_path / "q.onnx").stat().st_mtime_ns == first
    assert _invoke(*q, "--tokenizer", world.spiece, "--force").exit_code == 0
    assert (tmp_path / "q.onnx").stat().st_mtime_ns != first
    names = [f["name"] for f in json.loads((tmp_path / "manifest.json").read_text())["files"]]
    assert names.count("q.onnx") == 1


def test_convert_force_keeps_quantized_entries_unless_their_parent_changed(world, tmp_path):
    out = tmp_path / "conv"
    assert _invoke("convert", world.ckpt, "--seq-len", "16", "--out", out).exit_code == 0
    assert _invoke("quantize", out / "model.onnx", "--scheme", "int8-dynamic", "--tokenizer", world.spiece,
                   "--samples", "4", "--eval-samples", "4", "--out", out / "model.int8-dynamic.onnx").exit_code == 0

    def listed() -> list[str]:
        return [f["name"] for f in json.loads((out / "manifest.json").read_text())["files"]]

    assert listed() == ["model.onnx", "model.int8-dynamic.onnx"]
    # The same export again writes the same bytes: the quantized file's parent is unchanged, its entry stays.
    assert _invoke("convert", world.ckpt, "--seq-len", "16", "--out", out, "--force").exit_code == 0
    assert listed() == ["model.onnx", "model.int8-dynamic.onnx"]
    # Another opset rewrites model.onnx: the quantized entry measured against the old bytes goes.
    assert _invoke("convert", world.ckpt, "--seq-len", "16", "--opset", "18", "--out", out, "--force").exit_code == 0
    assert listed() == ["model.onnx"]
    assert (out / "model.int8-dynamic.onnx").exists()  # the file itself is the user's to delete
    assert leftovers(tmp_path) == []


def test_pretrain_and_tokenizer_train_force(world, tmp_path):
    out = tmp_path / "run"
    args = [a.format(**world.fields(tmp_path)) for a in PRETRAIN] + [str(out)]
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    one_line(_invoke(*args), 2, "already holds files")
    assert _invoke(*args, "--force").exit_code == 0
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "model.safetensors").is_file() and leftovers(tmp_path) == []
    tok = tmp_path / "tok"
    base = [a.format(**world.fields(tmp_path)) for a in TOKENIZER] + [str(tok)]
    assert _invoke(*base).exit_code == 0
    one_line(_invoke(*base), 2, "already exists; pass --force")
    assert _invoke(*base, "--force").exit_code == 0


def test_unexpected_errors_say_bug_and_show_the_traceback_only_with_v(world, tmp_path, monkeypatch):
    from albert_edge import info

    def broken(path):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(info, "describe", broken)
    result = CliRunner().invoke(main, ["info", str(world.ckpt)], catch_exceptions=False)
    line = one_line(result, 1, "This is a bug")
    assert "ZeroDivisionError" in line
    verbose = CliRunner().invoke(main, ["-v", "info", str(world.ckpt)], catch_exceptions=False)
    assert verbose.exit_code == 1 and "Traceback" in verbose.stderr


# ------------------------------------------------------------------- real processes, signals
def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def _wait_for(proc: subprocess.Popen, ready: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"finished before {what}: {proc.returncode} {err}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no {what} after {timeout}s")
        time.sleep(0.005)


@pytest.fixture(scope="module")
def slow_onnx(tmp_path_factory, world):
    """A model big enough that quantizing it takes a while: something to interrupt."""
    from albert_edge.converters.export import convert

    root = tmp_path_factory.mktemp("slow")
    config = TINY.replace(hidden_size=256, num_attention_heads=4, intermediate_size=1024, num_hidden_layers=12,
                          num_hidden_groups=1, vocab_size=400)
    torch.manual_seed(0)
    ckpt = checkpoints.save(build_model(config, "pretraining"), root / "ckpt", spiece=world.spiece)
    convert(ckpt, root / "conv", seq_len=64)
    return root / "conv" / "model.onnx"


INTERRUPTS = {"sigint": (signal.SIGINT, 130, "interrupted"), "sigterm": (signal.SIGTERM, 143, "terminated")}


def _finish(proc: subprocess.Popen, sig: int, code: int, word: str) -> None:
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code, stderr
    lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith(PROGRESS)]
    assert len(lines) == 1 and word in lines[0], stderr
    assert "Traceback" not in stderr


@pytest.mark.parametrize("name", INTERRUPTS)
def test_interrupted_pretrain_leaves_whole_checkpoints_only(world, tmp_path, name):
    sig, code, word = INTERRUPTS[name]
    out = tmp_path / "run"
    args = [a.format(**world.fields(tmp_path)) for a in PRETRAIN] + [str(out)]
    args[args.index("--steps") + 1] = "100000"
    proc = subprocess.Popen([str(SCRIPT), *args, "--save-every", "1", "--keep-checkpoints", "2", "--log-every", "1",
                             "--holdout-every", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    _wait_for(proc, lambda: len(list(out.glob("checkpoint-*"))) >= 2, "two checkpoints")
    _finish(proc, sig, code, word)
    assert leftovers(tmp_path) == []
    saved = sorted(out.glob("checkpoint-*"))
    assert saved and all((c / "trainer_state.json").is_file() and (c / "optimizer.pt").is_file() for c in saved)


@pytest.mark.parametrize("name", INTERRUPTS)
def test_interrupted_quantize_leaves_no_file(slow_onnx, world, tmp_path, name):
    sig, code, word = INTERRUPTS[name]
    out = slow_onnx.parent / f"q-{name}.onnx"
    before = snapshot(slow_onnx.parent)
    proc = subprocess.Popen([str(SCRIPT), "quantize", str(slow_onnx), "--scheme", "int8-dynamic", "--tokenizer",
                             str(world.spiece), "--eval-samples", "256", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    _wait_for(proc, lambda: any(p.name.startswith(f".{out.name}.") for p in slow_onnx.parent.iterdir()),
              "the temporary file")
    _finish(proc, sig, code, word)
    assert snapshot(slow_onnx.parent) == before


@pytest.mark.parametrize("name", INTERRUPTS)
def test_interrupted_finetune_leaves_no_directory(world, tmp_path, name):
    sig, code, word = INTERRUPTS[name]
    out = tmp_path / "ft"
    args = [a.format(**world.fields(tmp_path)) for a in FINETUNE] + [str(out)]
    args[args.index("--epochs") + 1] = "100000"
    proc = subprocess.Popen([str(SCRIPT), *args, "--log-every", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env())
    _wait_for(proc, lambda: any((p / "log.jsonl").is_file() and (p / "log.jsonl").stat().st_size > 200
                                for p in tmp_path.glob(".ft.*")), "training")
    _finish(proc, sig, code, word)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_entry_point_is_quiet_and_one_line(world, tmp_path):
    """A real process: no TensorFlow start-up log around the one line; -v brings library logs back."""
    bad = damage(world.tflite if world.tflite.exists() else world.onnx, tmp_path / "model.tflite", "truncated")
    result = subprocess.run([str(SCRIPT), "info", str(bad)], capture_output=True, text=True, timeout=300, env=_env())
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    if not world.tflite.exists():
        pytest.skip("tensorflow is not installed")
    ok = subprocess.run([str(SCRIPT), "convert", str(world.ckpt), "--to", "tflite", "--seq-len", "16", "--out",
                         str(tmp_path / "conv"), "--json"], capture_output=True, text=True, timeout=300,
                        env={**_env(), "ALBERT_EDGE_QUIET_FOR": "3600"})  # our own progress lines aside
    assert ok.returncode == 0, ok.stderr
    assert ok.stderr.strip() == "", ok.stderr  # no absl / CUDA / XNNPACK lines
    assert json.loads(ok.stdout)["files"][0]["name"] == "model.tflite"


# A command whose signal lands inside a weakref callback (onnxruntime's and TensorFlow's objects are
# freed through them while `quantize` runs): Python swallows what a handler raises there.
_IN_A_CALLBACK = """
import os, signal, sys, time, weakref
import click
from albert_edge.cli import main

class Freed:
    pass

def callback(_):
    os.kill(os.getpid(), signal.{sig})
    sum(range(100_000))  # the handler runs here, inside the callback

@main.command("freeing")
def freeing():
    kept = Freed()
    ref = weakref.ref(kept, callback)
    del kept
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        pass
    click.echo("finished")

main(["freeing"])
"""


@pytest.mark.parametrize("name", INTERRUPTS)
def test_a_signal_inside_a_weakref_callback_still_ends_the_command(name, tmp_path):
    sig, code, word = INTERRUPTS[name]
    done = subprocess.run([sys.executable, "-c", _IN_A_CALLBACK.format(sig=sig.name)], capture_output=True,
                          text=True, timeout=120, env=_env())
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert len(lines) == 1 and lines[0].startswith(f"Error: {word}"), done.stderr
    assert "finished" not in done.stdout
