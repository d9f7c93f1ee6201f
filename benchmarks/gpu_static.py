"""Static-shape TFLite files on LiteRT's GPU accelerator: where their operators run and how close
their outputs are to PyTorch's.

For a model shape (ALBERT-base's, or the pipeline's builtin small model's) with random weights,
base and classification heads: ``convert --to tflite --static`` (fp32) and its fp16 file
(``quantize --scheme fp16``). For each file: the accelerator's own placement (operators on the
GPU / on the CPU, with its reasons), the largest difference from PyTorch with float32 arithmetic
(``enforce_f32``) and the cosine to PyTorch at the accelerator's default float16 arithmetic, on
one padded, two-segment row of random ids; stored and unique weight bytes; file size. Writes a
JSON result file (versions, date, commit, the Vulkan device) under benchmarks/results/.

Timings are not taken: on Mesa's lavapipe (Vulkan on the CPU) they say nothing about a GPU.

    python benchmarks/gpu_static.py --shape albert-base --seq-len 128
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import _harness as harness  # noqa: E402  (options, models, inputs, the result file)

HEADS = ("base", "classification")


def config_for(shape: str):
    from albert_edge.config import AlbertConfig
    from albert_edge.pipeline.small import PIPELINE_RECIPE

    if shape == "albert-base":
        return AlbertConfig.preset("albert-base-v2")
    r = PIPELINE_RECIPE  # the pipeline's albert-small-builtin shape (random weights here, not its training)
    return AlbertConfig.preset("albert-base-v2").replace(**{**r.config, "vocab_size": r.vocab_size})


def pytorch(model, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import torch

    with torch.no_grad():
        out = model(*(torch.from_numpy(batch[n].astype(np.int64)) for n in harness.INPUTS))
    out = out if isinstance(out, tuple) else (out,)
    return {name: t.numpy() for name, t in zip(model.output_names, out)}


def measure_file(path: Path, entry, expected: dict[str, np.ndarray], batch: dict[str, np.ndarray]) -> dict:
    from albert_edge.runtime.accelerator import placed_run, run_on_gpu

    placement, exact = placed_run(path, batch, enforce_f32=True)
    half = run_on_gpu(path, batch, enforce_f32=False)
    where = placement.to_dict()
    return {
        "file": path.name,
        "precision": entry.precision,
        "static_len": entry.static_len,
        "size": path.stat().st_size,
        "stored_bytes": entry.weights.get("stored_bytes"),
        "unique_bytes": entry.weights.get("unique_bytes"),
        "duplicates": len(entry.weights.get("duplicates") or []),
        "ops": where["ops"], "gpu_ops": where["gpu_ops"], "cpu_ops": where["cpu_ops"],
        "all_on_gpu": where["all_on_gpu"], "fallbacks": where["fallbacks"], "adapter": where["adapter"],
        "max_abs_diff_enforce_f32": {n: float(np.abs(exact[n] - v).max()) for n, v in expected.items()},
        "cosine_default_precision": {n: harness.cosine(half[n], v) for n, v in expected.items()},
    }


def run(shape: str, seq_len: int, work: Path) -> list[dict]:
    from albert_edge import checkpoints
    from albert_edge.converters.export import convert
    from albert_edge.converters.quantized import quantize_file
    from albert_edge.formats import manifest
    from albert_edge.quantize import QuantizeConfig

    config = config_for(shape)
    batch = harness.reference_row(config.vocab_size, config.pad_token_id, seq_len)
    rows = []
    for head in HEADS:
        model = harness.random_model(config.replace(num_labels=3) if head == "classification" else config, head)
        expected = pytorch(model, batch)
        ckpt = checkpoints.save(model, work / head / "ckpt")
        out = work / head / "out"
        start = time.perf_counter()
        convert(str(ckpt), out, targets=("tflite",), head=head, seq_len=seq_len, static=True)
        # one [1, N] row per evaluation batch: the static file takes no other shape
        quantize_file(out / "model.tflite", QuantizeConfig("fp16", batch_size=1, eval_samples=4))
        print(f"{head}: converted and quantized in {time.perf_counter() - start:.0f} s", file=sys.stderr)
        entries = {e.name: e for e in manifest.read(out).files}
        for name in ("model.tflite", "model.fp16.tflite"):
            row = {"head": head, **measure_file(out / name, entries[name], expected, batch)}
            if name == "model.tflite":
                row["verify_gpu"] = entries[name].parity.get("gpu")
            rows.append(row)
            print(json.dumps({k: row[k] for k in ("head", "file", "gpu_ops", "cpu_ops")}), file=sys.stderr)
    return rows


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--shape", choices=("albert-base", "small"), default="albert-base",
                        help="ALBERT-base's shape, or the pipeline's builtin small model's (random weights either way)")
    harness.options(parser, seq_len={"default": 128, "help": "N of the static files' [1, N] inputs"},
                    out={"help": "result file (default: benchmarks/results/gpu_static-SHAPE.json)"})
    args = parser.parse_args()

    from albert_edge.runtime.accelerator import vulkan_available, vulkan_devices

    missing = vulkan_available()
    if missing is not None:
        sys.exit(f"no Vulkan device for LiteRT's GPU accelerator: {missing}")
    with tempfile.TemporaryDirectory(prefix="gpu-static-") as work:
        rows = run(args.shape, args.seq_len, Path(work))
    result = {
        "benchmark": "gpu_static",
        "what": "static-shape TFLite (fp32, fp16) on LiteRT's GPU accelerator: placement and outputs against "
                "PyTorch; random weights; no timings (the Vulkan device is software)",
        "shape": args.shape, "seq_len": args.seq_len, "weights": "random (seed 0)",
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "commit": harness.commit(),
        "machine": {**harness.platform_info(), "vulkan_devices": vulkan_devices()},
        "versions": harness.package_versions(("albert-edge", "ai-edge-litert", "tensorflow", "torch", "numpy")),
        "files": rows,
    }
    print(harness.write_json(args.out or harness.RESULTS / f"gpu_static-{args.shape}.json", result))


if __name__ == "__main__":
    main()
