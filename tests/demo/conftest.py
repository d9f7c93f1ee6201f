"""Fixtures of the demo tests: a tiny bundle made once through `albert-edge demo bundle`, copies
of it whose parts disagree, and a real server (uvicorn in a child process) on a free loopback port."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from albert_edge.cli import main


@pytest.fixture(scope="session")
def tiny_bundle(tmp_path_factory) -> Path:
    """The 'tiny' preset: every step of the real chain in seconds. Its accuracy means nothing."""
    out = tmp_path_factory.mktemp("demo") / "bundle"
    result = CliRunner().invoke(main, ["demo", "bundle", "--out", str(out), "--preset", "tiny", "--threads", "1",
                                       "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.output[result.output.index("{"):])
    assert info == json.loads((out / "bundle.json").read_text())
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, bundle: Path, *options: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "albert_edge", "demo", "serve", str(bundle), "--port", str(self.port), *options]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env={**os.environ, "OMP_NUM_THREADS": "1"})
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.proc.stdout.read()}")
            try:
                with urllib.request.urlopen(self.url + "/api/status", timeout=2) as r:
                    self.status = json.loads(r.read())
                    return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError("server did not start within 60 s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def server(tiny_bundle):
    """`albert-edge demo serve` on the int8 ONNX files, queue of 2 so that load gives 503s."""
    srv = Server(tiny_bundle, "--model", "onnx-int8", "--threads", "1", "--queue", "2")
    yield srv
    srv.stop()


# Bundles whose parts disagree: how each is made from the tiny bundle, and the words of the one
# line that refuses it. The tiny bundle has 4 labels, a 400-piece tokenizer, seq_len 32 and
# max_position_embeddings 64.
def _labels(bundle: Path, labels) -> None:
    (bundle / "labels.json").write_text(json.dumps(labels))


def _bundle_json(bundle: Path, **change) -> None:
    info = json.loads((bundle / "bundle.json").read_text())
    (bundle / "bundle.json").write_text(json.dumps({**info, **change}))


def _swap(bundle: Path) -> None:
    (bundle / "classifier").rename(bundle / "x")
    (bundle / "mlm").rename(bundle / "classifier")
    (bundle / "x").rename(bundle / "mlm")


DISAGREEING = {
    "labels-short": (lambda b, tok: _labels(b, ["asyncio", "decimal", "email"]), "lists 3 labels but"),
    "labels-long": (lambda b, tok: _labels(b, ["asyncio", "decimal", "email", "xml", "json"]), "lists 5 labels but"),
    "labels-an-object": (lambda b, tok: _labels(b, {"0": "asyncio"}), "must be a JSON list of label names"),
    "labels-numbers": (lambda b, tok: _labels(b, [0, 1, 2, 3]), "must be a JSON list of label names"),
    "labels-a-string": (lambda b, tok: _labels(b, "asyncio"), "must be a JSON list of label names"),
    "labels-twice": (lambda b, tok: _labels(b, ["xml", "xml", "email", "decimal"]), "names 'xml' more than once"),
    "folders-swapped": (lambda b, tok: _swap(b), "folders swapped"),
    "seq-len-0": (lambda b, tok: _bundle_json(b, seq_len=0), "seq_len 0 must be from 3"),
    "seq-len-above-model": (lambda b, tok: _bundle_json(b, seq_len=65),
                            "seq_len 65 must be from 3 to the model's max_position_embeddings (64)"),
    "seq-len-fraction": (lambda b, tok: _bundle_json(b, seq_len=31.5), "has no valid seq_len"),
    "tokenizer-too-big": (lambda b, tok: shutil.copyfile(tok, b / "spiece.model"),
                          "spiece.model has 420 pieces but the model embeds only 400"),
    "no-manifest": (lambda b, tok: (b / "mlm" / "manifest.json").unlink(), "mlm/manifest.json is missing"),
}


@pytest.fixture(scope="session")
def spiece_420(tmp_path_factory) -> Path:
    """A tokenizer with more pieces (420) than the tiny bundle's models embed (400)."""
    from albert_edge.tokenizer import train_spiece

    data = Path(__file__).parents[1] / "data" / "corpus.txt"
    return train_spiece([data], tmp_path_factory.mktemp("spiece420"), vocab_size=420)


@pytest.fixture()
def disagreeing(tiny_bundle, spiece_420, tmp_path):
    """``disagreeing(name)``: a copy of the tiny bundle broken as DISAGREEING[name] says."""
    def make(name: str) -> Path:
        copy = tmp_path / name
        shutil.copytree(tiny_bundle, copy)
        DISAGREEING[name][0](copy, spiece_420)
        return copy

    return make
