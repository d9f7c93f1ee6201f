"""Fixtures of the demo tests: a tiny bundle made once through `albert-edge demo bundle`, and
a real server (uvicorn in a child process) on a free loopback port."""

from __future__ import annotations

import json
import os
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
