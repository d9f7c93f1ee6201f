"""Bad input across the device-half commands: `profile`, `report`, `pipeline` and `demo`
(classify, fill-mask, serve, bundle), and what the first pass left: `finetune` on integer
weights, a closed output pipe, interrupts during `tokenizer train` and `profile`.

Each table case keeps the contract of tests/cli/test_bad_input.py: its exit code, exactly one
line on stderr, no traceback, nothing on stdout, and every file under the case's directory and
the shared inputs unchanged. The tables run in-process through click's CliRunner; interrupts
and the closed pipe run as real processes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from albert_edge import checkpoints
from albert_edge.cli import main
from albert_edge.config import AlbertConfig
from albert_edge.model import build_model

from .bad_input import damage, leftovers, mounted, write_jsonl
from .test_bad_input import INTERRUPTS, run_case

pytestmark = pytest.mark.filterwarnings("ignore")

SCRIPT = Path(sys.executable).with_name("albert-edge")
SEQ = 16
TINY = AlbertConfig.preset("tiny").replace(vocab_size=400)  # the size of the shared spiece_model


# ------------------------------------------------------------------------------------- world
@dataclass(frozen=True)
class Device:
    """Real inputs of the device-half commands, and damaged copies of them, built once."""

    root: Path
    busy_port: int  # a loopback port something already listens on

    def fields(self, scratch: Path) -> dict[str, str]:
        return {"scratch": str(scratch), "w": str(self.root), "busy_port": str(self.busy_port)}


def _convert(root: Path, name: str, config: AlbertConfig, head: str, spiece: Path) -> Path:
    from albert_edge.converters.export import convert

    torch.manual_seed(0)
    ckpt = checkpoints.save(build_model(config, head), root / f"{name}-ckpt", spiece=spiece)
    convert(ckpt, root / name, targets=("onnx",), seq_len=SEQ)
    return root / name


def _profile(onnx: Path, out: Path) -> Path:
    result = CliRunner().invoke(main, ["profile", str(onnx), "--seq-len", str(SEQ), "--threads", "1", "--runs", "2",
                                       "--min-seconds", "0", "--warmup", "0", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    out.write_text(result.stdout)
    return out


def _bundle(root: Path, spiece: Path, mlm: Path, classifier: Path, **change) -> Path:
    """A demo bundle put together from converted files (what `demo bundle` writes, less the training)."""
    root.mkdir()
    (root / "bundle.json").write_text(json.dumps({"format_version": 1, "seq_len": SEQ, **change}))
    (root / "labels.json").write_text(json.dumps(["bad", "good"]))
    shutil.copyfile(spiece, root / "spiece.model")
    for task, source in (("mlm", mlm), ("classifier", classifier)):
        (root / task).mkdir()
        for name in ("model.onnx", "manifest.json", "spiece.model", "labels.json"):  # the app files it lists too
            if (source / name).is_file():
                shutil.copyfile(source / name, root / task / name)
    return root


@pytest.fixture(scope="module")
def dev(tmp_path_factory, spiece_model) -> Device:
    root = tmp_path_factory.mktemp("device")
    conv = _convert(root, "conv", TINY, "pretraining", spiece_model)
    conv2 = _convert(root, "conv2", TINY.replace(hidden_size=32), "pretraining", spiece_model)
    cls = _convert(root, "cls", TINY.replace(num_labels=2, label_names=("bad", "good")), "classification",
                   spiece_model)
    _profile(conv / "model.onnx", root / "prof.json")
    _profile(conv2 / "model.onnx", root / "prof2.json")
    records = json.loads((root / "prof.json").read_text())
    (root / "prof.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (root / "prof-cut.jsonl").write_text(json.dumps(records[0]) + "\n" + json.dumps(records[0])[:100])
    (root / "prof-cut.json").write_text((root / "prof.json").read_text()[:200])
    # Records of the right shape with fields of the wrong type: refused when read, before any work.
    (root / "prof-latency-text.json").write_text(json.dumps([{**records[0], "latency": "12 ms"}]))
    (root / "prof-memory-list.jsonl").write_text("".join(json.dumps(r) + "\n" for r in
                                                         (records[0], {**records[0], "memory": [1, 2]})))
    (root / "prof-p50-text.json").write_text(json.dumps([{**records[0], "latency": {**records[0]["latency"],
                                                                                     "p50": "fast"}}]))
    (root / "prof-no-sha.json").write_text(json.dumps([{k: v for k, v in records[0].items() if k != "sha256"}]))
    (root / "empty-list.json").write_text("[]")
    (root / "obj.json").write_text('{"a": 1}')
    (root / "list.json").write_text("[1, 2]")
    (root / "broken.json").write_text("{not json")
    (root / "latin1.json").write_bytes(b'{"file_name": "caf\xe9"}')
    (root / "latin1.txt").write_bytes("caf\xe9 cr\xe8me\n".encode("latin-1"))
    write_jsonl(root / "other.jsonl", [{"event": "train", "step": 1}])
    (root / "afile").write_text("keep\n")
    (root / "emptydir").mkdir()
    shutil.copyfile(spiece_model, root / "spiece.model")
    for how in ("truncated", "first-64-bytes", "empty", "zeros", "random", "text"):
        damage(conv / "model.onnx", root / "damaged" / how / "model.onnx", how)
    for how in ("empty", "random", "text", "renamed"):  # no TFL3 identifier: needs no real .tflite
        damage(conv / "model.onnx", root / "damaged" / how / "model.tflite", how)
    bad_conv = root / "bad-conv"
    shutil.copytree(conv, bad_conv)
    damage(conv / "model.onnx", bad_conv / "model.onnx", "truncated")
    bad_manifest = root / "bad-manifest"
    shutil.copytree(conv, bad_manifest)
    (bad_manifest / "manifest.json").write_text("{not json")
    int_ckpt = root / "int32-ckpt"
    shutil.copytree(root / "conv-ckpt", int_ckpt)
    from safetensors.torch import load_file, save_file

    state = load_file(int_ckpt / "model.safetensors")
    state = {k: v.to(torch.int32) if v.is_floating_point() else v for k, v in state.items()}
    save_file(state, int_ckpt / "model.safetensors")
    _bundle(root / "bundle", spiece_model, conv, cls)
    for name, change in {"no-bundle-json": "bundle.json", "no-labels": "labels.json", "no-spiece": "spiece.model"}.items():
        _bundle(root / name, spiece_model, conv, cls)
        (root / name / change).unlink()
    _bundle(root / "bad-bundle-json", spiece_model, conv, cls)
    (root / "bad-bundle-json" / "bundle.json").write_text("{x")
    _bundle(root / "bad-seq-len", spiece_model, conv, cls, seq_len="long")
    _bundle(root / "bad-spiece", spiece_model, conv, cls)
    (root / "bad-spiece" / "spiece.model").write_text("not a sentencepiece model")
    _bundle(root / "bad-model", spiece_model, conv, cls)
    for task in ("mlm", "classifier"):
        damage(conv / "model.onnx", root / "bad-model" / task / "model.onnx", "truncated")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        yield Device(root, busy.getsockname()[1])


@pytest.fixture(scope="module")
def mounts(tmp_path_factory):
    """A read-only file system and a full one, each mounted once for the module (as root)."""
    base = tmp_path_factory.mktemp("mounts")
    with mounted(base / "readonly", "readonly") as ro, mounted(base / "full", "full") as full:
        yield {"readonly": (base / "readonly", ro), "full": (base / "full", full)}


# ------------------------------------------------------------------------------ the cases
@dataclass(frozen=True)
class Case:
    args: tuple[str, ...]  # {w} (the shared inputs), {scratch}, {mnt}, {busy_port} are filled in
    message: str  # a part of the one line
    mount: str | None = None  # "readonly" | "full": {mnt} is that file system
    code: int = 2


def _table(base: tuple[str, ...], rows: dict[str, tuple]) -> dict[str, Case]:
    """Cases of one command: each row is (extra args, message[, mount])."""
    return {name: Case(base + tuple(row[0]), *row[1:]) for name, row in rows.items()}


def _unwritable(option: str, file_name: str) -> dict[str, tuple]:
    """Rows of an output-file option pointed where no file can be written."""
    name = option.lstrip("-")
    return {
        f"{name}-under-a-file": ([option, f"{{w}}/afile/{file_name}"], "is a file, not a directory"),
        f"{name}-directory": ([option, "{w}"], "is a directory"),
        f"{name}-read-only": ([option, f"{{mnt}}/{file_name}"], "not writable", "readonly"),
        f"{name}-full-disk": ([option, f"{{mnt}}/{file_name}"], "disk is full", "full"),
    }


PROFILE = ("profile", "{w}/conv/model.onnx", "--seq-len", str(SEQ), "--threads", "1", "--runs", "2",
           "--min-seconds", "0", "--warmup", "0")
PROFILE_CASES = _table(PROFILE, {
    "seq-len-0": (["--seq-len", "0"], "--seq-len values must be 1 or more"),
    "seq-len-word": (["--seq-len", "abc"], "--seq-len takes whole numbers"),
    "seq-len-empty": (["--seq-len", ","], "--seq-len values must be 1 or more"),
    "seq-len-beyond-model": (["--seq-len", "99999"], "above the model's maximum 64"),
    "batch-0": (["--batch", "0"], "--batch values must be 1 or more"),
    "batch-negative": (["--batch", "-1"], "--batch values must be 1 or more"),
    "threads-0": (["--threads", "0"], "--threads values must be 1 or more"),
    "threads-word": (["--threads", "x"], "--threads takes whole numbers"),
    "runs-0": (["--runs", "0"], "'--runs': 0 is not in the range"),
    "runs-negative": (["--runs", "-5"], "'--runs': -5 is not in the range"),
    "min-seconds-negative": (["--min-seconds", "-1"], "not a finite number of seconds"),
    "min-seconds-nan": (["--min-seconds", "nan"], "not a finite number of seconds"),
    "min-seconds-inf": (["--min-seconds", "inf"], "not a finite number of seconds"),
    "warmup-negative": (["--warmup", "-1"], "'--warmup': -1 is not in the range"),
    "max-sentences-0": (["--max-sentences", "0"], "'--max-sentences': 0 is not in the range"),
    "delegate-unknown": (["--delegate", "bogus"], "delegate must be one of"),
    "provider-unknown": (["--provider", "bogus"], "provider must be one of"),
    "provider-empty": (["--provider", ""], "provider must be one of"),
    "fail-on-regression-alone": (["--fail-on-regression"], "--fail-on-regression needs --baseline"),
    "text-without-tokenizer": (["--text", "builtin"], "--text needs --tokenizer"),
    "text-not-utf8": (["--text", "{w}/latin1.txt", "--tokenizer", "{w}/spiece.model"], "not UTF-8"),
    "text-missing": (["--text", "{w}/nothing.txt", "--tokenizer", "{w}/spiece.model"], "no such file"),
    "tokenizer-missing": (["--text", "builtin", "--tokenizer", "{w}/nothing"], "no such file"),
    "tokenizer-not-spiece": (["--text", "builtin", "--tokenizer", "{w}/obj.json"], "not a sentencepiece model"),
    "baseline-missing": (["--baseline", "{w}/nothing.json"], "cannot read it as profile results"),
    "baseline-other-json": (["--baseline", "{w}/obj.json"], "not profile results"),
    "baseline-list": (["--baseline", "{w}/list.json"], "not profile results"),
    "baseline-broken": (["--baseline", "{w}/broken.json"], "not profile results"),
    "baseline-cut": (["--baseline", "{w}/prof-cut.json"], "not profile results"),
    "baseline-cut-jsonl": (["--baseline", "{w}/prof-cut.jsonl"], "not profile results"),
    "baseline-not-utf8": (["--baseline", "{w}/latin1.json"], "cannot read it as profile results"),
    "baseline-directory": (["--baseline", "{w}"], "cannot read it as profile results"),
    "baseline-other-records": (["--baseline", "{w}/other.jsonl"], "not profile results"),
    "baseline-empty-list": (["--baseline", "{w}/empty-list.json"], "not profile results"),
    "baseline-latency-text": (["--baseline", "{w}/prof-latency-text.json"],
                              "prof-latency-text.json: record 1: 'latency' is a string ('12 ms'), not an object"),
    "baseline-memory-list": (["--baseline", "{w}/prof-memory-list.jsonl"],
                             "prof-memory-list.jsonl: record 2: 'memory' is a list, not an object (Memory) or null"),
    "baseline-p50-text": (["--baseline", "{w}/prof-p50-text.json"],
                          "record 1: 'latency.p50' is a string ('fast'), not a number"),
    "baseline-no-sha256": (["--baseline", "{w}/prof-no-sha.json"], "record 1: lacks 'sha256'"),
    "csv-exists": (["--csv", "{w}/afile"], "exists; pass --force"),
    **_unwritable("--csv", "p.csv"),
    **_unwritable("--append", "p.jsonl"),
    "append-to-broken": (["--append", "{w}/broken.json"], "not profile results"),
    "append-to-cut": (["--append", "{w}/prof-cut.jsonl"], "not profile results"),
    "append-to-other-records": (["--append", "{w}/other.jsonl"], "not profile results"),
    "append-to-not-utf8": (["--append", "{w}/latin1.json"], "cannot read it as profile results"),
    "estimate-unknown": (["--estimate", "bogus"], "unknown device 'bogus'"),
    "estimate-empty": (["--estimate", ""], "no device named"),
    "estimate-one-unknown": (["--estimate", "pi4,rpi9"], "unknown device 'rpi9'"),
    "remote-empty": (["--remote", ""], "expected user@host"),
    "remote-port-0": (["--remote", "pi@127.0.0.1:0"], "expected user@host"),
    "remote-port-too-big": (["--remote", "pi@127.0.0.1:99999"], "expected user@host"),
    "ssh-config-missing": (["--remote", "pi@127.0.0.1", "--ssh-config", "{w}/nothing"], "no such file"),
})
PROFILE_CASES.update({
    f"file-{how}": Case(("profile", f"{{w}}/damaged/{how}/model.onnx", *PROFILE[2:]), f"damaged/{how}/model.onnx")
    for how in ("truncated", "first-64-bytes", "empty", "zeros", "random", "text")
})
PROFILE_CASES.update({
    f"tflite-{how}": Case(("profile", f"{{w}}/damaged/{how}/model.tflite", "--seq-len", str(SEQ)),
                          f"damaged/{how}/model.tflite: not a TFLite model")
    for how in ("empty", "random", "text", "renamed")
})
PROFILE_CASES.update({
    "file-missing": Case(("profile", "{w}/nothing.onnx"), "no such model file"),
    "file-json": Case(("profile", "{w}/obj.json"), "unknown model file type '.json'"),
    "file-directory": Case(("profile", "{w}/conv"), "no such model file"),
    "no-file": Case(("profile",), "Missing argument"),
})


REPORT = ("report", "--no-charts", "--out", "{scratch}/report")
REPORT_CASES = _table(REPORT, {
    "seq-len-0": (["albert-base-v2", "--seq-len", "0"], "give whole numbers of at least 1"),
    "seq-len-word": (["albert-base-v2", "--seq-len", "x"], "not a comma-separated list"),
    "seq-len-beyond-model": (["albert-base-v2", "--seq-len", "99999999999"], "every length is above"),
    "title-empty": (["{w}/conv", "--title", " "], "--title"),
    "name-empty": (["{w}/conv", "--name", ""], "--name"),
    "unknown-preset": (["bogus-preset"], "not a preset"),
    "source-missing": (["{w}/nothing"], "no such file or directory"),
    "source-empty-name": ([""], "holds no config.json"),
    "other-json": (["{w}/obj.json"], "a JSON file the report does not know"),
    "json-list": (["{w}/list.json"], "is not an albert-edge profile record"),
    "broken-json": (["{w}/broken.json"], "not readable JSON"),
    "json-not-utf8": (["{w}/latin1.json"], "not readable JSON"),
    "cut-json": (["{w}/prof-cut.json"], "not readable JSON"),
    "cut-jsonl": (["{w}/prof-cut.jsonl"], "not profile results"),
    "other-jsonl": (["{w}/other.jsonl"], "not profile results"),
    "empty-list": (["{w}/empty-list.json"], "empty-list.json holds no profile records"),
    "profile-latency-text": (["{w}/conv", "{w}/prof-latency-text.json"],
                             "prof-latency-text.json: record 1: 'latency' is a string ('12 ms'), not an object"),
    "profile-memory-list": (["{w}/conv", "{w}/prof-memory-list.jsonl"],
                            "prof-memory-list.jsonl: record 2: 'memory' is a list, not an object (Memory) or null"),
    "profile-p50-text": (["{w}/prof-p50-text.json"], "record 1: 'latency.p50' is a string ('fast'), not a number"),
    "text-file": (["{w}/latin1.txt"], "not a source the report reads"),
    "spiece-model": (["{w}/spiece.model"], "not a source the report reads"),
    "empty-directory": (["{w}/emptydir"], "holds no config.json"),
    "damaged-file-beside-manifest": (["{w}/bad-conv"], "changed since"),
    "damaged-file": (["{w}/damaged/truncated/model.onnx"], "is not a readable ONNX model"),
    "damaged-manifest": (["{w}/bad-manifest"], "is not an albert-edge manifest"),
    **{f"tflite-{how}": ([f"{{w}}/damaged/{how}/model.tflite"], f"damaged/{how}/model.tflite")
       for how in ("empty", "random", "text", "renamed")},
    "profile-of-another-model": (["{w}/conv", "{w}/prof2.json"], "a profile of another model"),
    "two-models": (["{w}/conv", "{w}/conv2"], "describes another model"),
    "profile-of-another-preset": (["albert-base-v2", "{w}/prof.json"], "not the 30000 of albert-base-v2"),
    "out-a-file": (["{w}/conv", "--out", "{w}/afile"], "is a file, not a directory"),
    "out-under-a-file": (["{w}/conv", "--out", "{w}/afile/r"], "is a file, not a directory"),
    "out-is-the-source": (["{w}/conv", "--out", "{w}/conv"], "is the input"),
    "out-read-only": (["{w}/conv", "--out", "{mnt}/r"], "not writable", "readonly"),
    "out-full-disk": (["{w}/conv", "--out", "{mnt}/r"], "disk is full", "full"),
    "no-source": ([], "Missing argument"),
})


PIPELINE = ("pipeline", "{w}/conv-ckpt", "--to", "onnx", "--seq-len", str(SEQ), "--profile-seq-len", str(SEQ),
            "--out", "{scratch}/run")
PIPELINE_CASES = _table(PIPELINE, {
    "seq-len-0": (["--seq-len", "0"], "'--seq-len': 0 is not in the range"),
    "seq-len-negative": (["--seq-len", "-5"], "'--seq-len': -5 is not in the range"),
    "seq-len-beyond-model": (["--seq-len", "99999"], "above the model's max_position_embeddings"),
    "profile-beyond-seq-len": (["--profile-seq-len", "32"], "go beyond the conversion's --seq-len 16"),
    "profile-seq-len-0": (["--profile-seq-len", "0"], "give whole numbers of at least 1"),
    "profile-seq-len-word": (["--profile-seq-len", "x"], "not a comma-separated list"),
    "to-unknown": (["--to", "bogus"], "'bogus' is not one of"),
    "scheme-unknown": (["--scheme", "bogus"], "scheme 'bogus' is not available"),
    "threads-0": (["--threads", "0"], "'--threads': 0 is not in the range"),
    "runs-0": (["--runs", "0"], "'--runs': 0 is not in the range"),
    "min-seconds-nan": (["--min-seconds", "nan"], "not a finite number of seconds"),
    "only-unknown": (["--only", "bogus"], "--only bogus: steps are"),
    "skip-unknown": (["--skip", "bogus"], "--skip bogus: steps are"),
    "only-and-skip": (["--only", "convert", "--skip", "report"], "give --only or --skip, not both"),
    "only-no-step": (["--only", ","], "Invalid value for '--only': ',' names no step"),
    "only-empty": (["--only", ""], "Invalid value for '--only': '' names no step"),
    "skip-no-step": (["--skip", ","], "Invalid value for '--skip': ',' names no step"),
    "out-a-file": (["--out", "{w}/afile"], "is not a directory"),
    "out-under-a-file": (["--out", "{w}/afile/run"], "Not a directory"),
    "out-foreign-files": (["--out", "{w}/conv"], "holds files the pipeline did not write"),
    "out-read-only": (["--out", "{mnt}/run"], "Read-only file system", "readonly"),
    "out-full-disk": (["--out", "{mnt}/run"], "disk is full", "full"),
})
PIPELINE_CASES.update({
    name: Case(("pipeline", source, *PIPELINE[2:]), message)
    for name, (source, message) in {
        "source-missing": ("{w}/nothing", "no such checkpoint"),
        "source-a-file": ("{w}/afile", "is not a checkpoint directory"),
        "source-empty-directory": ("{w}/emptydir", "has no config.json"),
        "source-a-conversion": ("{w}/conv", "has no config.json"),
        "source-integer-weights": ("{w}/int32-ckpt", "is int32, not floating point"),
    }.items()
})


def _demo(command: str, bundle: str, *rest: str) -> tuple[str, ...]:
    return ("demo", command, "{w}/" + bundle, *rest)


DEMO_CASES = {
    "classify-threads-0": Case(_demo("classify", "bundle", "a text", "--threads", "0"), "'--threads': 0"),
    "classify-threads-negative": Case(_demo("classify", "bundle", "a text", "--threads", "-1"), "'--threads': -1"),
    "classify-model-unknown": Case(_demo("classify", "bundle", "a text", "--model", "bogus"), "unknown model 'bogus'"),
    "classify-model-fp16": Case(_demo("classify", "bundle", "a text", "--model", "onnx-fp16"), "unknown model"),
    "classify-empty-text": Case(_demo("classify", "bundle", ""), "text is empty"),
    "classify-blank-text": Case(_demo("classify", "bundle", "   "), "text is empty"),
    "fill-mask-no-mask": Case(_demo("fill-mask", "bundle", "no blank here"), "write [MASK] or ___"),
    "fill-mask-top-k-0": Case(_demo("fill-mask", "bundle", "a [MASK]", "--top-k", "0"), "'--top-k': 0"),
    "fill-mask-top-k-too-big": Case(_demo("fill-mask", "bundle", "a [MASK]", "--top-k", "1000"), "'--top-k': 1000"),
    "fill-mask-top-k-word": Case(_demo("fill-mask", "bundle", "a [MASK]", "--top-k", "x"), "'--top-k'"),
    "serve-port-too-big": Case(_demo("serve", "bundle", "--port", "99999"), "'--port': 99999"),
    "serve-port-negative": Case(_demo("serve", "bundle", "--port", "-1"), "'--port': -1"),
    "serve-queue-0": Case(_demo("serve", "bundle", "--queue", "0"), "'--queue': 0"),
    "serve-timeout-0": Case(_demo("serve", "bundle", "--timeout", "0"), "not a finite number of seconds above 0"),
    "serve-timeout-nan": Case(_demo("serve", "bundle", "--timeout", "nan"), "not a finite number of seconds"),
    "serve-max-body-0": Case(_demo("serve", "bundle", "--max-body", "0"), "'--max-body': 0"),
    "serve-threads-0": Case(_demo("serve", "bundle", "--threads", "0"), "'--threads': 0"),
    "serve-model-unknown": Case(_demo("serve", "bundle", "--model", "bogus", "--port", "{busy_port}"),
                                "unknown model 'bogus'"),
    "serve-port-in-use": Case(_demo("serve", "bundle", "--port", "{busy_port}"), "cannot listen on 127.0.0.1"),
    "serve-address-of-another-machine": Case(_demo("serve", "bundle", "--host", "192.0.2.1", "--port", "8123"),
                                             "cannot listen on 192.0.2.1:8123"),
    "serve-damaged-bundle": Case(_demo("serve", "bad-bundle-json", "--port", "{busy_port}"), "cannot be read"),
    "bundle-preset-unknown": Case(("demo", "bundle", "--out", "{scratch}/b", "--preset", "bogus"),
                                  "unknown bundle preset 'bogus'"),
    "bundle-threads-0": Case(("demo", "bundle", "--out", "{scratch}/b", "--threads", "0"), "'--threads': 0"),
    "bundle-seed-negative": Case(("demo", "bundle", "--out", "{scratch}/b", "--seed", "-1"), "'--seed': -1"),
    "bundle-out-a-file": Case(("demo", "bundle", "--out", "{w}/afile"), "is a file, not a directory"),
    "bundle-out-under-a-file": Case(("demo", "bundle", "--out", "{w}/afile/b"), "is a file, not a directory"),
    "bundle-out-exists": Case(("demo", "bundle", "--out", "{w}/bundle"), "already exists and is not empty"),
    "bundle-out-read-only": Case(("demo", "bundle", "--out", "{mnt}/b"), "not writable", "readonly"),
    "unknown-command": Case(("demo", "bogus"), "No such command 'bogus'"),
}
# Bundles that are not whole, for each command that opens one.
_BROKEN_BUNDLES = {
    "missing": ("nothing", "is not a bundle directory"),
    "a-file": ("afile", "is not a bundle directory"),
    "a-checkpoint": ("conv-ckpt", "bundle.json is missing"),
    "no-bundle-json": ("no-bundle-json", "bundle.json is missing"),
    "bad-bundle-json": ("bad-bundle-json", "bundle.json cannot be read"),
    "no-labels": ("no-labels", "labels.json is missing"),
    "no-spiece": ("no-spiece", "spiece.model does not exist"),
    "bad-spiece": ("bad-spiece", "is not a sentencepiece model"),
    "bad-seq-len": ("bad-seq-len", "has no valid seq_len"),
    "damaged-model": ("bad-model", "cannot load it"),
}
DEMO_CASES.update({
    f"{command}-{name}": Case(_demo(command, bundle, "a [MASK] text"), message)
    for command in ("classify", "fill-mask") for name, (bundle, message) in _BROKEN_BUNDLES.items()
})


@pytest.mark.parametrize("case", [*PROFILE_CASES.values()], ids=[*PROFILE_CASES])
def test_profile(case, dev, tmp_path, mounts):
    run_case(case, dev, tmp_path, mounts)


@pytest.mark.parametrize("case", [*REPORT_CASES.values()], ids=[*REPORT_CASES])
def test_report(case, dev, tmp_path, mounts):
    run_case(case, dev, tmp_path, mounts)


@pytest.mark.parametrize("case", [*PIPELINE_CASES.values()], ids=[*PIPELINE_CASES])
def test_pipeline(case, dev, tmp_path, mounts):
    run_case(case, dev, tmp_path, mounts)


@pytest.mark.parametrize("case", [*DEMO_CASES.values()], ids=[*DEMO_CASES])
def test_demo(case, dev, tmp_path, mounts):
    run_case(case, dev, tmp_path, mounts)


def test_the_good_inputs_work(dev, tmp_path):
    """The cases above fail for the one thing each changes: the same commands on the good
    inputs succeed."""
    for args in (["report", "--no-charts", "--out", f"{tmp_path}/report", f"{dev.root}/conv", f"{dev.root}/prof.json"],
                 ["demo", "classify", f"{dev.root}/bundle", "a text", "--json"],
                 ["demo", "fill-mask", f"{dev.root}/bundle", "a [MASK] text", "--top-k", "2", "--json"]):
        result = CliRunner().invoke(main, args, catch_exceptions=False)
        assert result.exit_code == 0, (args, result.output)
    assert (tmp_path / "report" / "report.html").is_file()


def test_finetune_refuses_integer_weights(dev, tmp_path):
    """As convert does: integer weights are never copied into a model's float parameters."""
    data = tmp_path / "cls.csv"
    data.write_text("text,label\na good module,1\na bad function,0\n", encoding="utf-8")
    case = Case(("finetune", "--task", "classification", "--train", str(data), "--eval", str(data), "--model",
                 "{w}/int32-ckpt", "--max-seq-length", str(SEQ), "--out", "{scratch}/ft"), "is int32, not floating point")
    run_case(case, dev, tmp_path, None)


