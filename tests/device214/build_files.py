"""Build the .tflite files that test_tflite214.py loads in tflite-runtime 2.14, with the
outputs ai-edge-litert gives for them. Runs in the main (build) environment:

    python tests/device214/build_files.py OUT_DIR

OUT_DIR gets a small ALBERT (the quantization tests' config: G=2 < L=4, every weight at least
1024 elements so the dynamic-range quantizer quantizes all of them) converted to fp32 TFLite in
the unrolled form and quantized with every TFLite scheme as albert-edge writes it by default,
plus one ``--tflite-compat latest`` file that 2.14 must refuse, and the loop form (convert's
default) as it is and int8-dynamic; ``index.json`` says what each file is,
``references.npz`` holds the feeds and the reference outputs.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
# After the installed packages: `tests` comes from the checkout, albert_edge from the installed wheel.
sys.path.append(str(ROOT))

SEQ = 32
LENGTHS = (SEQ, 20)  # the length the files were built for, and one the interpreter resizes to
# file: (scheme, QuantizeConfig changes); None is the fp32 file itself.
FILES = {
    "model.tflite": None,
    "model.int8-dynamic.tflite": ("int8-dynamic", {}),
    "model.int8-full.tflite": ("int8-full", {}),
    "model.int8-full.per-tensor.tflite": ("int8-full", {"per_channel": False}),
    "model.int16x8.tflite": ("int16x8", {}),
    "model.fp16.tflite": ("fp16", {}),
    "model.int8-dynamic.latest.tflite": ("int8-dynamic", {"tflite_compat": "latest"}),
}
# The same model written with `convert --layers loop` (a WHILE over one body subgraph per weight
# group), as it is and int8-dynamic: what a Pi 4's interpreter packs once.
LOOP_FILES = {
    "model.loop.tflite": None,
    "model.loop.int8-dynamic.tflite": ("int8-dynamic", {}),
}
# Tokenized on both sides: sentencepiece and numpy < 2 on the device give the same ids.
SENTENCES = ("The interpreter loads the model once.", "Weights are shared between layers (all of them).",
             "numpy 1.26 - and sentencepiece - on a Raspberry Pi!")


def feeds(seq: int, vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, vocab, size=(2, seq))
    mask = np.ones_like(ids)
    mask[-1, seq // 2:] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def build(out: Path) -> None:
    import torch

    from albert_edge import checkpoints
    from albert_edge.converters.export import convert
    from albert_edge.formats.op_versions import min_runtime, op_versions
    from albert_edge.model import build_model
    from albert_edge.converters.quantized import quantize_file
    from albert_edge.quantize import QuantizeConfig
    from albert_edge.runtime import Session
    from albert_edge.tokenizer import train_spiece
    from tests.quantize.conftest import CORPUS, small_config

    out.mkdir(parents=True, exist_ok=True)
    config = small_config()
    spiece = train_spiece([CORPUS], out / "spiece", vocab_size=config.vocab_size)
    torch.manual_seed(0)
    checkpoint = checkpoints.save(build_model(config, "mlm").eval(), out / "checkpoint", spiece=spiece)
    models = out / "files"
    convert(checkpoint, models, targets=("tflite",), seq_len=SEQ, layers="unrolled")

    loop = out / "loop"
    convert(checkpoint, loop, targets=("tflite",), seq_len=SEQ, layers="loop")

    text = dict(calibration=(str(CORPUS),), tokenizer=spiece, num_samples=16, eval_samples=16)
    for source, files in ((models, FILES), (loop, LOOP_FILES)):
        for name, made in files.items():
            start = time.perf_counter()
            if made is not None:
                scheme, changes = made
                quantize_file(source / "model.tflite", QuantizeConfig(scheme, **text, **changes), source / name)
            if source is loop:  # beside the others, under its own name
                shutil.copyfile(loop / (name if made is not None else "model.tflite"), models / name)
            print(f"{name}: {time.perf_counter() - start:.1f} s", flush=True)

    arrays: dict[str, np.ndarray] = {}
    index = {}
    for seq in LENGTHS:
        for key, value in feeds(seq, config.vocab_size).items():
            arrays[f"feeds/{seq}/{key}"] = value
    every = {**FILES, **LOOP_FILES}
    for name, made in every.items():
        session = Session(models / name)
        for seq in LENGTHS:
            for output, value in session.run(feeds(seq, config.vocab_size)).items():
                arrays[f"{name}/{seq}/{output}"] = value
        index[name] = {"scheme": (made or ("fp32",))[0], "min_runtime": min_runtime(op_versions(models / name)),
                       "reference_runtime": session.backend_name, "outputs": session.output_names}
    from albert_edge.tokenizer import AlbertTokenizer

    encoded = AlbertTokenizer(spiece)(list(SENTENCES), max_length=SEQ, padding="max_length")
    for key, value in encoded.items():
        arrays[f"tokens/{key}"] = np.asarray(value)
    np.savez(out / "references.npz", **arrays)
    summary = {"lengths": LENGTHS, "files": index, "sentences": SENTENCES, "seq_len": SEQ,
               "spiece": str(spiece.relative_to(out))}
    (out / "index.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"{len(every)} files and their references in {out}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/device214/build_files.py OUT_DIR")
    build(Path(sys.argv[1]))
