"""Run by test_distributed.py under torchrun: pretrain with the options in a JSON file, then
write this process's weights to RANKS_DIR/rank{RANK}.safetensors."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from safetensors.torch import save_file

from albert_edge.config import AlbertConfig
from albert_edge.train.data import MaskingOptions
from albert_edge.train.pretrain import PretrainOptions, pretrain


def main(options_file: str, ranks_dir: str) -> None:
    data = json.loads(Path(options_file).read_text())
    data["config"] = AlbertConfig.from_hf_dict(data["config"])
    data["masking"] = MaskingOptions(**data["masking"])
    for key in ("corpus", "eval_corpus"):
        data[key] = tuple(data[key])
    result = pretrain(PretrainOptions(**data))
    rank = os.environ["RANK"]
    weights = {name: p.detach().contiguous() for name, p in result.model.named_parameters()}
    save_file(weights, str(Path(ranks_dir) / f"rank{rank}.safetensors"))


if __name__ == "__main__":
    main(*sys.argv[1:])
