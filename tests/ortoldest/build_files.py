"""Build the .ort files that test_ort_oldest.py loads in the oldest onnxruntime albert-edge[ort]
allows, with the outputs the build environment's onnxruntime gives for them:

    python tests/ortoldest/build_files.py OUT_DIR [CHECKPOINT]

OUT_DIR gets ``convert --to ort --scheme int8-dynamic`` of CHECKPOINT (default: a small ALBERT
made here, the quantization tests' config: G=2 < L=4, every weight quantized), i.e. model.ort and
model.int8-dynamic.ort with their manifest; ``index.json`` says what each file is and which
onnxruntime made the references, ``references.npz`` holds the feeds and each file's outputs
through albert_edge.runtime.Session.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
# After the installed packages: `tests` comes from the checkout, albert_edge from the installed wheel.
sys.path.append(str(ROOT))

LENGTHS = (1, 16, 64, 128)  # those above the model's max_position_embeddings are left out
FILES = ("model.ort", "model.int8-dynamic.ort")


def feeds(seq: int, vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, vocab, size=(2, seq))
    mask = np.ones_like(ids)
    mask[-1, seq - seq // 3:] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def build(out: Path, checkpoint: Path | None = None) -> None:
    import onnxruntime

    from albert_edge.converters.export import convert
    from albert_edge.formats import manifest as manifest_io
    from albert_edge.runtime import Session

    out.mkdir(parents=True, exist_ok=True)
    if checkpoint is None:
        import torch

        from albert_edge import checkpoints
        from albert_edge.model import build_model
        from albert_edge.tokenizer import train_spiece
        from tests.quantize.conftest import CORPUS, small_config

        config = small_config()
        spiece = train_spiece([CORPUS], out / "spiece", vocab_size=config.vocab_size)
        torch.manual_seed(0)
        checkpoint = checkpoints.save(build_model(config, "mlm").eval(), out / "checkpoint", spiece=spiece)
    models = out / "files"
    convert(str(checkpoint), models, targets=("ort",), seq_len=32, scheme="int8-dynamic")
    manifest = manifest_io.read(models)
    vocab = manifest.config["vocab_size"]
    lengths = [T for T in LENGTHS if T <= manifest.config["max_position_embeddings"]]

    arrays: dict[str, np.ndarray] = {}
    index = {}
    for seq in lengths:
        for key, value in feeds(seq, vocab).items():
            arrays[f"feeds/{seq}/{key}"] = value
    for name in FILES:
        session = Session(models / name)
        for seq in lengths:
            for output, value in session.run(feeds(seq, vocab)).items():
                arrays[f"{name}/{seq}/{output}"] = value
        entry = manifest.file(name)
        index[name] = {"format_version": entry.format_version, "min_runtime": entry.min_runtime,
                       "outputs": session.output_names}
    np.savez(out / "references.npz", **arrays)
    summary = {"lengths": lengths, "files": index, "reference_onnxruntime": onnxruntime.__version__}
    (out / "index.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"{len(FILES)} files and their references (onnxruntime {onnxruntime.__version__}) in {out}")


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: python tests/ortoldest/build_files.py OUT_DIR [CHECKPOINT]")
    build(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) == 3 else None)