# ------------------------------------------------------------------- real processes, signals
def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def test_closed_pipe_ends_quietly(dev):
    """`albert-edge params albert-base-v2 | head -1`: the reader goes, the command ends quietly
    with 141 (128 + SIGPIPE), or 0 when everything was written before it went."""
    proc = subprocess.Popen([str(SCRIPT), "params", "albert-base-v2"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=_env())
    assert proc.stdout.read(20)
    proc.stdout.close()
    assert proc.wait(timeout=120) in (0, 141)
    assert proc.stderr.read() == b""
    # a reader that is gone before the first line: the exit is 141 and stderr stays empty
    result = subprocess.run(f"{SCRIPT} params albert-base-v2 | true; echo ${{PIPESTATUS[0]}}", shell=True,
                            executable="/bin/bash", capture_output=True, text=True, env=_env(), timeout=120)
    assert result.stdout.strip() in ("0", "141") and result.stderr == "", result


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _catching(proc: subprocess.Popen, sig: int, seconds: float = 60) -> None:
    """Wait until the process has its handler for ``sig`` in place (SigCgt in /proc/PID/status)."""
    deadline = time.monotonic() + seconds
    while proc.poll() is None and time.monotonic() < deadline:
        status = Path(f"/proc/{proc.pid}/status").read_text()
        caught = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
        if caught >> (int(sig) - 1) & 1:
            return
        time.sleep(0.05)
    raise AssertionError(f"the command never caught signal {int(sig)}")


def _stopped(proc: subprocess.Popen, sig: int, code: int, word: str, within: float = 20) -> None:
    t0 = time.monotonic()
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert time.monotonic() - t0 < within, "the signal took effect only after the work"
    assert proc.returncode == code, stderr
    progress = ("profiling", "bundle [", "[profile ", "[convert ", "[quantize ")
    lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith(progress)]
    assert len(lines) == 1 and word in lines[0].lower(), stderr
    assert "Traceback" not in stderr


