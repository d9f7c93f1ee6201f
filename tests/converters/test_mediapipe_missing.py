"""convert --to mediapipe where mediapipe cannot be imported (as in the build environment, whose
tensorflow 2.21 rules out mediapipe 0.10.21): one line naming the extra, exit 2, nothing written.
Runs in a fresh interpreter in which importing mediapipe fails, whether or not it is installed."""

from __future__ import annotations

import torch

from albert_edge import checkpoints
from albert_edge.errors import install_line
from albert_edge.config import AlbertConfig
from albert_edge.model import build_model

def test_missing_mediapipe_names_the_extra(tmp_path, spiece_model, cli_without):
    config = AlbertConfig.preset("tiny").replace(vocab_size=400, num_labels=2, label_names=("no", "yes"))
    torch.manual_seed(0)
    checkpoint = checkpoints.save(build_model(config, "classification"), tmp_path / "ckpt", spiece=spiece_model)
    out = tmp_path / "out"
    done = cli_without("mediapipe", "convert", checkpoint, "--to", "mediapipe", "--out", out, "--seq-len", "16")
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    assert lines == ["Error: the mediapipe target needs MediaPipe's metadata writer (mediapipe did not import): "
                     f"{install_line('mobile')}"], done.stderr
    assert done.stdout == "" and not out.exists()
