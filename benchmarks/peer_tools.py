"""The peers benchmarks/peers.py cannot build in the build environment: run with the Python of
.venv-peers (benchmarks/peer_envs.sh), which has optimum and transformers 4 with TensorFlow.
Each writes its files into OUT under the names peers.py reads (FILES); nothing here imports
albert_edge. peers.py calls ``files``, which runs this script in that environment.

    optimum     optimum's ONNX export of the checkpoint (`optimum-cli export onnx --task
                feature-extraction`): model.onnx; its quantizer with the AVX-512 VNNI dynamic config
                (`optimum-cli onnxruntime quantize --avx512_vnni`, per_channel its default, off):
                model.int8.onnx; the same after its optimizer at level O2 (`optimum-cli onnxruntime
                optimize -O2`, then onnxruntime's symbolic shape inference, without which the
                quantizer fails on the fused graph): model.opt.int8.onnx
    tf-albert   transformers 4's TFAlbertModel (weights from the PyTorch checkpoint), a SavedModel
                whose one signature takes int32 input_ids, attention_mask, token_type_ids of shape
                [None, None] and returns last_hidden_state; TFLiteConverter.from_saved_model with
                its defaults: model.tflite, and with Optimize.DEFAULT (dynamic-range int8):
                model.int8.tflite

    .venv-peers/bin/python benchmarks/peer_tools.py optimum CHECKPOINT OUT
    .venv-peers/bin/python benchmarks/peer_tools.py tf-albert CHECKPOINT OUT
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

log = logging.getLogger("peers")
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
FILES = {"optimum": ("model.onnx", "model.int8.onnx", "model.opt.int8.onnx"),
         "tf-albert": ("model.tflite", "model.int8.tflite")}


def files(peer: str, ckpt: Path, out: Path, venv: Path) -> tuple[Path, ...] | None:
    """PEER's files in ``out`` (FILES[peer]), built by this script run with the Python of ``venv``
    unless all are there already; None, logged once, when ``venv`` is missing."""
    paths = tuple(out / name for name in FILES[peer])
    if all(p.is_file() for p in paths):
        return paths
    python = venv / "bin" / "python"
    if not python.is_file():
        log.warning("%s peer left out: no %s (benchmarks/peer_envs.sh makes it)", peer, python)
        return None
    log.info("building the %s peer in %s", peer, venv)
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(python), str(Path(__file__).resolve()), peer, str(ckpt), str(out)], check=True,
                   env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    return paths


def optimum_files(ckpt: Path, out: Path) -> None:
    from optimum.exporters.onnx import main_export
    from optimum.onnxruntime import ORTOptimizer, ORTQuantizer
    from optimum.onnxruntime.configuration import AutoOptimizationConfig, AutoQuantizationConfig

    qconfig = AutoQuantizationConfig.avx512_vnni(is_static=False, per_channel=False)
    with tempfile.TemporaryDirectory(dir=out, prefix="optimum-") as tmp:
        exported, optimized = Path(tmp) / "export", Path(tmp) / "optimized"
        main_export(str(ckpt), output=exported, task="feature-extraction")
        plain = ORTQuantizer.from_pretrained(exported, file_name="model.onnx").quantize(qconfig, Path(tmp) / "int8")
        ORTOptimizer.from_pretrained(exported).optimize(AutoOptimizationConfig.O2(), optimized)
        # The quantizer fails on the optimized graph as written ("Unable to find data type for
        # weight_name=.../ffn/MatMul_output_0": ONNX shape inference gives no type past the fused
        # com.microsoft nodes); onnxruntime's symbolic shape inference first, as its error suggests
        # a user would, lets it through.
        _infer_shapes(optimized / "model_optimized.onnx")
        opt = ORTQuantizer.from_pretrained(optimized, file_name="model_optimized.onnx").quantize(
            qconfig, Path(tmp) / "opt-int8")
        # Each a single file (no external data below 2 GB), so moving it moves the model.
        for made, name in ((exported / "model.onnx", "model.onnx"), (plain / "model_quantized.onnx", "model.int8.onnx"),
                           (opt / "model_optimized_quantized.onnx", "model.opt.int8.onnx")):
            shutil.move(made, out / name)


def _infer_shapes(path: Path) -> None:
    import onnx
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    onnx.save(SymbolicShapeInference.infer_shapes(onnx.load(str(path)), auto_merge=True), str(path))


def tf_albert_files(ckpt: Path, out: Path) -> None:
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # transformers 4's TF models need Keras 2 (tf-keras)
    import tensorflow as tf
    from transformers import TFAlbertModel

    model = TFAlbertModel.from_pretrained(str(ckpt), from_pt=True)
    specs = [tf.TensorSpec([None, None], tf.int32, name=name) for name in INPUTS]

    @tf.function(input_signature=specs)
    def serving(input_ids, attention_mask, token_type_ids):
        hidden = model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                       training=False).last_hidden_state
        return {"last_hidden_state": hidden}

    with tempfile.TemporaryDirectory(dir=out, prefix="saved-model-") as saved:
        tf.saved_model.save(model, saved, signatures={"serving_default": serving})
        for name, optimizations in (("model.tflite", []), ("model.int8.tflite", [tf.lite.Optimize.DEFAULT])):
            converter = tf.lite.TFLiteConverter.from_saved_model(saved)
            converter.optimizations = optimizations
            (out / name).write_bytes(converter.convert())


BUILDERS = {"optimum": optimum_files, "tf-albert": tf_albert_files}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("peer", choices=sorted(BUILDERS), help="Which peer's files to build.")
    p.add_argument("checkpoint", type=Path, help="A Hugging Face ALBERT directory (config.json, model.safetensors).")
    p.add_argument("out", type=Path, help="Directory for the files (made).")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    BUILDERS[args.peer](args.checkpoint.resolve(), args.out.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
