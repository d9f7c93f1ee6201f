"""DistributedDataParallel: two CPU processes (gloo) under torchrun against one process."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

from albert_edge.train.data import MaskingOptions
from albert_edge.train.pretrain import PretrainOptions, pretrain

WORKER = Path(__file__).with_name("ddp_worker.py")


def _train_losses(run: Path) -> list[float]:
    records = map(json.loads, (run / "log.jsonl").read_text().splitlines())
    return [r["loss"] for r in records if r["event"] == "train"]


def test_two_gloo_processes_match_one_process(tmp_path, tiny_config, spiece_model, corpus_file):
    # Per process: micro-batches of 2, accumulated twice; 2 processes: a global batch of 8.
    ddp = PretrainOptions(
        corpus=(str(corpus_file),), tokenizer=str(spiece_model), out_dir=str(tmp_path / "ddp"), config=tiny_config,
        steps=5, batch_size=2, grad_accum=2, lr=0.05, masking=MaskingOptions(max_seq_length=48), chunk_documents=4,
        holdout_every=0, eval_corpus=(str(corpus_file),), eval_examples=8, eval_every=5, save_every=5, log_every=1,
        device="cpu",
    )
    data = dataclasses.asdict(ddp)
    data["config"] = tiny_config.to_hf_dict()
    options = tmp_path / "options.json"
    options.write_text(json.dumps(data))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(WORKER), str(options), str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]

    # Both processes hold the same weights after every step's all-reduce.
    rank0 = load_file(tmp_path / "rank0.safetensors")
    rank1 = load_file(tmp_path / "rank1.safetensors")
    assert rank0.keys() == rank1.keys()
    assert all(torch.equal(rank0[k], rank1[k]) for k in rank0)

    # One process on the same global batch (8 examples at once) follows the same path.
    single = pretrain(dataclasses.replace(ddp, out_dir=str(tmp_path / "single"), batch_size=8, grad_accum=1))
    ddp_losses, single_losses = _train_losses(tmp_path / "ddp"), _train_losses(tmp_path / "single")
    assert len(ddp_losses) == len(single_losses) == 5
    assert torch.allclose(torch.tensor(ddp_losses), torch.tensor(single_losses), rtol=1e-5, atol=1e-6)
    weights = {n: p.detach() for n, p in single.model.named_parameters()}
    assert all(torch.allclose(rank0[k], weights[k], atol=1e-5) for k in weights)
    # Only the main process wrote the run directory; its model is the ranks' model.
    saved = load_file(tmp_path / "ddp" / "model.safetensors")
    assert all(torch.equal(saved[k], rank0[k]) for k in saved)