@pytest.fixture(scope="module")
def big_text(tmp_path_factory) -> Path:
    """Text on which sentencepiece's trainer works for many seconds: random words."""
    import random

    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 10)))
             for _ in range(60000)]
    path = tmp_path_factory.mktemp("text") / "words.txt"
    path.write_text("".join(" ".join(rng.choices(words, k=12)) + "\n" for _ in range(200000)))
    return path


@pytest.mark.parametrize("name", INTERRUPTS)
def test_interrupted_tokenizer_train_stops_at_once(big_text, tmp_path, name):
    sig, code, word = INTERRUPTS[name]
    out = tmp_path / "tok"
    proc = subprocess.Popen([str(SCRIPT), "tokenizer", "train", str(big_text), "--vocab-size", "20000", "--out",
                             str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    _catching(proc, sig)  # on a loaded machine the imports alone can take seconds
    time.sleep(3)  # reading done, the trainer's EM rounds run (about 6 s more on a fast machine)
    assert proc.poll() is None, "training ended before the signal: the text is too small to test this"
    _stopped(proc, sig, code, word, within=3)
    assert sorted(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", INTERRUPTS)
def test_interrupted_profile_stops_its_children(dev, tmp_path, name):
    sig, code, word = INTERRUPTS[name]
    csv = tmp_path / "p.csv"
    proc = subprocess.Popen([str(SCRIPT), "profile", str(dev.root / "conv" / "model.onnx"), "--seq-len", str(SEQ),
                             "--threads", "1", "--runs", "100000000", "--min-seconds", "600", "--csv", str(csv)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    deadline = time.monotonic() + 60
    while not (children := _children(proc.pid)):
        assert proc.poll() is None and time.monotonic() < deadline, "no measuring child started"
        time.sleep(0.05)
    time.sleep(1)
    _stopped(proc, sig, code, "interrupt")
    assert not [c for c in children if Path(f"/proc/{c}").exists()], "a measuring child outlived the command"
    assert sorted(tmp_path.iterdir()) == [] and leftovers(dev.root) == []


@pytest.mark.parametrize("name", INTERRUPTS)
def test_interrupted_pipeline_keeps_finished_steps_only(dev, tmp_path, name):
    """Stopped while profiling: the profiler's own interrupt is an interrupt too (not a bug),
    its children are gone, and the files of the steps that finished are whole."""
    sig, code, word = INTERRUPTS[name]
    out = tmp_path / "run"
    proc = subprocess.Popen([str(SCRIPT), "pipeline", str(dev.root / "conv-ckpt"), "--to", "onnx", "--seq-len",
                             str(SEQ), "--profile-seq-len", str(SEQ), "--threads", "1", "--runs", "100000000",
                             "--min-seconds", "600", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    deadline = time.monotonic() + 120
    while not ((out / "conv-ckpt" / "files" / "model.fp16.onnx").exists() and (children := _children(proc.pid))):
        assert proc.poll() is None and time.monotonic() < deadline, "the profile step did not start"
        time.sleep(0.05)
    time.sleep(1)
    _stopped(proc, sig, code, word)
    assert not [c for c in children if Path(f"/proc/{c}").exists()], "a measuring child outlived the command"
    assert leftovers(tmp_path) == []
    manifest = json.loads((out / "conv-ckpt" / "files" / "manifest.json").read_text())
    assert {"model.onnx", "model.int8-dynamic.onnx", "model.fp16.onnx"} <= {f["name"] for f in manifest["files"]}


def test_terminated_bundle_leaves_no_bundle_only_its_finished_steps(dev, tmp_path):
    """SIGTERM while the bundle is made: 143, no bundle directory (never a half one), and only
    the work of the steps that finished, kept beside it for the next run to resume from."""
    out = tmp_path / "new" / "bundle"
    proc = subprocess.Popen([str(SCRIPT), "demo", "bundle", "--out", str(out), "--preset", "tiny", "--threads", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    partial = tmp_path / "new" / ".bundle.partial"
    deadline = time.monotonic() + 60
    while not any(partial.glob("*")):
        assert proc.poll() is None and time.monotonic() < deadline, "the bundle's work did not start"
        time.sleep(0.05)
    _stopped(proc, signal.SIGTERM, 143, "terminated")
    assert not out.exists()
    assert [p.name for p in (tmp_path / "new").iterdir()] in ([], [".bundle.partial"])
    if partial.exists():  # a step had finished: its record says which
        assert (partial / "pipeline.json").is_file()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_serve_stops_cleanly(dev, sig):
    """A server's normal end: Ctrl-C or a service manager's SIGTERM shut it down with exit 0
    (what systemd counts as a clean stop), no traceback, no process left."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([str(SCRIPT), "demo", "serve", str(dev.root / "bundle"), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    deadline = time.monotonic() + 60
    while True:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                break
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else "no server"
        time.sleep(0.1)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "Traceback" not in stderr, stderr
    assert stderr.strip().splitlines() == [f"albert-edge demo on http://127.0.0.1:{port}/  (Ctrl-C stops it)"]
    assert _children(proc.pid) == []
